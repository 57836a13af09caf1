// The shared half of the .npy operations (declared in npy_op.hpp): op_base's
// chunked transfer, the test seams of io_testing.hpp, the strided copy, and the
// context of the exceptions the synchronous wrappers throw.

#include "io/npy_op.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/nd_loop.hpp"
#include "kernels/structural.hpp"

namespace tenferro {
namespace detail::io {
namespace {

std::atomic<io_test_hook> test_hook{nullptr};
std::atomic<void*> test_hook_context{nullptr};

}  // namespace

int injected(io_event event) noexcept {
    const io_test_hook hook = test_hook.load(std::memory_order_acquire);
    return hook ? hook(event, test_hook_context.load(std::memory_order_acquire)) : 0;
}

void set_io_test_hook(io_test_hook hook, void* context) noexcept {
    test_hook_context.store(context, std::memory_order_release);
    test_hook.store(hook, std::memory_order_release);
}

// dst (row-major, shape) = the elements of src read with `src_strides`.
void strided_copy(const tensor_view& dst, const void* src, std::span<const std::int64_t> src_strides) {
    if (dst.size() == 0) return;
    const auto loop = kernels::make_loop<2>(dst.shape(), {dst.strides(), src_strides});
    const int r = loop.rank;
    if (r >= 2) {
        const std::int64_t inner = std::llabs(loop.strides[1][r - 1]), outer = std::llabs(loop.strides[1][r - 2]);
        if (inner > 1 && outer < inner && loop.shape[r - 1] >= 8 && loop.shape[r - 2] >= 8) {
            kernels::copy_tiled(loop, dst.itemsize(), dst.data(), src, 0, kernels::copy_tiled_units(loop));
            return;
        }
    }
    kernels::copy(loop, dst.itemsize(), dst.data(), src, 0, loop.size());
}

// ---------------------------------------------------------------------------
// op_base: single steps and the chunked transfer.
// ---------------------------------------------------------------------------

op_base::op_base(file_engine& engine) noexcept : engine_(engine) {
    step_.op = this;
    step_.on_done = [](io_request* r, int result) {
        auto* self = static_cast<step_request*>(r)->op;
        if (result == -EINTR) {
            // Interrupted before it did anything: the same request again.
            std::error_code ec;
            if (self->issue_step(ec)) return;
            result = -ec.value();
        }
        self->on_step(result);
    };
    for (auto& c : chunks_) {
        c.op = this;
        c.on_done = [](io_request* r, int result) {
            auto& c = *static_cast<chunk_request*>(r);
            c.op->on_chunk(c, result);
        };
    }
}

bool op_base::issue_step(std::error_code& ec) noexcept {
    try {
        step_reissue_(*this);
        return true;
    } catch (const std::bad_alloc&) {
        ec = system_error(ENOMEM);
    } catch (...) {
        ec = system_error(EIO);
    }
    return false;
}

void op_base::start_chunks(int fd, bool writing, std::uint64_t begin, std::uint64_t end) noexcept {
    chunk_request* ready[max_in_flight];
    std::size_t n = 0;
    {
        std::lock_guard lock(mutex_);
        fd_for_chunks_ = fd;
        writing_ = writing;
        next_ = begin;
        end_ = end;
        in_flight_ = 0;
        chunk_error_ = {};
        for (auto& c : chunks_)
            if (assign_next(c)) ready[n++] = &c;
    }
    if (n == 0) {
        chunks_finished(cancelled() ? aborted() : std::error_code{});
        return;
    }
    for (std::size_t i = 0; i < n; ++i) submit_chunk(*ready[i]);
}

bool op_base::assign_next(chunk_request& c) noexcept {
    if (next_ >= end_ || chunk_error_) return false;
    if (cancelled()) {
        chunk_error_ = aborted();
        return false;
    }
    std::uint64_t segment_left = 0;
    chunk_memory(next_, segment_left);
    c.offset = next_;
    c.len = static_cast<std::uint32_t>(std::min<std::uint64_t>({chunk_bytes, end_ - next_, segment_left}));
    c.done = 0;
    next_ += c.len;
    ++in_flight_;
    return true;
}

void op_base::submit_chunk(chunk_request& c) noexcept {
    std::uint64_t segment_left = 0;
    unsigned char* memory = chunk_memory(c.offset + c.done, segment_left);
    const std::uint32_t len = c.len - c.done;
    try {
        if (writing_)
            engine_.write(c, fd_for_chunks_, memory, len, c.offset + c.done);
        else
            engine_.read(c, fd_for_chunks_, memory, len, c.offset + c.done);
    } catch (const std::bad_alloc&) {
        chunk_over(c, system_error(ENOMEM));
    } catch (...) {
        chunk_over(c, system_error(EIO));
    }
}

void op_base::on_chunk(chunk_request& c, int result) noexcept {
    if (result == -EINTR || result == -EAGAIN) {
        submit_chunk(c);
        return;
    }
    if (result < 0) {
        chunk_over(c, system_error(-result));
        return;
    }
    if (result == 0) {
        // End of file before the end of the chunk: the file shrank under us. A
        // write that makes no progress is an I/O error.
        chunk_over(c, writing_ ? system_error(EIO) : std::error_code(npy_errc::truncated_data));
        return;
    }
    c.done += static_cast<std::uint32_t>(result);
    if (c.done < c.len) {
        submit_chunk(c);  // a short transfer: the rest of the chunk
        return;
    }
    const int err = chunk_done(c.offset, c.len);
    chunk_over(c, err ? system_error(err) : std::error_code{});
}

void op_base::chunk_over(chunk_request& c, std::error_code ec) noexcept {
    bool again = false, finished = false;
    std::error_code outcome;
    {
        std::lock_guard lock(mutex_);
        --in_flight_;
        if (ec && !chunk_error_) chunk_error_ = ec;
        again = assign_next(c);
        if (!again && in_flight_ == 0) {
            finished = true;
            outcome = chunk_error_;
        }
    }
    if (again)
        submit_chunk(c);
    else if (finished)
        chunks_finished(outcome);
}

}  // namespace detail::io

namespace detail {

std::string npy_error_context(std::string_view function, const std::filesystem::path& path) {
    return std::string(function) + ": '" + path.string() + "'";
}

}  // namespace detail
}  // namespace tenferro
