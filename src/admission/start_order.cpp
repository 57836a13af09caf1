// The start-order sequencer of include/tenferro/detail/admission/start_order.hpp.

#include "tenferro/detail/admission/start_order.hpp"

#include <mutex>

namespace tenferro::detail {

void start_sequencer::granted_locked(entry_node& n, bool ready, bool listed) noexcept {
    n.may_start_inline_ = unstarted_.load(std::memory_order_relaxed) == 0;
    if (!n.starts_on_caller_) return;
    n.start_counted_ = true;
    unstarted_.fetch_add(1, std::memory_order_relaxed);
    n.handoff_listed_ = listed;
    n.handoff_ready_ = ready;
    if (listed) handoffs_.push_back(n);
}

entry_node* start_sequencer::take_ready_locked() noexcept {
    auto ready = handoffs_.take_front_while([](const entry_node& n) { return n.handoff_ready_; });
    for (entry_node* n = ready.front(); n != nullptr; n = n->handoff_next_) n->handoff_listed_ = false;
    return ready.front();
}

entry_node* start_sequencer::claim_locked() noexcept {
    // A thread is handing off: tell it to look again before it stops (the
    // entries that became ready are its to hand off), and leave.
    unsigned char role = role_busy;
    if (role_.compare_exchange_strong(role, role_busy_more, std::memory_order_acq_rel) || role == role_busy_more)
        return nullptr;
    // Nobody is: take the ready prefix, and the role with it.
    entry_node* chain = take_ready_locked();
    if (chain != nullptr) role_.store(role_busy, std::memory_order_relaxed);
    return chain;
}

entry_node* start_sequencer::ready_for_handoff(entry_node& n, bool inline_candidate, bool& took_alone) {
    std::lock_guard lock(lock_);
    n.handoff_ready_ = true;
    took_alone = false;
    if (inline_candidate && handoffs_.front() == &n) {
        // Admitted at once with nothing unstarted before it: it may start
        // inline, and the thread that starts it does not take the hand-off
        // role meanwhile (others may hand off grants made after it).
        handoffs_.unlink(n);
        n.handoff_listed_ = false;
        took_alone = true;
        return &n;
    }
    return claim_locked();
}

entry_node* start_sequencer::abandon_handoff(entry_node& n) {
    std::lock_guard lock(lock_);
    if (n.handoff_listed_) {
        handoffs_.unlink(n);
        n.handoff_listed_ = false;
    }
    return claim_locked();
}

entry_node* start_sequencer::next_handoffs(bool has_role) {
    if (has_role) {
        // The common case costs no lock: nobody marked an entry ready while
        // we handed off, so we are done.
        unsigned char role = role_busy;
        if (role_.compare_exchange_strong(role, role_idle, std::memory_order_acq_rel)) return nullptr;
        std::lock_guard lock(lock_);
        role_.store(role_busy, std::memory_order_relaxed);
        entry_node* chain = take_ready_locked();
        if (chain == nullptr) role_.store(role_idle, std::memory_order_release);
        return chain;
    }
    std::lock_guard lock(lock_);
    return claim_locked();
}

}  // namespace tenferro::detail
