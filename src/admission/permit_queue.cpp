#include "tenferro/detail/permit_queue.hpp"

namespace tenferro::detail {

permit_queue::permit_queue(std::size_t permits, std::size_t max_waiters) noexcept
    : permits_(permits), max_waiters_(max_waiters), available_(permits), at_once_hint_(permits) {}

acquire_outcome permit_queue::acquire(permit_waiter& w, bool may_wait, bool start_inline_if_clear) {
    std::lock_guard lock(mutex_);
    if (poisoned_.load(std::memory_order_relaxed)) {
        ++rejected_;
        return acquire_outcome::poisoned;
    }
    if (shut_down_.load(std::memory_order_relaxed)) {
        ++rejected_;
        return acquire_outcome::shut_down;
    }
    if (admits_at_once_locked(w)) {
        available_ -= w.permits_;
        // Inline at once when nothing granted before `w` is unstarted (every
        // such grant is counted until its body starts, and is in the hand-off
        // list until it is handed off): `w` may start now, on this thread
        // (S17). It is left out of the hand-off list (nobody can queue behind
        // it there) but stays counted as unstarted until it starts, so that a
        // grant made meanwhile on another thread does not start inline ahead of it.
        const bool start_inline =
            start_inline_if_clear && w.starts_on_caller_ && w.ready_at_grant_ && nothing_unstarted_locked();
        grant_locked(w, start_inline, !start_inline);
        publish_hint_locked();
        return start_inline ? acquire_outcome::granted_inline : acquire_outcome::granted;
    }
    if (!may_wait) {
        ++rejected_;
        return acquire_outcome::would_wait;
    }
    if (waiters_.size() >= max_waiters_) {
        ++rejected_;
        return acquire_outcome::queue_full;
    }
    w.state_ = permit_waiter::state::waiting;
    waiters_.push_back(w);
    publish_hint_locked();
    return acquire_outcome::queued;
}

bool permit_queue::try_acquire_inline(permit_waiter& w) noexcept {
    std::lock_guard lock(mutex_);
    // acquire()'s conditions for granted_inline, in one test (the same helpers).
    if (!admits_locked() || !admits_at_once_locked(w) || !nothing_unstarted_locked()) return false;
    available_ -= w.permits_;
    publish_hint_locked();
    w.state_ = permit_waiter::state::granted;
    ++admitted_;
    // Not counted as unstarted, unlike acquire's granted_inline: that count
    // keeps a grant made meanwhile on another thread from starting inline
    // ahead of this one while this one waits for its start, and this one does
    // not wait: its thread goes on to its body at once. Counting it would
    // only make such a grant in the instant between this unlock and the count
    // going down again take a post instead, an order no body could tell from
    // the same grant made an instant later; it cost two atomic
    // read-modify-writes on a cache line the I/O threads share.
    return true;
}

void permit_queue::grant_locked(permit_waiter& w, bool ready, bool listed) noexcept {
    w.state_ = permit_waiter::state::granted;
    ++admitted_;
    w.may_start_inline_ = unstarted_.load(std::memory_order_relaxed) == 0;
    if (w.starts_on_caller_) {
        w.start_counted_ = true;
        unstarted_.fetch_add(1, std::memory_order_relaxed);
        w.handoff_listed_ = listed;
        w.handoff_ready_ = ready;
        if (listed) handoffs_.push_back(w);
    }
}

permit_waiter* permit_queue::take_ready_handoffs_locked() noexcept {
    // Unlinks the ready prefix of the hand-off list and returns it as a chain
    // (through handoff_next_, null-terminated).
    auto ready = handoffs_.take_front_while([](const permit_waiter& w) { return w.handoff_ready_; });
    for (permit_waiter* w = ready.front(); w != nullptr; w = w->handoff_next_) w->handoff_listed_ = false;
    return ready.front();
}

permit_waiter* permit_queue::ready_for_handoff(permit_waiter& w, bool inline_candidate, bool& took_alone) {
    std::lock_guard lock(mutex_);
    w.handoff_ready_ = true;
    took_alone = false;
    if (inline_candidate && handoffs_.front() == &w) {
        // Admitted at once with nothing unstarted before it: it may start
        // inline, and the thread that starts it does not take the hand-off
        // role meanwhile (others may hand off grants made after it).
        handoffs_.unlink(w);
        w.handoff_listed_ = false;
        took_alone = true;
        return &w;
    }
    return claim_handoffs_locked();
}

permit_waiter* permit_queue::abandon_handoff(permit_waiter& w) {
    std::lock_guard lock(mutex_);
    if (w.handoff_listed_) {
        handoffs_.unlink(w);
        w.handoff_listed_ = false;
    }
    return claim_handoffs_locked();
}

permit_waiter* permit_queue::claim_handoffs_locked() noexcept {
    // A thread is handing off: tell it to look again before it stops (the
    // entries that became ready are its to hand off), and leave.
    unsigned char role = role_busy;
    if (handoff_role_.compare_exchange_strong(role, role_busy_more, std::memory_order_acq_rel) ||
        role == role_busy_more)
        return nullptr;
    // Nobody is: take the ready prefix, and the role with it.
    permit_waiter* chain = take_ready_handoffs_locked();
    if (chain != nullptr) handoff_role_.store(role_busy, std::memory_order_relaxed);
    return chain;
}

permit_waiter* permit_queue::next_handoffs(bool has_role) {
    if (has_role) {
        // The common case costs no lock: nobody marked an entry ready while
        // we handed off, so we are done.
        unsigned char role = role_busy;
        if (handoff_role_.compare_exchange_strong(role, role_idle, std::memory_order_acq_rel)) return nullptr;
        std::lock_guard lock(mutex_);
        handoff_role_.store(role_busy, std::memory_order_relaxed);
        permit_waiter* chain = take_ready_handoffs_locked();
        if (chain == nullptr) handoff_role_.store(role_idle, std::memory_order_release);
        return chain;
    }
    std::lock_guard lock(mutex_);
    return claim_handoffs_locked();
}

void permit_queue::grant_fitting_locked(waiter_list& granted, permit_waiter** handoffs) {
    // Stop at the first waiter that does not fit: a weighted head blocks those
    // behind it (S4), otherwise small entries could starve it forever.
    bool made_ready = false;
    while (permit_waiter* head = waiters_.front()) {
        if (head->permits_ > available_) break;
        waiters_.pop_front();
        available_ -= head->permits_;
        // A waiter ready at its grant is not returned: from here on the
        // hand-off list owns it (another thread handing off may take it as
        // soon as the lock is released), so we must not touch it again.
        const bool ready = handoffs != nullptr && head->starts_on_caller_ && head->ready_at_grant_;
        grant_locked(*head, ready);
        if (ready)
            made_ready = true;
        else
            granted.push_back(*head);
    }
    // The fan-in common path: the granting thread takes the ready chain (and
    // the hand-off role) in this same critical section, no second lock.
    if (made_ready) *handoffs = claim_handoffs_locked();
}

waiter_list permit_queue::release(std::size_t n, permit_waiter** handoffs) {
    waiter_list granted;
    if (handoffs != nullptr) *handoffs = nullptr;
    std::lock_guard lock(mutex_);
    available_ += n;
    ++completed_;
    if (admits_locked()) grant_fitting_locked(granted, handoffs);
    publish_hint_locked();
    if (idle_waited_ && available_ == permits_ && nested_running_ == 0) idle_cv_.notify_all();
    return granted;
}

bool permit_queue::cancel(permit_waiter& w, waiter_list& granted, permit_waiter** handoffs) {
    if (handoffs != nullptr) *handoffs = nullptr;
    std::lock_guard lock(mutex_);
    if (w.state_ != permit_waiter::state::waiting) return false;  // granted or drained first
    waiters_.unlink(w);
    w.state_ = permit_waiter::state::removed;
    ++cancelled_;
    if (admits_locked()) grant_fitting_locked(granted, handoffs);
    publish_hint_locked();
    return true;
}

waiter_list permit_queue::drain_locked() {
    waiter_list drained;
    while (permit_waiter* w = waiters_.pop_front()) {
        w->state_ = permit_waiter::state::removed;
        ++rejected_;
        drained.push_back(*w);
    }
    publish_hint_locked();
    return drained;
}

waiter_list permit_queue::poison() {
    std::lock_guard lock(mutex_);
    poisoned_.store(true, std::memory_order_release);
    return drain_locked();
}

waiter_list permit_queue::shut_down() {
    std::lock_guard lock(mutex_);
    shut_down_.store(true, std::memory_order_release);
    return drain_locked();
}

void permit_queue::note_admitted_without_permits(permit_waiter& w) {
    std::lock_guard lock(mutex_);
    grant_locked(w);
    ++nested_running_;
}

void permit_queue::note_completed_without_permits() {
    std::lock_guard lock(mutex_);
    ++completed_;
    --nested_running_;
    if (idle_waited_ && available_ == permits_ && nested_running_ == 0) idle_cv_.notify_all();
}

void permit_queue::note_rejected() {
    std::lock_guard lock(mutex_);
    ++rejected_;
}

permit_counters permit_queue::counters() const {
    std::lock_guard lock(mutex_);
    return {permits_, available_, waiters_.size(), admitted_, completed_, rejected_, cancelled_};
}

void permit_queue::wait_until_idle() {
    std::unique_lock lock(mutex_);
    idle_waited_ = true;
    idle_cv_.wait(lock, [&] { return available_ == permits_ && nested_running_ == 0; });
    idle_waited_ = false;
}

}  // namespace tenferro::detail
