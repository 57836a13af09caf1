// The io_uring engine: one ring for the process, submissions serialised by a
// mutex, and one thread that reaps completions and runs the callbacks (which may
// submit the next requests of their operation).
//
// Why liburing directly rather than Asio's io_uring support: Asio 1.22 enables it
// only with ASIO_HAS_IO_URING defined for every translation unit that includes
// Asio (it changes the io_context's reactor), which a library cannot impose on
// its users' builds, and it offers no open/statx/fsync/link/rename. Here liburing
// stays inside src/io/ and users' Asio configuration is untouched.
//
// Reads of page-cached data complete inline in io_uring_enter, on the submitting
// thread; bulk reads and writes (the data chunks) are flagged IOSQE_ASYNC so that
// the kernel's io-wq workers copy several chunks in parallel instead.

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "io/file_engine.hpp"
#include "io/io_testing.hpp"

namespace tenferro::detail::io {
namespace {

constexpr unsigned sq_entries = 256;
constexpr unsigned cq_entries = 4096;
// Reads and writes at least this long go to io-wq (IOSQE_ASYNC).
constexpr std::uint32_t async_threshold = 256 * 1024;

// A transfer of `len` bytes, or half of it (at least 1) for a short_transfer fault.
std::uint32_t shortened(std::uint32_t len, bool shorten) noexcept { return shorten ? std::max(1u, len / 2) : len; }

class uring_engine final : public file_engine {
public:
    // Returns null when the kernel refuses the ring or lacks an operation.
    static uring_engine* create() noexcept {
        io_uring_params params{};
        params.flags = IORING_SETUP_CQSIZE;
        params.cq_entries = cq_entries;
        io_uring ring{};
        if (io_uring_queue_init_params(sq_entries, &ring, &params) < 0) return nullptr;
        bool ok = (params.features & IORING_FEAT_NODROP) != 0 && (params.features & IORING_FEAT_EXT_ARG) != 0;
        if (io_uring_probe* probe = io_uring_get_probe_ring(&ring)) {
            for (int op : {IORING_OP_OPENAT, IORING_OP_STATX, IORING_OP_READ, IORING_OP_WRITE, IORING_OP_FSYNC,
                           IORING_OP_LINKAT, IORING_OP_RENAMEAT})
                ok = ok && io_uring_opcode_supported(probe, op);
            io_uring_free_probe(probe);
        } else {
            ok = false;
        }
        if (!ok) {
            io_uring_queue_exit(&ring);
            return nullptr;
        }
        try {
            return new uring_engine(ring);
        } catch (...) {
            io_uring_queue_exit(&ring);
            return nullptr;
        }
    }

    io_backend kind() const noexcept override { return io_backend::io_uring; }

    void open(io_request& r, const char* path, int flags, unsigned mode) override {
        submit(
            r, io_call::open, 0,
            [&](io_uring_sqe* sqe, bool) { io_uring_prep_openat(sqe, AT_FDCWD, path, flags, mode); },
            [&](file_engine& pool) { pool.open(r, path, flags, mode); });
    }
    void stat(io_request& r, int fd, struct statx* out) override {
        submit(
            r, io_call::stat, 0,
            [&](io_uring_sqe* sqe, bool) {
                io_uring_prep_statx(sqe, fd, "", AT_EMPTY_PATH, STATX_TYPE | STATX_SIZE, out);
            },
            [&](file_engine& pool) { pool.stat(r, fd, out); });
    }
    void read(io_request& r, int fd, void* buf, std::uint32_t len, std::uint64_t offset) override {
        submit(
            r, io_call::read, len >= async_threshold ? IOSQE_ASYNC : 0,
            [&](io_uring_sqe* sqe, bool shorten) { io_uring_prep_read(sqe, fd, buf, shortened(len, shorten), offset); },
            [&](file_engine& pool) { pool.read(r, fd, buf, len, offset); });
    }
    void write(io_request& r, int fd, const void* buf, std::uint32_t len, std::uint64_t offset) override {
        submit(
            r, io_call::write, len >= async_threshold ? IOSQE_ASYNC : 0,
            [&](io_uring_sqe* sqe, bool shorten) {
                io_uring_prep_write(sqe, fd, buf, shortened(len, shorten), offset);
            },
            [&](file_engine& pool) { pool.write(r, fd, buf, len, offset); });
    }
    void fsync(io_request& r, int fd) override {
        submit(
            r, io_call::fsync, 0, [&](io_uring_sqe* sqe, bool) { io_uring_prep_fsync(sqe, fd, 0); },
            [&](file_engine& pool) { pool.fsync(r, fd); });
    }
    void fdatasync(io_request& r, int fd) override {
        submit(
            r, io_call::fsync, 0, [&](io_uring_sqe* sqe, bool) { io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC); },
            [&](file_engine& pool) { pool.fdatasync(r, fd); });
    }
    void link(io_request& r, const char* from, const char* to) override {
        submit(
            r, io_call::link, 0,
            [&](io_uring_sqe* sqe, bool) {
                io_uring_prep_linkat(sqe, AT_FDCWD, from, AT_FDCWD, to, AT_SYMLINK_FOLLOW);
            },
            [&](file_engine& pool) { pool.link(r, from, to); });
    }
    void rename(io_request& r, const char* from, const char* to) override {
        submit(
            r, io_call::rename, 0,
            [&](io_uring_sqe* sqe, bool) { io_uring_prep_renameat(sqe, AT_FDCWD, from, AT_FDCWD, to, 0); },
            [&](file_engine& pool) { pool.rename(r, from, to); });
    }

private:
    explicit uring_engine(const io_uring& ring) : ring_(ring), reaper_([this] { reap(); }) {}

    // The fault shim's boundary calls (io_testing.hpp): io_uring_get_sqe and
    // io_uring_submit as such, and each request's result. The result's fault is
    // drawn when the request is prepared (so that the numbering does not depend on
    // the order of completions): an errno fault sends a no-op in its place, which
    // completes with that errno; short_transfer halves a read or write.
    io_uring_sqe* get_sqe() noexcept {
        if (io_fault_at(io_call::get_sqe) == io_fault::ring_full) return nullptr;
        return io_uring_get_sqe(&ring_);
    }
    int submit_sq() noexcept {
        switch (io_fault_at(io_call::submit)) {
        case io_fault::submit_ebusy:
            return -EBUSY;
        case io_fault::submit_eagain:
            return -EAGAIN;
        default:
            return io_uring_submit(&ring_);
        }
    }

    template <class Prep, class Overflow>
    void submit(io_request& r, io_call call, unsigned sqe_flags, Prep prep, Overflow overflow) {
        std::unique_lock lock(sq_mutex_);
        io_uring_sqe* sqe = get_sqe();
        if (sqe == nullptr) {
            // The submission queue is full of entries the kernel has not taken yet
            // (it refuses while it flushes a completion backlog). Push them; if that
            // frees no slot, the blocking pool carries this one request: same
            // contract, and no deadlock when the reaper itself is the submitter.
            submit_sq();
            sqe = get_sqe();
            if (sqe == nullptr) {
                lock.unlock();
                overflow(pool_io_engine());
                return;
            }
        }
        const io_fault fault = io_fault_at(call);
        if (const int err = io_fault_errno(fault)) {
            r.injected_result = -err;
            r.handoff.store(true, std::memory_order_release);
            io_uring_prep_nop(sqe);
        } else {
            r.handoff.store(true, std::memory_order_release);
            prep(sqe, fault == io_fault::short_transfer);
        }
        io_uring_sqe_set_flags(sqe, sqe_flags);
        io_uring_sqe_set_data(sqe, &r);
        int ret;
        do {
            ret = submit_sq();
        } while (ret == -EINTR);
        if (ret >= 0 || std::this_thread::get_id() == reaper_.get_id()) return;
        // Refused (-EBUSY: a completion backlog; -EAGAIN: no kernel memory): the entry
        // stays queued. The reaper pushes queued entries after each batch of
        // completions (and, when refused itself, again every millisecond), but it
        // may be asleep with nothing in flight: then no completion would wake it, so
        // a submitter on another thread pushes its entry itself, pausing between
        // tries with the lock released.
        for (auto pause = std::chrono::microseconds(50); io_uring_sq_ready(&ring_) > 0;
             pause = std::min(2 * pause, std::chrono::microseconds(10'000))) {
            lock.unlock();
            std::this_thread::sleep_for(pause);
            lock.lock();
            if (io_uring_sq_ready(&ring_) == 0) break;
            do {
                ret = submit_sq();
            } while (ret == -EINTR);
        }
    }

    // Pushes the entries queued but refused earlier; true if some are still queued.
    bool push_backlog() noexcept {
        std::lock_guard lock(sq_mutex_);
        if (io_uring_sq_ready(&ring_) == 0) return false;
        int ret;
        do {
            ret = submit_sq();
        } while (ret == -EINTR);
        return io_uring_sq_ready(&ring_) > 0;
    }

    void reap() noexcept {
        constexpr unsigned batch = 64;
        io_uring_cqe* cqes[batch];
        struct completion {
            io_request* request;
            int result;
        } done[batch];
        bool backlog = false;  // entries queued that the kernel refused
        for (;;) {
            io_uring_cqe* first = nullptr;
            int ret;
            if (backlog) {
                // Nothing may be in flight to wake us: try the backlog again soon.
                // (IORING_FEAT_EXT_ARG: this wait submits nothing itself.)
                __kernel_timespec timeout{0, 1'000'000};
                ret = io_uring_wait_cqe_timeout(&ring_, &first, &timeout);
            } else {
                ret = io_uring_wait_cqe(&ring_, &first);
            }
            if (ret == -ETIME) {
                backlog = push_backlog();
                continue;
            }
            if (ret < 0) {
                if (ret == -EINTR || ret == -EAGAIN || ret == -EBUSY) continue;
                std::abort();  // the ring itself is broken: nothing sane is left to do
            }
            // Copy the completions out and release their slots before running the
            // callbacks, which submit more.
            const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, batch);
            for (unsigned i = 0; i < n; ++i)
                done[i] = {static_cast<io_request*>(io_uring_cqe_get_data(cqes[i])), cqes[i]->res};
            io_uring_cq_advance(&ring_, n);
            for (unsigned i = 0; i < n; ++i) {
                io_request* request = done[i].request;
                (void)request->handoff.load(std::memory_order_acquire);
                int result = done[i].result;
                if (request->injected_result != 0) {  // a fault shim's no-op
                    result = request->injected_result;
                    request->injected_result = 0;
                }
                request->on_done(request, result);
            }
            backlog = push_backlog();
        }
    }

    io_uring ring_;
    std::mutex sq_mutex_;
    std::thread reaper_;
};

}  // namespace

file_engine* uring_io_engine() {
    // Probed once; never destroyed (see pool_io_engine).
    static uring_engine* engine = uring_engine::create();
    return engine;
}

}  // namespace tenferro::detail::io
