// The contended paths of include/tenferro/detail/admission/brief_mutex.hpp.

#include "tenferro/detail/admission/brief_mutex.hpp"

#include "async/cpu_relax.hpp"

namespace tenferro::detail {

namespace {
// Polls before sleeping: ~1-2 us on cores whose PAUSE takes ~40 ns, enough
// for a holder that is running to finish a critical section of the permit
// queue several times over, short enough that a preempted holder costs the
// poller little before it sleeps.
constexpr unsigned poll_rounds = 32;
}  // namespace

void brief_mutex::lock_contended() noexcept {
    // Poll with plain loads, so that pollers share the lock's cache line
    // instead of taking it from each other with failed compare-exchanges.
    for (unsigned round = 0; round < poll_rounds; ++round) {
        cpu_relax();
        if (state_.load(std::memory_order_relaxed) == free && try_lock()) return;
    }
    // Sleep (libstdc++'s wait itself spins a dozen pauses and yields a few
    // times before the futex). Whoever takes the lock from here on marks it as possibly having
    // sleepers, so its unlock wakes one (at worst one wake too many, when the
    // last sleeper was this thread). The exchange that returns `free` has
    // taken the lock.
    while (state_.exchange(held_with_sleepers, std::memory_order_acquire) != free)
        state_.wait(held_with_sleepers, std::memory_order_relaxed);
}

void brief_mutex::wake_one() noexcept { state_.notify_one(); }

}  // namespace tenferro::detail
