// The fallback engine: every request is one blocking syscall on a small thread
// pool. Used when io_uring is unavailable (old kernels, seccomp profiles that
// block io_uring_setup, a build without liburing) or TENFERRO_IO_URING=0.

#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "tenferro/asio.hpp"
#if TENFERRO_ASIO_BOOST
#include <boost/asio/thread_pool.hpp>
#else
#include <asio/thread_pool.hpp>
#endif

#include "io/file_engine.hpp"
#include "io/io_testing.hpp"

namespace tenferro::detail::io {
namespace {

int result_of(long r) noexcept { return r < 0 ? -errno : static_cast<int>(r); }

// One request's syscall, retried while it fails with EINTR. Each attempt is a
// boundary call of the fault shim (io_testing.hpp): an errno fault stands for the
// syscall's result (the syscall is not made, so nothing is created or changed),
// and `syscall(true)` is asked to move half its bytes.
template <class F>
int boundary_syscall(io_call call, F syscall) noexcept {
    long r;
    do {
        const io_fault fault = io_fault_at(call);
        if (const int err = io_fault_errno(fault)) {
            errno = err;
            r = -1;
        } else {
            r = syscall(fault == io_fault::short_transfer);
        }
    } while (r < 0 && errno == EINTR);
    return result_of(r);
}

// A transfer of `len` bytes, or half of it (at least 1) for a short_transfer fault.
std::uint32_t shortened(std::uint32_t len, bool shorten) noexcept { return shorten ? std::max(1u, len / 2) : len; }

class pool_engine final : public file_engine {
public:
    // Enough threads to keep a few chunk reads of one large file in flight at once
    // (page-cache copies run in parallel), few enough to stay a "small" pool.
    pool_engine() : pool_(std::clamp<unsigned>(std::thread::hardware_concurrency(), 2, 4)) {}

    io_backend kind() const noexcept override { return io_backend::thread_pool; }

    void open(io_request& r, const char* path, int flags, unsigned mode) override {
        run(r, [=] { return boundary_syscall(io_call::open, [&](bool) { return ::open(path, flags, mode); }); });
    }
    void stat(io_request& r, int fd, struct statx* out) override {
        run(r, [=] {
            return boundary_syscall(io_call::stat,
                                    [&](bool) { return ::statx(fd, "", AT_EMPTY_PATH, STATX_TYPE | STATX_SIZE, out); });
        });
    }
    void read(io_request& r, int fd, void* buf, std::uint32_t len, std::uint64_t offset) override {
        run(r, [=] {
            return boundary_syscall(io_call::read, [&](bool shorten) {
                return ::pread(fd, buf, shortened(len, shorten), static_cast<off_t>(offset));
            });
        });
    }
    void write(io_request& r, int fd, const void* buf, std::uint32_t len, std::uint64_t offset) override {
        run(r, [=] {
            return boundary_syscall(io_call::write, [&](bool shorten) {
                return ::pwrite(fd, buf, shortened(len, shorten), static_cast<off_t>(offset));
            });
        });
    }
    void fsync(io_request& r, int fd) override {
        run(r, [=] { return boundary_syscall(io_call::fsync, [&](bool) { return ::fsync(fd); }); });
    }
    void fdatasync(io_request& r, int fd) override {
        run(r, [=] { return boundary_syscall(io_call::fsync, [&](bool) { return ::fdatasync(fd); }); });
    }
    void link(io_request& r, const char* from, const char* to) override {
        run(r, [=] {
            return boundary_syscall(io_call::link,
                                    [&](bool) { return ::linkat(AT_FDCWD, from, AT_FDCWD, to, AT_SYMLINK_FOLLOW); });
        });
    }
    void rename(io_request& r, const char* from, const char* to) override {
        run(r, [=] { return boundary_syscall(io_call::rename, [&](bool) { return ::rename(from, to); }); });
    }

private:
    template <class Syscall>
    void run(io_request& r, Syscall syscall) {
        io_request* req = &r;
        asio::post(pool_, [req, syscall] { req->on_done(req, syscall()); });
    }

    asio::thread_pool pool_;
};

}  // namespace

file_engine& pool_io_engine() {
    // Never destroyed: operations may still be in flight while static objects
    // are torn down at exit, and the pool's threads must outlive them.
    static pool_engine* engine = new pool_engine();
    return *engine;
}

}  // namespace tenferro::detail::io
