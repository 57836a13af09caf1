// The write-ahead log (write_log.hpp): recovery, group commit, and what a failed
// group leaves behind.
//
// Group commit. At most one group is in flight. An append that finds none starts one
// with its own record; appends arriving meanwhile are encoded into `pending_bytes_`,
// and when the group's fdatasync completes its callbacks run and the pending records
// become the next group: one write request of their bytes (split only above
// `max_write`, and continued after a short write), one fdatasync. The group in flight
// is owned by its completion chain (one request at a time, so no lock is needed to
// touch it); the lock guards only the pending side and the log's position.
//
// Failed groups. After a failed write or fdatasync the bytes of the group may or may
// not be on disk, in any part: Linux marks the pages clean after a failed writeback,
// so a page that did reach the disk stays there and later readers of the page cache
// see the rest. Two things keep those records from ever being recovered:
//
// 1. Invalidation. Before any record of the group completes with the error, a zero
//    header is written over the group's first header and fdatasync'ed: recovery stops
//    there. Appends after the failure reuse the failed seqs and are written from that
//    same offset.
// 2. Generations. Those later groups may be shorter than the failed one, leaving some
//    of its records behind theirs, with the seqs that would follow (a caller that
//    retries the same writes, minus one, writes exactly that). Each failure raises
//    the generation stamped on later records, and recovery accepts no record of a
//    lower generation than its predecessor, so the leftovers cannot be chained on.
//    Across restarts the recovery's truncation removes them, and a reopened log
//    continues with a higher generation than its last record's.
//
// If the invalidation itself fails the disk is refusing writes; the log says so
// (`broken_`) and takes no appends until a reset or reopen, since nothing it could
// write would be known to stick (write_log.hpp, append).

#include "corpus/write_log.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>

#include "io/file_engine.hpp"

namespace tenferro::detail::corpus {
namespace {

constexpr std::uint32_t record_magic = 0x314c5754;  // "TWL1"
constexpr std::size_t header_size = 32;
constexpr std::size_t crc_at = 24;
// The largest single write request (the engine takes 32-bit lengths).
constexpr std::uint64_t max_write = std::uint64_t{64} << 20;
// Recovery reads the file in blocks of this size (more for a larger record).
constexpr std::size_t read_block = std::size_t{1} << 20;

std::error_code sys(int err) noexcept { return {err, std::system_category()}; }

// --- CRC-32C (Castagnoli, reflected), slicing by 8 -------------------------------

struct crc_tables {
    std::uint32_t t[8][256];
};

constexpr crc_tables make_crc_tables() {
    crc_tables c{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t x = i;
        for (int k = 0; k < 8; ++k) x = (x >> 1) ^ (0x82f63b78u & (0u - (x & 1u)));
        c.t[0][i] = x;
    }
    // t[s][i]: the CRC of byte i followed by s zero bytes.
    for (int s = 1; s < 8; ++s)
        for (std::uint32_t i = 0; i < 256; ++i) c.t[s][i] = (c.t[s - 1][i] >> 8) ^ c.t[0][c.t[s - 1][i] & 0xff];
    return c;
}

constexpr crc_tables crc = make_crc_tables();

void store_le(std::byte* p, std::uint64_t v, int bytes) noexcept {
    for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint64_t load_le(const std::byte* p, int bytes) noexcept {
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
    return v;
}

std::size_t record_size(std::size_t payload) noexcept { return header_size + ((payload + 7) & ~std::size_t{7}); }

// The header of a record whose payload's CRC is `payload_crc`, at `h` (zeroed by the caller).
void encode_header(std::byte* h, std::uint32_t len, std::uint64_t seq, std::uint64_t generation,
                   std::uint32_t payload_crc) noexcept {
    store_le(h, record_magic, 4);
    store_le(h + 4, len, 4);
    store_le(h + 8, seq, 8);
    store_le(h + 16, generation, 8);
    store_le(h + crc_at, crc32c({h, header_size}, payload_crc), 4);  // the crc field is still zero
}

// --- recovery's blocking reads ---------------------------------------------------

// pread until `n` bytes are in; false at a premature end of file (the file shrank:
// treated as a torn tail) or an error (`ec` set).
bool read_exact(int fd, std::byte* out, std::size_t n, std::uint64_t offset, std::error_code& ec) noexcept {
    while (n > 0) {
        const ssize_t r = ::pread(fd, out, n, static_cast<off_t>(offset));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) ec = sys(errno);
        if (r <= 0) return false;
        out += r;
        n -= static_cast<std::size_t>(r);
        offset += static_cast<std::uint64_t>(r);
    }
    return true;
}

// A window over the file, refilled a block at a time as recovery walks forward.
class file_window {
public:
    file_window(int fd, std::uint64_t size) : fd_(fd), size_(size) {}

    // Bytes [offset, offset + n) (within the file's size), or null (`ec` set on an error).
    const std::byte* view(std::uint64_t offset, std::size_t n, std::error_code& ec) {
        if (offset >= base_ && offset + n <= base_ + buf_.size()) return buf_.data() + (offset - base_);
        const std::size_t len =
            static_cast<std::size_t>(std::min<std::uint64_t>(std::max(n, read_block), size_ - offset));
        buf_.resize(len);
        base_ = offset;
        if (!read_exact(fd_, buf_.data(), len, offset, ec)) {
            buf_.clear();
            return nullptr;
        }
        return buf_.data();
    }

private:
    int fd_;
    std::uint64_t size_;
    std::uint64_t base_ = 0;
    std::vector<std::byte> buf_;
};

// fsync of `path`'s directory, so that a file just created there stays (best effort
// where a file system does not sync directories: EINVAL).
std::error_code sync_parent(const std::string& path) {
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.empty()) dir = ".";
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return sys(errno);
    std::error_code ec;
    if (::fsync(fd) != 0 && errno != EINVAL) ec = sys(errno);
    ::close(fd);
    return ec;
}

}  // namespace

std::uint32_t crc32c_table(std::span<const std::byte> data, std::uint32_t prev) noexcept {
    std::uint32_t c = ~prev;
    const std::byte* p = data.data();
    std::size_t n = data.size();
    for (; n >= 8; p += 8, n -= 8) {
        const std::uint64_t w = load_le(p, 8) ^ c;
        c = crc.t[7][w & 0xff] ^ crc.t[6][(w >> 8) & 0xff] ^ crc.t[5][(w >> 16) & 0xff] ^ crc.t[4][(w >> 24) & 0xff] ^
            crc.t[3][(w >> 32) & 0xff] ^ crc.t[2][(w >> 40) & 0xff] ^ crc.t[1][(w >> 48) & 0xff] ^ crc.t[0][w >> 56];
    }
    for (; n > 0; ++p, --n) c = (c >> 8) ^ crc.t[0][(c ^ std::to_integer<std::uint32_t>(*p)) & 0xff];
    return ~c;
}

#if defined(__x86_64__)
namespace {

// SSE4.2's CRC32 instruction computes CRC-32C: 8 bytes per instruction, a few times the table's
// rate (every record's payload is checksummed as it is appended, and the whole log at recovery).
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(std::span<const std::byte> data,
                                                             std::uint32_t prev) noexcept {
    std::uint64_t c = ~prev;
    const std::byte* p = data.data();
    std::size_t n = data.size();
    for (; n >= 8; p += 8, n -= 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    auto c32 = static_cast<std::uint32_t>(c);
    for (; n > 0; ++p, --n) c32 = __builtin_ia32_crc32qi(c32, std::to_integer<unsigned char>(*p));
    return ~c32;
}

const bool has_sse42 = __builtin_cpu_supports("sse4.2");

}  // namespace
#endif

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t prev) noexcept {
#if defined(__x86_64__)
    if (has_sse42) return crc32c_sse42(data, prev);
#endif
    return crc32c_table(data, prev);
}

// The one request the log has in flight at a time, reused for every step.
struct write_log::request : io::io_request {
    write_log* log = nullptr;
};

write_log::write_log(io::file_engine& engine, int fd) : engine_(engine), fd_(fd), request_(new request) {
    request_->log = this;
    request_->on_done = [](io::io_request* r, int result) { static_cast<request*>(r)->log->on_result(result); };
}

write_log::~write_log() {
    {
        std::unique_lock lock(mutex_);
        idle_.wait(lock, [&] { return !busy_; });
    }
    ::close(fd_);
}

std::unique_ptr<write_log> write_log::open(const std::string& path, function_ref<void(const log_record&)> on_record,
                                           std::error_code& ec) {
    ec.clear();
    // Blocking open and recovery: once, at startup, on the caller's thread.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        ec = sys(errno);
        return nullptr;
    }
    std::unique_ptr<write_log> log;
    try {
        log.reset(new write_log(io::io_engine(), fd));
    } catch (...) {
        ::close(fd);
        throw;
    }
    log->recover(on_record, ec);
    if (!ec) ec = sync_parent(path);
    if (ec) return nullptr;
    return log;
}

void write_log::recover(function_ref<void(const log_record&)> on_record, std::error_code& ec) {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
        ec = sys(errno);
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        ec = std::make_error_code(std::errc::invalid_argument);
        return;
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    file_window window(fd_, size);
    std::uint64_t at = 0;
    bool first = true;
    std::uint64_t last_seq = 0;
    std::uint64_t last_generation = 0;
    while (size - at >= header_size) {
        const std::byte* h = window.view(at, header_size, ec);
        if (h == nullptr) break;
        std::array<std::byte, header_size> header;
        std::memcpy(header.data(), h, header_size);
        const auto len = static_cast<std::size_t>(load_le(&header[4], 4));
        const std::uint64_t seq = load_le(&header[8], 8);
        const std::uint64_t generation = load_le(&header[16], 8);
        const auto stored_crc = static_cast<std::uint32_t>(load_le(&header[crc_at], 4));
        if (load_le(&header[0], 4) != record_magic || load_le(&header[28], 4) != 0 || len > max_payload) break;
        // Checked against the size before anything is read or allocated for it.
        if (record_size(len) > size - at) break;
        if (!first && (seq != last_seq + 1 || generation < last_generation)) break;
        const std::byte* r = window.view(at, record_size(len), ec);
        if (r == nullptr) break;
        const std::span<const std::byte> payload(r + header_size, len);
        store_le(&header[crc_at], 0, 4);
        if (crc32c(header, crc32c(payload)) != stored_crc) break;
        on_record(log_record{seq, payload});
        first = false;
        last_seq = seq;
        last_generation = generation;
        at += record_size(len);
    }
    if (ec) return;
    // The torn or corrupt tail goes, so that nothing after `at` can ever be read as a
    // record again; the sync makes that, and every recovered record that was only in
    // the page cache (a killed process), durable before anything depends on it.
    if (at < size && ::ftruncate(fd_, static_cast<off_t>(at)) != 0) {
        ec = sys(errno);
        return;
    }
    if (::fdatasync(fd_) != 0) {
        ec = sys(errno);
        return;
    }
    tail_ = at;
    durable_bytes_.store(at, std::memory_order_release);
    any_seq_ = first;
    expected_seq_ = first ? 0 : last_seq + 1;
    generation_ = first ? 0 : last_generation + 1;
}

std::uint64_t write_log::next_seq() const {
    std::lock_guard lock(mutex_);
    return expected_seq_;
}

std::error_code write_log::append(std::uint64_t seq, std::span<const std::byte> payload, done_fn done) {
    if (payload.size() > max_payload) return std::make_error_code(std::errc::message_size);
    const std::uint32_t payload_crc = crc32c(payload);  // outside the lock
    std::lock_guard lock(mutex_);
    if (resetting_) return std::make_error_code(std::errc::device_or_resource_busy);
    if (broken_) return broken_;
    if (!any_seq_ && seq != expected_seq_) return std::make_error_code(std::errc::invalid_argument);
    const std::size_t at = pending_bytes_.size();
    try {
        if (pending_done_.size() == pending_done_.capacity())
            pending_done_.reserve(std::max<std::size_t>(16, 2 * pending_done_.capacity()));
        pending_bytes_.resize(at + record_size(payload.size()));  // zero-filled: the padding
    } catch (const std::bad_alloc&) {
        pending_bytes_.resize(at);
        return std::make_error_code(std::errc::not_enough_memory);
    }
    std::byte* record = pending_bytes_.data() + at;
    if (!payload.empty()) std::memcpy(record + header_size, payload.data(), payload.size());
    encode_header(record, static_cast<std::uint32_t>(payload.size()), seq, generation_, payload_crc);
    if (pending_done_.empty()) {
        pending_first_seq_ = seq;
        pending_any_seq_ = any_seq_;
    }
    pending_done_.push_back(std::move(done));  // capacity reserved above: cannot throw
    expected_seq_ = seq + 1;
    any_seq_ = false;
    if (busy_) return {};  // the group in flight starts the next one when it completes

    start_group_locked();
    // Issued under the lock, so that if the engine cannot take the request
    // (std::bad_alloc in the pool engine) the group is still this one record, and
    // undoing it leaves no later append's seq dangling. Submitting never waits for a
    // callback of this log: none is in flight.
    try {
        issue();
    } catch (...) {
        group_bytes_.clear();
        group_done_.clear();  // `done` is destroyed, not called: the error is returned
        tail_ = group_offset_;
        expected_seq_ = seq;
        any_seq_ = group_any_seq_;
        busy_ = false;
        idle_.notify_all();
        return std::make_error_code(std::errc::not_enough_memory);
    }
    return {};
}

void write_log::start_group_locked() noexcept {
    // Swapping keeps both buffers' capacity: steady-state groups allocate nothing.
    std::swap(group_bytes_, pending_bytes_);
    pending_bytes_.clear();
    std::swap(group_done_, pending_done_);
    pending_done_.clear();
    group_offset_ = tail_;
    tail_ += group_bytes_.size();
    group_first_seq_ = pending_first_seq_;
    group_any_seq_ = pending_any_seq_;
    group_done_bytes_ = 0;
    group_error_.clear();
    stage_ = stage::write;
    busy_ = true;
}

void write_log::issue() {
    switch (stage_) {
    case stage::write: {
        const std::uint64_t left = group_bytes_.size() - group_done_bytes_;
        engine_.write(*request_, fd_, group_bytes_.data() + group_done_bytes_,
                      static_cast<std::uint32_t>(std::min(left, max_write)), group_offset_ + group_done_bytes_);
        return;
    }
    case stage::poison_write:
        engine_.write(*request_, fd_, poison_ + group_done_bytes_,
                      static_cast<std::uint32_t>(sizeof poison_ - group_done_bytes_),
                      group_offset_ + group_done_bytes_);
        return;
    case stage::sync:
    case stage::poison_sync:
        engine_.fdatasync(*request_, fd_);
        return;
    }
}

void write_log::submit() noexcept {
    try {
        issue();
    } catch (...) {
        on_result(-ENOMEM);  // the engine could not take it (std::bad_alloc): nothing was issued
    }
}

// The completion chain, on an engine thread. EINTR means the call did nothing and
// EAGAIN on a write is a non-blocking attempt (docs/io.md): both are issued again. A
// short write is continued; a write of 0 bytes is EIO.
void write_log::on_result(int result) noexcept {
    switch (stage_) {
    case stage::write:
    case stage::poison_write: {
        const bool poison = stage_ == stage::poison_write;
        if (result == -EINTR || result == -EAGAIN) return submit();
        if (result <= 0) {
            const int err = result < 0 ? -result : EIO;
            return poison ? finish_poison(err) : fail_group(err);
        }
        group_done_bytes_ += static_cast<std::uint64_t>(result);
        if (group_done_bytes_ < (poison ? sizeof poison_ : group_bytes_.size())) return submit();
        stage_ = poison ? stage::poison_sync : stage::sync;
        return submit();
    }
    case stage::sync:
        if (result == -EINTR) return submit();
        if (result < 0) return fail_group(-result);
        groups_.fetch_add(1, std::memory_order_relaxed);
        records_.fetch_add(group_done_.size(), std::memory_order_relaxed);
        durable_bytes_.store(group_offset_ + group_bytes_.size(), std::memory_order_release);
        return finish_group({});
    case stage::poison_sync:
        if (result == -EINTR) return submit();
        return finish_poison(result < 0 ? -result : 0);
    }
}

void write_log::fail_group(int err) noexcept {
    {
        std::lock_guard lock(mutex_);
        group_error_ = sys(err);
        // Records appended after the group follow its seqs: they fail with it.
        std::swap(failed_after_, pending_done_);
        pending_bytes_.clear();
        expected_seq_ = group_first_seq_;
        any_seq_ = group_any_seq_;
        tail_ = group_offset_;
        ++generation_;
    }
    // Overwrite the group's first header with zeros (poison_ stays zero) and sync.
    stage_ = stage::poison_write;
    group_done_bytes_ = 0;
    submit();
}

void write_log::finish_poison(int err) noexcept {
    if (err != 0) {
        std::lock_guard lock(mutex_);
        broken_ = sys(err);
    }
    finish_group(group_error_);
}

// Completes the group (and the records that failed with it), then starts the next one
// or goes idle. The callbacks run before the next group is issued, so that they run
// one at a time and in seq order.
void write_log::finish_group(std::error_code ec) noexcept {
    for (done_fn& done : group_done_) done(ec);
    group_done_.clear();
    group_bytes_.clear();
    for (done_fn& done : failed_after_) done(ec);
    failed_after_.clear();
    if (group_end_ != nullptr) group_end_(group_end_context_);

    std::unique_lock lock(mutex_);
    if (broken_ && !pending_done_.empty()) {
        // Appended while the invalidation ran; none can arrive now that broken_ is set.
        std::swap(failed_after_, pending_done_);
        pending_bytes_.clear();
        const std::error_code broken = broken_;
        lock.unlock();
        for (done_fn& done : failed_after_) done(broken);
        failed_after_.clear();
        lock.lock();
    }
    if (!pending_done_.empty()) {
        start_group_locked();
        lock.unlock();
        submit();
        return;
    }
    busy_ = false;
    idle_.notify_all();
}

std::error_code write_log::reset(std::uint64_t next_seq) {
    std::unique_lock lock(mutex_);
    if (resetting_) return std::make_error_code(std::errc::device_or_resource_busy);
    resetting_ = true;  // appends are refused from here on
    idle_.wait(lock, [&] { return !busy_; });
    if (tail_ > 0 && expected_seq_ > next_seq) {
        resetting_ = false;
        return std::make_error_code(std::errc::invalid_argument);
    }
    lock.unlock();
    // Blocking, on the caller's thread: nothing is in flight and no append is taken.
    std::error_code ec;
    if (::ftruncate(fd_, 0) != 0) {
        ec = sys(errno);
        lock.lock();
        resetting_ = false;
        return ec;
    }
    if (::fdatasync(fd_) != 0) ec = sys(errno);
    lock.lock();
    // Truncated either way; a later append's fdatasync also makes the truncation durable.
    tail_ = 0;
    durable_bytes_.store(0, std::memory_order_release);
    expected_seq_ = next_seq;
    any_seq_ = false;
    ++generation_;
    if (!ec) broken_.clear();
    resetting_ = false;
    return ec;
}

}  // namespace tenferro::detail::corpus
