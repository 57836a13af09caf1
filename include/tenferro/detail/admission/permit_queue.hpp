#pragma once
// The weighted FIFO permit queue at the heart of admission.
//
// Design (see docs/design/session-entry.md):
//  * Waiters are intrusive nodes living inside each entry's operation state, so
//    waiting allocates nothing and leaving the queue (cancellation) is an O(1)
//    unlink.
//  * Strict FIFO, no barging: an acquire succeeds at once only when nobody is
//    queued *and* enough permits are free. A weighted head blocks everybody
//    behind it until it can be satisfied.
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
#include <mutex>

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
    queue_full,  // the waiter count reached max_waiters
    poisoned,    // the queue is poisoned
    shut_down,   // the queue was shut down
};

/// Counters kept under the queue lock; `cpu_backend::stats()` reads them.
struct permit_counters {
    std::size_t permits = 0, available = 0, waiting = 0;
    std::uint64_t admitted = 0, completed = 0, rejected = 0, cancelled = 0;
};

class permit_queue {
public:
    permit_queue(std::size_t permits, std::size_t max_waiters) noexcept;
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
    acquire_outcome acquire(entry_node& w, bool may_wait, bool start_inline_if_clear = false);
    /// The inline fast path's acquire (entry_op::try_run_inline): grants `w`
    /// exactly when acquire would answer `granted_inline` for a caller-started
    /// waiter ready at its grant, and
    /// otherwise changes nothing at all, not even a counter: the entry then
    /// goes the general way, acquire included. Same critical section, same
    /// checks (S4, S17). The grant is not counted as unstarted (see the .cpp):
    /// the caller starts `w`'s body at once, on this thread, and calls no
    /// note_started.
    bool try_acquire_inline(permit_waiter& w) noexcept;

    /// Returns `n` permits and grants as many head waiters as now fit (FIFO
    /// order, stopping at the first one that does not). The granted waiters are
    /// returned for the caller to resume.
    ///
    /// With `handoffs`, the caller takes part in the hand-off (S17): granted
    /// waiters ready at their grant (start_sequencer::ready_at_grant) are not
    /// returned in the list but made ready in the hand-off list, and if this
    /// thread may hand off now, the ready chain comes back in `*handoffs`
    /// (with the hand-off role, as from start_sequencer::next_handoffs()).
    /// Without it, every grant is returned in the list.
    waiter_list release(std::size_t n, entry_node** handoffs = nullptr);

    /// Removes `w` if it is still waiting (returns true) and re-offers the free
    /// permits, since `w` may have been a weighted head blocking smaller waiters.
    /// Those newly granted are appended to `granted` (`handoffs`: as for release).
    bool cancel(entry_node& w, waiter_list& granted, entry_node** handoffs = nullptr);

    /// Marks the queue poisoned and hands back every waiter, now removed.
    waiter_list poison();
    /// Marks the queue shut down and hands back every waiter, now removed.
    waiter_list shut_down();

    /// Entries admitted without a permit grant (sessions inside an execution
    /// scope reuse the scope's permit) still count as admitted and completed;
    /// `w` is granted as far as start order is concerned (S17).
    void note_admitted_without_permits(entry_node& w);
    void note_completed_without_permits();
    void note_rejected();

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
    std::size_t permits() const noexcept { return permits_; }
    permit_counters counters() const;

    /// Blocks the calling thread until every permit is back and every entry
    /// admitted without permits has completed. Used only by the host's destructor.
    void wait_until_idle();

private:
    /// Neither poisoned nor shut down: the queue still grants permits. Both
    /// flags only ever go from false to true, under the lock.
    bool admits_locked() const noexcept {
        return !poisoned_.load(std::memory_order_relaxed) && !shut_down_.load(std::memory_order_relaxed);
    }
    /// S4, no barging: free permits go to the queue's head first, never to a
    /// newcomer; a newcomer is admitted at once only when nobody waits.
    bool admits_at_once_locked(const permit_waiter& w) const noexcept {
        return waiters_.empty() && w.permits_ <= available_;
    }
    void grant_fitting_locked(waiter_list& granted, entry_node** handoffs);
    /// Refreshes likely_admits_at_once's hint; called by every locked
    /// operation that changes the free permits, the waiters or whether the
    /// queue admits at all. Stored only when it changes: enter() reads it on
    /// every thread, and a store would take its cache line from them.
    void publish_hint_locked() noexcept {
        const std::size_t hint = admits_locked() && waiters_.empty() ? available_ : 0;
        if (at_once_hint_.load(std::memory_order_relaxed) != hint) at_once_hint_.store(hint, std::memory_order_relaxed);
    }
    /// Grants `w` its permits (already taken from available_) and tells the
    /// start order (`ready`, `listed`: start_sequencer::granted_locked).
    void grant_locked(entry_node& w, bool ready = false, bool listed = true) noexcept;
    waiter_list drain_locked();

    mutable brief_mutex mutex_;
    std::condition_variable_any idle_cv_;  // signalled when the last permit comes back
    bool idle_waited_ = false;         // someone sits in wait_until_idle
    waiter_list waiters_;
    const std::size_t permits_;
    const std::size_t max_waiters_;
    std::size_t available_;
    std::size_t nested_running_ = 0;
    std::uint64_t admitted_ = 0, completed_ = 0, rejected_ = 0, cancelled_ = 0;
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
