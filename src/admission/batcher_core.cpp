// The batcher core of include/tenferro/detail/admission/batcher_core.hpp.

#include "tenferro/detail/admission/batcher_core.hpp"

#include <algorithm>
#include <stdexcept>
#include <stop_token>

#include "tenferro/batcher.hpp"
#include "tenferro/detail/admission/compose_detail.hpp"
#include "tenferro/detail/admission/entry_base.hpp"
#include "tenferro/detail/base/session_stopped.hpp"

namespace tenferro::detail {

namespace {

bool is_session_stopped(const std::exception_ptr& e) noexcept {
    try {
        std::rethrow_exception(e);
    } catch (const session_stopped&) {
        return true;
    } catch (...) {
        return false;
    }
}

}  // namespace

batcher_core::batcher_core(std::string_view host_name, std::size_t host_permits, const batch_options& options)
    : host_name_(host_name),
      max_batch_(std::max<std::size_t>(1, options.max_batch)),
      max_delay_(options.max_delay),
      caller_placed_(options.session.where == placement::caller),
      timer_(options.timer) {
    const std::size_t weight = std::max<std::size_t>(1, options.session.permits);
    max_sessions_ = std::max<std::size_t>(1, host_permits / weight);
}

batcher_core::~batcher_core() = default;

void batcher_core::enqueue(item& it) {
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

void batcher_core::reject_at_submit(item& it, session_entry_errc code, std::string detail) {
    {
        const std::lock_guard lock(mutex_);
        ++submitted_;
        ++rejected_;
    }
    it.fail(nullptr, session_entry_error(code, host_name_, std::move(detail)));
}

void batcher_core::cancel(item& it, asio::cancellation_type_t type) noexcept {
    {
        std::unique_lock lock(mutex_);
        if (it.where != item::stage::waiting) {
            // Taken: it completes with its result (B4), unless it was the
            // last one its batch was computed for (B7).
            constexpr auto stops = asio::cancellation_type::terminal | asio::cancellation_type::partial;
            if (it.run == nullptr || it.cancelled_in_batch || (type & stops) == asio::cancellation_type::none) return;
            it.cancelled_in_batch = true;
            batch_run_base& run = *it.run;
            if (--run.live != 0 || run.ended) return;
            run.abandoned = true;
            // The entry is alive until its session finished (`ended`, under
            // this lock); its stop is asked outside the lock, where the
            // token's callbacks may run.
            std::stop_source stop =
                run.entry != nullptr ? run.entry->stop_for_cancellation() : std::stop_source(std::nostopstate);
            lock.unlock();
            stop.request_stop();
            return;
        }
        waiting_.unlink(it);
        it.where = item::stage::finished;
        ++cancelled_;
    }
    it.fail(nullptr,
            session_entry_error(session_entry_errc::cancelled, host_name_,
                                compose_detail({"the batch item was cancelled before it was taken into a batch"})));
}

const asio::any_io_executor* batcher_core::target_of(batch_run_base& run) {
    if (!caller_placed_) return nullptr;
    if (!run.taken.load(std::memory_order_acquire)) take(run);
    return &run.target;
}

void batcher_core::close() noexcept {
    item_list list;
    {
        const std::lock_guard lock(mutex_);
        closed_ = true;
        for (item* it = waiting_.front(); it != nullptr; it = item_list::next(*it)) it->where = item::stage::finished;
        rejected_ += waiting_.size();
        list = std::move(waiting_);
    }
    // No firing after this (one running elsewhere is waited for).
    if (library_timer_) cancel_library_timer(*this);
    // (Each is unlinked before it finishes: finishing may free it.)
    while (item* it = list.pop_front()) {
        it->fail(nullptr, session_entry_error(
                              session_entry_errc::executor, host_name_,
                              compose_detail({"the batcher was destroyed before this item was taken into a batch"})));
    }
}

batch_stats batcher_core::stats() const {
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

void batcher_core::timer_fired() noexcept {
    {
        const std::lock_guard lock(mutex_);
        armed_.reset();
    }
    enter_if_due(now());
    rearm();
}

void batcher_core::use_library_timer() {
    start_library_timer();
    library_timer_ = true;
}

timer_node::clock::time_point batcher_core::fire(clock::time_point at) noexcept {
    // Held while it runs: the last run of a destroyed batcher may end here.
    const std::shared_ptr<batcher_core> self = shared_from_this();
    enter_if_due(at);
    // The next partial batch's time; none when nothing could start (no
    // session slot): the news that frees one arms it again.
    const std::lock_guard lock(mutex_);
    if (closed_) return clock::time_point::max();
    return delay_deadline_locked().value_or(clock::time_point::max());
}

/// B6, either timer: enters a partial batch whose first item has waited
/// max_delay by `at`.
void batcher_core::enter_if_due(clock::time_point at) noexcept {
    std::size_t start = 0;
    {
        const std::lock_guard lock(mutex_);
        const std::optional<clock::time_point> deadline = delay_deadline_locked();
        if (deadline && at >= *deadline) start = plan_locked(true);
    }
    enter_sessions(start);
}

/// How many sessions to enter now (counted as entered). B5: never more than
/// the host has permits for. Without a delay, enough sessions for what waits,
/// each taking up to max_batch at its grant (B1, B2). With a delay (B6): full
/// batches at once; a partial one once its first item has waited max_delay
/// (`aged`, from the timer).
std::size_t batcher_core::plan_locked(bool aged) noexcept {
    if (closed_) return 0;
    const std::size_t mb = max_batch_;
    std::size_t start = 0;
    if (max_delay_.count() == 0) {
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

/// When the first waiting item's batch is due (B6), if a partial batch could
/// be entered at all.
std::optional<std::chrono::steady_clock::time_point> batcher_core::delay_deadline_locked() const noexcept {
    if (waiting_.empty() || unclaimed_ != 0 || sessions_ >= max_sessions_) return std::nullopt;
    return waiting_.front()->submitted_at + max_delay_;
}

// -- the delay's timer (B6) ---------------------------------------------------

std::chrono::steady_clock::time_point batcher_core::now() const {
    return timer_ ? timer_->now() : std::chrono::steady_clock::now();
}

/// What the delay's deadline depends on changed (an item came, a batch was
/// taken, a session finished): set the timer for the deadline now.
void batcher_core::delay_news() noexcept {
    if (max_delay_.count() != 0) rearm();
}

/// Sets the timer for the current deadline: the library's (a deadline armed
/// earlier stands, and its firing finds the next), or the user's, unless it
/// is set for it already (asked outside the lock: the timer is user code).
void batcher_core::rearm() noexcept {
    std::optional<clock::time_point> deadline;
    {
        const std::lock_guard lock(mutex_);
        if (closed_) return;
        deadline = delay_deadline_locked();
        if (!deadline) return;
        if (!library_timer_) {
            if (deadline == armed_) return;
            armed_ = deadline;
        }
    }
    if (library_timer_) return arm_library_timer(*this, *deadline);
    try {
        timer_->wake_at(*deadline, [weak = weak_from_this()] {
            if (const auto core = weak.lock()) core->timer_fired();
        });
    } catch (...) {
        // Out of memory: forget the deadline, so that the next news retries.
        const std::lock_guard lock(mutex_);
        armed_.reset();
    }
}

// -- sessions -----------------------------------------------------------------

void batcher_core::enter_sessions(std::size_t n) noexcept {
    // A loop, not a recursion: a session that cannot be entered for want of
    // memory fails a batch and may ask for the next (S19).
    while (n > 0) n += enter_session() - 1;
}

/// Enters one planned session; returns how many more to enter (only when
/// this one could not be).
std::size_t batcher_core::enter_session() noexcept {
    std::shared_ptr<batch_run_base> run;
    try {
        enter(run);
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

/// A planned session for which not even its state could be allocated: the
/// next batch of waiting items completes with `executor` (they would
/// otherwise wait for a session nobody enters), threaded through their own
/// links, so that this allocates nothing. Returns the sessions the plan asks
/// for next.
std::size_t batcher_core::fail_batch_without_session() noexcept {
    return fail_next_batch(/*ends_session=*/true, compose_detail({"out of memory: no batch session could be entered"}));
}

/// Completes the next batch of waiting items with `executor` and `detail`,
/// for a session that cannot take them (out of memory); with `ends_session`,
/// that session is over. Returns the sessions the plan asks for next.
std::size_t batcher_core::fail_next_batch(bool ends_session, const std::string& detail) noexcept {
    item_list failed;
    std::size_t start = 0;
    {
        const std::lock_guard lock(mutex_);
        if (ends_session) --sessions_;
        --unclaimed_;
        const std::size_t n = closed_ ? 0 : std::min(waiting_.size(), max_batch_);
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
        next->fail(nullptr, session_entry_error(session_entry_errc::executor, host_name_,
                                                compose_detail({std::string_view(detail)})));
    }
    return start;
}

// It enters no session itself, although taking a batch changes what
// plan_locked() would say (it cannot make it ask for more): with
// placement::compute it runs inside the session's body, where an entry would
// be re-entry (S7). A delay's timer thread is woken to re-plan.
void batcher_core::take(batch_run_base& run) {
    {
        const std::lock_guard lock(mutex_);
        if (run.taken.load(std::memory_order_relaxed)) return;
        const std::size_t n = closed_ ? 0 : std::min(waiting_.size(), max_batch_);
        run.items.reserve(n);
        run.reserve_inputs(n);
        for (std::size_t i = 0; i < n; ++i) {
            item& it = *waiting_.pop_front();
            it.where = item::stage::taken;
            it.run = &run;
            run.items.push_back(&it);
        }
        run.live = n;
        run.take_inputs();
        if (caller_placed_ && n > 0) run.target = run.items.front()->executor();
        --unclaimed_;
        run.taken.store(true, std::memory_order_release);
    }
    delay_news();
}

void batcher_core::note_batch(std::size_t n) {
    const std::lock_guard lock(mutex_);
    ++batches_;
    largest_ = std::max(largest_, n);
}

void batcher_core::session_finished(batch_run_base& run, std::exception_ptr e, session_result<batch_done> r) noexcept {
    std::optional<session_entry_error> admission;
    if (!r) admission.emplace(std::move(r.error()));
    // A session that never ran its body fails the items meant for it (those
    // it took, or the next max_batch waiting) with its error.
    if (!run.taken.load(std::memory_order_acquire)) {
        try {
            take(run);
        } catch (...) {
            // Out of memory for the batch's lists: the items meant for it are
            // failed where they wait, threaded through their own links (S19);
            // the session ends below, with nothing taken.
            run.taken.store(true, std::memory_order_release);
            enter_sessions(fail_next_batch(/*ends_session=*/false,
                                           compose_detail({"out of memory: the batch could not be gathered"})));
        }
    }
    // B7: whatever the body returned or threw, a batch whose items were all
    // cancelled completes them with `cancelled`. From here no cancellation
    // reaches this run (nor its entry, which is completing).
    bool abandoned = false;
    {
        const std::lock_guard lock(mutex_);
        run.ended = true;
        abandoned = run.abandoned;
        for (item* it : run.items) it->run = nullptr;
    }
    if (e && admission && is_session_stopped(e)) {
        // A session_stopped nobody asked for left the session's body (S2):
        // its items get it, as a batch body's exception (B3).
        admission.reset();
    }
    if (!e) e = run.body_error;
    if (!e && !admission && run.body_ran && run.output_count() != run.items.size()) {
        try {
            e = std::make_exception_ptr(
                std::length_error(compose_detail({"tenferro::batcher: the batch body returned ", run.output_count(),
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
        if (abandoned)
            cancelled_ += n;
        else if (admission)
            rejected_ += n;
        else
            completed_ += n;
        start = plan_locked();
    }
    delay_news();
    // Keep the host busy first: the items' completions are posts anyway.
    enter_sessions(start);
    // (Each stays `taken`: a cancellation leaves it alone.)
    if (abandoned) {
        for (std::size_t i = 0; i < n; ++i)
            run.items[i]->fail(nullptr, session_entry_error(session_entry_errc::cancelled, host_name_,
                                                            compose_detail({"every item of its batch was cancelled; "
                                                                            "the batch session was stopped (B7)"})));
    } else if (admission) {
        for (std::size_t i = 0; i < n; ++i) run.items[i]->fail(nullptr, *admission);
    } else if (e) {
        for (std::size_t i = 0; i < n; ++i)
            run.items[i]->fail(e, session_entry_error(session_entry_errc::executor, host_name_,
                                                      compose_detail({"no value: the batch body threw an exception "
                                                                      "(delivered as the first argument)"})));
    } else {
        run.complete_with_outputs();
    }
    run.items.clear();
    run.clear_values();
}

}  // namespace tenferro::detail
