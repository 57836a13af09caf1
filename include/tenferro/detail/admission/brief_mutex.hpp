#pragma once
// A mutex for critical sections of a few loads and stores that several threads
// enter at a high rate (the permit queue's).

#include <atomic>
#include <cstdint>

namespace tenferro::detail {

/// A mutex that spins briefly before it sleeps. When it is taken, its holder
/// is most likely running on another core and about to leave (the permit
/// queue holds it for a few pointer moves), so a short poll usually wins it
/// without a system call; std::mutex would put the thread to sleep in the
/// kernel at once, and the holder would then pay a futex wake on unlock. The
/// poll is bounded (the holder may have been preempted), then the thread
/// sleeps on the lock word (std::atomic::wait, a futex on Linux).
///
/// One word, three states: free, held, held with possible sleepers. Taking and
/// releasing it uncontended is one compare-exchange and one exchange, no call
/// into the C library (glibc's pthread_mutex_trylock + unlock cost ~140
/// instructions per lock round trip, this ~10). Meets Lockable
/// (std::lock_guard, std::unique_lock, std::condition_variable_any).
class brief_mutex {
public:
    brief_mutex() = default;
    brief_mutex(const brief_mutex&) = delete;
    brief_mutex& operator=(const brief_mutex&) = delete;

    void lock() noexcept {
        if (!try_lock()) lock_contended();
    }
    bool try_lock() noexcept {
        std::uint32_t expected = free;
        return state_.compare_exchange_strong(expected, held, std::memory_order_acquire, std::memory_order_relaxed);
    }
    // The wake comes after the release, as in glibc's own mutex: it only
    // names the word's address to the kernel (a futex wake), never reads it,
    // so a mutex destroyed by its next owner in between is not touched.
    void unlock() noexcept {
        if (state_.exchange(free, std::memory_order_release) == held_with_sleepers) wake_one();
    }

private:
    static constexpr std::uint32_t free = 0;
    static constexpr std::uint32_t held = 1;
    static constexpr std::uint32_t held_with_sleepers = 2;

    void lock_contended() noexcept;
    void wake_one() noexcept;

    std::atomic<std::uint32_t> state_{free};
};

}  // namespace tenferro::detail
