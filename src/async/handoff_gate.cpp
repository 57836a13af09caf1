// The rendezvous of include/tenferro/detail/async/handoff_gate.hpp.

#include "tenferro/detail/async/handoff_gate.hpp"

#include <thread>

#include "async/cpu_relax.hpp"
#include "async/fast_tls.hpp"

namespace tenferro::detail {
namespace {

// The gate whose hand-off is inside post/dispatch on this thread right now. A
// function that passes this gate while it is current runs inline in that call.
TENFERRO_FAST_TLS thread_local handoff_gate* posting_gate = nullptr;

}  // namespace

handoff_scope::handoff_scope(handoff_gate& gate) noexcept : gate_(&gate), previous_(posting_gate) {
    // Relaxed suffices: the executor's queue orders this store before the
    // function's first load (the enqueue synchronises with the dequeue).
    gate.state_.store(handoff_gate::closed, std::memory_order_relaxed);
    posting_gate = &gate;
}

handoff_scope::~handoff_scope() {
    // Compare pointers only: if the function ran inline, `*gate_` may be freed.
    const bool still_ours = posting_gate == gate_;
    posting_gate = previous_;
    if (!still_ours) return;
    // The last touch of the gate: open it and learn, in the same atomic step,
    // whether the function is already waiting for us. If it is, it has most
    // likely preempted this thread on this CPU (Linux tends to run a woken
    // thread on its waker's CPU), so give the CPU back at once rather than at
    // the end of our time slice or of a compute worker's spin.
    if (gate_->state_.exchange(handoff_gate::open, std::memory_order_acq_rel) == handoff_gate::closed_with_waiter)
        std::this_thread::yield();
}

namespace {
// The gate whose function the last post on this thread dropped (note_dropped_in_post).
TENFERRO_FAST_TLS thread_local const handoff_gate* dropped_in_post = nullptr;
}  // namespace

bool handoff_gate::in_own_post() const noexcept { return posting_gate == this; }

void handoff_gate::note_dropped_in_post() noexcept { dropped_in_post = this; }

bool handoff_gate::take_dropped_in_post(const handoff_gate* gate) noexcept {
    if (dropped_in_post != gate) return false;
    dropped_in_post = nullptr;
    return true;
}

void handoff_gate::pass() noexcept {
    if (posting_gate == this) {
        // Inline in our own post/dispatch (run there, or destroyed there by a
        // post that failed): nothing to wait for; tell the scope that the gate
        // is no longer its to open, and open it ourselves, on the poster's own
        // thread, while its storage is still ours. Left closed, the next
        // pass() of this gate (the same operation's completion, after a
        // failed post of its runner) would wait forever for a poster that has
        // left (S19).
        posting_gate = nullptr;
        state_.store(open, std::memory_order_relaxed);
        return;
    }
    // The poster is between its enqueue and its return from post: a few
    // hundred instructions, unless it was preempted, typically by this very
    // thread on the same CPU. Spin only briefly (a PAUSE costs up to ~40 ns),
    // then say we wait and yield the CPU to it until it opens the gate.
    for (unsigned spins = 0; spins < 16; ++spins) {
        if (state_.load(std::memory_order_acquire) == open) return;
        cpu_relax();
    }
    unsigned char expected = closed;
    if (!state_.compare_exchange_strong(expected, closed_with_waiter, std::memory_order_acq_rel) && expected == open)
        return;
    while (state_.load(std::memory_order_acquire) != open) std::this_thread::yield();
}

}  // namespace tenferro::detail
