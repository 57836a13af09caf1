#pragma once
// The search itself: each request enters one tenferro session; the session
// scores the corpus against the query with one matmul and picks the best rows
// with top_k. Concurrent queries that are waiting when a session starts are
// folded into its matmul (up to `max_batch`), which reads the corpus once for
// all of them; their own entries, still queued, are cancelled, so that no
// permit is spent on a session with nothing left to do.

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <asio/awaitable.hpp>
#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "latency_histogram.hpp"
#include "permit_usage.hpp"
#include "search_request.hpp"

namespace embedding_search {

struct engine_options {
    /// Run every session body on the I/O thread that asked for it
    /// (`placement::caller`) instead of on tenferro's compute workers: the
    /// "no admission" baseline, where compute blocks the I/O threads.
    bool inline_compute = false;
    /// The most queries one session scores together (1: one query per matmul).
    std::size_t max_batch = 16;
};

/// How one run of the server is set up.
struct server_mode {
    bool inline_compute = false;    ///< compute on the I/O threads (the baseline without admission)
    std::size_t io_threads = 1;
    std::size_t permits = 0;        ///< tenferro permits; 0: one per core. Inline: ignored (= io_threads)
    std::size_t max_waiters = 4096; ///< tenferro queue bound (503 beyond it)
    std::size_t max_batch = 16;
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
    std::uint64_t handed_over = 0;  ///< queries answered by another request's session
    double busy_permit_seconds = 0.0;  ///< from the admission observer (0 without one)
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
    struct pending_query;

    void run_session(tenferro::backend_session& s, pending_query* own) noexcept;
    void compute(tenferro::backend_session& s, const std::vector<std::shared_ptr<pending_query>>& batch) const;
    bool withdraw(const pending_query* q);
    template <class Handler>
    static void post_to_owner(const asio::any_io_executor& owner, Handler&& handler);

    tenferro::cpu_backend& cpu_;
    tenferro::tensor corpus_;
    engine_options options_;
    std::shared_ptr<permit_usage_observer> usage_;

    std::mutex mutex_;
    std::deque<std::shared_ptr<pending_query>> pending_;  // queries no session has taken yet, oldest first

    latency_histogram admission_wait_;
    latency_histogram batch_compute_;
    std::atomic<std::uint64_t> sessions_{0}, batches_{0}, batched_queries_{0}, largest_batch_{0}, handed_over_{0};
};

}  // namespace embedding_search
