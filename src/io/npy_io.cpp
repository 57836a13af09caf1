// async_read_npy / async_write_npy: the operations behind <tenferro/io.hpp>,
// written once against file_engine (so both backends run the same logic).
//
// A read:  open (O_NONBLOCK, so that a FIFO cannot hang us) -> statx (regular file?
//          size) -> read the first 4 KiB (and the rest of a longer header) -> parse,
//          checking the described data against the file size -> allocate the tensor
//          -> read the data straight into it in chunks, several in flight, swapping
//          bytes chunk by chunk while they are hot -> (Fortran order: transpose) -> done.
// A write: open an O_TMPFILE inode in the destination's directory (or a named
//          temporary) -> header and data chunks, several in flight -> fsync -> give the
//          inode a temporary name (linkat via /proc/self/fd) -> rename over the
//          destination -> fsync the directory (best effort) -> done. Any failure or
//          cancellation before the rename closes and removes the temporary.
//
// Life and threads: an operation owns itself (`self_`) from start() until it hands
// its outcome to the receiver. Steps run on engine threads; only the chunk phase has
// several requests in flight, and its bookkeeping is under `mutex_`. Cancellation is
// an atomic flag read at every step boundary; requests already in flight finish first.

#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "io/file_engine.hpp"
#include "io/io_testing.hpp"
#include "io/npy_format.hpp"
#include "kernels/nd_loop.hpp"
#include "kernels/structural.hpp"
#include "tenferro/io.hpp"

namespace tenferro {
namespace detail::io {
namespace {

// Chunked transfers: this many bytes per request, this many requests in flight.
constexpr std::uint32_t chunk_bytes = 2u << 20;
constexpr std::size_t max_in_flight = 8;
// The first read of a file: enough for every header numpy writes for rank <= 8.
constexpr std::uint32_t first_read_bytes = 4096;

std::error_code system_error(int err) noexcept { return {err, std::system_category()}; }
std::error_code aborted() noexcept { return asio::error::operation_aborted; }

std::atomic<io_test_hook> test_hook{nullptr};
std::atomic<void*> test_hook_context{nullptr};
std::atomic<bool> force_named_temp{false};

// 0, or the errno a test injects at `event`.
int injected(io_event event) noexcept {
    const io_test_hook hook = test_hook.load(std::memory_order_acquire);
    return hook ? hook(event, test_hook_context.load(std::memory_order_acquire)) : 0;
}

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
// The part both operations share: single steps and the chunked transfer.
// ---------------------------------------------------------------------------

class op_base : public npy_operation {
public:
    void cancel() noexcept override { cancelled_.store(true, std::memory_order_release); }

protected:
    explicit op_base(file_engine& engine) noexcept : engine_(engine) {
        step_.op = this;
        step_.on_done = [](io_request* r, int result) {
            auto* self = static_cast<step_request*>(r)->op;
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

    bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }

    /// The outcome of the single request in flight outside the chunk phase.
    virtual void on_step(int result) noexcept = 0;

    /// Issues one single-step request; false (with `ec` set) if it could not be issued.
    template <class Issue>
    bool issue(Issue issue_request, std::error_code& ec) noexcept {
        try {
            issue_request(step_);
            return true;
        } catch (const std::bad_alloc&) {
            ec = system_error(ENOMEM);
        } catch (...) {
            ec = system_error(EIO);
        }
        return false;
    }

    // --- the chunk phase: file bytes [begin, end) to or from memory ---

    /// Memory of file offset `offset`, and how many bytes from there lie in one segment.
    virtual unsigned char* chunk_memory(std::uint64_t offset, std::uint64_t& segment_left) noexcept = 0;
    /// A chunk is complete (before the next is issued); a non-zero errno fails the operation.
    virtual int chunk_done(std::uint64_t offset, std::uint32_t len) noexcept = 0;
    /// Every chunk request has finished: `ec` is the first error (cancellation included).
    virtual void chunks_finished(std::error_code ec) noexcept = 0;

    void start_chunks(int fd, bool writing, std::uint64_t begin, std::uint64_t end) noexcept {
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

private:
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
    bool assign_next(chunk_request& c) noexcept {
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

    void submit_chunk(chunk_request& c) noexcept {
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

    void on_chunk(chunk_request& c, int result) noexcept {
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

    // A chunk request is over (done or failed): issue the next one, or finish.
    void chunk_over(chunk_request& c, std::error_code ec) noexcept {
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

protected:
    file_engine& engine_;

private:
    std::atomic<bool> cancelled_{false};
    step_request step_;
    std::mutex mutex_;
    std::array<chunk_request, max_in_flight> chunks_;
    int fd_for_chunks_ = -1;
    bool writing_ = false;
    std::uint64_t next_ = 0, end_ = 0;
    std::size_t in_flight_ = 0;
    std::error_code chunk_error_;
};

// ---------------------------------------------------------------------------
// Reading.
// ---------------------------------------------------------------------------

class read_op final : public op_base, public std::enable_shared_from_this<read_op> {
public:
    read_op(file_engine& engine, std::filesystem::path path, const npy_read_options& options,
            npy_read_receiver& receiver)
        : op_base(engine), path_(std::move(path)), receiver_(&receiver), resource_(options.memory_resource) {
        limits_.max_data_bytes = options.max_data_bytes;
        limits_.max_header_bytes = options.max_header_bytes;
    }

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
            if (result == -EINTR || result == -EAGAIN) return read_header_rest();
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
    npy_read_receiver* receiver_;
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

// ---------------------------------------------------------------------------
// Writing.
// ---------------------------------------------------------------------------

// O_TMPFILE inodes are given a name through /proc/self/fd/N (linkat with
// AT_SYMLINK_FOLLOW), which needs no privilege; without /proc, named temporaries.
bool can_link_tmpfile() noexcept {
    static const bool ok = ::access("/proc/self/fd", X_OK) == 0;
    return ok;
}

std::string random_suffix() {
    thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<std::uint64_t>(::getpid())};
    static constexpr char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    std::string s(12, '0');
    for (char& c : s) c = digits[rng() % 36];
    return s;
}

class write_op final : public op_base, public std::enable_shared_from_this<write_op> {
public:
    write_op(file_engine& engine, std::filesystem::path path, const_tensor_view view, npy_write_receiver& receiver)
        : op_base(engine), path_(std::move(path)), view_(view), receiver_(&receiver) {
        const std::size_t rank = view_.rank();
        if (view_.size() == 0 || view_.is_contiguous()) {
            source_ = static_cast<const unsigned char*>(view_.data());
        } else if (rank >= 2 && view_.transposed().is_contiguous()) {
            fortran_ = true;  // numpy does the same for an F-contiguous array
            source_ = static_cast<const unsigned char*>(view_.data());
        } else {
            gather_ = true;
        }
        header_ = npy::format_header(view_.type(), view_.shape(), fortran_);
        data_bytes_ = static_cast<std::uint64_t>(view_.size()) * view_.itemsize();
        dir_ = path_.parent_path();
        if (dir_.empty()) dir_ = ".";
    }

    void start() noexcept override {
        self_ = shared_from_this();
        if (path_.empty()) return finish(system_error(ENOENT));
        if (!path_.has_filename()) return finish(system_error(EISDIR));
        if (can_link_tmpfile() && !force_named_temp.load(std::memory_order_acquire)) {
            stage_ = stage::open_anonymous;
            std::error_code ec;
            if (!issue([&](io_request& r) { engine_.open(r, dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666); },
                       ec))
                finish(ec);
            return;
        }
        open_named();
    }

private:
    enum class stage { open_anonymous, open_named, fsync_file, link, rename, open_dir, fsync_dir };

    // `.NAME.tenferro-XXXXXXXXXXXX` next to the destination. (Built by appending:
    // GCC 12 reports a false -Wrestrict for a chain of string + string.)
    std::filesystem::path temp_name() const {
        std::string name = ".";
        name += path_.filename().string();
        name += ".tenferro-";
        name += random_suffix();
        return dir_ / name;
    }

    void open_named() noexcept {
        stage_ = stage::open_named;
        std::error_code ec;
        try {
            temp_ = temp_name();
        } catch (const std::bad_alloc&) {
            return fail(system_error(ENOMEM));
        }
        if (!issue(
                [&](io_request& r) { engine_.open(r, temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666); },
                ec))
            fail(ec);
    }

    void link_temp() noexcept {
        stage_ = stage::link;
        if (const int err = injected(io_event::before_link)) return fail(system_error(err));
        std::error_code ec;
        try {
            temp_ = temp_name();
            proc_path_ = "/proc/self/fd/";
            proc_path_ += std::to_string(fd_);
        } catch (const std::bad_alloc&) {
            return fail(system_error(ENOMEM));
        }
        if (!issue([&](io_request& r) { engine_.link(r, proc_path_.c_str(), temp_.c_str()); }, ec)) fail(ec);
    }

    void rename_temp() noexcept {
        // The last point at which cancellation is honoured: after it the
        // destination may already be replaced.
        if (cancelled()) return fail(aborted());
        stage_ = stage::rename;
        if (const int err = injected(io_event::before_rename)) return fail(system_error(err));
        std::error_code ec;
        if (!issue([&](io_request& r) { engine_.rename(r, temp_.c_str(), path_.c_str()); }, ec)) fail(ec);
    }

    void on_step(int result) noexcept override {
        std::error_code ec;
        switch (stage_) {
        case stage::open_anonymous:
            // No O_TMPFILE here (an old kernel reports EISDIR, file systems without
            // it EOPNOTSUPP): a named temporary instead.
            if (result == -EOPNOTSUPP || result == -EISDIR || result == -EINVAL) return open_named();
            if (result < 0) return fail(system_error(-result));
            fd_ = result;
            anonymous_ = true;
            return write_data();
        case stage::open_named:
            if (result == -EEXIST && ++name_attempts_ < 16) return open_named();
            if (result < 0) {
                temp_.clear();
                return fail(system_error(-result));
            }
            fd_ = result;
            return write_data();
        case stage::fsync_file:
            if (result < 0) return fail(system_error(-result));
            if (cancelled()) return fail(aborted());
            if (anonymous_) return link_temp();
            return rename_temp();
        case stage::link:
            if (result == -EEXIST && ++name_attempts_ < 16) {
                temp_.clear();
                return link_temp();
            }
            if (result < 0) {
                temp_.clear();  // nothing was created
                return fail(system_error(-result));
            }
            return rename_temp();
        case stage::rename:
            if (result < 0) return fail(system_error(-result));
            temp_.clear();  // it is the destination now
            ::close(fd_);
            fd_ = -1;
            // Make the rename durable. Best effort: the new file is in place, and an
            // error here must not report a failure that left the destination replaced.
            stage_ = stage::open_dir;
            if (!issue([&](io_request& r) { engine_.open(r, dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0); },
                       ec))
                finish({});
            return;
        case stage::open_dir:
            if (result < 0) return finish({});
            fd_ = result;
            stage_ = stage::fsync_dir;
            if (!issue([&](io_request& r) { engine_.fsync(r, fd_); }, ec)) finish({});
            return;
        case stage::fsync_dir:
            return finish({});
        }
    }

    void write_data() noexcept {
        if (cancelled()) return fail(aborted());
        if (gather_) {
            // A strided view: gather it into a contiguous buffer (here, on an engine
            // thread, not on the caller's).
            try {
                gathered_ = tensor::empty(view_.type(), view_.shape());
                strided_copy(gathered_.view(), view_.data(), view_.strides());
            } catch (const std::bad_alloc&) {
                return fail(system_error(ENOMEM));
            }
            source_ = static_cast<const unsigned char*>(gathered_.data());
        }
        start_chunks(fd_, true, 0, header_.size() + data_bytes_);
    }

    // The file is the header followed by the data; a chunk never spans both.
    unsigned char* chunk_memory(std::uint64_t offset, std::uint64_t& segment_left) noexcept override {
        if (offset < header_.size()) {
            segment_left = header_.size() - offset;
            return reinterpret_cast<unsigned char*>(header_.data()) + offset;
        }
        const std::uint64_t rel = offset - header_.size();
        segment_left = data_bytes_ - rel;
        return const_cast<unsigned char*>(source_) + rel;  // only ever written from
    }

    int chunk_done(std::uint64_t, std::uint32_t) noexcept override { return injected(io_event::write_chunk_done); }

    void chunks_finished(std::error_code ec) noexcept override {
        if (ec) return fail(ec);
        if (cancelled()) return fail(aborted());
        gathered_ = tensor();
        stage_ = stage::fsync_file;
        if (const int err = injected(io_event::before_fsync)) return fail(system_error(err));
        std::error_code issue_ec;
        if (!issue([&](io_request& r) { engine_.fsync(r, fd_); }, issue_ec)) fail(issue_ec);
    }

    // Before the rename: drop the temporary, leave the destination alone.
    void fail(std::error_code ec) noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        if (!temp_.empty()) ::unlink(temp_.c_str());
        temp_.clear();
        finish(ec);
    }

    void finish(std::error_code ec) noexcept {
        const auto keep_alive = std::move(self_);
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        gathered_ = tensor();
        receiver_->complete(ec);
    }

    std::filesystem::path path_;
    const_tensor_view view_;
    npy_write_receiver* receiver_;
    std::shared_ptr<write_op> self_;
    std::filesystem::path dir_;
    std::filesystem::path temp_;  // the named temporary, while one exists
    std::string proc_path_;
    std::string header_;
    std::uint64_t data_bytes_ = 0;
    const unsigned char* source_ = nullptr;
    tensor gathered_;
    bool fortran_ = false;
    bool gather_ = false;
    bool anonymous_ = false;
    int name_attempts_ = 0;
    stage stage_ = stage::open_anonymous;
    int fd_ = -1;
};

}  // namespace

file_engine& io_engine() {
    static file_engine* const engine = [] {
        const char* env = std::getenv("TENFERRO_IO_URING");
        if (env != nullptr && std::string_view(env) == "0") return &pool_io_engine();
        if (file_engine* uring = uring_io_engine()) return uring;
        return &pool_io_engine();
    }();
    return *engine;
}

#if !TENFERRO_HAVE_IO_URING
file_engine* uring_io_engine() { return nullptr; }
#endif

void set_io_test_hook(io_test_hook hook, void* context) noexcept {
    test_hook_context.store(context, std::memory_order_release);
    test_hook.store(hook, std::memory_order_release);
}

void set_io_force_named_temp(bool force) noexcept { force_named_temp.store(force, std::memory_order_release); }

}  // namespace detail::io

namespace detail {

std::shared_ptr<npy_operation> make_read_npy_op(std::filesystem::path path, const npy_read_options& options,
                                                npy_read_receiver& receiver) {
    return std::make_shared<io::read_op>(io::io_engine(), std::move(path), options, receiver);
}

std::shared_ptr<npy_operation> make_write_npy_op(std::filesystem::path path, const_tensor_view view,
                                                 npy_write_receiver& receiver) {
    return std::make_shared<io::write_op>(io::io_engine(), std::move(path), view, receiver);
}

std::string npy_error_context(std::string_view function, const std::filesystem::path& path) {
    return std::string(function) + ": '" + path.string() + "'";
}

}  // namespace detail

io_backend active_io_backend() noexcept { return detail::io::io_engine().kind(); }

std::string_view to_string(io_backend b) noexcept {
    switch (b) {
    case io_backend::io_uring:
        return "io_uring";
    case io_backend::thread_pool:
        return "thread_pool";
    }
    return "invalid";
}

}  // namespace tenferro
