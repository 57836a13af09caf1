// The contended path of include/tenferro/detail/brief_mutex.hpp.

#include "tenferro/detail/brief_mutex.hpp"

#include "admission/cpu_relax.hpp"

namespace tenferro::detail {

namespace {
// Polls before sleeping: ~1-2 us on cores whose PAUSE takes ~40 ns, enough
// for a holder that is running to finish a critical section of the permit
// queue several times over, short enough that a preempted holder costs the
// poller little before it sleeps.
constexpr unsigned poll_rounds = 32;
}  // namespace

void brief_mutex::lock_contended() noexcept {
    for (unsigned round = 0; round < poll_rounds; ++round) {
        cpu_relax();
        if (!held_.load(std::memory_order_relaxed) && mutex_.try_lock()) {
            held_.store(true, std::memory_order_relaxed);
            return;
        }
    }
    mutex_.lock();
    held_.store(true, std::memory_order_relaxed);
}

}  // namespace tenferro::detail
