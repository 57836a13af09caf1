#pragma once
// What the .npy read (npy_read.cpp) and write (npy_write.cpp) operations share:
// `op_base`, the single steps and the chunked transfer, written once against
// file_engine (so both backends run the same logic); the test seams they report to
// (io_testing.hpp); and the strided copy both use to (un)transpose data.
//
// Life and threads: an operation owns itself (`self_`) from start() until it hands
// its outcome to the receiver. Steps run on engine threads; only the chunk phase has
// several requests in flight, and its bookkeeping is under `mutex_`. Cancellation is
// an atomic flag read at every step boundary; requests already in flight finish first.

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <span>
#include <system_error>
#include <type_traits>

#include "io/file_engine.hpp"
#include "io/io_testing.hpp"
#include "tenferro/io.hpp"

namespace tenferro::detail::io {

// Chunked transfers: this many bytes per request, this many requests in flight.
inline constexpr std::uint32_t chunk_bytes = 2u << 20;
inline constexpr std::size_t max_in_flight = 8;

inline std::error_code system_error(int err) noexcept { return {err, std::system_category()}; }
inline std::error_code aborted() noexcept { return from_asio_error_code(asio::error::operation_aborted); }

// 0, or the errno a test injects at `event` (set_io_test_hook).
int injected(io_event event) noexcept;

// dst (row-major, shape) = the elements of src read with `src_strides`.
void strided_copy(const tensor_view& dst, const void* src, std::span<const std::int64_t> src_strides);

// ---------------------------------------------------------------------------
// The part both operations share: single steps and the chunked transfer
// (npy_op.cpp).
// ---------------------------------------------------------------------------

class op_base : public virtual npy_operation {
public:
    void cancel() noexcept override { cancelled_.store(true, std::memory_order_release); }

protected:
    explicit op_base(file_engine& engine) noexcept;

    bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }

    /// The outcome of the single request in flight outside the chunk phase.
    virtual void on_step(int result) noexcept = 0;

    /// Issues one single-step request; false (with `ec` set) if it could not be issued.
    /// The request is kept so that a step interrupted (-EINTR, which io_uring
    /// completions can carry) is issued again rather than failing the operation.
    template <class Issue>
    bool issue(Issue issue_request, std::error_code& ec) noexcept {
        static_assert(sizeof(Issue) <= sizeof(step_issue_) && alignof(Issue) <= alignof(void*) &&
                          std::is_trivially_copyable_v<Issue> && std::is_trivially_destructible_v<Issue>,
                      "a step's request is a closure over `this` (and at most one more pointer)");
        ::new (static_cast<void*>(step_issue_)) Issue(issue_request);
        step_reissue_ = [](op_base& self) { (*std::launder(reinterpret_cast<Issue*>(self.step_issue_)))(self.step_); };
        return issue_step(ec);
    }

    // --- the chunk phase: file bytes [begin, end) to or from memory ---

    /// Memory of file offset `offset`, and how many bytes from there lie in one segment.
    virtual unsigned char* chunk_memory(std::uint64_t offset, std::uint64_t& segment_left) noexcept = 0;
    /// A chunk is complete (before the next is issued); a non-zero errno fails the operation.
    virtual int chunk_done(std::uint64_t offset, std::uint32_t len) noexcept = 0;
    /// Every chunk request has finished: `ec` is the first error (cancellation included).
    virtual void chunks_finished(std::error_code ec) noexcept = 0;

    void start_chunks(int fd, bool writing, std::uint64_t begin, std::uint64_t end) noexcept;

private:
    // Runs the kept step request; false (with `ec` set) if it could not be issued.
    bool issue_step(std::error_code& ec) noexcept;

    struct step_request : io_request {
        op_base* op = nullptr;
    };
    struct chunk_request : io_request {
        op_base* op = nullptr;
        std::uint64_t offset = 0;  // file offset of the chunk
        std::uint32_t len = 0;     // chunk length
        std::uint32_t done = 0;    // bytes transferred so far (short reads and writes)
    };

    // Under mutex_: gives `c` the next chunk, unless the transfer is over or failing.
    bool assign_next(chunk_request& c) noexcept;
    void submit_chunk(chunk_request& c) noexcept;
    void on_chunk(chunk_request& c, int result) noexcept;
    // A chunk request is over (done or failed): issue the next one, or finish.
    void chunk_over(chunk_request& c, std::error_code ec) noexcept;

protected:
    file_engine& engine_;

private:
    std::atomic<bool> cancelled_{false};
    step_request step_;
    // The last single-step request (a closure over `this`), to issue it again.
    alignas(void*) unsigned char step_issue_[2 * sizeof(void*)];
    void (*step_reissue_)(op_base&) = nullptr;
    std::mutex mutex_;
    std::array<chunk_request, max_in_flight> chunks_;
    int fd_for_chunks_ = -1;
    bool writing_ = false;
    std::uint64_t next_ = 0, end_ = 0;
    std::size_t in_flight_ = 0;
    std::error_code chunk_error_;
};

}  // namespace tenferro::detail::io
