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

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <asio/awaitable.hpp>
#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "latency_histogram.hpp"
#include "permit_usage.hpp"
#include "search_request.hpp"

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
    /// Load shedding: a query arriving while this many wait in the batcher is
    /// answered `shed` (503) at once. (Checked without a lock held across the
    /// submission: concurrent arrivals may overshoot it by a few.)
    std::size_t max_waiting = std::numeric_limits<std::size_t>::max();
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
};

/// The backend a `server_mode` needs: inline gets one permit per I/O thread
/// and no queue bound (its bodies run on the I/O threads at once, nothing
/// waits), tenferro gets `permits` (one per core by default), `max_waiters`
/// and, unless `compute_nice` is 0, an `on_worker_start` hook that gives each
/// compute worker that nice value. Both get a runtime cache large enough to keep the packed copy of a corpus
/// of `corpus_bytes` (see `search_engine`).
tenferro::cpu_backend_options backend_options_for(const server_mode& mode, std::shared_ptr<permit_usage_observer> usage,
                                                  std::size_t corpus_bytes = 0);
/// The engine a `server_mode` needs (inline computes one query per session).
engine_options engine_options_for(const server_mode& mode);

enum class search_status {
    ok,
    shed,    ///< admission refused the entry (`contended`: queue full, or shut down): 503
    failed,  ///< the computation threw: 500
};

struct search_outcome {
    search_status status = search_status::ok;
    std::vector<search_hit> hits;  ///< best first
    std::string error;             ///< why, when not ok
};

/// Counters of the engine, cumulative since construction.
struct engine_snapshot {
    histogram_snapshot admission_wait;  ///< entry initiated -> its session body started
    histogram_snapshot batch_compute;   ///< one session's matmul + top_k
    std::uint64_t sessions = 0;         ///< session bodies that ran
    std::uint64_t batches = 0;          ///< sessions that computed at least one query
    std::uint64_t batched_queries = 0;  ///< queries computed
    std::uint64_t largest_batch = 0;
    std::uint64_t handed_over = 0;  ///< queries answered in a batch led by another request
    double busy_permit_seconds = 0.0;  ///< from the admission observer (0 without one)
    tenferro::batch_stats batcher;     ///< the batcher's own counters
    std::uint64_t shed = 0;            ///< queries refused at once: max_waiting were waiting
    /// Queries completed with an admission error, by `session_entry_errc`
    /// (index: the code's value, 1 = reentered ... 6 = cancelled).
    std::array<std::uint64_t, 7> rejected_by_reason{};
};

class search_engine {
public:
    /// `corpus` is a 2-D f32 tensor of unit rows; `usage` is the observer
    /// installed in `cpu` (or null). The corpus is marked constant in `cpu`'s
    /// runtime cache for the engine's lifetime, so the matmuls keep its packed
    /// panels instead of packing 100 MB per call (the cache must be large enough:
    /// `backend_options_for`).
    search_engine(tenferro::cpu_backend& cpu, tenferro::tensor corpus, engine_options options,
                  std::shared_ptr<permit_usage_observer> usage = nullptr);
    ~search_engine();

    search_engine(const search_engine&) = delete;
    search_engine& operator=(const search_engine&) = delete;

    /// The `k` corpus rows most similar to `query.unit_vector`, best first.
    /// Resumes on the calling coroutine's executor, which must serialise its
    /// handlers (a strand, or a single-threaded context).
    asio::awaitable<search_outcome> search(search_query query);

    std::int64_t rows() const noexcept { return corpus_.shape()[0]; }
    std::int64_t dim() const noexcept { return corpus_.shape()[1]; }
    const tenferro::tensor& corpus() const noexcept { return corpus_; }
    const engine_options& options() const noexcept { return options_; }
    tenferro::cpu_backend& backend() noexcept { return cpu_; }
    engine_snapshot snapshot() const;

private:
    /// One query in the batcher: the query and when it arrived.
    struct item {
        search_query query;
        clock_type::time_point entered;
    };
    using hits = std::vector<search_hit>;

    std::vector<hits> compute(tenferro::backend_session& s, std::span<item> batch);

    tenferro::cpu_backend& cpu_;
    tenferro::tensor corpus_;
    engine_options options_;
    std::shared_ptr<permit_usage_observer> usage_;

    latency_histogram admission_wait_;
    latency_histogram batch_compute_;
    std::atomic<std::uint64_t> sessions_{0}, batched_queries_{0}, shed_{0};
    std::array<std::atomic<std::uint64_t>, 7> rejected_by_reason_{};
    // Last: destroyed first, while what its bodies use is still alive.
    tenferro::batcher<tenferro::cpu_backend, item, hits> batcher_;
};

}  // namespace embedding_search
