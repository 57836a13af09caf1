#pragma once
// The tests' way into what cpu_backend and cpu_runtime_cache keep from their
// users: cpu_backend befriends detail::testing_access, and the cache's claim
// goes through the library's own detail::cache_access (src/). In `detail`, not
// in a `tenferro::testing` namespace, so that a user's `using namespace
// tenferro;` cannot collide with GoogleTest's `::testing`.

#include <cstddef>

#include "cpu/runtime_cache_state.hpp"
#include "tenferro/cpu_backend.hpp"
#include "tenferro/cpu_runtime_cache.hpp"

namespace tenferro::detail {

struct testing_access {
    /// The next `n` runners handed to `cpu`'s compute workers are dropped
    /// unrun, as an executor that loses work would.
    static void drop_next_runs(cpu_backend& cpu, std::size_t n) noexcept {
        host_access::core(cpu.host_).pool().drop_next_for_testing(n);
    }
    /// The same for any `session_host` (the generic host of the admission tests).
    template <class B>
    static void drop_next_runs(session_host<B>& host, std::size_t n) noexcept {
        host_access::core(host).pool().drop_next_for_testing(n);
    }

    /// This thread's next 31 inline fast-path entries awaited with
    /// use_awaitable return at once; the 32nd goes through the executor.
    static void renew_inline_return_budget() noexcept { detail::renew_inline_return_budget(); }

    /// Claims `cache` as a session entry does; false if a session holds it.
    static bool try_claim(cpu_runtime_cache& cache) noexcept { return cache_access::try_claim(cache); }
    /// Gives `cache` back.
    static void release_claim(cpu_runtime_cache& cache) noexcept { cache_access::release_claim(cache); }
};

}  // namespace tenferro::detail
