// async_read_npy: the read operation behind <tenferro/io.hpp>, an op_base
// (npy_op.hpp) written once against file_engine.
//
// A read:  open (O_NONBLOCK, so that a FIFO cannot hang us) -> statx (regular file?
//          size) -> read the first 4 KiB (and the rest of a longer header) -> parse,
//          checking the described data against the file size -> allocate the tensor
//          -> read the data straight into it in chunks, several in flight, swapping
//          bytes chunk by chunk while they are hot -> (Fortran order: transpose) -> done.

#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "io/npy_format.hpp"
#include "io/npy_op.hpp"
#include "tenferro/io.hpp"

namespace tenferro {
namespace detail::io {
namespace {

// The first read of a file: enough for every header numpy writes for rank <= 8.
constexpr std::uint32_t first_read_bytes = 4096;

void byte_swap(void* data, std::size_t bytes, std::size_t itemsize) noexcept {
    auto* p = static_cast<unsigned char*>(data);
    if (itemsize == 4) {
        for (std::size_t i = 0; i + 4 <= bytes; i += 4) {
            std::uint32_t v;
            std::memcpy(&v, p + i, 4);
            v = __builtin_bswap32(v);
            std::memcpy(p + i, &v, 4);
        }
    } else {
        for (std::size_t i = 0; i + 8 <= bytes; i += 8) {
            std::uint64_t v;
            std::memcpy(&v, p + i, 8);
            v = __builtin_bswap64(v);
            std::memcpy(p + i, &v, 8);
        }
    }
}

class read_op final : public op_base, public npy_read_operation, public std::enable_shared_from_this<read_op> {
public:
    read_op(file_engine& engine, std::filesystem::path path, const npy_read_options& options)
        : op_base(engine), path_(std::move(path)), resource_(options.memory_resource) {
        limits_.max_data_bytes = options.max_data_bytes;
        limits_.max_header_bytes = options.max_header_bytes;
    }

    void bind(npy_read_receiver& receiver) noexcept override { receiver_ = &receiver; }

    void start() noexcept override {
        self_ = shared_from_this();
        stage_ = stage::opening;
        std::error_code ec;
        if (!issue(
                [&](io_request& r) { engine_.open(r, path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0); },
                ec))
            finish(ec);
    }

private:
    enum class stage { opening, stating, reading_header };

    void on_step(int result) noexcept override {
        std::error_code ec;
        switch (stage_) {
        case stage::opening:
            if (result < 0) return finish(system_error(-result));
            fd_ = result;
            if (cancelled()) return finish(aborted());
            stage_ = stage::stating;
            if (!issue([&](io_request& r) { engine_.stat(r, fd_, &stx_); }, ec)) return finish(ec);
            return;
        case stage::stating:
            if (result < 0) return finish(system_error(-result));
            if (S_ISDIR(stx_.stx_mode)) return finish(system_error(EISDIR));
            if (!S_ISREG(stx_.stx_mode)) return finish(npy_errc::not_a_regular_file);
            // O_NONBLOCK only guarded the open; io_uring would fail uncached reads with
            // EAGAIN instead of waiting for the disk.
            if (const int flags = ::fcntl(fd_, F_GETFL); flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) < 0)
                return finish(system_error(errno));
            if (cancelled()) return finish(aborted());
            file_size_ = stx_.stx_size;
            try {
                header_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(file_size_, first_read_bytes)));
            } catch (const std::bad_alloc&) {
                return finish(system_error(ENOMEM));
            }
            stage_ = stage::reading_header;
            return read_header_rest();
        case stage::reading_header:
            if (result == -EAGAIN) return read_header_rest();
            if (result < 0) return finish(system_error(-result));
            if (result == 0) return finish(npy_errc::truncated_header);  // the file shrank
            header_got_ += static_cast<std::size_t>(result);
            return read_header_rest();
        }
    }

    void read_header_rest() noexcept {
        if (header_got_ < header_.size()) {
            std::error_code ec;
            if (!issue(
                    [&](io_request& r) {
                        engine_.read(r, fd_, header_.data() + header_got_,
                                     static_cast<std::uint32_t>(header_.size() - header_got_), header_got_);
                    },
                    ec))
                finish(ec);
            return;
        }
        const auto total = npy::header_size(header_, file_size_, limits_);
        if (!total) return finish(total.error());
        if (*total > header_.size()) {  // a header longer than the first read
            try {
                header_.resize(static_cast<std::size_t>(*total));
            } catch (const std::bad_alloc&) {
                return finish(system_error(ENOMEM));
            }
            return read_header_rest();
        }
        const auto info = npy::parse_header(header_, file_size_, limits_);
        if (!info) return finish(info.error());
        info_ = *info;
        header_ = {};
        header_.shrink_to_fit();
        if (cancelled()) return finish(aborted());

        // Fortran order: the data is the row-major array of the reversed shape.
        transposed_ = info_.fortran_order && info_.rank >= 2;
        std::array<std::int64_t, max_rank> shape = info_.shape;
        if (transposed_) std::reverse(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(info_.rank));
        try {
            data_ = tensor::empty(info_.type, std::span<const std::int64_t>(shape.data(), info_.rank), resource_);
        } catch (const std::bad_alloc&) {
            return finish(system_error(ENOMEM));
        } catch (const tensor_error&) {
            return finish(npy_errc::shape_overflow);  // the parser applies the same rule; defensive
        }
        start_chunks(fd_, false, info_.data_offset, info_.data_offset + info_.data_bytes);
    }

    unsigned char* chunk_memory(std::uint64_t offset, std::uint64_t& segment_left) noexcept override {
        const std::uint64_t rel = offset - info_.data_offset;
        segment_left = info_.data_bytes - rel;
        return static_cast<unsigned char*>(data_.data()) + rel;
    }

    int chunk_done(std::uint64_t offset, std::uint32_t len) noexcept override {
        std::uint64_t ignored = 0;
        if (info_.swap_bytes) byte_swap(chunk_memory(offset, ignored), len, size_of(info_.type));
        return injected(io_event::read_chunk_done);
    }

    void chunks_finished(std::error_code ec) noexcept override { finish(ec); }

    void finish(std::error_code ec) noexcept {
        const auto keep_alive = std::move(self_);
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        tensor result;
        if (!ec) {
            try {
                if (transposed_) {
                    result = tensor::empty(info_.type, info_.extents(), resource_);
                    detail::extents reversed(info_.rank, 0);
                    const auto src = data_.strides();
                    for (std::size_t i = 0; i < info_.rank; ++i) reversed[i] = src[info_.rank - 1 - i];
                    strided_copy(result.view(), data_.data(), reversed.span());
                } else {
                    result = std::move(data_);
                }
            } catch (const std::bad_alloc&) {
                ec = system_error(ENOMEM);
                result = tensor();
            }
        }
        data_ = tensor();  // the cancellation slot may keep this op alive a while: not its memory
        receiver_->complete(ec, std::move(result));
    }

    std::filesystem::path path_;
    npy_read_receiver* receiver_ = nullptr;  // bound once, before start
    npy::limits limits_;
    std::shared_ptr<std::pmr::memory_resource> resource_;  // null: ::operator new
    std::shared_ptr<read_op> self_;
    stage stage_ = stage::opening;
    int fd_ = -1;
    struct statx stx_ {};
    std::uint64_t file_size_ = 0;
    std::vector<std::uint8_t> header_;
    std::size_t header_got_ = 0;
    npy::header_info info_;
    bool transposed_ = false;
    tensor data_;
};

}  // namespace
}  // namespace detail::io

namespace detail {

std::shared_ptr<npy_read_operation> make_read_npy_op(std::filesystem::path path, const npy_read_options& options) {
    return std::make_shared<io::read_op>(io::io_engine(), std::move(path), options);
}

}  // namespace detail
}  // namespace tenferro
