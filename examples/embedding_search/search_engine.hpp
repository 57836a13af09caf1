#pragma once
// The search itself: each request is an item of a `tenferro::batcher`; each
// batch's session scores the corpus against its queries and picks the best
// rows with one fused matmul_top_k (the score matrix is never materialised).
// Each batch session takes every permit of the backend by default, so a lone
// query on an idle server runs on every core (the corpus split between them)
// and queued batches run one after another, in FIFO order. Queries that arrive while the host is busy
// wait in the batcher and are folded into the next session's matmul (up to
// `max_batch`), which reads the corpus once for all of them; an idle server
// answers each query in a session of its own, at once (no timer unless
// `max_delay` asks for one: contract B1-B6, docs/design/batching.md).
//
// Tenants: the backend may have several groups (`server_mode::groups`, contract
// P1-P3). The engine keeps one batcher per group, whose sessions are entered in
// that group, so a batch holds one tenant's queries and the host's weighted fair
// queuing shares the permit-time between the groups' batch sessions.
//
// Deadlines: a batcher item has none of its own (contract section 8), so the
// engine enforces a query's deadline itself, three ways: refused at arrival when
// the predicted wait (tenant_groups.hpp) exceeds the time left; removed from its
// batcher when the deadline passes while it waits (per-operation cancellation
// from a timer); skipped by the batch body when the deadline passed before it
// started. Each is answered `expired`.
//
// Clients that leave: the caller may pass a cancellation slot that gets
// `terminal` when the query's client is gone (the server's connection watches
// its socket). The submission is then cancelled: a waiting query leaves its
// batcher (B4), and a batch whose every query is gone is stopped inside its
// matmul (B7, S20). Either is answered `abandoned` and counted.
//
// Patience (engine_options::patience, patience.hpp): the ages at which clients
// leave teach the engine how long they wait, and recent batches how long a
// batch takes; each batch body computes only the queries with the most time
// left that can still finish in it, and answers the others `shed` (503) at
// once, before its matmul.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>
#include <tenferro/live_corpus.hpp>
#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "latency_histogram.hpp"
#include "patience.hpp"
#include "permit_usage.hpp"
#include "search_request.hpp"
#include "tenant_groups.hpp"

namespace embedding_search {

using clock_type = std::chrono::steady_clock;

struct engine_options {
    /// Run every session body on the I/O thread that asked for it
    /// (`placement::caller`) instead of on tenferro's compute workers: the
    /// "no admission" baseline, where compute blocks the I/O threads.
    bool inline_compute = false;
    /// The most queries one session scores together (1: one query per matmul).
    std::size_t max_batch = 256;
    /// Permits each batch session asks for (0: all of the backend's): the
    /// session's matmul_top_k splits the corpus over that many workers.
    std::size_t session_permits = 0;
    /// 0: batch only what waits anyway (B1). Otherwise wait up to this long for
    /// a batch to fill (B6: the timer policy of other servers, for comparison).
    std::chrono::microseconds max_delay{0};
    /// Load shedding: a query arriving while this many wait in its group's
    /// batcher is answered `shed` (503) at once. (Checked without a lock held
    /// across the submission: concurrent arrivals may overshoot it by a few.)
    std::size_t max_waiting = std::numeric_limits<std::size_t>::max();
    /// Called at the start of every batch body, on the thread that runs it,
    /// after its queries are taken and before the matmul. For tests: it can
    /// hold a batch still while they arrange what happens meanwhile.
    std::function<void(tenferro::backend_session&)> on_batch_start{};
    /// The patience policy (patience.hpp); off by default here, on in the
    /// server's (server_mode::patience).
    patience_options patience{};
    /// The engine's clock, for the ages and the batch times it measures
    /// (tests; empty: steady_clock). Deadline timers run on the real clock.
    std::function<clock_type::time_point()> clock{};
    /// The host's group in which compaction sessions run (contract L8: apart
    /// from the searches' groups, which are the ones before it); `none`: no
    /// group of its own, compaction runs in group 0.
    static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
    std::size_t compaction_group = none;
    /// Compaction starts once the rows outside the compacted segment and the
    /// erased rows still stored reach max(compaction_min_rows, live rows / 8).
    std::int64_t compaction_min_rows = 4096;
    /// A durable corpus writes a checkpoint (on a thread of its own) once its log
    /// holds max(checkpoint_log_bytes, half the corpus's bytes).
    std::uint64_t checkpoint_log_bytes = std::uint64_t{256} << 20;
};

/// How one run of the server is set up.
struct server_mode {
    bool inline_compute = false;    ///< compute on the I/O threads (the baseline without admission)
    std::size_t io_threads = 1;
    std::size_t permits = 0;        ///< tenferro permits; 0: one per core. Inline: ignored (= io_threads)
    std::size_t max_waiters = 4096; ///< queued searches beyond which requests get 503
    std::size_t max_batch = 256;
    std::size_t batch_permits = 0;  ///< permits per batch session; 0: all (engine_options::session_permits)
    std::chrono::microseconds max_delay{0};  ///< see engine_options::max_delay
    /// Nice value the compute workers give themselves as they start (Linux:
    /// per thread, through `cpu_backend_options::on_worker_start`), so that a
    /// saturated compute pool yields the CPU to the I/O threads at once; 0
    /// leaves them alone. Tenferro mode only: inline compute runs its bodies
    /// on the I/O threads.
    int compute_nice = 19;
    /// Tenant groups (`--group NAME:WEIGHT`), into `cpu_backend_options::groups`;
    /// empty: one group, "default", which is plain FIFO. Tenferro mode only.
    std::vector<tenferro::group_options> groups;
    /// The patience policy (engine_options::patience): `--no-patience` turns
    /// it off, and so does `--keep-abandoned` (it learns from clients that leave).
    bool patience = true;
};

/// The backend a `server_mode` needs: inline gets one permit per I/O thread
/// and no queue bound (its bodies run on the I/O threads at once, nothing
/// waits), tenferro gets `permits` (one per core by default), `max_waiters`
/// and, unless `compute_nice` is 0, an `on_worker_start` hook that gives each
/// compute worker that nice value, and `groups`. Both get a runtime cache large enough to keep the packed copy of a
/// corpus of `corpus_bytes` (see `search_engine`).
tenferro::cpu_backend_options backend_options_for(const server_mode& mode, std::shared_ptr<permit_usage_observer> usage,
                                                  std::size_t corpus_bytes = 0);
/// The engine a `server_mode` needs (inline computes one query per session).
engine_options engine_options_for(const server_mode& mode);

enum class search_status {
    ok,
    shed,     ///< admission refused the entry (`contended`: queue full, or shut down): 503
    expired,  ///< not started by its deadline, or predicted not to be: 503 deadline_exceeded
    failed,   ///< the computation threw: 500
    abandoned,  ///< the caller's slot said the client was gone: no one to answer
};

/// Where a query's deadline was found to be missed.
enum class expiry_stage {
    arrival,      ///< the predicted wait exceeded the time left (or none was left)
    queue,        ///< the deadline passed while it waited in its batcher
    batch_start,  ///< its batch body started after the deadline
};
inline constexpr std::array<std::string_view, 3> expiry_stage_names = {"arrival", "queue", "batch_start"};

struct search_outcome {
    search_status status = search_status::ok;
    std::vector<search_hit> hits;  ///< best first
    std::uint64_t seq = 0;         ///< the snapshot's sequence number, when ok
    std::string error;             ///< why, when not ok
    expiry_stage stage = expiry_stage::arrival;  ///< when expired
    double predicted_wait_seconds = 0.0;  ///< when expired: the group's predicted wait (then)
    bool patience = false;  ///< when shed: by the patience policy (it could not finish in time)
};

/// One group's counters: the host's `group_stats` and the engine's own.
struct group_snapshot {
    std::string name;
    tenferro::group_stats admission{};  ///< (its `name` is only valid as long as the host: use `name`)
    std::size_t waiting = 0;            ///< items in the group's batcher
    std::uint64_t requests = 0;         ///< searches submitted to the engine in this group
    std::uint64_t shed = 0;             ///< refused at once: max_waiting were waiting
    std::array<std::uint64_t, 3> expired{};  ///< by expiry_stage
    std::uint64_t batches = 0;          ///< batch bodies that ran
    double mean_batch_seconds = 0.0;    ///< recent mean batch-body duration (moving average)
    double predicted_wait_seconds = 0.0;  ///< what a query arriving now would be predicted to wait
};

/// Counters of the engine, cumulative since construction.
struct engine_snapshot {
    histogram_snapshot admission_wait;  ///< entry initiated -> its session body started
    histogram_snapshot batch_compute;   ///< one session's matmul + top_k
    /// The age of each batch's oldest query (its first) when its body started:
    /// how old the head of the queue is when it is served.
    histogram_snapshot queue_head_age;
    std::uint64_t sessions = 0;         ///< session bodies that ran
    std::uint64_t batches = 0;          ///< sessions that computed at least one query
    std::uint64_t batched_queries = 0;  ///< queries computed
    std::uint64_t largest_batch = 0;
    std::uint64_t handed_over = 0;  ///< queries answered in a batch led by another request
    double busy_permit_seconds = 0.0;  ///< from the admission observer (0 without one)
    tenferro::batch_stats batcher;     ///< the batcher's own counters
    std::uint64_t shed = 0;            ///< queries refused at once: max_waiting were waiting
    /// Queries whose client left before the answer (search's `gone` slot): by
    /// where they were, still waiting in a batcher (they left it, never
    /// computed), or taken into a batch (computed with it, or stopped with it).
    std::uint64_t abandoned_waiting = 0, abandoned_taken = 0;
    /// Notices that a query's client left, counted as each arrives (its
    /// search still running); abandoned_* count the same queries as they end.
    std::uint64_t clients_gone = 0;
    /// Batch bodies that ended because their session was stopped (every query
    /// of the batch gone: B7), and the queries they held.
    std::uint64_t stopped_batches = 0, stopped_queries = 0;
    /// Queries completed with an admission error, by `session_entry_errc`
    /// (index: the code's value, 1 = reentered ... 7 = deadline_exceeded).
    std::array<std::uint64_t, 8> rejected_by_reason{};
    std::vector<group_snapshot> groups;  ///< one per search group of the host
    tenferro::corpus_stats corpus;       ///< the live corpus's own counters
    std::uint64_t compactions_started = 0, compactions_failed = 0;
    std::uint64_t checkpoints = 0, checkpoints_failed = 0;
    /// The patience policy: on or not; taken queries it answered 503 instead
    /// of computing; close ages recorded; the learned patience (0: not yet
    /// known) and the batch cost model (fixed + per query, 0: not yet known).
    bool patience_enabled = false;
    std::uint64_t patience_shed = 0, patience_samples = 0;
    double patience_seconds = 0.0;
    double batch_fixed_seconds = 0.0, batch_per_query_seconds = 0.0;
};

/// Writes `rows` (a 2-D f32 tensor) into `corpus` as ids first_id, first_id + 1, ..., in writes
/// of 16384 rows. \throws std::runtime_error naming the row the corpus refused.
void load_rows(tenferro::live_corpus& corpus, const tenferro::tensor& rows, std::uint64_t first_id);

class search_engine {
public:
    /// Serves `corpus` (a corpus that normalises: cosine similarity); `usage`
    /// is the observer installed in `cpu` (or null).
    search_engine(tenferro::cpu_backend& cpu, std::shared_ptr<tenferro::live_corpus> corpus, engine_options options,
                  std::shared_ptr<permit_usage_observer> usage = nullptr);
    /// Serves a constant corpus: `rows`, a 2-D f32 tensor of unit rows, become
    /// rows 0..n-1 of a live corpus of their own, compacted at once.
    search_engine(tenferro::cpu_backend& cpu, const tenferro::tensor& rows, engine_options options,
                  std::shared_ptr<permit_usage_observer> usage = nullptr);
    ~search_engine();

    search_engine(const search_engine&) = delete;
    search_engine& operator=(const search_engine&) = delete;

    /// The `k` corpus rows most similar to `query.unit_vector`, best first,
    /// computed in a batch of tenant group `group` (< groups()) unless the
    /// query's `deadline` (`max()`: none) is missed first (`expired`).
    /// Resumes on the calling coroutine's executor, which must serialise its
    /// handlers (a strand, or a single-threaded context): the deadline's timer
    /// runs there too, and `gone` must be emitted there. `gone` (when
    /// connected): `terminal` or `partial` means the client left; the search
    /// is cancelled and answered `abandoned`.
    asio::awaitable<search_outcome> search(search_query query, std::size_t group = 0,
                                           clock_type::time_point deadline = clock_type::time_point::max(),
                                           asio::cancellation_slot gone = {});

    /// The host's groups (at least 1), their names, and the index of `name`
    /// (exact match), or groups() when there is none of that name.
    std::size_t groups() const noexcept { return counters_.size(); }
    const std::string& group_name(std::size_t group) const { return counters_.at(group)->name; }
    std::size_t group_index(std::string_view name) const noexcept;
    /// What a query arriving in `group` now would be predicted to wait (tenant_groups.hpp).
    double predicted_wait_seconds(std::size_t group) const;

    /// Applies `w` to the corpus (contract L2: visible to every search
    /// admitted after it completes), then starts a compaction when one is due.
    /// Resumes on the calling coroutine's executor.
    asio::awaitable<tenferro::write_result> write(tenferro::corpus_write w);
    /// A compaction, when one is due and none runs: a session of one permit in
    /// the compaction group, completed in the library's context (counted; the
    /// engine's destructor waits for it).
    void compact_if_due();
    /// A checkpoint of a durable corpus, when its log has grown enough and none runs.
    void checkpoint_if_due();

    std::int64_t rows() const noexcept { return corpus_->snapshot().rows(); }
    std::int64_t dim() const noexcept { return corpus_->dim(); }
    tenferro::live_corpus& corpus() noexcept { return *corpus_; }
    const engine_options& options() const noexcept { return options_; }
    tenferro::cpu_backend& backend() noexcept { return cpu_; }
    engine_snapshot snapshot() const;

private:
    /// What a query's submission shares with its deadline's timer, the
    /// caller's `gone` slot and the batch body; may outlive the search's frame.
    struct pending_submit;
    struct query_watch {
        asio::cancellation_signal signal;  // the submission's slot
        bool expired = false;              // the deadline's timer fired (on the caller's executor)
        bool abandoned = false;            // the client left (same)
        bool shed = false;                 // the patience policy shed it (same)
        std::atomic<bool> taken{false};    // a batch body received it
        clock_type::time_point entered{};  // when it was submitted (engine clock)
        // With the patience policy: the caller's executor and what wakes the
        // search, so that a body can answer a query it sheds at once.
        asio::any_io_executor executor{};
        std::shared_ptr<pending_submit> pending;
    };
    /// One query in the batcher: the query, when it arrived, its deadline, and
    /// its watch (none without a deadline or a `gone` slot).
    struct item {
        search_query query;
        clock_type::time_point entered;
        clock_type::time_point deadline = clock_type::time_point::max();
        std::shared_ptr<query_watch> watch;
    };
    /// An item's answer: its hits, or none because its deadline had passed
    /// when the batch body started.
    struct answer {
        std::vector<search_hit> hits;
        std::uint64_t seq = 0;
        bool expired = false;
        bool shed = false;  // the patience policy did not compute it
    };
    using batcher_type = tenferro::batcher<tenferro::cpu_backend, item, answer>;

    /// A group's own counters. (Apart from the batchers, which are destroyed
    /// first: the bodies still running then use these.)
    struct group_counters {
        std::string name;
        unsigned weight = 1;
        std::atomic<std::uint64_t> requests{0}, shed{0}, batches{0};
        std::array<std::atomic<std::uint64_t>, 3> expired{};
        std::atomic<std::int64_t> mean_batch_ns{0};  // moving average, 1/8 per batch
    };

    std::vector<answer> compute(tenferro::backend_session& s, std::size_t group, std::span<item> batch);
    /// Scores the queries of `batch` at the indices `live` into `out`.
    void compute_batch(tenferro::backend_session& s, std::size_t group, std::span<item> batch,
                       std::span<const std::size_t> live, std::vector<answer>& out, clock_type::time_point started);
    void count_expired(std::size_t group, expiry_stage stage);
    clock_type::time_point now() const { return options_.clock ? options_.clock() : clock_type::now(); }
    /// The patience policy's choice for `batch` (live: the indices not
    /// expired); marks and announces the ones it sheds, returns the rest.
    /// The patience learned, leaving out the close ages shorter than a
    /// one-query batch (patience_estimator::estimate).
    std::optional<double> learned_patience() const;
    std::vector<std::size_t> apply_patience(std::span<item> batch, std::vector<std::size_t> live,
                                            clock_type::time_point started, std::vector<answer>& out);

    tenferro::cpu_backend& cpu_;
    std::shared_ptr<tenferro::live_corpus> corpus_;
    std::atomic<bool> compacting_{false};
    std::mutex compaction_mutex_;
    std::condition_variable compaction_done_;
    bool compaction_running_ = false;  // under compaction_mutex_
    std::atomic<std::uint64_t> compactions_started_{0}, compactions_failed_{0};
    std::atomic<bool> checkpointing_{false};
    std::atomic<std::uint64_t> checkpoints_{0}, checkpoints_failed_{0};
    std::thread checkpointer_;
    engine_options options_;
    std::shared_ptr<permit_usage_observer> usage_;

    latency_histogram admission_wait_;
    latency_histogram batch_compute_;
    latency_histogram queue_head_age_;
    std::atomic<std::uint64_t> sessions_{0}, batched_queries_{0}, shed_{0};
    std::atomic<std::uint64_t> clients_gone_{0}, abandoned_waiting_{0}, abandoned_taken_{0}, stopped_batches_{0},
        stopped_queries_{0};
    std::array<std::atomic<std::uint64_t>, 8> rejected_by_reason_{};
    std::atomic<std::uint64_t> patience_shed_{0};
    patience_estimator patience_;
    batch_cost_model batch_cost_;
    std::vector<std::unique_ptr<group_counters>> counters_;
    // Last: destroyed first, while what their bodies use is still alive.
    std::vector<std::unique_ptr<batcher_type>> batchers_;
};

}  // namespace embedding_search
