#pragma once
// Helpers shared by the tests: stepping an io_context until a condition holds,
// a gate that blocks a compute worker until the test opens it, and a small
// lifetime probe. Catch2 v2 macros are not thread-safe, so helpers that run on
// workers only record; assertions happen on the test's thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "test_asio.hpp"

namespace tenferro::test {

/// Polls `io` (and yields) until `done()` is true or `timeout` passes.
/// Returns done(). Use for work that crosses onto the compute workers.
template <class Pred>
bool run_until(asio::io_context& io, Pred done, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        io.restart();
        if (io.poll() == 0) std::this_thread::yield();
    }
    return true;
}

/// Blocks the threads that wait on it until `open()`.
class gate {
public:
    void wait() {
        std::unique_lock lock(mutex_);
        ++waiting_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return open_; });
    }
    void open() {
        std::lock_guard lock(mutex_);
        open_ = true;
        cv_.notify_all();
    }
    /// Waits until `n` threads sit in wait().
    bool wait_for_waiters(int n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
        std::unique_lock lock(mutex_);
        return cv_.wait_for(lock, timeout, [&] { return waiting_ >= n; });
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    int waiting_ = 0;
    bool open_ = false;
};

/// Counts live instances: a lifetime probe for "f is destroyed exactly once".
struct counted {
    static inline std::atomic<int> live{0};
    counted() noexcept { live.fetch_add(1); }
    counted(const counted&) noexcept { live.fetch_add(1); }
    counted(counted&&) noexcept { live.fetch_add(1); }
    counted& operator=(const counted&) = default;
    counted& operator=(counted&&) = default;
    ~counted() { live.fetch_sub(1); }
};

/// Iteration count for stress tests: TENFERRO_STRESS_ITERATIONS or `fallback`.
inline long stress_iterations(long fallback) {
    if (const char* env = std::getenv("TENFERRO_STRESS_ITERATIONS")) {
        const long n = std::strtol(env, nullptr, 10);
        if (n > 0) return n;
    }
    return fallback;
}

}  // namespace tenferro::test
