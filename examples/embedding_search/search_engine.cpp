#include "search_engine.hpp"

#include <unistd.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "thread_priority.hpp"

namespace tf = tenferro;

namespace embedding_search {

tf::cpu_backend_options backend_options_for(const server_mode& mode, std::shared_ptr<permit_usage_observer> usage,
                                            std::size_t corpus_bytes) {
    tf::cpu_backend_options o;
    // The packed corpus (about its own size, panels padded), the exact search's bf16 copy beside it
    // (half its size, where the CPU has a bf16 dot product), plus room for plans.
    o.runtime_cache_bytes =
        std::max(o.runtime_cache_bytes, corpus_bytes + corpus_bytes * 3 / 4 + (std::size_t{16} << 20));
    const std::size_t io_threads = std::max<std::size_t>(1, mode.io_threads);
    o.permits = mode.inline_compute ? io_threads
                                    : (mode.permits ? mode.permits : std::max(1u, std::thread::hardware_concurrency()));
    o.max_waiters = mode.inline_compute ? std::numeric_limits<std::size_t>::max() : mode.max_waiters;
    o.observer = std::move(usage);
    if (!mode.inline_compute) {
        // The tenants' groups (or the one "default"), then the live corpus's compaction in a group
        // of its own (contract L8), so that the searches' groups keep their shares meanwhile.
        o.groups = mode.groups;
        if (o.groups.empty()) o.groups.push_back(tf::group_options{.name = "default"});
        o.groups.push_back(tf::group_options{.name = "compaction"});
    }
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
    o.patience.enabled = mode.patience && !mode.inline_compute;
    // The last group of backend_options_for's host.
    o.compaction_group = mode.inline_compute ? engine_options::none : std::max<std::size_t>(1, mode.groups.size());
    return o;
}

namespace {
/// The batcher's options for an engine's group: inline compute runs each
/// query on the I/O thread that asked for it (placement::caller), one per session.
tf::batch_options batching_for(const engine_options& o, std::size_t backend_permits, std::size_t group) {
    tf::batch_options b;
    // A batch takes every permit by default: a lone query then uses every core, and a batch
    // split over the cores finishes as soon as two half-size batches would, in FIFO order.
    const std::size_t wanted = o.session_permits == 0 ? backend_permits : o.session_permits;
    b.session.permits =
        o.inline_compute ? 1 : std::clamp<std::size_t>(wanted, 1, std::max<std::size_t>(1, backend_permits));
    b.max_batch = o.inline_compute ? 1 : std::max<std::size_t>(1, o.max_batch);
    b.max_delay = o.inline_compute ? std::chrono::microseconds(0) : o.max_delay;
    b.session.where = o.inline_compute ? tf::placement::caller : tf::placement::compute;
    b.session.group = group;
    return b;
}

/// A live corpus holding `rows` as ids 0..n-1, compacted (one segment sorted by id, with the
/// first pass's copy): what a constant corpus was.
std::shared_ptr<tf::live_corpus> corpus_of(const tf::tensor& rows) {
    if (rows.type() != tf::dtype::f32 || rows.rank() != 2 || rows.shape()[0] < 1 || rows.shape()[1] < 1) {
        throw std::invalid_argument("search_engine: the corpus must be a non-empty 2-D f32 tensor, got " +
                                    std::string(tf::to_string(rows.type())) + " " + tf::to_string(rows.shape()));
    }
    auto corpus = std::make_shared<tf::live_corpus>(
        tf::live_corpus_options{.dim = rows.shape()[1], .directory = {}, .normalize = true});
    load_rows(*corpus, rows, 0);
    corpus->compact();
    return corpus;
}
}  // namespace

void load_rows(tf::live_corpus& corpus, const tf::tensor& rows, std::uint64_t first_id) {
    const std::int64_t n = rows.shape()[0], dim = rows.shape()[1];
    const float* data = rows.data<float>();  // a tensor is row-major
    constexpr std::int64_t chunk = 16384;
    for (std::int64_t r0 = 0; r0 < n; r0 += chunk) {
        tf::corpus_write w;
        for (std::int64_t r = r0; r < std::min(n, r0 + chunk); ++r)
            w.upsert(first_id + static_cast<std::uint64_t>(r),
                     std::span<const float>(data + r * dim, static_cast<std::size_t>(dim)));
        const tf::write_result res = corpus.apply(w);
        if (!res) {
            throw std::runtime_error("row " + std::to_string(r0 + static_cast<std::int64_t>(res.item)) +
                                     " of the corpus: " + res.error.message());
        }
    }
}

search_engine::search_engine(tf::cpu_backend& cpu, const tf::tensor& rows, engine_options options,
                             std::shared_ptr<permit_usage_observer> usage)
    : search_engine(cpu, corpus_of(rows), std::move(options), std::move(usage)) {}

search_engine::search_engine(tf::cpu_backend& cpu, std::shared_ptr<tf::live_corpus> corpus, engine_options options,
                             std::shared_ptr<permit_usage_observer> usage)
    : cpu_(cpu),
      corpus_(std::move(corpus)),
      options_(std::move(options)),
      usage_(std::move(usage)),
      patience_(options_.patience) {
    // The search groups: every group of the host but the compaction group, which is the last one
    // (named in the options, or else a last group named "compaction", as backend_options_for makes).
    if (options_.compaction_group == engine_options::none && cpu_.groups() > 1 &&
        cpu_.group_stats(cpu_.groups() - 1).name == "compaction")
        options_.compaction_group = cpu_.groups() - 1;
    if (options_.compaction_group != engine_options::none && options_.compaction_group + 1 != cpu_.groups())
        throw std::invalid_argument("search_engine: the compaction group must be the host's last group");
    const std::size_t search_groups = options_.compaction_group < cpu_.groups() ? cpu_.groups() - 1 : cpu_.groups();
    for (std::size_t g = 0; g < search_groups; ++g) {
        const tf::group_stats gs = cpu_.group_stats(g);
        auto c = std::make_unique<group_counters>();
        c->name = std::string(gs.name);
        c->weight = gs.weight;
        counters_.push_back(std::move(c));
    }
    for (std::size_t g = 0; g < search_groups; ++g) {
        batchers_.push_back(std::make_unique<batcher_type>(
            cpu_, batching_for(options_, cpu_.permits(), g),
            [this, g](tf::backend_session& s, std::span<item> batch) { return compute(s, g, batch); }));
    }
    options_.max_batch = batchers_.front()->options().max_batch;
}

search_engine::~search_engine() {
    batchers_.clear();  // before the counters their bodies use
    {
        std::unique_lock lock(compaction_mutex_);
        compaction_done_.wait(lock, [&] { return !compaction_running_; });
    }
    if (checkpointer_.joinable()) checkpointer_.join();
}

asio::awaitable<tf::write_result> search_engine::write(tf::corpus_write w) {
    // Durable: completes once in the log (fdatasync'ed; writes that arrive together share one)
    // and visible. In memory: at once.
    tf::write_result r = co_await corpus_->async_apply(std::move(w), asio::use_awaitable);
    if (r) {
        compact_if_due();
        checkpoint_if_due();
    }
    co_return r;
}

void search_engine::checkpoint_if_due() {
    if (!corpus_->durable() || checkpointing_.load(std::memory_order_relaxed)) return;
    const tf::corpus_stats c = corpus_->stats();
    if (c.log_bytes < std::max<std::uint64_t>(options_.checkpoint_log_bytes, c.bytes / 2)) return;
    if (checkpointing_.exchange(true, std::memory_order_acq_rel)) return;
    // A checkpoint writes the whole corpus: on a thread of its own, never an I/O thread.
    if (checkpointer_.joinable()) checkpointer_.join();
    checkpointer_ = std::thread([this] {
        const std::error_code ec = corpus_->checkpoint();
        if (ec) {
            checkpoints_failed_.fetch_add(1, std::memory_order_relaxed);
            std::fprintf(stderr, "tenferro-search: checkpoint failed: %s (the log keeps every write)\n",
                         ec.message().c_str());
        } else {
            checkpoints_.fetch_add(1, std::memory_order_relaxed);
        }
        checkpointing_.store(false, std::memory_order_release);
    });
}

void search_engine::compact_if_due() {
    if (compacting_.load(std::memory_order_relaxed)) return;
    const tf::corpus_stats c = corpus_->stats();
    const std::int64_t pending = c.uncompacted_rows + (c.stored_rows - c.rows);
    if (pending < std::max<std::int64_t>(options_.compaction_min_rows, c.rows / 8)) return;
    if (compacting_.exchange(true, std::memory_order_acq_rel)) return;
    compactions_started_.fetch_add(1, std::memory_order_relaxed);
    tf::session_options so;
    so.permits = 1;
    so.group = options_.compaction_group < cpu_.groups() ? options_.compaction_group : 0;
    so.where = options_.inline_compute ? tf::placement::caller : tf::placement::compute;
    // Completed by a plain callback, in the library's own context: nothing of it runs on (or
    // keeps alive) the server's io_context, which may be gone before the engine. The engine's
    // destructor waits for it (compaction_done_).
    {
        const std::lock_guard lock(compaction_mutex_);
        compaction_running_ = true;
    }
    try {
        cpu_.with_backend_session(
            so, [corpus = corpus_](tf::backend_session& s) { return corpus->compact(s); },
            [this](std::exception_ptr e, tf::session_result<bool> r) {
                if (e || !r) compactions_failed_.fetch_add(1, std::memory_order_relaxed);
                compacting_.store(false, std::memory_order_release);
                const std::lock_guard lock(compaction_mutex_);
                compaction_running_ = false;
                compaction_done_.notify_all();
            });
    } catch (...) {
        // Not started (no memory to start it): the next write tries again.
        compactions_failed_.fetch_add(1, std::memory_order_relaxed);
        compacting_.store(false, std::memory_order_release);
        const std::lock_guard lock(compaction_mutex_);
        compaction_running_ = false;
    }
}

std::size_t search_engine::group_index(std::string_view name) const noexcept {
    for (std::size_t g = 0; g < counters_.size(); ++g) {
        if (counters_[g]->name == name) return g;
    }
    return counters_.size();
}

double search_engine::predicted_wait_seconds(std::size_t group) const {
    wait_inputs in;
    in.max_batch = options_.max_batch;
    in.weight = counters_.at(group)->weight;
    in.backlogged_weight = in.weight;
    for (std::size_t g = 0; g < batchers_.size(); ++g) {
        const std::size_t waiting = batchers_[g]->stats().waiting;
        if (g == group) {
            in.waiting_ahead = waiting;
        } else if (waiting > 0) {
            in.backlogged_weight += counters_[g]->weight;
        }
    }
    in.mean_batch_seconds = double(counters_[group]->mean_batch_ns.load(std::memory_order_relaxed)) / 1e9;
    return embedding_search::predicted_wait_seconds(in);
}

/// What a search waits on with the patience policy: its submission's outcome,
/// stored by the completion handler, or a wake-up from the batch body that
/// shed it (both on the search's executor).
struct search_engine::pending_submit {
    explicit pending_submit(const asio::any_io_executor& ex) : wake(ex, clock_type::time_point::max()) {}
    asio::steady_timer wake;  // never expires: cancelled to wake the search
    bool done = false;
    std::exception_ptr error;
    tf::session_result<answer> result;
};

namespace {
/// The submission's completion handler with the patience policy: on the
/// search's executor, cancellable through the watch's slot (B4/B7 as before).
/// It holds the watch: a shed search returns before its batch ends, and the
/// slot (the watch's signal) must outlive the submission, which clears it as
/// it completes.
template <class Watch, class Result>
struct submit_handler {
    std::shared_ptr<Watch> watch;
    asio::any_io_executor executor;

    using executor_type = asio::any_io_executor;
    executor_type get_executor() const noexcept { return executor; }
    using cancellation_slot_type = asio::cancellation_slot;
    cancellation_slot_type get_cancellation_slot() const noexcept { return watch->signal.slot(); }

    void operator()(std::exception_ptr e, Result r) {
        auto& pending = *watch->pending;
        pending.error = std::move(e);
        pending.result = std::move(r);
        pending.done = true;
        pending.wake.cancel();
    }
};
}  // namespace

void search_engine::count_expired(std::size_t group, expiry_stage stage) {
    counters_[group]->expired[std::size_t(stage)].fetch_add(1, std::memory_order_relaxed);
}

asio::awaitable<search_outcome> search_engine::search(search_query query, std::size_t group,
                                                      clock_type::time_point deadline, asio::cancellation_slot gone) {
    search_outcome outcome;
    if (group >= batchers_.size()) {
        outcome.status = search_status::failed;
        outcome.error = "no group " + std::to_string(group);
        co_return outcome;
    }
    group_counters& counters = *counters_[group];
    batcher_type& batcher = *batchers_[group];
    counters.requests.fetch_add(1, std::memory_order_relaxed);
    if (batcher.stats().waiting >= options_.max_waiting) {
        shed_.fetch_add(1, std::memory_order_relaxed);
        counters.shed.fetch_add(1, std::memory_order_relaxed);
        outcome.status = search_status::shed;
        outcome.error = "the search queue is full (" + std::to_string(options_.max_waiting) + " waiting)";
        co_return outcome;
    }
    const bool has_deadline = deadline != clock_type::time_point::max();
    const auto expired = [&](expiry_stage stage, std::string why) {
        count_expired(group, stage);
        outcome.status = search_status::expired;
        outcome.stage = stage;
        outcome.error = std::move(why);
        outcome.predicted_wait_seconds = predicted_wait_seconds(group);
    };
    if (has_deadline) {
        const double left = std::chrono::duration<double>(deadline - now()).count();
        const double predicted = predicted_wait_seconds(group);
        if (left <= 0.0 || predicted > left) {
            char why[160];
            if (left <= 0.0) {
                std::snprintf(why, sizeof why, "no time was left on arrival");
            } else {
                std::snprintf(why, sizeof why, "predicted wait %.0f ms, time left %.0f ms", predicted * 1e3,
                              left * 1e3);
            }
            expired(expiry_stage::arrival, why);
            co_return outcome;
        }
    }

    // The deadline's timer cancels the submission: an item still waiting in
    // the batcher leaves it at once (one already taken into a batch is judged
    // by the body: a `total` cancellation, which B7 does not count as giving
    // up on a taken item, so the batch's other queries are not stopped with
    // it). A client that leaves cancels it with `terminal`: waiting, it leaves
    // the batcher; taken, its batch stops once no query of it is waited for
    // (B7). The state is shared with the timer's handler, which may run after
    // this frame is gone. A query with neither has none.
    std::shared_ptr<query_watch> watch;
    std::optional<asio::steady_timer> timer;
    const bool patient = options_.patience.enabled;
    if (has_deadline || gone.is_connected() || patient) watch = std::make_shared<query_watch>();
    const auto entered = now();
    if (watch) watch->entered = entered;
    if (has_deadline) {
        timer.emplace(co_await asio::this_coro::executor, deadline);
        timer->async_wait([watch](std::error_code ec) {
            if (ec) return;
            watch->expired = true;
            watch->signal.emit(asio::cancellation_type::total);
        });
    }
    if (gone.is_connected()) {
        gone.assign([this, watch](asio::cancellation_type_t type) {
            constexpr auto leaves = asio::cancellation_type::terminal | asio::cancellation_type::partial;
            if ((type & leaves) == asio::cancellation_type::none || watch->abandoned) return;
            watch->abandoned = true;
            clients_gone_.fetch_add(1, std::memory_order_relaxed);
            // How long this client waited before it left: what the patience
            // policy learns from (recorded with the policy off too, for /metrics).
            const auto at = now();
            patience_.record_close(std::chrono::duration<double>(at - watch->entered).count(), at);
            watch->signal.emit(type);
        });
    }
    tf::session_result<answer> r;
    try {
        // (Named, not a braced temporary in the co_await: docs/pitfalls.md, 3.)
        item it{std::move(query), entered, deadline, watch};
        if (patient) {
            // Not a plain co_await of the submission: a batch body that sheds
            // this query wakes the search before the batch ends (a taken item
            // completes only with its batch, B4), so the 503 goes out at once.
            const auto ex = co_await asio::this_coro::executor;
            auto pending = std::make_shared<pending_submit>(ex);
            watch->executor = ex;
            watch->pending = pending;
            batcher.submit(std::move(it), submit_handler<query_watch, tf::session_result<answer>>{watch, ex});
            while (!pending->done && !watch->shed) {
                std::error_code ignored;
                co_await pending->wake.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
            }
            if (pending->done) {
                if (pending->error) std::rethrow_exception(pending->error);
                r = std::move(pending->result);
            }
        } else if (watch) {
            r = co_await batcher.submit(std::move(it),
                                        asio::bind_cancellation_slot(watch->signal.slot(), asio::use_awaitable));
        } else {
            r = co_await batcher.submit(std::move(it));
        }
    } catch (const std::exception& e) {
        // The batch's body threw (every query of that batch gets it).
        if (timer) timer->cancel();
        if (gone.is_connected()) gone.clear();
        outcome.status = search_status::failed;
        outcome.error = e.what();
        co_return outcome;
    }
    if (timer) timer->cancel();
    if (gone.is_connected()) gone.clear();
    if (watch && watch->abandoned) {
        // Whatever came back (its result, when others of its batch were still
        // waited for; `cancelled` otherwise), no one is there to read it.
        const bool taken = watch->taken.load(std::memory_order_relaxed);
        (taken ? abandoned_taken_ : abandoned_waiting_).fetch_add(1, std::memory_order_relaxed);
        outcome.status = search_status::abandoned;
        outcome.error =
            taken ? "the client left after its query was taken into a batch" : "the client left while its query waited";
        co_return outcome;
    }
    if (watch && (watch->shed || (r && r->shed))) {
        // The patience policy's batch body found no time left for it (counted there).
        outcome.status = search_status::shed;
        outcome.patience = true;
        char why[160];
        if (has_deadline) {
            std::snprintf(why, sizeof why, "the search could not be answered before its deadline");
        } else {
            std::snprintf(why, sizeof why,
                          "the search could not be answered before its client would give up (learned patience %.0f ms)",
                          learned_patience().value_or(0.0) * 1e3);
        }
        outcome.error = why;
        co_return outcome;
    }
    if (!r) {
        // `contended` is the queue bound (max_waiters); `executor` means the
        // backend (or the engine) is shutting down: shed the query.
        const auto code = r.error().code();
        if (const auto i = static_cast<std::size_t>(code); i < rejected_by_reason_.size())
            rejected_by_reason_[i].fetch_add(1, std::memory_order_relaxed);
        if (code == tf::session_entry_errc::cancelled && watch && watch->expired) {
            expired(expiry_stage::queue, "the deadline passed while the search waited for its batch");
            co_return outcome;
        }
        outcome.status = code == tf::session_entry_errc::contended || code == tf::session_entry_errc::executor
                             ? search_status::shed
                             : search_status::failed;
        outcome.error = r.error().message();
        co_return outcome;
    }
    if (r->expired) {
        expired(expiry_stage::batch_start, "the deadline passed before its batch started");
        co_return outcome;
    }
    if (patient) {
        // Its client waited at least this long (patience_estimator).
        const auto at = now();
        patience_.record_delivered(std::chrono::duration<double>(at - entered).count(), at);
    }
    outcome.hits = std::move(r->hits);
    outcome.seq = r->seq;
    co_return outcome;
}

std::vector<search_engine::answer> search_engine::compute(tf::backend_session& s, std::size_t group,
                                                          std::span<item> batch) {
    const auto started = now();
    for (const item& q : batch) {
        admission_wait_.record(started - q.entered);
        if (q.watch) q.watch->taken.store(true, std::memory_order_relaxed);
    }
    if (!batch.empty()) queue_head_age_.record(started - batch.front().entered);  // in submission order
    sessions_.fetch_add(1, std::memory_order_relaxed);
    try {
        // Items past their deadline are answered expired, not computed, and
        // the patience policy sheds those that cannot finish in time (their
        // searches are woken at once): the rest, in batch order, are computed.
        std::vector<answer> out(batch.size());
        std::vector<std::size_t> live;
        live.reserve(batch.size());
        for (std::size_t j = 0; j < batch.size(); ++j) {
            if (batch[j].deadline <= started) {
                out[j].expired = true;
            } else {
                live.push_back(j);
            }
        }
        if (options_.patience.enabled) live = apply_patience(batch, std::move(live), started, out);
        if (options_.on_batch_start) options_.on_batch_start(s);
        compute_batch(s, group, batch, live, out, started);
        return out;
    } catch (const tf::session_stopped&) {
        // Every query of the batch is gone (B7): the matmul stopped between
        // two of its tiles, and the batcher answers each item `cancelled`.
        stopped_batches_.fetch_add(1, std::memory_order_relaxed);
        stopped_queries_.fetch_add(batch.size(), std::memory_order_relaxed);
        throw;
    }
}

void search_engine::compute_batch(tf::backend_session& s, std::size_t group, std::span<item> batch,
                                  std::span<const std::size_t> live, std::vector<answer>& out,
                                  clock_type::time_point started) {
    if (live.empty()) return;
    const auto computing = now();  // the cost model's start: after any hold of on_batch_start
    const auto count = std::int64_t(live.size());
    const std::int64_t d = dim();
    std::int64_t k_max = 0;
    for (const std::size_t j : live) k_max = std::max(k_max, batch[j].query.k);

    // Queries as rows: [B, D]; the best k_max of queries x corpus^T ([B, N], never materialised).
    tf::tensor queries = tf::tensor::empty(tf::dtype::f32, {count, d});
    float* rows_out = queries.data<float>();
    for (const std::size_t j : live) {
        std::copy(batch[j].query.unit_vector.begin(), batch[j].query.unit_vector.end(), rows_out);
        rows_out += d;
    }
    // Each query's filter, where any has one (contract L5: in a batch, each query has its own).
    std::vector<tf::row_filter> filters;
    for (const std::size_t j : live)
        if (batch[j].query.filter) filters.resize(live.size());
    if (!filters.empty())
        for (std::size_t b = 0; b < live.size(); ++b)
            if (batch[live[b]].query.filter) filters[b] = std::move(*batch[live[b]].query.filter);
    // One snapshot for the whole batch (L3), taken as its session runs.
    const tf::corpus_snapshot snapshot = corpus_->snapshot();
    const tf::corpus_hits hits = tf::search(s, snapshot, queries.view(), k_max, filters);

    for (std::int64_t b = 0; b < count; ++b) {
        const std::size_t at = live[std::size_t(b)];
        const auto mine = hits[std::size_t(b)];
        const std::size_t k = std::min(mine.size(), std::size_t(batch[at].query.k));
        std::vector<search_hit>& h = out[at].hits;
        h.resize(k);
        for (std::size_t j = 0; j < k; ++j) h[j] = {mine[j].id, mine[j].score};
        out[at].seq = hits.seq;
    }
    const auto took = now() - started;
    batch_compute_.record(took);
    batch_cost_.record(live.size(), std::chrono::duration<double>(now() - computing).count());
    batched_queries_.fetch_add(live.size(), std::memory_order_relaxed);
    // The group's moving mean of batch durations, for the wait prediction:
    // 1/8 per batch follows a change of load within a few dozen batches and
    // smooths the noise of one. (Bodies of a group may overlap with
    // --batch-permits: a lost update then only drops one sample.)
    group_counters& c = *counters_[group];
    c.batches.fetch_add(1, std::memory_order_relaxed);
    const std::int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(took).count();
    const std::int64_t mean = c.mean_batch_ns.load(std::memory_order_relaxed);
    c.mean_batch_ns.store(mean == 0 ? ns : mean + (ns - mean) / 8, std::memory_order_relaxed);
}

std::optional<double> search_engine::learned_patience() const {
    const patience_options& o = options_.patience;
    const double one = o.fixed_cost_seconds > 0 || o.per_query_cost_seconds > 0
                           ? o.fixed_cost_seconds + o.per_query_cost_seconds
                           : batch_cost_.predict(1).value_or(0.0);
    return patience_.estimate(now(), one);
}

std::vector<std::size_t> search_engine::apply_patience(std::span<item> batch, std::vector<std::size_t> live,
                                                       clock_type::time_point started, std::vector<answer>& out) {
    const patience_options& o = options_.patience;
    const std::optional<double> patience = learned_patience();
    batch_cost_model::fit cost = batch_cost_.current();
    if (o.fixed_cost_seconds > 0 || o.per_query_cost_seconds > 0)
        cost = {o.fixed_cost_seconds, o.per_query_cost_seconds, true};
    // No client has left yet: nothing to go by, compute them all.
    if (!patience || live.size() < 2) return live;
    // Clients leave but no batch has run to its end yet (under FIFO every
    // batch may have been stopped, B7): the youngest alone, which teaches the
    // cost model; the sizes grow from there as it learns.
    if (!cost.known) cost = {0.0, std::numeric_limits<double>::infinity(), true};
    // Each query's time left, its reserve already taken off (none for a query
    // with its own deadline: patient_time_left).
    std::vector<double> time_left(live.size());
    for (std::size_t i = 0; i < live.size(); ++i) {
        const item& q = batch[live[i]];
        std::optional<double> deadline_left;
        if (q.deadline != clock_type::time_point::max())
            deadline_left = std::chrono::duration<double>(q.deadline - started).count();
        time_left[i] = patient_time_left(std::chrono::duration<double>(started - q.entered).count(), deadline_left,
                                         *patience, o.reserve);
    }
    const bool given = o.fixed_cost_seconds > 0 || o.per_query_cost_seconds > 0;
    const double margin = o.margin * (given ? 1.0 : batch_cost_.overrun(o.overrun_quantile));
    const std::vector<bool> keep = plan_patient_batch(time_left, cost, margin, 0.0);
    std::vector<std::size_t> kept;
    kept.reserve(live.size());
    for (std::size_t i = 0; i < live.size(); ++i) {
        if (keep[i]) {
            kept.push_back(live[i]);
            continue;
        }
        item& q = batch[live[i]];
        out[live[i]].shed = true;
        patience_shed_.fetch_add(1, std::memory_order_relaxed);
        // Wake its search now (on its executor): it answers 503 at once, and
        // its item no longer counts as waited for (B7), so a batch whose
        // computed queries are all gone still stops.
        if (q.watch && q.watch->pending) {
            asio::post(q.watch->executor, [w = q.watch] {
                w->shed = true;
                w->pending->wake.cancel();
                w->signal.emit(asio::cancellation_type::terminal);
            });
        }
    }
    return kept;
}

engine_snapshot search_engine::snapshot() const {
    engine_snapshot s;
    s.admission_wait = admission_wait_.snapshot();
    s.batch_compute = batch_compute_.snapshot();
    s.queue_head_age = queue_head_age_.snapshot();
    for (std::size_t g = 0; g < batchers_.size(); ++g) {
        const tf::batch_stats b = batchers_[g]->stats();
        s.batcher.submitted += b.submitted;
        s.batcher.completed += b.completed;
        s.batcher.cancelled += b.cancelled;
        s.batcher.rejected += b.rejected;
        s.batcher.batches += b.batches;
        s.batcher.largest_batch = std::max(s.batcher.largest_batch, b.largest_batch);
        s.batcher.waiting += b.waiting;

        const group_counters& c = *counters_[g];
        group_snapshot gs;
        gs.name = c.name;
        gs.admission = cpu_.group_stats(g);
        gs.waiting = b.waiting;
        gs.requests = c.requests.load(std::memory_order_relaxed);
        gs.shed = c.shed.load(std::memory_order_relaxed);
        for (std::size_t i = 0; i < gs.expired.size(); ++i)
            gs.expired[i] = c.expired[i].load(std::memory_order_relaxed);
        gs.batches = c.batches.load(std::memory_order_relaxed);
        gs.mean_batch_seconds = double(c.mean_batch_ns.load(std::memory_order_relaxed)) / 1e9;
        gs.predicted_wait_seconds = predicted_wait_seconds(g);
        s.groups.push_back(std::move(gs));
    }
    s.shed = shed_.load(std::memory_order_relaxed);
    s.clients_gone = clients_gone_.load(std::memory_order_relaxed);
    s.abandoned_waiting = abandoned_waiting_.load(std::memory_order_relaxed);
    s.abandoned_taken = abandoned_taken_.load(std::memory_order_relaxed);
    s.stopped_batches = stopped_batches_.load(std::memory_order_relaxed);
    s.stopped_queries = stopped_queries_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < s.rejected_by_reason.size(); ++i)
        s.rejected_by_reason[i] = rejected_by_reason_[i].load(std::memory_order_relaxed);
    s.sessions = sessions_.load(std::memory_order_relaxed);
    s.batches = s.batcher.batches;
    s.batched_queries = batched_queries_.load(std::memory_order_relaxed);
    s.largest_batch = s.batcher.largest_batch;
    s.handed_over = s.batched_queries - std::min(s.batched_queries, s.sessions);
    s.busy_permit_seconds = usage_ ? usage_->busy_permit_seconds() : 0.0;
    s.patience_enabled = options_.patience.enabled;
    s.patience_shed = patience_shed_.load(std::memory_order_relaxed);
    s.patience_samples = patience_.samples();
    s.patience_seconds = learned_patience().value_or(0.0);
    const batch_cost_model::fit cost = batch_cost_.current();
    s.batch_fixed_seconds = cost.fixed_seconds;
    s.batch_per_query_seconds = cost.per_query_seconds;
    s.corpus = corpus_->stats();
    s.compactions_started = compactions_started_.load(std::memory_order_relaxed);
    s.compactions_failed = compactions_failed_.load(std::memory_order_relaxed);
    s.checkpoints = checkpoints_.load(std::memory_order_relaxed);
    s.checkpoints_failed = checkpoints_failed_.load(std::memory_order_relaxed);
    return s;
}

}  // namespace embedding_search
