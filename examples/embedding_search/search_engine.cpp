#include "search_engine.hpp"

#include <unistd.h>
#include <sys/resource.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

#include <asio/use_awaitable.hpp>

#include "thread_priority.hpp"

namespace tf = tenferro;

namespace embedding_search {

tf::cpu_backend_options backend_options_for(const server_mode& mode, std::shared_ptr<permit_usage_observer> usage,
                                            std::size_t corpus_bytes) {
    tf::cpu_backend_options o;
    // The packed corpus (about its own size, panels padded) plus room for plans.
    o.runtime_cache_bytes = std::max(o.runtime_cache_bytes, corpus_bytes + corpus_bytes / 4 + (std::size_t{16} << 20));
    const std::size_t io_threads = std::max<std::size_t>(1, mode.io_threads);
    o.permits = mode.inline_compute ? io_threads
                                    : (mode.permits ? mode.permits : std::max(1u, std::thread::hardware_concurrency()));
    o.max_waiters = mode.inline_compute ? std::numeric_limits<std::size_t>::max() : mode.max_waiters;
    o.observer = std::move(usage);
    if (!mode.inline_compute && mode.compute_nice != 0) {
        // Each compute worker lowers its own priority once, as it starts.
        o.on_worker_start = [nice = mode.compute_nice](std::size_t) { set_thread_nice(nice); };
    }
    return o;
}

engine_options engine_options_for(const server_mode& mode) {
    engine_options o;
    o.inline_compute = mode.inline_compute;
    o.max_batch = mode.inline_compute ? 1 : std::max<std::size_t>(1, mode.max_batch);
    o.max_delay = mode.inline_compute ? std::chrono::microseconds(0) : mode.max_delay;
    o.session_permits = mode.inline_compute ? 1 : mode.batch_permits;
    if (!mode.inline_compute) o.max_waiting = mode.max_waiters;
    return o;
}

namespace {
/// The batcher's options for an engine: inline compute runs each query on the
/// I/O thread that asked for it (placement::caller), one per session.
tf::batch_options batching_for(const engine_options& o, std::size_t backend_permits) {
    tf::batch_options b;
    // A batch takes every permit by default: a lone query then uses every core, and a batch
    // split over the cores finishes as soon as two half-size batches would, in FIFO order.
    const std::size_t wanted = o.session_permits == 0 ? backend_permits : o.session_permits;
    b.session.permits =
        o.inline_compute ? 1 : std::clamp<std::size_t>(wanted, 1, std::max<std::size_t>(1, backend_permits));
    b.max_batch = o.inline_compute ? 1 : std::max<std::size_t>(1, o.max_batch);
    b.max_delay = o.inline_compute ? std::chrono::microseconds(0) : o.max_delay;
    b.session.where = o.inline_compute ? tf::placement::caller : tf::placement::compute;
    return b;
}

tf::tensor checked_corpus(tf::tensor corpus) {
    if (corpus.type() != tf::dtype::f32 || corpus.rank() != 2 || corpus.shape()[0] < 1 || corpus.shape()[1] < 1) {
        throw std::invalid_argument("search_engine: the corpus must be a non-empty 2-D f32 tensor, got " +
                                    std::string(tf::to_string(corpus.type())) + " " + tf::to_string(corpus.shape()));
    }
    return corpus;
}
}  // namespace

search_engine::search_engine(tf::cpu_backend& cpu, tf::tensor corpus, engine_options options,
                             std::shared_ptr<permit_usage_observer> usage)
    : cpu_(cpu),
      corpus_(checked_corpus(std::move(corpus))),
      options_(options),
      usage_(std::move(usage)),
      batcher_(cpu, batching_for(options, cpu.permits()),
               [this](tf::backend_session& s, std::span<item> batch) { return compute(s, batch); }) {
    options_.max_batch = batcher_.options().max_batch;
    cpu_.default_cache().mark_constant(corpus_);
}

search_engine::~search_engine() { cpu_.default_cache().unmark_constant(corpus_); }

asio::awaitable<search_outcome> search_engine::search(search_query query) {
    tf::session_result<hits> r;
    search_outcome outcome;
    if (batcher_.stats().waiting >= options_.max_waiting) {
        shed_.fetch_add(1, std::memory_order_relaxed);
        outcome.status = search_status::shed;
        outcome.error = "the search queue is full (" + std::to_string(options_.max_waiting) + " waiting)";
        co_return outcome;
    }
    try {
        // (Named, not a braced temporary in the co_await: docs/pitfalls.md, 3.)
        item it{std::move(query), clock_type::now()};
        r = co_await batcher_.submit(std::move(it));
    } catch (const std::exception& e) {
        // The batch's body threw (every query of that batch gets it).
        outcome.status = search_status::failed;
        outcome.error = e.what();
        co_return outcome;
    }
    if (!r) {
        // `contended` is the queue bound (max_waiters); `executor` means the
        // backend (or the engine) is shutting down: shed the query.
        const auto code = r.error().code();
        if (const auto i = static_cast<std::size_t>(code); i < rejected_by_reason_.size())
            rejected_by_reason_[i].fetch_add(1, std::memory_order_relaxed);
        outcome.status = code == tf::session_entry_errc::contended || code == tf::session_entry_errc::executor
                             ? search_status::shed
                             : search_status::failed;
        outcome.error = r.error().message();
        co_return outcome;
    }
    outcome.hits = std::move(*r);
    co_return outcome;
}

std::vector<search_engine::hits> search_engine::compute(tf::backend_session& s, std::span<item> batch) {
    const auto started = clock_type::now();
    for (const item& q : batch) admission_wait_.record(started - q.entered);
    sessions_.fetch_add(1, std::memory_order_relaxed);

    const auto count = std::int64_t(batch.size());
    const std::int64_t d = dim();
    std::int64_t k_max = 0;
    for (const item& q : batch) k_max = std::max(k_max, q.query.k);

    // Queries as rows: [B, D]; the best k_max of queries x corpus^T ([B, N], never materialised).
    tf::tensor queries = tf::tensor::empty(tf::dtype::f32, {count, d});
    float* rows_out = queries.data<float>();
    for (const item& q : batch) {
        std::copy(q.query.unit_vector.begin(), q.query.unit_vector.end(), rows_out);
        rows_out += d;
    }
    const auto [values, indices] = s.matmul_top_k(queries, corpus_.transposed(), k_max);

    const float* v = values.data<float>();
    const std::int64_t* i = indices.data<std::int64_t>();
    std::vector<hits> out(batch.size());
    for (std::int64_t b = 0; b < count; ++b) {
        const std::int64_t k = batch[std::size_t(b)].query.k;
        hits& h = out[std::size_t(b)];
        h.resize(std::size_t(k));
        for (std::int64_t j = 0; j < k; ++j) h[std::size_t(j)] = {i[b * k_max + j], v[b * k_max + j]};
    }
    batch_compute_.record(clock_type::now() - started);
    batched_queries_.fetch_add(batch.size(), std::memory_order_relaxed);
    return out;
}

engine_snapshot search_engine::snapshot() const {
    engine_snapshot s;
    s.admission_wait = admission_wait_.snapshot();
    s.batch_compute = batch_compute_.snapshot();
    s.batcher = batcher_.stats();
    s.shed = shed_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < s.rejected_by_reason.size(); ++i)
        s.rejected_by_reason[i] = rejected_by_reason_[i].load(std::memory_order_relaxed);
    s.sessions = sessions_.load(std::memory_order_relaxed);
    s.batches = s.batcher.batches;
    s.batched_queries = batched_queries_.load(std::memory_order_relaxed);
    s.largest_batch = s.batcher.largest_batch;
    s.handed_over = s.batched_queries - std::min(s.batched_queries, s.sessions);
    s.busy_permit_seconds = usage_ ? usage_->busy_permit_seconds() : 0.0;
    return s;
}

}  // namespace embedding_search
