#pragma once
// The permit queue at the heart of admission: FIFO within each tenant group,
// weighted shares of permit-time between groups, an optional byte budget, and
// a permit count that may change while it runs (docs/contract.md S4, P1-P8).
//
// Design (see docs/design/session-entry.md):
//  * Waiters are intrusive nodes living inside each entry's operation state
//    (entry_node, start_order.hpp: the queue needs the whole node, not only
//    its permit_waiter base, for the deadline list and the start order), so
//    waiting allocates nothing and leaving the queue (cancellation) is an O(1)
//    unlink.
//  * Strict FIFO, no barging: an acquire succeeds at once only when nobody is
//    queued *and* enough permits (and bytes) are free. A weighted head blocks
//    everybody behind it until it can be satisfied.
//  * Groups (P2, P3): each group is a FIFO of its own. When permits free up,
//    the backlogged group with the least charge (permit-seconds / weight) is
//    served; if its head does not fit, nothing is granted until it does. A
//    group that becomes backlogged starts from the least charge then
//    backlogged, so idle time is not banked. With one group (the default)
//    this is the single FIFO above, at its cost: no clock is read.
//  * The queue never runs user code and never resumes anybody. Every mutating
//    call hands back the list of waiters it granted (in FIFO order); the caller
//    resumes them after the lock is released, on their own executors.
//  * The start order of the bodies it grants (S17) is the start sequencer's
//    (start_order.hpp), which the queue informs of every grant under its lock.
//  * One mutex guards everything. Admission is a handful of loads and stores
//    under it, and an entry's cost is dominated by its executor hops, not by
//    this lock; what matters is taking it few times (an entry admitted at once
//    that may start inline learns so in acquire's own critical section,
//    granted_inline) and not sleeping for it: the mutex polls briefly before
//    it sleeps (brief_mutex), since its holder is most likely about to leave.
//
// No Asio here: the queue is tested step by step in tests/admission/permit_queue_test.cpp.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tenferro/admission_group.hpp"
#include "tenferro/admission_timer.hpp"
#include "tenferro/detail/admission/brief_mutex.hpp"
#include "tenferro/detail/admission/permit_waiter.hpp"
#include "tenferro/detail/admission/start_order.hpp"

namespace tenferro::detail {

/// What `permit_queue::acquire` decided.
enum class acquire_outcome : std::uint8_t {
    granted,     // the waiter holds its permits now
    // The waiter holds its permits now and may start inline, at once: it was
    // offered with `start_inline_if_clear`, is ready at its grant, and nothing
    // granted before it is unstarted or waiting for its hand-off. It is not in
    // the hand-off list (nobody can be held up behind it); it is counted as
    // unstarted until note_started().
    granted_inline,
    queued,      // the waiter is linked; a later release/cancel will grant it
    would_wait,  // may_wait was false and it could not be admitted at once
    queue_full,  // the waiter count reached max_waiters (the host's or its group's)
    too_large,   // it asks for more permits than the host has, or more bytes than its budget
    poisoned,    // the queue is poisoned
    shut_down,   // the queue was shut down
    expired,     // its deadline had passed already (P4)
    late,        // its predicted wait exceeds the time left to its deadline (P5, reject_late)
};

/// Counters kept under the queue lock; `session_host::stats()` reads them.
struct permit_counters {
    std::size_t permits = 0, available = 0, waiting = 0;
    std::uint64_t admitted = 0, completed = 0, rejected = 0, cancelled = 0, expired = 0;
    std::uint64_t stopped = 0;  // S20: bodies stopped while running
    std::size_t memory_budget = 0, memory_available = 0;
    std::size_t held_bytes = 0;  // may exceed the budget after a shrink (P7), when memory_available is 0
};

/// What a session gives back when it releases its grant: its permits, its
/// bytes, its group, and for how long it held them (seconds from its body's
/// start; negative when the host does not measure, see measures_time()).
/// Converts from a permit count: a grant of group 0 with no bytes.
struct released_grant {
    released_grant(std::size_t n) noexcept : permits(n) {}  // NOLINT: a count is a grant
    released_grant(const permit_waiter& w, double held_seconds) noexcept
        : permits(w.permits_), bytes(w.bytes_), group(w.group_), seconds(held_seconds) {}
    std::size_t permits;
    std::size_t bytes = 0;
    std::size_t group = 0;
    double seconds = -1;
};

/// How a queue's groups, bytes and clock are set up; the defaults are one
/// group, no budget, no clock.
struct queue_policy {
    std::vector<group_options> groups = {};  // empty: one group, {"default", 1}
    std::size_t memory_budget = 0;           // 0: no byte budget
    bool measure_time = false;               // charge by measured permit-time (more than one group, or reject_late)
    bool reject_late = false;                // P5
    std::shared_ptr<admission_timer> clock = nullptr;  // null: the steady clock (host_options::timer)
};

class permit_queue {
public:
    permit_queue(std::size_t permits, std::size_t max_waiters, queue_policy policy = {});
    permit_queue(const permit_queue&) = delete;
    permit_queue& operator=(const permit_queue&) = delete;

    /// Offers `w` (with `w.permits_` set) to the queue. FIFO, no barging.
    ///
    /// `start_inline_if_clear` (an entry in its initiating function, S17):
    /// when `w` is granted at once, is ready at its grant
    /// (start_sequencer::ready_at_grant) and no earlier grant is unstarted,
    /// the queue answers `granted_inline` and leaves `w` out of the hand-off
    /// list, in the same critical section; the caller starts it without asking
    /// the queue again (the caller-placement round trip takes the queue's lock
    /// twice, not four times).
    ///
    /// With reject_late, a waiter with a deadline whose predicted wait
    /// exceeds the time left is answered `late` (P5); the prediction is
    /// stored in `*predicted` when given.
    acquire_outcome acquire(entry_node& w, bool may_wait, bool start_inline_if_clear = false,
                            std::chrono::steady_clock::duration* predicted = nullptr);
    /// The inline fast path's acquire (entry_op::try_run_inline): grants `w`
    /// exactly when acquire would answer `granted_inline` for a caller-started
    /// waiter ready at its grant, and
    /// otherwise changes nothing at all, not even a counter: the entry then
    /// goes the general way, acquire included. Same critical section, same
    /// checks (S4, S17). The grant is not counted as unstarted (see the .cpp):
    /// the caller starts `w`'s body at once, on this thread, and calls no
    /// note_started.
    bool try_acquire_inline(permit_waiter& w) noexcept;

    /// Returns a grant's permits and bytes (charging its group for the time it
    /// held them) and grants as many waiters as now fit (policy order,
    /// stopping at the first chosen head that does not fit). The granted
    /// waiters are returned for the caller to resume.
    ///
    /// With `handoffs`, the caller takes part in the hand-off (S17): granted
    /// waiters ready at their grant (start_sequencer::ready_at_grant) are not
    /// returned in the list but made ready in the hand-off list, and if this
    /// thread may hand off now, the ready chain comes back in `*handoffs`
    /// (with the hand-off role, as from start_sequencer::next_handoffs()).
    /// Without it, every grant is returned in the list.
    waiter_list release(const released_grant& g, entry_node** handoffs = nullptr);

    /// Removes `w` if it is still waiting (returns true) and re-offers the free
    /// permits, since `w` may have been a weighted head blocking smaller waiters.
    /// Those newly granted are appended to `granted` (`handoffs`: as for release).
    bool cancel(entry_node& w, waiter_list& granted, entry_node** handoffs = nullptr);
    /// P4: removes every waiter whose deadline is at or before `now` into
    /// `expired` (counted as expired) and grants those behind them that now
    /// fit. Returns the earliest deadline still waiting (max() if none).
    std::chrono::steady_clock::time_point expire_due(std::chrono::steady_clock::time_point now, waiter_list& expired,
                                                     waiter_list& granted, entry_node** handoffs = nullptr);

    /// P7: the host now has `n` permits (n >= 1). Growing grants waiters at
    /// once (returned in `granted`); shrinking preempts nobody, new grants wait
    /// until the permits held drop below `n`. Waiters asking for more than `n`
    /// are removed and returned in `rejected` (for incompatible_context).
    void set_permits(std::size_t n, waiter_list& granted, waiter_list& rejected, entry_node** handoffs = nullptr);
    /// The same for the byte budget (0: none).
    void set_memory_budget(std::size_t bytes, waiter_list& granted, waiter_list& rejected,
                           entry_node** handoffs = nullptr);

    /// Marks the queue poisoned and hands back every waiter, now removed.
    waiter_list poison();
    /// Marks the queue shut down and hands back every waiter, now removed.
    waiter_list shut_down();

    /// Entries admitted without a permit grant (sessions inside an execution
    /// scope reuse the scope's permit) still count as admitted and completed;
    /// `w` is granted as far as start order is concerned (S17).
    void note_admitted_without_permits(entry_node& w);
    void note_completed_without_permits(std::size_t group = 0);
    void note_rejected(std::size_t group = 0);
    /// A granted entry that reached its start after its deadline (P4): rejected and expired.
    void note_expired(std::size_t group);
    /// A granted entry cancelled before its body started (S20): cancelled,
    /// as a waiter cancelled in the queue is.
    void note_cancelled(std::size_t group);
    /// A body that ended by the stop asked of it (S20): stopped (it was
    /// admitted, and completes).
    void note_stopped(std::size_t group);

    /// The start order of the bodies this queue grants (S17).
    start_sequencer& start_order() noexcept { return start_order_; }

    /// A hint, stale as soon as it is read: whether a newcomer asking for `n`
    /// permits would be admitted at once (nobody waits, `n` are free, and the
    /// queue is neither poisoned nor shut down).
    /// Only for choices where a wrong guess costs speed or a few bytes, never
    /// order: session_host::enter picks the shape of an awaited entry with it;
    /// admission itself decides under the lock.
    bool likely_admits_at_once(std::size_t n) const noexcept {
        return at_once_hint_.load(std::memory_order_relaxed) >= n;
    }

    /// Lock-free reads, for checks on the way to a body's start (S18).
    bool poisoned() const noexcept { return poisoned_.load(std::memory_order_acquire); }
    bool is_shut_down() const noexcept { return shut_down_.load(std::memory_order_acquire); }
    std::size_t permits() const noexcept { return permits_.load(std::memory_order_relaxed); }
    /// The number of groups (fixed at construction; at least 1).
    std::size_t groups() const noexcept { return groups_.size(); }
    /// Whether sessions' permit-time is measured (released_grant::seconds).
    bool measures_time() const noexcept { return measure_time_; }
    /// The time on the host's clock: `host_options::timer`'s, else the steady
    /// clock's. Every deadline and permit-time of the host is read here.
    std::chrono::steady_clock::time_point now() const {
        return clock_ ? clock_->now() : std::chrono::steady_clock::now();
    }
    permit_counters counters() const;
    /// A consistent snapshot of group `g` (< groups()).
    group_stats group_counters(std::size_t g) const;

    /// Blocks the calling thread until every permit is back and every entry
    /// admitted without permits has completed. Used only by the host's destructor.
    void wait_until_idle();

private:
    /// Neither poisoned nor shut down: the queue still grants permits. Both
    /// flags only ever go from false to true, under the lock.
    bool admits_locked() const noexcept {
        return !poisoned_.load(std::memory_order_relaxed) && !shut_down_.load(std::memory_order_relaxed);
    }
    /// The permits not held, floored at 0 (a shrink may leave more held than exist).
    std::size_t free_permits_locked() const noexcept {
        const std::size_t n = permits_.load(std::memory_order_relaxed);
        return held_ < n ? n - held_ : 0;
    }
    /// Whether `w`'s permits and bytes are free now.
    bool fits_locked(const permit_waiter& w) const noexcept {
        return w.permits_ <= free_permits_locked() &&
               (memory_budget_ == 0 || (held_bytes_ <= memory_budget_ && w.bytes_ <= memory_budget_ - held_bytes_));
    }
    /// S4, P1-P3, no barging: free permits go to a queued head first, never to
    /// a newcomer; a newcomer is admitted at once only when nobody waits.
    bool admits_at_once_locked(const permit_waiter& w) const noexcept { return waiting_ == 0 && fits_locked(w); }
    /// Whether `w` can ever be granted at the current size and budget.
    bool ever_fits_locked(const permit_waiter& w) const noexcept {
        return w.permits_ <= permits_.load(std::memory_order_relaxed) &&
               (memory_budget_ == 0 || w.bytes_ <= memory_budget_);
    }
    /// Grants what fits, in policy order. A chosen head whose deadline has
    /// passed (the timer has not reached it yet) is not granted: it leaves the
    /// queue as expired, into `granted` in phase `rejected`, for the caller to
    /// reject (host_core::start_granted does).
    void grant_fitting_locked(waiter_list& granted, entry_node** handoffs);
    /// The group served next (P2): the backlogged one with the least charge
    /// (ties: the lowest index); null when nobody waits.
    struct group_queue;
    group_queue* next_group_locked() noexcept;
    void link_locked(group_queue& g, permit_waiter& w) noexcept;
    /// The group whose counters the note_* calls bump: `group`, or the
    /// default group for an index the host does not have (an entry rejected
    /// for its group is still counted).
    group_queue& counted_group_locked(std::size_t group) noexcept;
    void unlink_locked(permit_waiter& w) noexcept;
    /// The entry leaves the waiting state: out of its group's FIFO, and out of
    /// the deadline list if it has a deadline.
    void leave_locked(entry_node& w) noexcept;
    /// Removes every waiter that can no longer fit (after a shrink) into `rejected`.
    void reject_oversized_locked(waiter_list& rejected) noexcept;
    /// Refreshes likely_admits_at_once's hint; called by every locked
    /// operation that changes the free permits, the waiters or whether the
    /// queue admits at all. Stored only when it changes: enter() reads it on
    /// every thread, and a store would take its cache line from them.
    void publish_hint_locked() noexcept {
        const std::size_t hint = admits_locked() && waiting_ == 0 ? free_permits_locked() : 0;
        if (at_once_hint_.load(std::memory_order_relaxed) != hint) at_once_hint_.store(hint, std::memory_order_relaxed);
    }
    /// Grants `w` its permits (already taken from available_) and tells the
    /// start order (`ready`, `listed`: start_sequencer::granted_locked).
    void grant_locked(entry_node& w, bool ready = false, bool listed = true) noexcept;
    waiter_list drain_locked();

    /// One tenant group: its FIFO, its share and its counters.
    struct group_queue {
        waiter_list waiters;
        std::string name;
        unsigned weight = 1;
        std::size_t max_waiters = 0;
        double charge = 0;  // permit-seconds / weight served so far (P2), from where it last became backlogged (P3)
        double busy_permit_seconds = 0;
        std::uint64_t admitted = 0, completed = 0, rejected = 0, cancelled = 0, expired = 0, stopped = 0;
        std::size_t queued_permits = 0;  // over its waiters (P5's prediction)
        double mean_seconds = -1;        // its sessions' recent mean duration; -1: none measured yet
    };

    /// P2: what a session of `g` is expected to hold a permit for: its group's
    /// recent mean, else the host's, else 0.
    double expected_seconds_locked(const group_queue& g) const noexcept {
        return g.mean_seconds >= 0 ? g.mean_seconds : mean_session_seconds_ >= 0 ? mean_session_seconds_ : 0;
    }
    /// P2: a grant is charged its expected permit-time at once, so that a group
    /// with long sessions running is not chosen again as if they cost nothing;
    /// the release corrects the charge by what the session really held.
    void charge_grant_locked(group_queue& g, std::size_t permits) noexcept {
        if (measure_time_) g.charge += static_cast<double>(permits) * expected_seconds_locked(g) / g.weight;
    }

    /// P5: how long `w` would wait if it queued now (0 when nothing finished yet).
    std::chrono::steady_clock::duration predicted_wait_locked(const permit_waiter& w) const noexcept;

    bool idle_locked() const noexcept { return held_ == 0 && nested_running_ == 0; }

    mutable brief_mutex mutex_;
    std::condition_variable_any idle_cv_;  // signalled when the last permit comes back
    bool idle_waited_ = false;         // someone sits in wait_until_idle
    std::vector<group_queue> groups_;  // at least one; fixed at construction
    std::size_t waiting_ = 0;          // over every group
    std::atomic<std::size_t> permits_;  // written under the lock (set_permits), read without it
    const std::size_t max_waiters_;
    std::size_t held_ = 0;  // permits granted and not released
    std::size_t memory_budget_;
    std::size_t held_bytes_ = 0;
    const bool measure_time_;
    const bool reject_late_;
    const std::shared_ptr<admission_timer> clock_;
    double mean_session_seconds_ = -1;  // recent mean of the measured sessions' durations (P5); -1: none yet
    double virtual_time_ = 0;  // the charge of the group served last: where an idle group starts (P3)
    // Waiters with a deadline, earliest first (P4), threaded through their
    // hand-off links (free until the grant).
    intrusive_list<entry_node, &entry_node::handoff_next_, &entry_node::handoff_prev_> deadlines_;
    std::size_t nested_running_ = 0;
    // likely_admits_at_once's hint: the free permits when nobody waits and
    // the queue admits (not poisoned, not shut down), else 0. Written under
    // the lock, read without it.
    std::atomic<std::size_t> at_once_hint_;
    start_sequencer start_order_{mutex_};  // guarded by mutex_ (its own *_locked members)
    // Written under the lock, read without it.
    std::atomic<bool> poisoned_{false};
    std::atomic<bool> shut_down_{false};
};

}  // namespace tenferro::detail
