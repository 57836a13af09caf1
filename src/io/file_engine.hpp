#pragma once
// The one small interface behind which tenferro's file I/O runs: asynchronous
// open / statx / read / write / fsync / fdatasync / link / rename, each completing with the
// syscall's result (>= 0) or -errno. Two implementations:
//
// - uring_engine (uring_engine.cpp): one io_uring instance shared by the process,
//   submissions under a mutex, one thread reaping completions and running the
//   callbacks.
// - pool_engine (pool_engine.cpp): each request is a blocking syscall on a small
//   thread pool.
//
// `io_engine()` (io_engine.cpp) picks one, once per process (see
// active_io_backend() in <tenferro/io.hpp>). The read and write operations
// (npy_read.cpp, npy_write.cpp, on the shared op_base of npy_op.hpp) are written
// once against this interface, so the same state machines and the same tests
// cover both backends.
//
// Callbacks never run inside the submitting call (no re-entrancy into a caller
// that holds its own lock); they run on an engine thread, one at a time per
// request, and may submit further requests.

#include <sys/stat.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tenferro/io.hpp"

namespace tenferro::detail::io {

/// One request in flight. The owner keeps it (and every buffer and path given
/// with it) alive until `on_done` has been called.
struct io_request {
    void (*on_done)(io_request* self, int result) = nullptr;
    // Released by the io_uring engine before each submission and acquired before
    // on_done: the kernel orders the two, but thread sanitizers cannot see that.
    std::atomic<bool> handoff{false};
    // The io_uring engine's fault shim (io_testing.hpp): non-zero, the request went
    // to the kernel as a no-op and completes with this result instead.
    int injected_result = 0;
};

class file_engine {
public:
    virtual ~file_engine() = default;

    virtual io_backend kind() const noexcept = 0;

    /// openat(AT_FDCWD, path, flags, mode) -> fd.
    virtual void open(io_request& r, const char* path, int flags, unsigned mode) = 0;
    /// statx(fd, "", AT_EMPTY_PATH, STATX_TYPE | STATX_SIZE, out) -> 0.
    virtual void stat(io_request& r, int fd, struct statx* out) = 0;
    /// pread(fd, buf, len, offset) -> bytes read (short at end of file).
    virtual void read(io_request& r, int fd, void* buf, std::uint32_t len, std::uint64_t offset) = 0;
    /// pwrite(fd, buf, len, offset) -> bytes written.
    virtual void write(io_request& r, int fd, const void* buf, std::uint32_t len, std::uint64_t offset) = 0;
    /// fsync(fd) -> 0.
    virtual void fsync(io_request& r, int fd) = 0;
    /// fdatasync(fd) -> 0 (the write-ahead log's commit, src/corpus/write_log.cpp). The
    /// fault shim counts it as io_call::fsync.
    virtual void fdatasync(io_request& r, int fd) = 0;
    /// linkat(AT_FDCWD, from, AT_FDCWD, to, AT_SYMLINK_FOLLOW) -> 0.
    virtual void link(io_request& r, const char* from, const char* to) = 0;
    /// renameat(AT_FDCWD, from, AT_FDCWD, to) -> 0.
    virtual void rename(io_request& r, const char* from, const char* to) = 0;
};

/// The engine of this process, chosen on the first call.
file_engine& io_engine();

/// The thread pool engine (always available; also used by tests and benchmarks
/// that compare the two).
file_engine& pool_io_engine();

/// The io_uring engine, or null when tenferro was built without liburing or the
/// kernel refuses a ring or one of the operations (probed once).
file_engine* uring_io_engine();

}  // namespace tenferro::detail::io
