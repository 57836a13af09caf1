#pragma once
// Start order (S17, docs/contract.md): a body never starts while a body
// granted before it on the same host, bound for the same executor, has not
// started. It concerns the entries whose body starts on their caller's
// executor (caller placement, execution scopes), between their grant and the
// start of their body, and is kept apart from FIFO admission (permit_queue.hpp),
// which decides the grants themselves.
//
// Two mechanisms, both ordered by the grants, and so by the permit queue's
// lock, which the sequencer shares (the queue calls it, under that lock, at
// every grant):
//
//  * Inline starts. An entry admitted inside its initiating function could run
//    its body inline there, ahead of bodies granted before it whose runners
//    were posted and have not run yet. The sequencer counts granted, unstarted
//    bodies, and an entry admitted at once may start inline only when that
//    count was zero at its grant.
//  * Hand-offs in grant order. Runners are handed to their executors by the
//    thread that granted them, after the observer hook; two threads granting
//    at nearly the same time could hand off out of grant order. So each such
//    grant joins the hand-off list at its grant and leaves it when it is handed
//    off (or rejected before that). Whoever finds the head of the list ready
//    hands off the ready prefix, one thread at a time (the hand-off role), so a
//    grant made later on another thread can never reach its executor first.
//
// No Asio here: tested step by step in tests/admission/permit_queue_test.cpp.

#include <atomic>
#include <chrono>
#include <cstddef>

#include "tenferro/detail/admission/brief_mutex.hpp"
#include "tenferro/detail/admission/permit_waiter.hpp"
#include "tenferro/detail/async/intrusive_list.hpp"

namespace tenferro::detail {

/// What an entry is to the permit queue: a waiter (its queue node), and its
/// place in the start order, which only the sequencer touches. Embedded in
/// every entry's operation state. (Derived rather than a second member, so
/// that the flags fill the waiter's tail padding: every byte here is paid by
/// each parked entry.)
struct entry_node : permit_waiter {
    // Set by the entry before it asks the queue for permits:
    bool starts_on_caller_ = false;  // its body starts on its caller's executor: it takes part
    // Nothing needs to run between its grant and its hand-off (no observer
    // hook, no cache claim), so a grant made by a release or a cancellation
    // marks it ready at once, in the same critical section, and the granting
    // thread may hand it off without locking again.
    bool ready_at_grant_ = false;
    // Set by the sequencer:
    bool start_counted_ = false;     // counted as granted and unstarted
    bool may_start_inline_ = false;  // at its grant, no earlier grant was unstarted
    bool handoff_listed_ = false;    // in the hand-off list
    bool handoff_ready_ = false;     // its hook ran: it may be handed to its executor
    // The hand-off list's links once granted; while the entry waits with a
    // deadline, the permit queue's deadline list threads it through them
    // (an entry is in one of the two lists at most, never both).
    entry_node* handoff_prev_ = nullptr;
    entry_node* handoff_next_ = nullptr;
    // One word, two uses that never overlap (each parked entry pays for it).
    // Until its body starts: its deadline (P4; max(): none), checked at the
    // grant and again at the start. From the start on: when the body
    // started, on hosts that charge groups for permit-time
    // (permit_queue::measures_time, P2); the epoch when not measured or
    // never started.
    std::chrono::steady_clock::time_point when_ = std::chrono::steady_clock::time_point::max();
};

/// The start order of one host's entries. Every member whose name ends in
/// `_locked` is called with the permit queue's lock held; the others take it
/// themselves, or need none.
class start_sequencer {
public:
    explicit start_sequencer(brief_mutex& queue_lock) noexcept : lock_(queue_lock) {}
    start_sequencer(const start_sequencer&) = delete;
    start_sequencer& operator=(const start_sequencer&) = delete;

    /// Nothing granted earlier is unstarted (every such grant is counted
    /// until its body starts) or waiting for its hand-off: a grant made now
    /// may start inline without overtaking one.
    bool clear_locked() const noexcept { return handoffs_.empty() && unstarted_.load(std::memory_order_relaxed) == 0; }

    /// Whether `n` may be handed off the moment it is granted (it takes part,
    /// and nothing runs between its grant and its hand-off).
    static bool ready_at_grant(const entry_node& n) noexcept { return n.starts_on_caller_ && n.ready_at_grant_; }

    /// `n` was granted now. If it takes part it is counted as unstarted and,
    /// unless `listed` is false (an inline start: nobody can be held up
    /// behind it), joins the hand-off list, `ready` or not.
    void granted_locked(entry_node& n, bool ready = false, bool listed = true) noexcept;

    /// The ready chain for a thread that may take the hand-off role if nobody
    /// holds it, or null (a thread holding the role is told to look again).
    entry_node* claim_locked() noexcept;

    /// Granted `n` (which takes part) may be handed to its executor. Returns
    /// the entries to hand off now, in grant order (chained through
    /// handoff_next_), when this thread is to do it; null when an earlier
    /// grant is not ready yet or another thread is handing off (it will hand
    /// off `n` too). Whoever receives a non-null chain must hand it off and
    /// then call next_handoffs() until that returns null.
    ///
    /// `inline_candidate`: `n` was admitted inside its initiating function
    /// with nothing unstarted before it. If it heads the list it is returned
    /// alone (`took_alone`), without the hand-off role: the caller starts it,
    /// then calls next_handoffs(false).
    entry_node* ready_for_handoff(entry_node& n, bool inline_candidate, bool& took_alone);
    /// `n` will not be handed off (rejected after its grant); like
    /// ready_for_handoff, may hand the caller the chain it unblocked.
    entry_node* abandon_handoff(entry_node& n);
    /// The next ready chain for the thread that is handing off (`has_role`),
    /// or for a thread that may take the role if nobody holds it; null when
    /// there is none (the role, if held, is then given up).
    entry_node* next_handoffs(bool has_role = true);

    /// The body of granted `n` starts now (or never will): it no longer holds
    /// back bodies granted after it. Idempotent; any thread, no lock.
    void note_started(entry_node& n) noexcept {
        if (n.start_counted_) {
            n.start_counted_ = false;
            unstarted_.fetch_sub(1, std::memory_order_release);
        }
    }

private:
    /// Unlinks the ready prefix of the hand-off list and returns it as a
    /// chain (through handoff_next_, null-terminated).
    entry_node* take_ready_locked() noexcept;

    brief_mutex& lock_;  // the permit queue's
    intrusive_list<entry_node, &entry_node::handoff_next_, &entry_node::handoff_prev_> handoffs_;
    // Granted entries that take part and whose bodies have not started.
    // Incremented under the lock (so a grant sees every earlier grant's
    // count), decremented without it by note_started (a stale read only costs
    // a post).
    std::atomic<std::size_t> unstarted_{0};
    // Who hands off: nobody, a thread (busy), or a thread that must look
    // again before it stops because entries became ready meanwhile. Changed
    // under the lock, except busy -> idle, the handing-off thread's lock-free
    // way out when nothing came meanwhile.
    enum : unsigned char { role_idle, role_busy, role_busy_more };
    std::atomic<unsigned char> role_{role_idle};
};

}  // namespace tenferro::detail
