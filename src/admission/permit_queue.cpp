#include "tenferro/detail/admission/permit_queue.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

namespace tenferro::detail {

namespace {

std::vector<group_options> default_groups(std::vector<group_options> groups) {
    if (groups.empty()) groups.push_back({"default", 1});
    if (groups.size() > std::numeric_limits<std::uint16_t>::max())
        throw std::invalid_argument("host_options::groups: at most 65535 groups");
    for (const group_options& g : groups)
        if (g.weight == 0) throw std::invalid_argument("host_options::groups: group \"" + g.name + "\" has weight 0");
    return groups;
}

}  // namespace

permit_queue::permit_queue(std::size_t permits, std::size_t max_waiters, queue_policy policy)
    : permits_(permits),
      max_waiters_(max_waiters),
      memory_budget_(policy.memory_budget),
      measure_time_(policy.measure_time || policy.reject_late),
      reject_late_(policy.reject_late),
      clock_(std::move(policy.clock)),
      at_once_hint_(permits) {
    std::vector<group_options> groups = default_groups(std::move(policy.groups));
    groups_.resize(groups.size());
    for (std::size_t i = 0; i < groups.size(); ++i) {
        groups_[i].name = std::move(groups[i].name);
        groups_[i].weight = groups[i].weight;
        groups_[i].max_waiters = groups[i].max_waiters;
    }
}

void permit_queue::link_locked(group_queue& g, permit_waiter& w) noexcept {
    if (g.waiters.empty() && groups_.size() > 1) {
        // P3: a group that becomes backlogged is not owed its idle time. It
        // starts from the least charge among the groups backlogged now (or,
        // when none is, where the last group served stood).
        double floor = virtual_time_;
        bool any = false;
        for (const group_queue& other : groups_)
            if (!other.waiters.empty() && (!any || other.charge < floor)) {
                floor = other.charge;
                any = true;
            }
        g.charge = std::max(g.charge, floor);
    }
    w.phase_.advance(entry_phase::waiting);
    g.waiters.push_back(w);
    g.queued_permits += w.permits_;
    ++waiting_;
    auto& e = static_cast<entry_node&>(w);
    if (e.when_ != std::chrono::steady_clock::time_point::max()) {
        // Sorted by deadline, scanning from the latest: deadlines are mostly
        // "now + the client's timeout", so an arrival usually goes last.
        entry_node* after = deadlines_.back();
        while (after != nullptr && after->when_ > e.when_) after = after->handoff_prev_;
        deadlines_.insert_after(after, e);
    }
}

void permit_queue::unlink_locked(permit_waiter& w) noexcept {
    group_queue& g = groups_[w.group_];
    g.waiters.unlink(w);
    g.queued_permits -= w.permits_;
    --waiting_;
    leave_locked(static_cast<entry_node&>(w));
}

void permit_queue::leave_locked(entry_node& w) noexcept {
    if (w.when_ != std::chrono::steady_clock::time_point::max()) deadlines_.unlink(w);
}

permit_queue::group_queue* permit_queue::next_group_locked() noexcept {
    if (waiting_ == 0) return nullptr;
    if (groups_.size() == 1) return &groups_[0];
    group_queue* best = nullptr;
    for (group_queue& g : groups_)
        if (!g.waiters.empty() && (best == nullptr || g.charge < best->charge)) best = &g;
    return best;
}

std::chrono::steady_clock::duration permit_queue::predicted_wait_locked(const permit_waiter& w) const noexcept {
    if (mean_session_seconds_ < 0) return {};
    // The permit-time served before `w`: its group's waiters ahead, and the
    // other backlogged groups' shares of that time (each up to its backlog),
    // plus half a session for each permit held now, at the recent mean.
    const group_queue& own = groups_[w.group_];
    const double ahead = static_cast<double>(own.queued_permits + w.permits_);
    double permits_ahead = ahead - w.permits_;
    for (const group_queue& g : groups_)
        if (&g != &own && g.queued_permits != 0)
            permits_ahead += std::min(static_cast<double>(g.queued_permits), ahead * g.weight / own.weight);
    const double permit_seconds = (permits_ahead + 0.5 * static_cast<double>(held_)) * mean_session_seconds_;
    const double seconds =
        permit_seconds / static_cast<double>(std::max<std::size_t>(permits_.load(std::memory_order_relaxed), 1));
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

acquire_outcome permit_queue::acquire(entry_node& w, bool may_wait, bool start_inline_if_clear,
                                      std::chrono::steady_clock::duration* predicted) {
    std::lock_guard lock(mutex_);
    group_queue& g = groups_[w.group_];  // in range: checked by the entry (groups are fixed)
    if (poisoned_.load(std::memory_order_relaxed)) {
        ++g.rejected;
        return acquire_outcome::poisoned;
    }
    if (shut_down_.load(std::memory_order_relaxed)) {
        ++g.rejected;
        return acquire_outcome::shut_down;
    }
    if (!ever_fits_locked(w)) {
        ++g.rejected;
        return acquire_outcome::too_large;
    }
    std::chrono::steady_clock::time_point now{};
    if (w.when_ != std::chrono::steady_clock::time_point::max()) {
        now = this->now();
        if (w.when_ <= now) {
            ++g.rejected;
            ++g.expired;
            return acquire_outcome::expired;
        }
    }
    if (admits_at_once_locked(w)) {
        held_ += w.permits_;
        held_bytes_ += w.bytes_;
        charge_grant_locked(g, w.permits_);
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
        ++g.rejected;
        return acquire_outcome::would_wait;
    }
    if (waiting_ >= max_waiters_ || g.waiters.size() >= g.max_waiters) {
        ++g.rejected;
        return acquire_outcome::queue_full;
    }
    if (reject_late_ && now != std::chrono::steady_clock::time_point{}) {
        const std::chrono::steady_clock::duration wait = predicted_wait_locked(w);
        if (predicted != nullptr) *predicted = wait;
        if (wait > w.when_ - now) {
            ++g.rejected;
            ++g.expired;
            return acquire_outcome::late;
        }
    }
    link_locked(g, w);
    publish_hint_locked();
    return acquire_outcome::queued;
}

bool permit_queue::try_acquire_inline(permit_waiter& w) noexcept {
    std::lock_guard lock(mutex_);
    // acquire()'s conditions for granted_inline, in one test (the same helpers).
    if (!admits_locked() || !admits_at_once_locked(w) || !start_order_.clear_locked()) return false;
    held_ += w.permits_;
    held_bytes_ += w.bytes_;
    publish_hint_locked();
    w.phase_.advance(entry_phase::granted);
    ++groups_[w.group_].admitted;
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
    w.phase_.advance(entry_phase::granted);
    ++groups_[w.group_].admitted;
    start_order_.granted_locked(w, ready, listed);
}

void permit_queue::grant_fitting_locked(waiter_list& granted, entry_node** handoffs) {
    // Stop at the first chosen head that does not fit: a weighted head blocks
    // those behind it (S4) and the other groups (P3), otherwise small entries
    // could starve it forever.
    bool made_ready = false;
    std::chrono::steady_clock::time_point now{};
    while (group_queue* g = next_group_locked()) {
        permit_waiter* head = g->waiters.front();
        auto& head_entry = static_cast<entry_node&>(*head);
        if (head_entry.when_ != std::chrono::steady_clock::time_point::max()) {
            if (now == std::chrono::steady_clock::time_point{}) now = this->now();
            if (head_entry.when_ <= now) {
                // P4: its deadline passed before its grant; no body starts late.
                unlink_locked(*head);
                head->phase_.advance(entry_phase::rejected);
                ++g->expired;
                ++g->rejected;
                granted.push_back(*head);
                continue;
            }
        }
        if (!fits_locked(*head)) break;
        g->waiters.pop_front();
        g->queued_permits -= head->permits_;
        --waiting_;
        leave_locked(head_entry);  // before the grant: the hand-off list takes its links
        held_ += head->permits_;
        held_bytes_ += head->bytes_;
        virtual_time_ = g->charge;
        charge_grant_locked(*g, head->permits_);
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

waiter_list permit_queue::release(const released_grant& r, entry_node** handoffs) {
    waiter_list granted;
    if (handoffs != nullptr) *handoffs = nullptr;
    std::lock_guard lock(mutex_);
    held_ -= r.permits;
    held_bytes_ -= r.bytes;
    group_queue& g = groups_[r.group];
    ++g.completed;
    if (r.seconds >= 0) {
        // P2: the group pays permits x seconds, divided by its weight; it was
        // charged the expected time at the grant, so the difference now.
        const double permit_seconds = static_cast<double>(r.permits) * r.seconds;
        g.busy_permit_seconds += permit_seconds;
        g.charge += static_cast<double>(r.permits) * (r.seconds - expected_seconds_locked(g)) / g.weight;
        // The estimates: moving means over roughly the last 16 sessions (P2's per group, P5's per host).
        g.mean_seconds = g.mean_seconds < 0 ? r.seconds : g.mean_seconds + (r.seconds - g.mean_seconds) / 16;
        mean_session_seconds_ =
            mean_session_seconds_ < 0 ? r.seconds : mean_session_seconds_ + (r.seconds - mean_session_seconds_) / 16;
    }
    if (admits_locked()) grant_fitting_locked(granted, handoffs);
    publish_hint_locked();
    if (idle_waited_ && idle_locked()) idle_cv_.notify_all();
    return granted;
}

bool permit_queue::cancel(entry_node& w, waiter_list& granted, entry_node** handoffs) {
    if (handoffs != nullptr) *handoffs = nullptr;
    std::lock_guard lock(mutex_);
    if (w.phase() != entry_phase::waiting) return false;  // granted or drained first
    unlink_locked(w);
    w.phase_.advance(entry_phase::rejected);
    ++groups_[w.group_].cancelled;
    if (admits_locked()) grant_fitting_locked(granted, handoffs);
    publish_hint_locked();
    return true;
}

std::chrono::steady_clock::time_point permit_queue::expire_due(std::chrono::steady_clock::time_point now,
                                                               waiter_list& expired, waiter_list& granted,
                                                               entry_node** handoffs) {
    if (handoffs != nullptr) *handoffs = nullptr;
    std::lock_guard lock(mutex_);
    while (entry_node* w = deadlines_.front()) {
        if (w->when_ > now) break;
        unlink_locked(*w);
        w->phase_.advance(entry_phase::rejected);
        group_queue& g = groups_[w->group_];
        ++g.expired;
        ++g.rejected;
        expired.push_back(*w);
    }
    if (admits_locked()) grant_fitting_locked(granted, handoffs);
    publish_hint_locked();
    const entry_node* next = deadlines_.front();
    return next != nullptr ? next->when_ : std::chrono::steady_clock::time_point::max();
}

void permit_queue::reject_oversized_locked(waiter_list& rejected) noexcept {
    for (group_queue& g : groups_) {
        permit_waiter* w = g.waiters.front();
        while (w != nullptr) {
            permit_waiter* next = w->next_;
            if (!ever_fits_locked(*w)) {
                g.waiters.unlink(*w);
                g.queued_permits -= w->permits_;
                --waiting_;
                leave_locked(static_cast<entry_node&>(*w));
                w->phase_.advance(entry_phase::rejected);
                ++g.rejected;
                rejected.push_back(*w);
            }
            w = next;
        }
    }
}

void permit_queue::set_permits(std::size_t n, waiter_list& granted, waiter_list& rejected, entry_node** handoffs) {
    if (n == 0) throw std::invalid_argument("set_permits: a host needs at least 1 permit");
    if (handoffs != nullptr) *handoffs = nullptr;
    std::lock_guard lock(mutex_);
    permits_.store(n, std::memory_order_relaxed);
    reject_oversized_locked(rejected);
    if (admits_locked()) grant_fitting_locked(granted, handoffs);
    publish_hint_locked();
    if (idle_waited_ && idle_locked()) idle_cv_.notify_all();
}

void permit_queue::set_memory_budget(std::size_t bytes, waiter_list& granted, waiter_list& rejected,
                                     entry_node** handoffs) {
    if (handoffs != nullptr) *handoffs = nullptr;
    std::lock_guard lock(mutex_);
    memory_budget_ = bytes;
    reject_oversized_locked(rejected);
    if (admits_locked()) grant_fitting_locked(granted, handoffs);
    publish_hint_locked();
}

waiter_list permit_queue::drain_locked() {
    waiter_list drained;
    for (group_queue& g : groups_)
        while (permit_waiter* w = g.waiters.pop_front()) {
            leave_locked(static_cast<entry_node&>(*w));
            g.queued_permits = 0;
            w->phase_.advance(entry_phase::rejected);
            ++g.rejected;
            drained.push_back(*w);
        }
    waiting_ = 0;
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

void permit_queue::note_completed_without_permits(std::size_t group) {
    std::lock_guard lock(mutex_);
    ++groups_[group].completed;
    --nested_running_;
    if (idle_waited_ && idle_locked()) idle_cv_.notify_all();
}

permit_queue::group_queue& permit_queue::counted_group_locked(std::size_t group) noexcept {
    return groups_[group < groups_.size() ? group : 0];
}

void permit_queue::note_expired(std::size_t group) {
    std::lock_guard lock(mutex_);
    group_queue& g = counted_group_locked(group);
    ++g.rejected;
    ++g.expired;
}

void permit_queue::note_cancelled(std::size_t group) {
    std::lock_guard lock(mutex_);
    ++counted_group_locked(group).cancelled;
}

void permit_queue::note_stopped(std::size_t group) {
    std::lock_guard lock(mutex_);
    ++counted_group_locked(group).stopped;
}

void permit_queue::note_rejected(std::size_t group) {
    std::lock_guard lock(mutex_);
    ++counted_group_locked(group).rejected;
}

permit_counters permit_queue::counters() const {
    std::lock_guard lock(mutex_);
    permit_counters c;
    c.permits = permits_.load(std::memory_order_relaxed);
    c.available = free_permits_locked();
    c.waiting = waiting_;
    for (const group_queue& g : groups_) {
        c.admitted += g.admitted;
        c.completed += g.completed;
        c.rejected += g.rejected;
        c.cancelled += g.cancelled;
        c.expired += g.expired;
        c.stopped += g.stopped;
    }
    c.memory_budget = memory_budget_;
    c.memory_available = memory_budget_ > held_bytes_ ? memory_budget_ - held_bytes_ : 0;
    c.held_bytes = held_bytes_;
    return c;
}

group_stats permit_queue::group_counters(std::size_t i) const {
    if (i >= groups_.size())
        throw std::out_of_range("group_stats: group " + std::to_string(i) + " of " + std::to_string(groups_.size()));
    std::lock_guard lock(mutex_);
    const group_queue& g = groups_[i];
    return {g.name,      g.weight,  g.waiters.size(),      g.admitted, g.completed, g.rejected,
            g.cancelled, g.expired, g.busy_permit_seconds, g.stopped};
}

void permit_queue::wait_until_idle() {
    std::unique_lock lock(mutex_);
    idle_waited_ = true;
    idle_cv_.wait(lock, [&] { return idle_locked(); });
    idle_waited_ = false;
}

}  // namespace tenferro::detail
