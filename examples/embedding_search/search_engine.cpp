#include "search_engine.hpp"

#include <unistd.h>
#include <sys/resource.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <thread>

#include <asio/any_io_executor.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "thread_priority.hpp"

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

namespace embedding_search {

// One query between its arrival and its answer. The owner (the request's
// coroutine) and, possibly, another request's session body share it.
struct search_engine::pending_query {
    pending_query(asio::any_io_executor ex, search_query q) : executor(ex), wakeup(ex), query(std::move(q)) {}

    asio::any_io_executor executor;  // the owner's (serialising) executor
    asio::steady_timer wakeup;       // the owner waits on it while another session computes its query
    asio::cancellation_signal withdraw_entry;  // emitted (on `executor`) once another session took the query
    search_query query;
    clock_type::time_point entered;

    // Written by whichever session computes the query, read by the owner after
    // the hand-off: its own session's completion, or the posted `signalled`.
    std::vector<search_hit> hits;
    std::string error;
    bool computed_by_owner = false;
    bool signalled = false;  // touched only on `executor`
};

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
    return o;
}

search_engine::search_engine(tf::cpu_backend& cpu, tf::tensor corpus, engine_options options,
                             std::shared_ptr<permit_usage_observer> usage)
    : cpu_(cpu), corpus_(std::move(corpus)), options_(options), usage_(std::move(usage)) {
    if (corpus_.type() != tf::dtype::f32 || corpus_.rank() != 2 || corpus_.shape()[0] < 1 || corpus_.shape()[1] < 1) {
        throw std::invalid_argument("search_engine: the corpus must be a non-empty 2-D f32 tensor, got " +
                                    std::string(tf::to_string(corpus_.type())) + " " + tf::to_string(corpus_.shape()));
    }
    options_.max_batch = std::max<std::size_t>(1, options_.max_batch);
    cpu_.default_cache().mark_constant(corpus_);
}

search_engine::~search_engine() { cpu_.default_cache().unmark_constant(corpus_); }

asio::awaitable<search_outcome> search_engine::search(search_query query) {
    auto q = std::make_shared<pending_query>(co_await asio::this_coro::executor, std::move(query));
    q->entered = clock_type::now();
    {
        std::lock_guard lock(mutex_);
        pending_.push_back(q);
    }

    tf::session_options options;
    options.where = options_.inline_compute ? tf::placement::caller : tf::placement::compute;
    pending_query* const own = q.get();
    auto body = [this, own](tf::backend_session& s) { run_session(s, own); };
    // When another session takes this query into its batch, it cancels this
    // entry (if still queued), so that no permit is spent on an empty session.
    auto token = asio::bind_cancellation_slot(own->withdraw_entry.slot(), asio::use_awaitable);
    const tf::session_result<void> admitted = co_await cpu_.with_backend_session(options, std::move(body), token);

    search_outcome outcome;
    if (!admitted && admitted.error().code() != tf::session_entry_errc::cancelled && withdraw(own)) {
        // Nothing computed the query: shed it. `contended` is the queue bound
        // (max_waiters); `executor` means the backend is shutting down.
        const auto code = admitted.error().code();
        outcome.status = code == tf::session_entry_errc::contended || code == tf::session_entry_errc::executor
                             ? search_status::shed
                             : search_status::failed;
        outcome.error = admitted.error().message();
        co_return outcome;
    }
    // Either this entry's own session computed the query (its completion
    // publishes the result), or another session took it (and cancelled this
    // entry, or found it admitted already): wait for the hand-off that session
    // posts to this executor.
    if (!own->computed_by_owner) {
        while (!own->signalled) {
            own->wakeup.expires_at(clock_type::time_point::max());
            std::error_code ignored;
            co_await own->wakeup.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
        }
    }
    if (!own->error.empty()) {
        outcome.status = search_status::failed;
        outcome.error = std::move(own->error);
    } else {
        outcome.hits = std::move(own->hits);
    }
    co_return outcome;
}

bool search_engine::withdraw(const pending_query* q) {
    std::lock_guard lock(mutex_);
    const auto it = std::find_if(pending_.begin(), pending_.end(), [q](const auto& p) { return p.get() == q; });
    if (it == pending_.end()) return false;
    pending_.erase(it);
    return true;
}

void search_engine::run_session(tf::backend_session& s, pending_query* own) noexcept {
    const auto started = clock_type::now();
    admission_wait_.record(started - own->entered);
    sessions_.fetch_add(1, std::memory_order_relaxed);

    // Take this entry's own query first (if no earlier session took it), then
    // the oldest waiting ones. Every query is then computed by its own session
    // at the latest, so none can be left behind.
    std::vector<std::shared_ptr<pending_query>> batch;
    batch.reserve(options_.max_batch);
    {
        std::lock_guard lock(mutex_);
        const auto it = std::find_if(pending_.begin(), pending_.end(), [own](const auto& p) { return p.get() == own; });
        if (it != pending_.end()) {
            batch.push_back(std::move(*it));
            pending_.erase(it);
        }
        while (batch.size() < options_.max_batch && !pending_.empty()) {
            batch.push_back(std::move(pending_.front()));
            pending_.pop_front();
        }
    }
    if (batch.empty()) return;
    for (const auto& q : batch) {
        if (q.get() != own)
            post_to_owner(q->executor, [q] { q->withdraw_entry.emit(asio::cancellation_type::terminal); });
    }

    try {
        compute(s, batch);
    } catch (const std::exception& e) {
        for (auto& q : batch) q->error = e.what();
    } catch (...) {
        for (auto& q : batch) q->error = "unknown exception";
    }
    batch_compute_.record(clock_type::now() - started);
    batches_.fetch_add(1, std::memory_order_relaxed);
    batched_queries_.fetch_add(batch.size(), std::memory_order_relaxed);
    std::uint64_t largest = largest_batch_.load(std::memory_order_relaxed);
    while (batch.size() > largest && !largest_batch_.compare_exchange_weak(largest, batch.size())) {
    }

    for (auto& q : batch) {
        if (q.get() == own) {
            own->computed_by_owner = true;
            continue;
        }
        // The post orders the writes above before the owner's read. The query
        // (and its timer) moves into the handler, so that this thread never
        // drops the last reference to an object of the owner's io_context.
        handed_over_.fetch_add(1, std::memory_order_relaxed);
        const asio::any_io_executor owner = q->executor;  // before q moves into the handler
        post_to_owner(owner, [q = std::move(q)] {
            q->signalled = true;
            q->wakeup.cancel();
        });
    }
}

template <class Handler>
void search_engine::post_to_owner(const asio::any_io_executor& owner, Handler&& handler) {
    // This thread counts as work on the owner's io_context until it is done
    // with its copies of the owner's executor, so the context cannot run out of
    // work and be destroyed under them.
    const asio::any_io_executor keep_running = asio::prefer(owner, asio::execution::outstanding_work.tracked);
    asio::post(owner, std::forward<Handler>(handler));
}

void search_engine::compute(tf::backend_session& s, const std::vector<std::shared_ptr<pending_query>>& batch) const {
    const auto count = std::int64_t(batch.size());
    const std::int64_t d = dim();
    std::int64_t k_max = 0;
    for (const auto& q : batch) k_max = std::max(k_max, q->query.k);

    // Queries as rows: [B, D]. Scores = queries x corpus^T: [B, N].
    tf::tensor queries = tf::tensor::empty(tf::dtype::f32, {count, d});
    float* rows_out = queries.data<float>();
    for (const auto& q : batch) {
        std::copy(q->query.unit_vector.begin(), q->query.unit_vector.end(), rows_out);
        rows_out += d;
    }
    const tf::tensor scores = s.matmul(queries, corpus_.transposed());
    const auto [values, indices] = s.top_k(scores, k_max, -1);

    const float* v = values.data<float>();
    const std::int64_t* i = indices.data<std::int64_t>();
    for (std::int64_t b = 0; b < count; ++b) {
        pending_query& q = *batch[std::size_t(b)];
        q.hits.resize(std::size_t(q.query.k));
        for (std::int64_t j = 0; j < q.query.k; ++j) q.hits[std::size_t(j)] = {i[b * k_max + j], v[b * k_max + j]};
    }
}

engine_snapshot search_engine::snapshot() const {
    engine_snapshot s;
    s.admission_wait = admission_wait_.snapshot();
    s.batch_compute = batch_compute_.snapshot();
    s.sessions = sessions_.load(std::memory_order_relaxed);
    s.batches = batches_.load(std::memory_order_relaxed);
    s.batched_queries = batched_queries_.load(std::memory_order_relaxed);
    s.largest_batch = largest_batch_.load(std::memory_order_relaxed);
    s.handed_over = handed_over_.load(std::memory_order_relaxed);
    s.busy_permit_seconds = usage_ ? usage_->busy_permit_seconds() : 0.0;
    return s;
}

}  // namespace embedding_search
