// The retrying thread of include/tenferro/detail/handoff_retry.hpp.

#include "tenferro/detail/handoff_retry.hpp"

#include "tenferro/detail/permit_queue.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

namespace tenferro::detail {
namespace {

class handoff_retrier {
public:
    void start() {
        if (running_.load(std::memory_order_acquire)) return;
        const std::lock_guard<std::mutex> lock(mutex_);
        if (running_.load(std::memory_order_relaxed)) return;
        thread_ = std::thread([this] { loop(); });  // throws: the caller may throw
        running_.store(true, std::memory_order_release);
    }

    void park(retry_node& node) noexcept {
        parked_total_.fetch_add(1, std::memory_order_relaxed);
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            node.next_retry = nullptr;
            if (tail_ == nullptr)
                head_ = &node;
            else
                tail_->next_retry = &node;
            tail_ = &node;
        }
        wake_.notify_one();
    }

    void park(permit_waiter& waiter, bool (*retry)(permit_waiter&) noexcept) noexcept {
        parked_total_.fetch_add(1, std::memory_order_relaxed);
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            waiter_retry_ = retry;
            waiter.next_ = nullptr;
            if (waiters_tail_ == nullptr)
                waiters_head_ = &waiter;
            else
                waiters_tail_->next_ = &waiter;
            waiters_tail_ = &waiter;
        }
        wake_.notify_one();
    }

    std::uint64_t parked_total() const noexcept { return parked_total_.load(std::memory_order_relaxed); }

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
    void loop() noexcept {
        using namespace std::chrono_literals;
        std::chrono::milliseconds pause = 1ms;
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            if (head_ == nullptr && waiters_head_ == nullptr) {
                pause = 1ms;
                wake_.wait(lock, [&] { return head_ != nullptr || waiters_head_ != nullptr || stopping_; });
            } else {
                // Memory was short a moment ago: give it time to come back.
                wake_.wait_for(lock, pause, [&] { return stopping_; });
            }
            if (stopping_) return;
            retry_node* list = std::exchange(head_, nullptr);
            tail_ = nullptr;
            permit_waiter* waiters = std::exchange(waiters_head_, nullptr);
            waiters_tail_ = nullptr;
            bool (*const waiter_retry)(permit_waiter&) noexcept = waiter_retry_;
            lock.unlock();
            permit_waiter* failed_waiters_head = nullptr;
            permit_waiter* failed_waiters_tail = nullptr;
            while (waiters != nullptr) {
                permit_waiter* w = waiters;
                waiters = w->next_;  // read first: a hand-off that goes through may free the entry
                if (!waiter_retry(*w)) {
                    w->next_ = nullptr;
                    if (failed_waiters_tail == nullptr)
                        failed_waiters_head = w;
                    else
                        failed_waiters_tail->next_ = w;
                    failed_waiters_tail = w;
                }
            }
            retry_node* failed_head = nullptr;
            retry_node* failed_tail = nullptr;
            while (list != nullptr) {
                retry_node* node = list;
                list = node->next_retry;  // read first: a hand-off that goes through may free the node
                if (!node->retry(*node)) {
                    node->next_retry = nullptr;
                    if (failed_tail == nullptr)
                        failed_head = node;
                    else
                        failed_tail->next_retry = node;
                    failed_tail = node;
                }
            }
            lock.lock();
            if (failed_head != nullptr) {
                // Still short: keep the order, and back off.
                failed_tail->next_retry = head_;
                if (head_ == nullptr) tail_ = failed_tail;
                head_ = failed_head;
            }
            if (failed_waiters_head != nullptr) {
                failed_waiters_tail->next_ = waiters_head_;
                if (waiters_head_ == nullptr) waiters_tail_ = failed_waiters_tail;
                waiters_head_ = failed_waiters_head;
            }
            if (failed_head != nullptr || failed_waiters_head != nullptr)
                pause = std::min(pause * 2, std::chrono::milliseconds(64));
            else
                pause = 1ms;
        }
    }

    std::mutex mutex_;
    std::condition_variable wake_;
    retry_node* head_ = nullptr;  // guarded by mutex_
    retry_node* tail_ = nullptr;  // guarded by mutex_
    permit_waiter* waiters_head_ = nullptr;  // parked entries, through their queue links; guarded by mutex_
    permit_waiter* waiters_tail_ = nullptr;
    bool (*waiter_retry_)(permit_waiter&) noexcept = nullptr;
    bool stopping_ = false;       // guarded by mutex_
    std::atomic<bool> running_{false};
    std::atomic<std::uint64_t> parked_total_{0};
    std::thread thread_;
};

handoff_retrier& retrier() noexcept {
    // Constant-initialisable members: no allocation to build it.
    static handoff_retrier instance;
    return instance;
}

}  // namespace

void prepare_handoff_retry() { retrier().start(); }

void retry_handoff_later(retry_node& node) noexcept { retrier().park(node); }

void retry_waiter_later(permit_waiter& waiter, bool (*retry)(permit_waiter&) noexcept) noexcept {
    retrier().park(waiter, retry);
}

std::uint64_t handoffs_retried() noexcept { return retrier().parked_total(); }

}  // namespace tenferro::detail
