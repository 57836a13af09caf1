#pragma once
// The tests' way into what the library keeps from its users outside a host's
// admission core (for that, see host_internals.hpp): the inline-return budget
// of the fast path, and the runtime cache's claim, which goes through the
// library's own detail::cache_access (src/). In `detail`, not in a
// `tenferro::testing` namespace, so that a user's `using namespace tenferro;`
// cannot collide with GoogleTest's `::testing`.

#include "cpu/runtime_cache_state.hpp"
#include "tenferro/cpu_runtime_cache.hpp"
#include "tenferro/detail/admission/entry_awaitable.hpp"

namespace tenferro::detail {

struct testing_access {
    /// This thread's next 31 inline fast-path entries awaited with
    /// use_awaitable return at once; the 32nd goes through the executor.
    static void renew_inline_return_budget() noexcept { detail::renew_inline_return_budget(); }

    /// Claims `cache` as a session entry does; false if a session holds it.
    static bool try_claim(cpu_runtime_cache& cache) noexcept { return cache_access::try_claim(cache); }
    /// Gives `cache` back.
    static void release_claim(cpu_runtime_cache& cache) noexcept { cache_access::release_claim(cache); }
};

}  // namespace tenferro::detail
