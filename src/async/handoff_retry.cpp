// The retries of include/tenferro/detail/async/handoff_retry.hpp, on the library's timer thread.

#include "tenferro/detail/async/handoff_retry.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <type_traits>

#include "tenferro/detail/async/library_timer.hpp"

namespace tenferro::detail {

// A node of the library's timer: parking arms it, and each firing tries every
// parked hand-off once. Trivially destructible, with static storage: it stays
// valid while the timer thread runs during the process's exit, whatever the
// order of the statics' destruction.
class handoff_retrier final : public timer_node {
public:
    using clock = timer_node::clock;

    std::mutex& mutex() noexcept { return mutex_; }

    void start() { start_library_timer(); }

    /// A lane gained a parked operation (mutex_ held).
    void parked_locked(retry_lane_base& lane) noexcept {
        if (lane.registered_) return;
        lane.registered_ = true;
        lane.next_lane_ = lanes_;
        lanes_ = &lane;
    }

    /// Memory was short a moment ago: give it time to come back, then retry.
    void wake() noexcept { arm_library_timer(*this, clock::now() + std::chrono::milliseconds(1)); }

private:
    bool any_parked_locked() const noexcept {
        for (const retry_lane_base* lane = lanes_; lane != nullptr; lane = lane->next_lane_)
            if (!lane->empty_locked()) return true;
        return false;
    }

    clock::time_point fire(clock::time_point) noexcept override {
        retry_lane_base* lanes = nullptr;
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            if (!any_parked_locked()) {
                pause_ = std::chrono::milliseconds(1);
                return clock::time_point::max();
            }
            // Lanes are only ever added, at the front: the list read here
            // stays valid while the lock is dropped.
            lanes = lanes_;
        }
        bool still_short = false;
        for (retry_lane_base* lane = lanes; lane != nullptr; lane = lane->next_lane_)
            if (lane->retry_parked()) still_short = true;
        const std::lock_guard<std::mutex> lock(mutex_);
        // Still short: back off (the failed ones kept their order).
        pause_ = still_short ? std::min(pause_ * 2, std::chrono::milliseconds(64)) : std::chrono::milliseconds(1);
        return any_parked_locked() ? clock::now() + pause_ : clock::time_point::max();
    }

    std::mutex mutex_;
    retry_lane_base* lanes_ = nullptr;                  // guarded by mutex_
    std::chrono::milliseconds pause_{1};                // guarded by mutex_
};

namespace {

static_assert(std::is_trivially_destructible_v<handoff_retrier>);

handoff_retrier& retrier() noexcept {
    // Constant-initialisable members: no allocation to build it.
    static handoff_retrier instance;
    return instance;
}

bool retry_own(retry_node& node) noexcept { return node.retry(node); }

// Operations that carry their own retry_node.
constinit retry_lane<retry_node, &retry_node::next_retry, &retry_own> nodes;

}  // namespace

std::mutex& retry_lane_base::mutex() noexcept { return retrier().mutex(); }

void retry_lane_base::parked_locked() noexcept { retrier().parked_locked(*this); }

void retry_lane_base::wake() noexcept { retrier().wake(); }

void prepare_handoff_retry() { retrier().start(); }

void retry_handoff_later(retry_node& node) noexcept { nodes.park(node); }

}  // namespace tenferro::detail
