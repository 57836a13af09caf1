#pragma once
// A mutex for critical sections of a few loads and stores that several threads
// enter at a high rate (the permit queue's).

#include <atomic>
#include <mutex>

namespace tenferro::detail {

/// A mutex that spins briefly before it sleeps. When it is taken, its holder
/// is most likely running on another core and about to leave (the permit
/// queue holds it for a few pointer moves), so a short poll usually wins it
/// without a system call; std::mutex would put the thread to sleep in the
/// kernel at once, and the holder would then pay a futex wake on unlock. The
/// poll is bounded (the holder may have been preempted), then the thread
/// sleeps in the underlying std::mutex. Meets Lockable (std::lock_guard,
/// std::unique_lock, std::condition_variable_any).
class brief_mutex {
public:
    void lock() noexcept {
        if (mutex_.try_lock()) {
            held_.store(true, std::memory_order_relaxed);
            return;
        }
        lock_contended();
    }
    bool try_lock() noexcept {
        if (!mutex_.try_lock()) return false;
        held_.store(true, std::memory_order_relaxed);
        return true;
    }
    void unlock() noexcept {
        held_.store(false, std::memory_order_relaxed);
        mutex_.unlock();
    }

private:
    void lock_contended() noexcept;

    std::mutex mutex_;
    // A hint for the poll, read without ordering: it only decides when to try
    // the mutex again, so polling reads a shared line instead of bouncing the
    // mutex's own line between cores with failed compare-exchanges.
    std::atomic<bool> held_{false};
};

}  // namespace tenferro::detail
