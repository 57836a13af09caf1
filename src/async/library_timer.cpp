// The thread of include/tenferro/detail/async/library_timer.hpp.

#include "tenferro/detail/async/library_timer.hpp"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace tenferro::detail {

class library_timer {
public:
    using clock = timer_node::clock;

    void start() {
        if (running_.load(std::memory_order_acquire)) return;
        const std::lock_guard<std::mutex> lock(mutex_);
        if (running_.load(std::memory_order_relaxed)) return;
        thread_ = std::thread([this] { loop(); });  // throws: the caller may throw
        running_.store(true, std::memory_order_release);
    }

    void arm(timer_node& node, clock::time_point when) noexcept {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            if (node.linked_) {
                if (when >= node.when_) return;
            } else {
                link_locked(node);
            }
            node.when_ = when;
            if (when >= waiting_until_) return;  // the thread wakes earlier anyway
        }
        wake_.notify_one();
    }

    void cancel(timer_node& node) noexcept {
        std::unique_lock<std::mutex> lock(mutex_);
        if (node.linked_) unlink_locked(node);
        if (firing_ != &node) return;
        firing_cancelled_ = true;  // the loop forgets it when its fire returns
        if (std::this_thread::get_id() == thread_.get_id()) return;  // inside that fire
        fired_.wait(lock, [&] { return firing_ != &node; });
    }

    bool on_thread() const noexcept {
        return running_.load(std::memory_order_acquire) && std::this_thread::get_id() == thread_.get_id();
    }

    // At exit: the thread is stopped and joined. Clients with static storage
    // (the retry lanes) may still be linked; nothing fires after this.
    ~library_timer() {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_one();
        if (!thread_.joinable()) return;
        if (std::this_thread::get_id() == thread_.get_id())
            thread_.detach();  // exit() called inside a fire
        else
            thread_.join();
    }

private:
    void link_locked(timer_node& node) noexcept {
        node.prev_ = nullptr;
        node.next_ = nodes_;
        if (nodes_ != nullptr) nodes_->prev_ = &node;
        nodes_ = &node;
        node.linked_ = true;
    }
    void unlink_locked(timer_node& node) noexcept {
        (node.prev_ != nullptr ? node.prev_->next_ : nodes_) = node.next_;
        if (node.next_ != nullptr) node.next_->prev_ = node.prev_;
        node.next_ = node.prev_ = nullptr;
        node.linked_ = false;
        node.when_ = clock::time_point::max();
    }
    // A scan: the nodes are the process's hosts, batchers and retry lanes
    // that wait for something, tens at most.
    timer_node* earliest_locked() const noexcept {
        timer_node* first = nodes_;
        for (timer_node* n = nodes_; n != nullptr; n = n->next_)
            if (n->when_ < first->when_) first = n;
        return first;
    }

    void loop() noexcept {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            if (stopping_) return;
            timer_node* const node = earliest_locked();
            if (node == nullptr) {
                waiting_until_ = clock::time_point::max();
                wake_.wait(lock);
                continue;
            }
            const clock::time_point now = clock::now();
            if (now < node->when_) {
                waiting_until_ = node->when_;
                wake_.wait_until(lock, waiting_until_);
                continue;
            }
            waiting_until_ = clock::time_point::min();  // busy: arms need not wake us
            unlink_locked(*node);
            firing_ = node;
            firing_cancelled_ = false;
            lock.unlock();
            const clock::time_point next = node->fire(now);
            lock.lock();
            if (!firing_cancelled_ && next != clock::time_point::max()) {
                // (Armed again while it fired: the earlier of the two.)
                if (!node->linked_) {
                    link_locked(*node);
                    node->when_ = next;
                } else if (next < node->when_) {
                    node->when_ = next;
                }
            }
            firing_ = nullptr;
            fired_.notify_all();
        }
    }

    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable fired_;
    timer_node* nodes_ = nullptr;                                  // guarded by mutex_
    clock::time_point waiting_until_ = clock::time_point::max();  // guarded by mutex_: the loop's wake-up
    timer_node* firing_ = nullptr;                                 // guarded by mutex_
    bool firing_cancelled_ = false;                                // guarded by mutex_
    bool stopping_ = false;                                        // guarded by mutex_
    std::atomic<bool> running_{false};
    std::thread thread_;
};

namespace {

library_timer& the_timer() noexcept {
    // Constant-initialisable members: no allocation to build it.
    static library_timer timer;
    return timer;
}

}  // namespace

void start_library_timer() { the_timer().start(); }

void arm_library_timer(timer_node& node, timer_node::clock::time_point when) noexcept { the_timer().arm(node, when); }

void cancel_library_timer(timer_node& node) noexcept { the_timer().cancel(node); }

bool on_library_timer_thread() noexcept { return the_timer().on_thread(); }

}  // namespace tenferro::detail
