#pragma once
// Test seams of the .npy operations and of the engines under them (tests/io/):
//
// - a hook called at fixed points of every operation, which may inject a failure;
// - a switch that disables O_TMPFILE so that the named-temporary path of writes is
//   exercised too;
// - the fault shim: a plan that replaces the outcome of one numbered boundary call
//   of an engine (a syscall of the pool engine; io_uring_get_sqe, io_uring_submit or
//   a completion's result in the io_uring engine) with a fault (docs/io.md, "Fault
//   injection"; tests/io/io_faults_test.cpp walks every fault over every call).
//
// Not part of the public API; process-wide; set them only while no operation runs.

#include <atomic>
#include <cerrno>
#include <cstdint>

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

// ---------------------------------------------------------------------------
// The fault shim.
// ---------------------------------------------------------------------------

/// The boundary calls of the engines. The first seven are the calls whose result an
/// operation sees (a syscall of the pool engine, the result of an io_uring
/// completion); get_sqe and submit are the io_uring engine's own calls.
enum class io_call : unsigned char { open, stat, read, write, fsync, link, rename, get_sqe, submit };

/// What the shim does to a boundary call. A fault applies only to the calls named
/// with it; at any other call it does nothing (the call still counts).
enum class io_fault : unsigned char {
    none,
    eio,             // open..rename: the call is not made; its result is -EIO
    enospc,          // open..rename: -ENOSPC
    eintr,           // open..rename: -EINTR (interrupted before doing anything)
    eagain,          // open..rename: -EAGAIN
    ecanceled,       // open..rename: -ECANCELED (the kernel dropped the request)
    short_transfer,  // read, write: the call moves half its bytes (at least 1)
    submit_ebusy,    // submit: returns -EBUSY, nothing submitted (a full completion queue)
    submit_eagain,   // submit: returns -EAGAIN, nothing submitted (no kernel memory)
    ring_full,       // get_sqe: returns null (the submission queue is full)
};

struct io_fault_plan {
    io_fault fault = io_fault::none;
    /// The first boundary call faulted, counting from 1 after set_io_fault_plan; 0: none.
    std::uint64_t at = 0;
    /// How many consecutive calls from `at` are faulted; 0: every call from `at` on.
    std::uint64_t count = 1;
};

/// Installs `plan` and restarts the call count. A plan with io_fault::none only
/// counts (and logs) the calls.
void set_io_fault_plan(const io_fault_plan& plan) noexcept;
/// Removes the plan: the engines' boundary calls cost one relaxed load again.
void clear_io_fault_plan() noexcept;

/// The boundary calls of the engines since set_io_fault_plan.
struct io_fault_record {
    std::uint64_t calls = 0;    // boundary calls made
    std::uint64_t faulted = 0;  // calls the plan's fault was applied to
    std::uint64_t first_faulted = 0;
};
io_fault_record io_fault_counts() noexcept;

/// The kind of boundary call number `n` (1-based) since set_io_fault_plan; false
/// for a call not made or beyond the log (the first 4096 calls are logged).
bool io_fault_logged_call(std::uint64_t n, io_call& call) noexcept;

// --- for the engines ---

extern std::atomic<bool> io_fault_plan_set;
io_fault io_fault_at_slow(io_call call) noexcept;

/// Called by an engine at each boundary call: the fault to apply to it, or none.
/// One relaxed load while no plan is installed.
inline io_fault io_fault_at(io_call call) noexcept {
    if (!io_fault_plan_set.load(std::memory_order_relaxed)) return io_fault::none;
    return io_fault_at_slow(call);
}

/// The errno of an errno fault, else 0.
inline int io_fault_errno(io_fault f) noexcept {
    switch (f) {
    case io_fault::eio:
        return EIO;
    case io_fault::enospc:
        return ENOSPC;
    case io_fault::eintr:
        return EINTR;
    case io_fault::eagain:
        return EAGAIN;
    case io_fault::ecanceled:
        return ECANCELED;
    default:
        return 0;
    }
}

}  // namespace tenferro::detail::io
