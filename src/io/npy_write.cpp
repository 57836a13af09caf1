// async_write_npy: the write operation behind <tenferro/io.hpp>, an op_base
// (npy_op.hpp) written once against file_engine.
//
// A write: open an O_TMPFILE inode in the destination's directory (or a named
//          temporary) -> header and data chunks, several in flight -> fsync -> give the
//          inode a temporary name (linkat via /proc/self/fd) -> rename over the
//          destination -> fsync the directory (best effort) -> done. Any failure or
//          cancellation before the rename closes and removes the temporary.

#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <new>
#include <random>
#include <string>

#include "io/npy_format.hpp"
#include "io/npy_op.hpp"
#include "tenferro/io.hpp"

namespace tenferro {
namespace detail::io {
namespace {

std::atomic<bool> force_named_temp{false};

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

class write_op final : public op_base, public npy_write_operation, public std::enable_shared_from_this<write_op> {
public:
    write_op(file_engine& engine, std::filesystem::path path, const_tensor_view view)
        : op_base(engine), path_(std::move(path)), view_(view) {
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

    void bind(npy_write_receiver& receiver) noexcept override { receiver_ = &receiver; }

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
    npy_write_receiver* receiver_ = nullptr;  // bound once, before start
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

void set_io_force_named_temp(bool force) noexcept { force_named_temp.store(force, std::memory_order_release); }

}  // namespace detail::io

namespace detail {

std::shared_ptr<npy_write_operation> make_write_npy_op(std::filesystem::path path, const_tensor_view view) {
    return std::make_shared<io::write_op>(io::io_engine(), std::move(path), view);
}

}  // namespace detail
}  // namespace tenferro
