#pragma once
/// \file
/// `batcher<Host, In, Out>`: dynamic batching formed from the admission queue
/// itself. Items submitted while the batcher's sessions wait for admission or
/// run are folded into the next session that is granted, up to `max_batch`;
/// an item submitted to an idle host starts its own session at once. No timer
/// unless `max_delay` asks for one. Rules B1–B6 (docs/contract.md); the design
/// is in docs/design/batching.md.
///
/// \code
/// tenferro::batcher<tenferro::cpu_backend, tensor, tensor> search(
///     cpu, {.max_batch = 16},
///     [&](tenferro::backend_session& s, std::span<tensor> queries) {
///         return top_k_all(s, corpus, queries);   // one Out per item, in order
///     });
/// tenferro::session_result<tensor> r = co_await search.submit(std::move(query));
/// \endcode

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenferro/asio.hpp"

#include "tenferro/detail/async/cancellation.hpp"
#include "tenferro/detail/async/completion.hpp"
#include "tenferro/detail/async/handoff_gate.hpp"
#include "tenferro/detail/async/handoff_retry.hpp"
#include "tenferro/detail/async/intrusive_list.hpp"
#include "tenferro/detail/async/op_allocator.hpp"
#include "tenferro/detail/async/op_work.hpp"
#include "tenferro/detail/compose_detail.hpp"
#include "tenferro/detail/session_context.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_options.hpp"

namespace tenferro {

/// The timer behind `batch_options::max_delay` (B6), for a program that
/// wants to drive it itself. By default a batcher with a delay runs one
/// thread of its own that sleeps until the next partial batch is due; given a
/// `batch_timer`, it starts no thread and asks the timer instead. The batcher
/// decides when a batch is due either way (one code path); only the waiting
/// differs. Uses: an event loop that has timers already (an `asio::steady_timer`
/// on the server's io_context), and the deterministic simulation
/// (tests/sim/), whose clock is virtual.
class batch_timer {
public:
    virtual ~batch_timer() = default;
    /// The time on the timer's clock; the batcher stamps each item with it.
    virtual std::chrono::steady_clock::time_point now() = 0;
    /// Calls `fire` once, at `when` or soon after, on any thread, never inside
    /// this call; replaces the call asked for before, if it has not happened
    /// yet (a replaced call may still happen: the batcher then finds nothing
    /// due). `fire` is cheap and does not block; it may enter sessions.
    virtual void wake_at(std::chrono::steady_clock::time_point when, std::function<void()> fire) = 0;
};

/// How a batcher forms its batches.
struct batch_options {
    /// Items per session, at most (0 is taken as 1).
    std::size_t max_batch = 16;
    /// 0: never wait for more items (B1). Otherwise a batch's session is entered
    /// when the batch is full or when this long has passed since its first item
    /// was submitted, whichever comes first (B6, the timer policy of other servers).
    std::chrono::microseconds max_delay{0};
    /// How each batch's session is entered (permits, wait policy, placement).
    session_options session = {};
    /// With `max_delay > 0`: the timer that wakes the batcher when a partial
    /// batch is due. Null (the default): a thread of the batcher's own.
    std::shared_ptr<batch_timer> timer = nullptr;
};

/// A snapshot of a batcher's counters. At quiescence
/// `submitted == completed + cancelled + rejected` and `waiting == 0`.
struct batch_stats {
    std::uint64_t submitted = 0;  ///< items submitted
    std::uint64_t completed = 0;  ///< items completed with their Out or with their batch body's exception
    std::uint64_t cancelled = 0;  ///< items completed with `cancelled`
    std::uint64_t rejected = 0;   ///< items completed with any other admission error
    std::uint64_t batches = 0;    ///< sessions whose body ran
    std::size_t largest_batch = 0;  ///< most items one body received
    std::size_t waiting = 0;        ///< items submitted and not yet taken into a batch
};

namespace detail {

// ---------------------------------------------------------------------------
// One item: an intrusive node of the waiting list, and the operation state of
// its `submit`. The typed half (batch_item_op) owns the handler.
// ---------------------------------------------------------------------------

template <class In, class Out>
class batch_item {
public:
    enum class stage : unsigned char { waiting, taken, finished };

    batch_item(const batch_item&) = delete;
    batch_item& operator=(const batch_item&) = delete;

    /// Records the outcome and hands the completion to the item's executor
    /// (always a post: never inside `submit`, never inside a cancellation's emit).
    void finish(std::exception_ptr e, session_result<Out> r) noexcept {
        exception_ = std::move(e);
        result_.emplace(std::move(r));
        deliver();
    }

    /// Where a caller-placed batch led by this item runs its body.
    virtual asio::any_io_executor executor() const = 0;

    // The waiting list's links (guarded by the batcher's mutex).
    batch_item* prev = nullptr;
    batch_item* next = nullptr;
    stage where = stage::waiting;
    std::chrono::steady_clock::time_point submitted_at;
    std::optional<In> input;

protected:
    batch_item() = default;
    ~batch_item() = default;
    virtual void deliver() noexcept = 0;

    handoff_gate gate_;
    std::exception_ptr exception_;
    std::optional<session_result<Out>> result_;
};

/// The typed half of an item: the handler and its tracked work. Built from
/// the library's operation toolkit (detail/async/).
template <class Handler, class Core>
class batch_item_op final : public batch_item<typename Core::input_type, typename Core::output_type>,
                            public retry_node {
    using In = typename Core::input_type;
    using Out = typename Core::output_type;
    using handler_executor = asio::associated_executor_t<Handler>;
    friend struct completion_handoff<batch_item_op>;
    friend struct completion_poster;

public:
    template <class H>
    batch_item_op(H&& handler, std::shared_ptr<Core> core, In&& input)
        : handler_(std::forward<H>(handler)), work_(handler_), core_(std::move(core)) {
        this->input.emplace(std::move(input));
    }

    /// Installs the cancellation handler; called once the item is about to
    /// enter the waiting list, before anyone else sees it.
    void connect_cancellation() {
        detail::connect_cancellation<&batch_item_op::cancel>(asio::get_associated_cancellation_slot(handler_), this);
    }

    handler_executor handler_ex() const noexcept { return asio::get_associated_executor(handler_); }

    asio::any_io_executor executor() const override {
        if constexpr (std::is_constructible_v<asio::any_io_executor, const handler_executor&>)
            return unwrap_executor(asio::any_io_executor(work_.untracked()));
        else
            return asio::any_io_executor(asio::system_executor());
    }

    /// The executor dropped the completion unrun (its context shut down), or
    /// the submit failed before the item was queued.
    void discard() noexcept { free_op(this, op_allocator_for<batch_item_op>(handler_)); }

private:
    /// The slot's handler: withdraws the item if it still waits (B4).
    static void cancel(batch_item_op* op) noexcept { op->core_->cancel(*op); }

    // Out of memory for the post, the item is parked and posted again when
    // memory is back (S19).
    void deliver() noexcept override { completion_poster::post(*this); }

    handoff_gate& gate() noexcept { return this->gate_; }
    const auto& completion_executor() const noexcept { return work_.executor(); }

    /// On the item's executor: the completion routine (completion.hpp).
    void upcall() {
        complete_op<batch_item_op>(this, handler_, work_, this->gate_, std::move(this->exception_),
                                   std::move(*this->result_));
    }

    Handler handler_;
    op_work<Handler> work_;
    std::shared_ptr<Core> core_;  // the cancellation handler's way back
};

// ---------------------------------------------------------------------------
// One session of the batcher: the items it took and what its body returned.
// ---------------------------------------------------------------------------

template <class Core>
struct batch_run {
    using In = typename Core::input_type;
    using Out = typename Core::output_type;
    using item = batch_item<In, Out>;

    explicit batch_run(std::shared_ptr<Core> c) : core(std::move(c)) {}

    std::shared_ptr<Core> core;
    // Set once, by whoever takes the batch (under the core's mutex): the body
    // on a compute worker, the first hand-off to the caller's executor
    // (placement::caller), or the completion of a session that never ran.
    std::atomic<bool> taken{false};
    // placement::caller: the executor of the batch's first item; empty when
    // the batch is empty (then the session's hand-offs run inline).
    asio::any_io_executor target;
    std::vector<item*> items;
    std::vector<In> inputs;
    std::vector<Out> outputs;
    std::exception_ptr body_error;
    bool body_ran = false;
};

/// The executor a batch session's completion (and, with placement::caller,
/// its body) is handed to. With placement::caller it forwards to the executor
/// of the batch's first item, which is known only at the grant: its first use
/// takes the batch. Otherwise it runs everything inline, where the host hands
/// it over (the compute worker that ran the body), and each item's completion
/// is then posted to that item's own executor — one hop, as for a plain entry.
template <class Core>
class batch_executor {
public:
    batch_executor(batch_run<Core>* run, bool never_blocking) noexcept : run_(run), never_(never_blocking) {}

    template <class F>
    void execute(F&& f) const {
        const asio::any_io_executor* target = run_->core->target_of(*run_);
        if (target == nullptr || !*target) {
            std::forward<F>(f)();
        } else if (never_) {
            asio_execute(asio::prefer(asio::require(*target, asio::execution::blocking.never),
                                      asio::execution::relationship.continuation),
                         std::forward<F>(f));
        } else {
            asio_execute(asio::prefer(*target, asio::execution::blocking.possibly), std::forward<F>(f));
        }
    }

    asio::execution_context& query(asio::execution::context_t) const noexcept {
        const asio::any_io_executor* target = run_->taken.load(std::memory_order_acquire) ? &run_->target : nullptr;
        if (target != nullptr && *target) return asio::query(*target, asio::execution::context);
        return run_->core->fallback_context();
    }
    asio::execution::blocking_t query(asio::execution::blocking_t) const noexcept {
        return never_ ? asio::execution::blocking_t(asio::execution::blocking.never)
                      : asio::execution::blocking_t(asio::execution::blocking.possibly);
    }
    batch_executor require(asio::execution::blocking_t::never_t) const noexcept { return {run_, true}; }
    batch_executor require(asio::execution::blocking_t::possibly_t) const noexcept { return {run_, false}; }
    // The run outlives every use (the session's completion holds it); work is
    // tracked by the items themselves, on their own executors.
    batch_executor require(asio::execution::outstanding_work_t::tracked_t) const noexcept { return *this; }
    batch_executor require(asio::execution::outstanding_work_t::untracked_t) const noexcept { return *this; }
    batch_executor require(asio::execution::relationship_t::fork_t) const noexcept { return *this; }
    batch_executor require(asio::execution::relationship_t::continuation_t) const noexcept { return *this; }
    template <class Alloc>
    batch_executor require(const asio::execution::allocator_t<Alloc>&) const noexcept {
        return *this;
    }

    friend bool operator==(const batch_executor& a, const batch_executor& b) noexcept {
        return a.run_ == b.run_ && a.never_ == b.never_;
    }
    friend bool operator!=(const batch_executor& a, const batch_executor& b) noexcept { return !(a == b); }

private:
    batch_run<Core>* run_;
    bool never_;
};

/// What a batch session's body returns to the host (the outcome stays in the run).
struct batch_done {};

// ---------------------------------------------------------------------------
// The shared state: the waiting list, the session count, the counters.
// Reference counted: items and sessions in flight keep it (and the body)
// alive after the batcher itself is gone.
// ---------------------------------------------------------------------------

template <class Host, class In, class Out>
class batcher_core : public std::enable_shared_from_this<batcher_core<Host, In, Out>> {
public:
    using input_type = In;
    using output_type = Out;
    using session_type = typename Host::session_type;
    using item = batch_item<In, Out>;
    using item_list = intrusive_list<item, &item::next, &item::prev>;
    using run_type = batch_run<batcher_core>;
    using sync_body = std::function<std::vector<Out>(session_type&, std::span<In>)>;
    using async_body = std::function<asio::awaitable<std::vector<Out>>(session_type&, std::span<In>)>;

    batcher_core(Host& host, batch_options options, sync_body sb, async_body ab)
        : host_(&host), host_name_(host.name()), options_(options), sync_(std::move(sb)), async_(std::move(ab)) {
        if (options_.max_batch == 0) options_.max_batch = 1;
        const std::size_t weight = std::max<std::size_t>(1, options_.session.permits);
        max_sessions_ = std::max<std::size_t>(1, host.permits() / weight);
    }

    const std::string& host_name() const noexcept { return host_name_; }
    const batch_options& options() const noexcept { return options_; }
    asio::execution_context& fallback_context() noexcept { return fallback_context_; }

    /// A new item: into the waiting list, then enter the sessions it calls for.
    void enqueue(item& it) {
        std::size_t start = 0;
        {
            const std::lock_guard lock(mutex_);
            it.submitted_at = now();
            it.where = item::stage::waiting;
            waiting_.push_back(it);
            ++submitted_;
            start = plan_locked();
        }
        delay_news();
        enter_sessions(start);
    }

    /// An item rejected at submission (re-entry): counted, then completed.
    void reject_at_submit(item& it, session_entry_errc code, std::string detail) {
        {
            const std::lock_guard lock(mutex_);
            ++submitted_;
            ++rejected_;
        }
        it.finish(nullptr, tl::unexpected(session_entry_error(code, host_name_, std::move(detail))));
    }

    /// The item's cancellation slot fired: removed if it still waits (B4).
    void cancel(item& it) noexcept {
        {
            const std::lock_guard lock(mutex_);
            if (it.where != item::stage::waiting) return;  // taken: it completes with its result
            waiting_.unlink(it);
            it.where = item::stage::finished;
            ++cancelled_;
        }
        it.finish(nullptr, tl::unexpected(session_entry_error(
                               session_entry_errc::cancelled, host_name_,
                               compose_detail({"the batch item was cancelled before it was taken into a batch"}))));
    }

    /// placement::caller: the executor a session's hand-offs go to, taking
    /// the batch at the first one. Otherwise null (run inline).
    const asio::any_io_executor* target_of(run_type& run) {
        if (options_.session.where != placement::caller) return nullptr;
        if (!run.taken.load(std::memory_order_acquire)) take(run);
        return &run.target;
    }

    /// The batcher is being destroyed: every waiting item completes with
    /// `executor`; sessions in flight finish what they took.
    void close() noexcept {
        item_list list;
        {
            const std::lock_guard lock(mutex_);
            closed_ = true;
            for (item* it = waiting_.front(); it != nullptr; it = item_list::next(*it))
                it->where = item::stage::finished;
            rejected_ += waiting_.size();
            list = std::move(waiting_);
        }
        timer_wake_.notify_all();
        // (Each is unlinked before it finishes: finishing may free it.)
        while (item* it = list.pop_front()) {
            it->finish(nullptr, tl::unexpected(session_entry_error(
                                    session_entry_errc::executor, host_name_,
                                    compose_detail({"the batcher was destroyed before this item was taken into a "
                                                    "batch"}))));
        }
    }

    batch_stats stats() const {
        const std::lock_guard lock(mutex_);
        batch_stats s;
        s.submitted = submitted_;
        s.completed = completed_;
        s.cancelled = cancelled_;
        s.rejected = rejected_;
        s.batches = batches_;
        s.largest_batch = largest_;
        s.waiting = waiting_.size();
        return s;
    }

    /// B6 with a user's timer (batch_options::timer): it fired. The same
    /// decision as the thread's loop below: a partial batch whose first item
    /// has waited max_delay is entered; then the timer is set for the next.
    void timer_fired() noexcept {
        std::size_t start = 0;
        {
            const std::lock_guard lock(mutex_);
            armed_.reset();
            const std::optional<std::chrono::steady_clock::time_point> deadline = delay_deadline_locked();
            if (deadline && now() >= *deadline) start = plan_locked(true);
        }
        enter_sessions(start);
        rearm();
    }

    /// B6: the timer thread's loop (max_delay > 0, no batch_options::timer).
    void timer_loop() noexcept {
        std::unique_lock lock(mutex_);
        while (!closed_) {
            std::optional<std::chrono::steady_clock::time_point> deadline = delay_deadline_locked();
            if (deadline && now() >= *deadline) {
                const std::size_t start = plan_locked(true);
                lock.unlock();
                enter_sessions(start);
                lock.lock();
                if (start == 0) timer_wake_.wait(lock);  // nothing could start (no session slot): wait for news
                continue;
            }
            if (deadline)
                timer_wake_.wait_until(lock, *deadline);
            else
                timer_wake_.wait(lock);
        }
    }

private:
    /// How many sessions to enter now (counted as entered). B5: never more
    /// than the host has permits for. Without a delay, enough sessions for
    /// what waits, each taking up to max_batch at its grant (B1, B2). With a
    /// delay (B6): full batches at once; a partial one once its first item
    /// has waited max_delay (`aged`, from the timer thread).
    std::size_t plan_locked(bool aged = false) noexcept {
        if (closed_) return 0;
        const std::size_t mb = options_.max_batch;
        std::size_t start = 0;
        if (options_.max_delay.count() == 0) {
            while (sessions_ < max_sessions_ && waiting_.size() > mb * unclaimed_) {
                ++sessions_;
                ++unclaimed_;
                ++start;
            }
            return start;
        }
        while (sessions_ < max_sessions_ && waiting_.size() >= mb * (unclaimed_ + 1)) {
            ++sessions_;
            ++unclaimed_;
            ++start;
        }
        if (aged && sessions_ < max_sessions_ && unclaimed_ == 0 && !waiting_.empty()) {
            ++sessions_;
            ++unclaimed_;
            ++start;
        }
        return start;
    }

    /// When the first waiting item's batch is due (B6), if a partial batch
    /// could be entered at all.
    std::optional<std::chrono::steady_clock::time_point> delay_deadline_locked() const noexcept {
        if (waiting_.empty() || unclaimed_ != 0 || sessions_ >= max_sessions_) return std::nullopt;
        return waiting_.front()->submitted_at + options_.max_delay;
    }

    // -- the delay's timer (B6) -------------------------------------------------

    std::chrono::steady_clock::time_point now() const {
        return options_.timer ? options_.timer->now() : std::chrono::steady_clock::now();
    }

    /// What the delay's deadline depends on changed (an item came, a batch was
    /// taken, a session finished): wake the thread, or set the user's timer.
    void delay_news() noexcept {
        if (options_.max_delay.count() == 0) return;
        if (!options_.timer) {
            timer_wake_.notify_one();
            return;
        }
        rearm();
    }

    /// Sets the user's timer for the current deadline, unless it is set for it
    /// already (outside the lock: the timer is user code).
    void rearm() noexcept {
        std::optional<std::chrono::steady_clock::time_point> deadline;
        {
            const std::lock_guard lock(mutex_);
            if (closed_) return;
            deadline = delay_deadline_locked();
            if (!deadline || deadline == armed_) return;
            armed_ = deadline;
        }
        try {
            options_.timer->wake_at(*deadline, [weak = this->weak_from_this()] {
                if (const auto core = weak.lock()) core->timer_fired();
            });
        } catch (...) {
            // Out of memory: forget the deadline, so that the next news retries.
            const std::lock_guard lock(mutex_);
            armed_.reset();
        }
    }

    // -- sessions ------------------------------------------------------------

    /// The session's completion handler: its executor is the run's.
    struct session_done {
        std::shared_ptr<run_type> run;
        using executor_type = batch_executor<batcher_core>;
        executor_type get_executor() const noexcept { return executor_type(run.get(), false); }
        void operator()(std::exception_ptr e, session_result<batch_done> r) {
            run->core->session_finished(*run, std::move(e), std::move(r));
        }
    };

    void enter_sessions(std::size_t n) noexcept {
        // A loop, not a recursion: a session that cannot be entered for want
        // of memory fails a batch and may ask for the next (S19).
        while (n > 0) n += enter_session() - 1;
    }

    /// Enters one planned session; returns how many more to enter (only
    /// when this one could not be).
    std::size_t enter_session() noexcept {
        std::shared_ptr<run_type> run;
        try {
            run = std::make_shared<run_type>(this->shared_from_this());
            if (async_) {
                host_->with_backend_session(
                    options_.session,
                    [run](session_type& s) -> asio::awaitable<batch_done> {
                        co_await run->core->run_async(*run, s);
                        co_return batch_done{};
                    },
                    session_done{run});
            } else {
                host_->with_backend_session(
                    options_.session,
                    [run](session_type& s) {
                        run->core->run_sync(*run, s);
                        return batch_done{};
                    },
                    session_done{run});
            }
        } catch (...) {
            // Out of memory before the host took the entry: the items it was
            // meant for fail as if the host had refused it.
            if (!run) return fail_batch_without_session();
            session_finished(*run, nullptr,
                             tl::unexpected(session_entry_error(
                                 session_entry_errc::executor, host_name_,
                                 compose_detail({"out of memory: the batch session could not be entered"}))));
        }
        return 0;
    }

    /// A planned session for which not even its state could be allocated:
    /// the next batch of waiting items completes with `executor` (they would
    /// otherwise wait for a session nobody enters), threaded through their own
    /// links, so that this allocates nothing. Returns the sessions the plan
    /// asks for next.
    std::size_t fail_batch_without_session() noexcept {
        return fail_next_batch(/*ends_session=*/true,
                               compose_detail({"out of memory: no batch session could be entered"}));
    }

    /// Completes the next batch of waiting items with `executor` and `detail`,
    /// for a session that cannot take them (out of memory); with
    /// `ends_session`, that session is over. Returns the sessions the plan asks
    /// for next.
    std::size_t fail_next_batch(bool ends_session, const std::string& detail) noexcept {
        item_list failed;
        std::size_t start = 0;
        {
            const std::lock_guard lock(mutex_);
            if (ends_session) --sessions_;
            --unclaimed_;
            const std::size_t n = closed_ ? 0 : std::min(waiting_.size(), options_.max_batch);
            for (std::size_t i = 0; i < n; ++i) {
                item& it = *waiting_.pop_front();
                it.where = item::stage::taken;
                failed.push_back(it);
            }
            rejected_ += n;
            start = plan_locked();
        }
        // (Each is unlinked before it finishes: finishing may free it.)
        while (item* next = failed.pop_front()) {
            item& it = *next;
            it.input.reset();
            it.finish(nullptr, tl::unexpected(session_entry_error(session_entry_errc::executor, host_name_,
                                                                  compose_detail({std::string_view(detail)}))));
        }
        return start;
    }

    void abandon_session() noexcept {
        std::size_t start = 0;
        {
            const std::lock_guard lock(mutex_);
            --sessions_;
            --unclaimed_;
            start = plan_locked();
        }
        enter_sessions(start);
    }

    /// Takes the batch: up to max_batch waiting items, in submission order
    /// (B2). Once per session.
    ///
    /// It enters no session itself, although taking a batch changes what
    /// plan_locked() would say (it cannot make it ask for more): with
    /// placement::compute it runs inside the session's body, where an entry
    /// would be re-entry (S7). A delay's timer thread is woken to re-plan.
    void take(run_type& run) {
        {
            const std::lock_guard lock(mutex_);
            if (run.taken.load(std::memory_order_relaxed)) return;
            const std::size_t n = closed_ ? 0 : std::min(waiting_.size(), options_.max_batch);
            run.items.reserve(n);
            run.inputs.reserve(n);
            for (std::size_t i = 0; i < n; ++i) {
                item& it = *waiting_.pop_front();
                it.where = item::stage::taken;
                run.items.push_back(&it);
                run.inputs.push_back(std::move(*it.input));
                it.input.reset();
            }
            if (options_.session.where == placement::caller && n > 0) run.target = run.items.front()->executor();
            --unclaimed_;
            run.taken.store(true, std::memory_order_release);
        }
        delay_news();
    }

    void note_batch(std::size_t n) {
        const std::lock_guard lock(mutex_);
        ++batches_;
        largest_ = std::max(largest_, n);
    }

    void run_sync(run_type& run, session_type& s) {
        if (!run.taken.load(std::memory_order_acquire)) take(run);
        if (run.items.empty()) return;  // all cancelled meanwhile: the body never sees an empty batch
        note_batch(run.items.size());
        run.body_ran = true;
        try {
            run.outputs = sync_(s, std::span<In>(run.inputs));
        } catch (...) {
            run.body_error = std::current_exception();
        }
    }

    asio::awaitable<void> run_async(run_type& run, session_type& s) {
        if (!run.taken.load(std::memory_order_acquire)) take(run);
        if (run.items.empty()) co_return;
        note_batch(run.items.size());
        run.body_ran = true;
        try {
            run.outputs = co_await async_(s, std::span<In>(run.inputs));
        } catch (...) {
            run.body_error = std::current_exception();
        }
    }

    /// The session completed (on the run's executor): every item it took
    /// completes, exactly once (B3), then the sessions still needed are entered.
    void session_finished(run_type& run, std::exception_ptr e, session_result<batch_done> r) noexcept {
        std::optional<session_entry_error> admission;
        if (!r) admission.emplace(std::move(r.error()));
        // A session that never ran its body fails the items meant for it
        // (those it took, or the next max_batch waiting) with its error.
        if (!run.taken.load(std::memory_order_acquire)) {
            try {
                take(run);
            } catch (...) {
                // Out of memory for the batch's lists: the items meant for
                // it are failed where they wait, threaded through their own
                // links (S19); the session ends below, with nothing taken.
                run.taken.store(true, std::memory_order_release);
                enter_sessions(fail_next_batch(/*ends_session=*/false,
                                               compose_detail({"out of memory: the batch could not be gathered"})));
            }
        }
        if (!e) e = run.body_error;
        if (!e && !admission && run.body_ran && run.outputs.size() != run.items.size()) {
            try {
                e = std::make_exception_ptr(
                    std::length_error(compose_detail({"tenferro::batcher: the batch body returned ", run.outputs.size(),
                                                      " results for ", run.items.size(), " items"})));
            } catch (...) {
                e = std::current_exception();  // out of memory: that, then
            }
        }
        const std::size_t n = run.items.size();
        std::size_t start = 0;
        {
            const std::lock_guard lock(mutex_);
            --sessions_;
            if (admission)
                rejected_ += n;
            else
                completed_ += n;
            start = plan_locked();
        }
        delay_news();
        // Keep the host busy first: the items' completions are posts anyway.
        enter_sessions(start);
        for (std::size_t i = 0; i < n; ++i) {
            item& it = *run.items[i];  // (stays `taken`: a cancellation leaves it alone)
            if (admission) {
                it.finish(nullptr, tl::unexpected(*admission));
            } else if (e) {
                it.finish(e, tl::unexpected(session_entry_error(
                                 session_entry_errc::executor, host_name_,
                                 compose_detail({"no value: the batch body threw an exception (delivered as the "
                                                 "first argument)"}))));
            } else {
                it.finish(nullptr, session_result<Out>(std::move(run.outputs[i])));
            }
        }
        run.items.clear();
        run.inputs.clear();
        run.outputs.clear();
    }

    template <class H, class C>
    friend class batch_item_op;
    friend class batch_executor<batcher_core>;

    Host* host_;
    std::string host_name_;
    batch_options options_;
    std::size_t max_sessions_ = 1;
    sync_body sync_;
    async_body async_;
    asio::execution_context fallback_context_;

    mutable std::mutex mutex_;
    std::condition_variable timer_wake_;
    std::optional<std::chrono::steady_clock::time_point> armed_;  // the user's timer is set for this
    item_list waiting_;
    std::size_t sessions_ = 0;   // entered and not yet completed (B5)
    std::size_t unclaimed_ = 0;  // entered and not yet taken their batch
    bool closed_ = false;
    std::uint64_t submitted_ = 0, completed_ = 0, cancelled_ = 0, rejected_ = 0, batches_ = 0;
    std::size_t largest_ = 0;
};

template <class Core>
struct initiate_submit {
    std::shared_ptr<Core> core;

    template <class Handler>
    void operator()(Handler&& handler, typename Core::input_type item) const {
        using op_type = batch_item_op<std::decay_t<Handler>, Core>;
        op_type* op = make_op<op_type>(std::forward<Handler>(handler), core, std::move(item));
        // S7: submit is an entry. Inside a running session (a synchronous body
        // on this thread, or an asynchronous one whose executor the handler
        // carries) it is re-entry; inside an execution scope the batch's
        // session could not be the scope's.
        session_context* ctx = current_sync_context();
        if (ctx == nullptr) ctx = context_of(op->handler_ex());
        if (ctx != nullptr && ctx->kind == context_kind::session)
            return core->reject_at_submit(*op, session_entry_errc::reentered,
                                          "batcher::submit inside a running session (its batch would wait for "
                                          "the session it is called from)");
        if (ctx != nullptr)
            return core->reject_at_submit(*op, session_entry_errc::incompatible_context,
                                          "batcher::submit inside an execution scope: a batch session is not "
                                          "one of the scope's sessions");
        try {
            op->connect_cancellation();  // out of memory: submit throws, nothing queued
        } catch (...) {
            op->discard();
            throw;
        }
        core->enqueue(*op);
    }
};

template <class Body, class Session, class In>
using batch_body_result = std::invoke_result_t<Body&, Session&, std::span<In>>;

}  // namespace detail

/// Folds the items submitted while `Host` is busy into one session (contract
/// section 7, rules B1–B6). `Host` is `cpu_backend` or any `session_host<B>`.
///
/// Thread-safe: `submit` and `stats` may be called from any thread. The host
/// must outlive the batcher; the batcher may be destroyed while its sessions
/// run (they finish with the items they took).
template <class Host, class In, class Out>
class batcher {
    using core_type = detail::batcher_core<Host, In, Out>;

public:
    using host_type = Host;
    using session_type = typename Host::session_type;
    using input_type = In;
    using output_type = Out;

    /// `body(session, items)` runs once per batch, inside one session of
    /// `host`, with the items in submission order; it returns one Out per item,
    /// in the same order, as `std::vector<Out>` or
    /// `asio::awaitable<std::vector<Out>>`. `items` lives until the body (or
    /// its awaitable) has finished; the body may move from them.
    template <class Body>
    batcher(Host& host, batch_options options, Body body) {
        using R = std::remove_cvref_t<detail::batch_body_result<Body, session_type, In>>;
        if constexpr (std::is_same_v<R, asio::awaitable<std::vector<Out>>>) {
            core_ = std::make_shared<core_type>(host, options, nullptr, std::move(body));
        } else {
            static_assert(std::is_convertible_v<R, std::vector<Out>>,
                          "a batch body returns std::vector<Out> or asio::awaitable<std::vector<Out>>");
            core_ = std::make_shared<core_type>(
                host, options,
                [b = std::move(body)](session_type& s, std::span<In> items) mutable -> std::vector<Out> {
                    return b(s, items);
                },
                nullptr);
        }
        if (core_->options().max_delay.count() > 0 && !core_->options().timer)
            timer_ = std::thread([core = core_] { core->timer_loop(); });
    }

    /// Items still waiting complete with `executor`; sessions already entered
    /// finish with the items they took.
    ~batcher() {
        core_->close();
        if (timer_.joinable()) timer_.join();
    }

    batcher(const batcher&) = delete;
    batcher& operator=(const batcher&) = delete;

    /// Submits one item. Completion signature
    /// `void(std::exception_ptr, session_result<Out>)`: the item's Out; the
    /// batch body's exception (every item of the batch gets it;
    /// `std::length_error` when it returned the wrong number of results); or
    /// the admission error of the session it was meant for. Per-operation
    /// cancellation (any type) removes an item not yet taken into a batch.
    /// Every Asio completion token; never completes inside this call.
    template <class CompletionToken = asio::use_awaitable_t<>>
    auto submit(In item, CompletionToken&& token = {}) {
        return asio::async_initiate<CompletionToken, void(std::exception_ptr, session_result<Out>)>(
            detail::initiate_submit<core_type>{core_}, token, std::move(item));
    }

    /// A consistent snapshot of the counters.
    batch_stats stats() const { return core_->stats(); }

    const batch_options& options() const noexcept { return core_->options(); }

private:
    std::shared_ptr<core_type> core_;
    std::thread timer_;
};

}  // namespace tenferro
