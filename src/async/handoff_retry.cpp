// The retrying thread of include/tenferro/detail/async/handoff_retry.hpp.

#include "tenferro/detail/async/handoff_retry.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

namespace tenferro::detail {

class handoff_retrier {
public:
    std::mutex& mutex() noexcept { return mutex_; }

    void start() {
        if (running_.load(std::memory_order_acquire)) return;
        const std::lock_guard<std::mutex> lock(mutex_);
        if (running_.load(std::memory_order_relaxed)) return;
        thread_ = std::thread([this] { loop(); });  // throws: the caller may throw
        running_.store(true, std::memory_order_release);
    }

    /// A lane gained a parked operation (mutex_ held).
    void parked_locked(retry_lane_base& lane) noexcept {
        if (lane.registered_) return;
        lane.registered_ = true;
        lane.next_lane_ = lanes_;
        lanes_ = &lane;
    }

    void wake() noexcept { wake_.notify_one(); }

    // At exit: the thread is stopped. Hand-offs still parked then (memory
    // never came back) are left as they are: their executors' contexts may
    // already be gone, so not even their destruction is safe.
    ~handoff_retrier() {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_one();
        if (thread_.joinable()) thread_.join();
    }

private:
    bool any_parked_locked() const noexcept {
        for (const retry_lane_base* lane = lanes_; lane != nullptr; lane = lane->next_lane_)
            if (!lane->empty_locked()) return true;
        return false;
    }

    void loop() noexcept {
        using namespace std::chrono_literals;
        std::chrono::milliseconds pause = 1ms;
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            if (!any_parked_locked()) {
                pause = 1ms;
                wake_.wait(lock, [&] { return any_parked_locked() || stopping_; });
            } else {
                // Memory was short a moment ago: give it time to come back.
                wake_.wait_for(lock, pause, [&] { return stopping_; });
            }
            if (stopping_) return;
            // Lanes are only ever added, at the front: the list read here
            // stays valid while the lock is dropped.
            retry_lane_base* const lanes = lanes_;
            lock.unlock();
            bool still_short = false;
            for (retry_lane_base* lane = lanes; lane != nullptr; lane = lane->next_lane_)
                if (lane->retry_parked()) still_short = true;
            lock.lock();
            // Still short: back off (the failed ones kept their order).
            pause = still_short ? std::min(pause * 2, std::chrono::milliseconds(64)) : 1ms;
        }
    }

    std::mutex mutex_;
    std::condition_variable wake_;
    retry_lane_base* lanes_ = nullptr;  // guarded by mutex_
    bool stopping_ = false;             // guarded by mutex_
    std::atomic<bool> running_{false};
    std::thread thread_;
};

namespace {

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
