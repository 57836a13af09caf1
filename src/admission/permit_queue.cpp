#include "tenferro/detail/admission/permit_queue.hpp"

namespace tenferro::detail {

permit_queue::permit_queue(std::size_t permits, std::size_t max_waiters) noexcept
    : permits_(permits), max_waiters_(max_waiters), available_(permits), at_once_hint_(permits) {}

acquire_outcome permit_queue::acquire(entry_node& w, bool may_wait, bool start_inline_if_clear) {
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
            start_inline_if_clear && start_sequencer::ready_at_grant(w) && start_order_.clear_locked();
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
    if (!admits_locked() || !admits_at_once_locked(w) || !start_order_.clear_locked()) return false;
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

void permit_queue::grant_locked(entry_node& w, bool ready, bool listed) noexcept {
    w.state_ = permit_waiter::state::granted;
    ++admitted_;
    start_order_.granted_locked(w, ready, listed);
}

void permit_queue::grant_fitting_locked(waiter_list& granted, entry_node** handoffs) {
    // Stop at the first waiter that does not fit: a weighted head blocks those
    // behind it (S4), otherwise small entries could starve it forever.
    bool made_ready = false;
    while (permit_waiter* head = waiters_.front()) {
        if (head->permits_ > available_) break;
        waiters_.pop_front();
        available_ -= head->permits_;
        // (Every waiter in the list came through acquire: an entry_node.)
        entry_node& w = static_cast<entry_node&>(*head);
        // A waiter ready at its grant is not returned: from here on the
        // hand-off list owns it (another thread handing off may take it as
        // soon as the lock is released), so we must not touch it again.
        const bool ready = handoffs != nullptr && start_sequencer::ready_at_grant(w);
        grant_locked(w, ready);
        if (ready)
            made_ready = true;
        else
            granted.push_back(w);
    }
    // The fan-in common path: the granting thread takes the ready chain (and
    // the hand-off role) in this same critical section, no second lock.
    if (made_ready) *handoffs = start_order_.claim_locked();
}

waiter_list permit_queue::release(std::size_t n, entry_node** handoffs) {
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

bool permit_queue::cancel(entry_node& w, waiter_list& granted, entry_node** handoffs) {
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

void permit_queue::note_admitted_without_permits(entry_node& w) {
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
