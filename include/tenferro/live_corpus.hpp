#pragma once
/// \file
/// `live_corpus`: exact search over rows that change while it serves (contract section 9,
/// docs/contract.md "Live corpus", design in docs/design/live-corpus.md).
///
/// ```cpp
/// tenferro::live_corpus corpus({.dim = 768});
/// tenferro::corpus_write w;
/// w.upsert(17, vector17, {3, 9});          // id, dim floats, up to 16 labels
/// w.erase(18);
/// tenferro::write_result r = corpus.apply(w);   // atomic; r.seq is its sequence number
///
/// auto hits = co_await cpu.with_backend_session([&](tenferro::backend_session& s) {
///     tenferro::corpus_snapshot snap = corpus.snapshot();      // no allocation, no waiting
///     return tenferro::search(s, snap, queries, 10, filters); // exact top 10 per query
/// });
/// ```
///
/// Rows live in segments that only grow (their f32 values, a bf16 copy for the first pass once
/// compacted, the id and label columns, and per row the sequence number of the write that erased
/// or replaced it). A write appends to the newest segment and stamps the rows it erases or
/// replaces; a snapshot is a counted reference to the published list of segments, with the row
/// count of each and the sequence number it was taken at, and sees the rows not stamped at or
/// before it. `compact` merges segments into one sorted by id, drops the rows no snapshot can
/// see, and builds the first pass's copy. With `live_corpus_options::directory` every write
/// completes once it is in a write-ahead log there (L6), and reopening the directory recovers it.
///
/// Thread-safety: every member may be called from any thread. Writes (`apply`, `compact`'s
/// installation) are serialised by an internal mutex; `snapshot()` and searches never take it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "tenferro/asio.hpp"
#include "tenferro/backend_session.hpp"
#include "tenferro/detail/async/handoff_retry.hpp"
#include "tenferro/detail/base/function_ref.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro {

/// A row's id: every value, `2^64 - 1` included (L1).
using row_id = std::uint64_t;
/// A row's label.
using row_label = std::uint32_t;
/// The most labels one row carries.
inline constexpr std::size_t max_row_labels = 16;

/// Why a write or an open failed (category `corpus_category()`).
enum class corpus_errc {
    wrong_dimension = 1,  ///< a vector's length is not the corpus's dimension
    not_finite,           ///< a vector holds NaN or an infinity
    duplicate_id,         ///< an id appears twice in one write
    too_many_labels,      ///< more than `max_row_labels` labels
    dimension_mismatch,   ///< opened with a dimension other than the directory's corpus
    corrupt,              ///< a directory's files do not form a corpus (not a torn log tail: that is recovered)
    zero_vector,          ///< a vector of zeros in a corpus that normalises (`live_corpus_options::normalize`)
};
const std::error_category& corpus_category() noexcept;
std::error_code make_error_code(corpus_errc e) noexcept;

/// One write: upserts and erasures, applied atomically and in order (L2). An id may appear
/// once per write. The builder copies what it is given; it may be reused after `clear()`.
class corpus_write {
public:
    /// Inserts row `id`, or replaces its vector and labels together (L1).
    void upsert(row_id id, std::span<const float> vector, std::span<const row_label> labels = {});
    void upsert(row_id id, std::span<const float> vector, std::initializer_list<row_label> labels) {
        upsert(id, vector, std::span<const row_label>(labels.begin(), labels.size()));
    }
    void upsert(row_id id, std::initializer_list<float> vector, std::initializer_list<row_label> labels = {}) {
        upsert(id, std::span<const float>(vector.begin(), vector.size()),
               std::span<const row_label>(labels.begin(), labels.size()));
    }
    /// Removes row `id` (nothing happens to an id that does not exist, but it counts as an item).
    void erase(row_id id);

    /// One item of the write, in the order given.
    struct item {
        row_id id = 0;
        bool erase = false;
        std::span<const float> vector;      ///< empty for an erasure
        std::span<const row_label> labels;  ///< empty for an erasure
    };
    std::size_t size() const noexcept { return entries_.size(); }
    bool empty() const noexcept { return entries_.empty(); }
    item operator[](std::size_t i) const noexcept;
    void clear() noexcept;

private:
    struct entry {
        row_id id;
        std::size_t value_begin;
        std::size_t value_count;
        std::size_t label_begin;
        std::uint32_t label_count;
        bool erase;
    };
    std::vector<entry> entries_;
    std::vector<float> values_;
    std::vector<row_label> labels_;
};

/// What a write did. An error of the write's own (`corpus_errc`) names its item; a storage
/// error (a `std::system_category` code) names none. Either way nothing was applied.
struct write_result {
    std::error_code error;
    std::size_t item = 0;      ///< the offending item, with a `corpus_errc` error
    std::uint64_t seq = 0;     ///< the write's sequence number, when applied
    std::size_t upserted = 0;  ///< upserts applied
    std::size_t erased = 0;    ///< erasures of ids that existed
    explicit operator bool() const noexcept { return !error; }
};

class live_corpus;
namespace detail::corpus {
struct corpus_version;
struct snapshot_access;
}  // namespace detail::corpus

/// A consistent view of a corpus (L3): the rows as of `seq()`, alive while the snapshot is.
/// Taking one neither allocates nor waits for a writer; releasing the last one that needs a
/// segment frees it. Move-only. It may outlive its corpus: it still holds its rows then.
class corpus_snapshot {
public:
    corpus_snapshot() noexcept = default;
    corpus_snapshot(corpus_snapshot&& other) noexcept : version_(other.version_), slow_(other.slow_) {
        other.version_ = nullptr;
    }
    corpus_snapshot& operator=(corpus_snapshot&& other) noexcept {
        if (this != &other) {
            reset();
            version_ = other.version_;
            slow_ = other.slow_;
            other.version_ = nullptr;
        }
        return *this;
    }
    corpus_snapshot(const corpus_snapshot&) = delete;
    corpus_snapshot& operator=(const corpus_snapshot&) = delete;
    ~corpus_snapshot() { reset(); }

    /// Releases it (the snapshot is then empty).
    void reset() noexcept;
    explicit operator bool() const noexcept { return version_ != nullptr; }
    /// The sequence number of the last write it contains (0: none).
    std::uint64_t seq() const noexcept;
    /// Its live rows.
    std::int64_t rows() const noexcept;
    /// The corpus's dimension.
    std::int64_t dim() const noexcept;

private:
    friend class live_corpus;
    friend struct detail::corpus::snapshot_access;
    detail::corpus::corpus_version* version_ = nullptr;
    bool slow_ = false;  // taken through the fallback when 2^16 - 256 snapshots share one version
};

/// A query's filter (L5): a row passes if it has any of `labels` (when set) and its id is in
/// `ids` (when set). Neither set: every row passes. An empty set passes nothing.
struct row_filter {
    std::optional<std::vector<row_label>> labels;
    std::optional<std::vector<row_id>> ids;
    bool filters() const noexcept { return labels.has_value() || ids.has_value(); }
};

/// One result row.
struct corpus_hit {
    row_id id = 0;
    float score = 0.0f;
    friend bool operator==(const corpus_hit&, const corpus_hit&) = default;
};

/// The results of a batch: query i's hits, best first, are `(*this)[i]`.
struct corpus_hits {
    std::vector<corpus_hit> hits;
    std::vector<std::size_t> offsets;  ///< queries + 1 entries
    std::uint64_t seq = 0;             ///< the snapshot's
    std::size_t queries() const noexcept { return offsets.empty() ? 0 : offsets.size() - 1; }
    std::span<const corpus_hit> operator[](std::size_t i) const noexcept {
        return std::span<const corpus_hit>(hits.data() + offsets[i], offsets[i + 1] - offsets[i]);
    }
};

/// Exact search (L4, L5): for each row of `queries` (m x dim, f32), the `k` best of the
/// snapshot's live rows that pass its filter (`filters`: empty, or one per query), by the f32
/// score `matmul_top_k` gives that (query, row), NaN first, ties to the lower id. Fewer than `k`
/// pass: all of them. Runs on `s`'s workers; stoppable (S20: throws `session_stopped`).
/// \throws tensor_error naming the operand for a wrong shape or dtype, `k` < 0, a filter count
/// that is neither 0 nor m, or an empty snapshot.
corpus_hits search(backend_session& s, const corpus_snapshot& snapshot, const const_tensor_view& queries,
                   std::int64_t k, std::span<const row_filter> filters = {});

/// A row as stored (`live_corpus::get`).
struct stored_row {
    row_id id = 0;
    std::vector<float> vector;
    std::vector<row_label> labels;
};

/// What a corpus holds and has done (`live_corpus::stats`).
struct corpus_stats {
    std::uint64_t seq = 0;             ///< the last applied write's
    std::int64_t rows = 0;             ///< live rows
    std::int64_t stored_rows = 0;      ///< rows in segments, erased or replaced ones included
    std::int64_t segments = 0;
    std::int64_t uncompacted_rows = 0; ///< rows outside the largest (compacted) segment
    std::uint64_t writes = 0;          ///< writes applied
    std::uint64_t compactions = 0;
    std::uint64_t log_bytes = 0;       ///< the write-ahead log's size (0 in memory)
    std::uint64_t bytes = 0;           ///< memory held by the current segments
    // The searches (cumulative): queries, of them filtered; queries answered through the bf16
    // first pass on the compacted segment, and by its f32 fallback; rows scored in f32.
    std::uint64_t queries = 0, filtered_queries = 0, first_pass = 0, fallback = 0, rows_scored = 0;
};

/// How a corpus is set up.
struct live_corpus_options {
    /// The vectors' length (> 0).
    std::int64_t dim = 0;
    /// Rows per appended segment: writes fill one, then start the next.
    std::int64_t segment_rows = 16384;
    /// A directory that makes the corpus durable (L6): a write completes once it is in a
    /// write-ahead log there, fdatasync'ed (writes that arrive together are committed together),
    /// and `checkpoint` writes the rows as .npy files. Constructing the corpus recovers what the
    /// directory holds, or starts an empty corpus there. Empty: the corpus lives in memory.
    std::string directory;
    /// Search each row scaled to unit length (cosine similarity for unit queries): element times
    /// 1/‖x‖, both in double, rounded to f32. `get` still returns the row as written, which the
    /// corpus then keeps beside it (4 more bytes per element). A zero vector is refused.
    bool normalize = false;
};

/// Receives a write's result (`live_corpus::submit`), exactly once.
class write_completion {
public:
    virtual ~write_completion() = default;
    /// The result; `self` owns this completion, which may keep itself alive past the call (to
    /// retry a hand-off that found no memory, say).
    virtual void complete(std::unique_ptr<write_completion> self, write_result r) noexcept = 0;
    /// Calls `done`'s complete with its ownership.
    static void finish(std::unique_ptr<write_completion> done, write_result r) noexcept {
        write_completion* p = done.get();
        p->complete(std::move(done), std::move(r));
    }
};

/// A corpus of rows that change while searches run (contract section 9).
class live_corpus {
public:
    /// An empty corpus in memory, or (with `options.directory`) the corpus that directory holds,
    /// recovered: its last checkpoint and every write logged after it, a torn log tail ignored
    /// (blocking). \throws std::invalid_argument for dim <= 0; std::system_error for a directory
    /// that cannot be used (an OS error, corpus_errc::dimension_mismatch when it holds a corpus
    /// of another dimension or normalisation, corpus_errc::corrupt).
    explicit live_corpus(live_corpus_options options);
    ~live_corpus();
    live_corpus(const live_corpus&) = delete;
    live_corpus& operator=(const live_corpus&) = delete;

    /// Applies `w`: validated first (L7: the first offending item is named and nothing changes),
    /// then visible to every snapshot taken after this returns. In memory at once; in a
    /// directory once it is durable (blocking until then; a disk error: `result.error` is the
    /// OS error, nothing applied). Allocation failure: throws std::bad_alloc, nothing changed.
    write_result apply(const corpus_write& w);

    /// Applies `w` and calls `done` with the result: in memory at once (inside this call), in a
    /// directory on an I/O thread of the library once it is durable. Writes submitted while
    /// others are being committed are committed with the next group (one fdatasync). Results
    /// arrive in sequence order. \throws std::bad_alloc before anything is queued.
    void submit(corpus_write w, std::unique_ptr<write_completion> done);

    /// `submit` as an Asio asynchronous operation: completes with `void(write_result)` on the
    /// handler's associated executor (never inside this call), whose work is tracked meanwhile.
    /// Not cancellable: a write once submitted is committed or fails.
    template <class CompletionToken = asio::default_completion_token_t<asio::system_executor>>
    auto async_apply(corpus_write w, CompletionToken&& token = {}) {
        return asio::async_initiate<CompletionToken, void(write_result)>(
            [this](auto handler, corpus_write w) {
                using handler_type = decltype(handler);
                // The hand-off to the handler's executor allocates; out of memory (S19) the
                // completion parks itself and the library's timer thread retries it
                // (detail/async/handoff_retry.hpp), so the result is never lost.
                struct completion final : write_completion, detail::retry_node {
                    handler_type h;
                    decltype(asio::prefer(asio::get_associated_executor(std::declval<handler_type&>()),
                                          asio::execution::outstanding_work.tracked)) ex;
                    write_result result;
                    explicit completion(handler_type&& hh)
                        : h(std::move(hh)),
                          ex(asio::prefer(asio::get_associated_executor(h),
                                          asio::execution::outstanding_work.tracked)) {}
                    void complete(std::unique_ptr<write_completion> self, write_result r) noexcept override {
                        result = std::move(r);
                        (void)self.release();  // owned by the posted function (or the retry) now
                        if (!hand_off()) {
                            retry = [](detail::retry_node& n) noexcept {
                                return static_cast<completion&>(n).hand_off();
                            };
                            detail::retry_handoff_later(*this);
                        }
                    }
                    // Posts the call of the handler; false, with nothing moved, when that found no memory.
                    bool hand_off() noexcept {
                        try {
                            asio::post(ex, [self = this] {
                                const std::unique_ptr<completion> own(self);
                                std::move(own->h)(std::move(own->result));
                            });
                            return true;
                        } catch (const std::bad_alloc&) {
                            return false;
                        }
                    }
                };
                detail::prepare_handoff_retry();
                submit(std::move(w), std::make_unique<completion>(std::move(handler)));
            },
            token, std::move(w));
    }

    /// Writes a checkpoint: every live row, as .npy files replaced atomically, then drops the
    /// logs it makes redundant. Blocking (writes wait only while the log is switched: the time
    /// of one group commit); searches and writes go on meanwhile. Nothing to do in memory.
    std::error_code checkpoint();
    /// Whether the corpus lives in a directory.
    bool durable() const noexcept;

    /// A snapshot of the current state (L3).
    corpus_snapshot snapshot() const noexcept;

    /// The row `id` as stored now, or nothing.
    std::optional<stored_row> get(row_id id) const;

    /// Merges the segments into one sorted by id, without the rows no snapshot taken from now
    /// on can see, with its bf16 copy: run it inside a session (of a group of its own, L8).
    /// Searches and writes proceed meanwhile; a stop (S20) abandons it with nothing changed.
    /// Returns false when there was nothing to merge, or another compaction was running.
    bool compact(backend_session& s);
    /// The same on the calling thread, outside any session (not stoppable): for setting a corpus
    /// up before it serves.
    bool compact();
    /// Whether `compact` would do something worthwhile: more than one segment, or erased rows
    /// stored.
    bool needs_compaction() const noexcept;

    std::int64_t dim() const noexcept;
    corpus_stats stats() const;

private:
    struct state;
    struct log_state;
    bool compact_with(detail::function_ref<void()> check_stop);
    struct logged_write;
    write_result apply_in_memory(const corpus_write& w);
    write_result apply_locked(const corpus_write& w, bool publish);
    void recover();
    void on_logged(logged_write* rec, std::error_code ec) noexcept;
    void apply_group() noexcept;
    static void group_end(void* self) noexcept;
    std::unique_ptr<state> state_;
};

}  // namespace tenferro

template <>
struct std::is_error_code_enum<tenferro::corpus_errc> : std::true_type {};
