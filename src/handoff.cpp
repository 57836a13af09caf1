// The rendezvous of include/tenferro/detail/handoff.hpp.

#include "tenferro/detail/handoff.hpp"

#include <thread>

#include "fast_tls.hpp"

namespace tenferro::detail {
namespace {

// The gate whose hand-off is inside post/dispatch on this thread right now. A
// function that passes this gate while it is current runs inline in that call.
TENFERRO_FAST_TLS thread_local handoff_gate* posting_gate = nullptr;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace

handoff_scope::handoff_scope(handoff_gate& gate) noexcept : gate_(&gate), previous_(posting_gate) {
    // Relaxed suffices: the executor's queue orders this store before the
    // function's first load (the enqueue synchronises with the dequeue).
    gate.open_.store(false, std::memory_order_relaxed);
    posting_gate = &gate;
}

handoff_scope::~handoff_scope() {
    // Compare pointers only: if the function ran inline, `*gate_` may be freed.
    const bool still_ours = posting_gate == gate_;
    posting_gate = previous_;
    if (still_ours) gate_->open_.store(true, std::memory_order_release);  // the last touch
}

void handoff_gate::pass() noexcept {
    if (posting_gate == this) {
        // Inline in our own post/dispatch: nothing to wait for; tell the scope
        // that the gate is no longer its to open.
        posting_gate = nullptr;
        return;
    }
    // The poster is between its enqueue and its return from post: a few
    // hundred instructions at most, unless it was preempted; then yield the
    // core to it.
    for (unsigned spins = 0; !open_.load(std::memory_order_acquire); ++spins) {
        if (spins < 128)
            cpu_relax();
        else
            std::this_thread::yield();
    }
}

}  // namespace tenferro::detail
