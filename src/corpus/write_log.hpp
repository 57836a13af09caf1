#pragma once
// A durable, group-committing write-ahead log (contract section 9, L6 and L7): the
// live corpus's writes are appended here and complete only once they are on disk.
//
// One file; records appended at its end; an append completes (a callback on an I/O
// engine thread) once the record and every record before it are written and
// fdatasync'ed. Appends that arrive while a write + fdatasync is in flight wait in
// memory and are then written together, one write request of their concatenated
// bytes and one fdatasync for all of them (group commit): under load the cost of a
// sync is shared by every record that arrived during the previous one.
//
// The I/O runs on the library's engine (src/io/file_engine.hpp: io_uring, or the
// pread/pwrite pool), so no thread of the caller ever waits for the disk, except in
// `open`, `reset` and the destructor, which block (documented on each).
//
// Record format (little-endian; every record starts at a multiple of 8):
//
//   magic u32 | payload length u32 | seq u64 | generation u64 | crc u32 | zero u32
//   payload, zero-padded to a multiple of 8
//
// crc is CRC-32C over the payload, then over the 32 header bytes with the crc field
// zero (the payload's part first, so that it is computed outside the log's lock). Recovery
// accepts a record only if its magic, length (within the file), crc and zero field are
// right, its seq follows the previous record's, and its generation is not below the
// previous record's; the first record that fails ends the log, and the file is
// truncated there. Why generations: see write_log.cpp, "Failed groups".

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenferro/detail/base/function_ref.hpp"

namespace tenferro::detail::io {
class file_engine;
}

namespace tenferro::detail::corpus {

/// One record read back: its sequence number and payload bytes (valid only during the
/// `on_record` call that receives it).
struct log_record {
    std::uint64_t seq;
    std::span<const std::byte> payload;
};

/// CRC-32C (Castagnoli) of `data`, continuing `prev` (0 to start):
/// `crc32c(b, crc32c(a)) == crc32c(a + b)`. Table-driven, slicing by 8.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t prev = 0) noexcept;
/// The same through the table alone (what crc32c runs where the CPU has no CRC32 instruction;
/// tests compare the two).
std::uint32_t crc32c_table(std::span<const std::byte> data, std::uint32_t prev = 0) noexcept;

/// Counters for tests and benchmarks: records and syncs since the log was opened.
struct write_log_stats {
    std::uint64_t records = 0;  ///< records made durable
    std::uint64_t groups = 0;   ///< fdatasync calls that committed a group
};

/// A write-ahead log in one file (see the top of this header). Thread-safety: `append`,
/// `bytes`, `next_seq` and `stats` may be called from any thread, concurrently, also
/// from inside a `done` callback; `reset` from any thread but one at a time.
class write_log {
public:
    /// A move-only `void(std::error_code)` callable (so that it can own an Asio handler).
    /// Constructing one allocates; that happens before `append` is called, so a
    /// `std::bad_alloc` there leaves nothing queued.
    class done_fn {
    public:
        done_fn() = default;
        template <class F>
            requires(!std::is_same_v<std::remove_cvref_t<F>, done_fn> &&
                     std::is_invocable_v<std::remove_cvref_t<F>&, std::error_code>)
        done_fn(F&& f)  // NOLINT(google-explicit-constructor): used like std::function
            : impl_(std::make_unique<model<std::remove_cvref_t<F>>>(std::forward<F>(f))) {}
        done_fn(done_fn&&) noexcept = default;
        done_fn& operator=(done_fn&&) noexcept = default;
        explicit operator bool() const noexcept { return impl_ != nullptr; }
        void operator()(std::error_code ec) { impl_->call(ec); }

    private:
        struct concept_base {
            virtual ~concept_base() = default;
            virtual void call(std::error_code ec) = 0;
        };
        template <class F>
        struct model final : concept_base {
            template <class G>
            explicit model(G&& g) : f(std::forward<G>(g)) {}
            void call(std::error_code ec) override { f(ec); }
            F f;
        };
        std::unique_ptr<concept_base> impl_;
    };

    /// Opens (creating if absent) the log at `path` and recovers it, blocking on the
    /// calling thread (plain syscalls; it happens once, at startup): calls `on_record`
    /// for every valid record in order, truncates the file after the last one (a torn
    /// or corrupt tail: a record whose length runs past the end, whose checksum does not
    /// match, whose seq does not follow the previous one or whose generation is lower),
    /// then fdatasyncs the file (so that what was recovered from the page cache cannot
    /// vanish in a later power cut) and its directory (so that a new file stays).
    /// Appends then continue after the last valid record.
    /// Returns null with `ec` set on an OS error (ENOENT for a missing directory, ...).
    /// An exception thrown by `on_record` propagates (the file is closed untouched).
    static std::unique_ptr<write_log> open(const std::string& path, function_ref<void(const log_record&)> on_record,
                                           std::error_code& ec);

    /// Appends one record, copying `payload`. `seq` must be `next_seq()`: the previous
    /// appended (or recovered) record's seq + 1; any seq is accepted as the first record
    /// of an empty log opened fresh. The caller assigns seqs, so concurrent appenders
    /// serialise their seq assignment and their append call themselves.
    ///
    /// Returns an error, without calling `done` (it is destroyed), when the record is
    /// refused before anything is queued: `std::errc::invalid_argument` (seq out of
    /// order), `std::errc::message_size` (payload over `max_payload`),
    /// `std::errc::not_enough_memory`, `std::errc::device_or_resource_busy` (a `reset`
    /// is running), or the error that broke the log (below).
    ///
    /// Otherwise `done(ec)` is called exactly once, on an engine thread, never inside
    /// `append`: with no error once the record and every record appended before it are
    /// durable (written and fdatasync'ed); or with the error of the write or fdatasync
    /// that failed (EIO, ENOSPC, ...). Callbacks run one at a time, in seq order. They
    /// must not throw, and must not destroy the log.
    ///
    /// A failure fails the whole group it hit and every record appended after it that
    /// had not completed: none of them is ever returned by a later recovery, and
    /// `next_seq()` goes back to the first failed seq (the next append reuses it, and is
    /// written where the failed group was). Should the log be unable to make that
    /// failure durable (its invalidation of the failed group fails too), it is broken:
    /// every append is refused with that error until `reset` succeeds or the log is
    /// reopened, and a recovery may then return the failed records if their bytes
    /// reached the disk.
    ///
    /// Records waiting for the next group are held in memory without a bound: the
    /// caller limits how many it has outstanding.
    [[nodiscard]] std::error_code append(std::uint64_t seq, std::span<const std::byte> payload, done_fn done);

    /// Bytes of valid, durable records in the file (headers and padding included).
    std::uint64_t bytes() const noexcept { return durable_bytes_.load(std::memory_order_acquire); }

    /// The seq the next append must carry (meaningless while any is accepted: an empty
    /// log opened fresh, before its first append).
    std::uint64_t next_seq() const;

    /// Called (on the engine thread) after the callbacks of each group, before the next group is
    /// issued: where the caller finishes what the group's callbacks gathered (the live corpus
    /// applies a group's writes with one lock and one publication). Set before the first append;
    /// `hook` must not throw.
    void set_group_end(void (*hook)(void* context) noexcept, void* context) noexcept {
        group_end_ = hook;
        group_end_context_ = context;
    }

    /// Records and fdatasyncs so far (for tests and benchmarks).
    write_log_stats stats() const noexcept {
        return {records_.load(std::memory_order_relaxed), groups_.load(std::memory_order_relaxed)};
    }

    /// Truncates the log to empty, durably, once a checkpoint has made its records
    /// redundant; the next append must carry `next_seq`. Blocking: it waits for every
    /// record appended before it to complete, then ftruncates and fdatasyncs on the
    /// calling thread. Appends made while it runs are refused (device_or_resource_busy).
    /// Errors: `std::errc::invalid_argument` if the log holds a record with a seq at or
    /// after `next_seq` (truncating would lose it); an OS error from ftruncate (nothing
    /// changed) or fdatasync (the log is empty and usable, but its truncation may not
    /// survive a crash until the next append's sync). A successful reset repairs a
    /// broken log.
    std::error_code reset(std::uint64_t next_seq);

    /// The most payload bytes one record may carry.
    static constexpr std::size_t max_payload = std::size_t{1} << 30;

    write_log(const write_log&) = delete;
    write_log& operator=(const write_log&) = delete;
    /// Waits (blocking) until every appended record has completed, then closes the file.
    /// Must not run inside a `done` callback of this log.
    ~write_log();

private:
    struct request;
    enum class stage : unsigned char { write, sync, poison_write, poison_sync };

    write_log(io::file_engine& engine, int fd);
    void recover(function_ref<void(const log_record&)> on_record, std::error_code& ec);
    void start_group_locked() noexcept;
    void issue();
    void submit() noexcept;
    void on_result(int result) noexcept;
    void fail_group(int err) noexcept;
    void finish_poison(int err) noexcept;
    void finish_group(std::error_code ec) noexcept;

    io::file_engine& engine_;
    int fd_;
    std::unique_ptr<request> request_;  // the one request in flight (a group's step)

    mutable std::mutex mutex_;
    std::condition_variable idle_;  // busy_ became false
    // --- under mutex_ ---
    std::vector<std::byte> pending_bytes_;  // encoded records waiting for the next group
    std::vector<done_fn> pending_done_;
    void (*group_end_)(void*) noexcept = nullptr;
    void* group_end_context_ = nullptr;
    std::uint64_t pending_first_seq_ = 0;
    bool pending_any_seq_ = false;    // any_seq_ before the first pending record
    std::uint64_t expected_seq_ = 0;  // the seq the next append must carry...
    bool any_seq_ = true;             // ...unless any is accepted
    std::uint64_t tail_ = 0;          // where the next group is written
    std::uint64_t generation_ = 0;    // stamped on records appended from now on
    bool busy_ = false;               // a group (or its invalidation) is in flight
    bool resetting_ = false;
    std::error_code broken_;

    // --- the group in flight: touched only by its completion chain while busy_ ---
    std::vector<std::byte> group_bytes_;
    std::vector<done_fn> group_done_;
    std::vector<done_fn> failed_after_;  // records appended after a failed group, failed with it
    std::uint64_t group_offset_ = 0;
    std::uint64_t group_first_seq_ = 0;
    bool group_any_seq_ = false;          // any_seq_ when the group was taken
    std::uint64_t group_done_bytes_ = 0;  // bytes of the group (or of the poison) written so far
    std::error_code group_error_;
    stage stage_ = stage::write;
    std::byte poison_[32] = {};

    std::atomic<std::uint64_t> durable_bytes_{0};
    std::atomic<std::uint64_t> records_{0};
    std::atomic<std::uint64_t> groups_{0};
};

}  // namespace tenferro::detail::corpus
