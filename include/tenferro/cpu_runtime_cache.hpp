#pragma once
/// \file
/// `cpu_runtime_cache`: caller-owned state that contractions consult and fill
/// inside `cpu_backend::with_backend_session_cached`.

#include <atomic>

#include "tenferro/backend_session_host.hpp"

namespace tenferro {

/// A runtime cache for the CPU backend. Models `runtime_cache_control`.
///
/// One session at a time may use a cache: an entry naming a cache that a
/// running session holds completes with `contended` before its body runs.
/// `clear()` and `stats()` may be called from any thread while no session
/// holds the cache.
class cpu_runtime_cache {
public:
    cpu_runtime_cache() = default;
    cpu_runtime_cache(const cpu_runtime_cache&) = delete;
    cpu_runtime_cache& operator=(const cpu_runtime_cache&) = delete;

    /// Drops every retained entry (counted in `stats().clears`).
    void clear();
    /// Current counters.
    cache_stats stats() const;

    /// Claims the cache for one session; false if a session holds it.
    bool try_claim() noexcept { return !in_use_.exchange(true, std::memory_order_acquire); }
    /// Gives the cache back.
    void release_claim() noexcept { in_use_.store(false, std::memory_order_release); }
    /// True while a session holds the cache.
    bool in_use() const noexcept { return in_use_.load(std::memory_order_acquire); }

private:
    std::atomic<bool> in_use_{false};
    cache_stats stats_{0, 0, 0, 0, 0, 0};
};

}  // namespace tenferro
