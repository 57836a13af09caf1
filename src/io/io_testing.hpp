#pragma once
// Test seams of the .npy operations (tests/io/io_test.cpp): a hook called at
// fixed points of every operation, which may inject a failure, and a switch that
// disables O_TMPFILE so that the named-temporary path of writes is exercised too.
// Not part of the public API; process-wide; set them only while no operation runs.

namespace tenferro::detail::io {

enum class io_event {
    read_chunk_done,   // a data chunk of a read is in memory (byte-swapped)
    write_chunk_done,  // a chunk (the header, or data) of a write reached the temporary file
    before_fsync,      // a write is about to fsync its temporary file
    before_link,       // a write is about to give its O_TMPFILE inode a temporary name
    before_rename,     // a write is about to rename its temporary over the destination
};

/// Called on an engine thread, outside every lock of the operation. A non-zero
/// return is an errno value that the operation treats as the outcome of that step.
using io_test_hook = int (*)(io_event event, void* context);

void set_io_test_hook(io_test_hook hook, void* context) noexcept;

/// true: writes create a named temporary (`.NAME.tenferro-XXXXXX`) even where
/// O_TMPFILE works.
void set_io_force_named_temp(bool force) noexcept;

}  // namespace tenferro::detail::io
