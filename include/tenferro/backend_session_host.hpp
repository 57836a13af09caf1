#pragma once
/// \file
/// What every backend host offers: the concepts a generic server programs
/// against, and the per-entry `session_options`.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>

#include "tenferro/backend_session.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_options.hpp"

namespace tenferro {

/// What a runtime cache reports.
struct cache_stats {
    std::size_t entries, retained_bytes;
    std::uint64_t hits, misses, evictions, clears;
};

/// A backend's runtime cache: default-constructible, clearable, observable.
template <class C>
concept runtime_cache_control = std::default_initializable<C> && requires(C& c, const C& cc) {
    c.clear();
    { cc.stats() } -> std::same_as<cache_stats>;
};

/// A host that names its runtime cache type.
template <class H>
concept backend_runtime_cache =
    requires { typename H::runtime_cache; } && runtime_cache_control<typename H::runtime_cache>;

namespace detail {
/// A synchronous session body and a plain completion callback, used only to
/// state the host concept.
struct archetype_body {
    void operator()(backend_session&) const {}
};
struct archetype_handler {
    void operator()(std::exception_ptr, session_result<void>) const {}
};
}  // namespace detail

/// A host that admits session entries: `host.with_backend_session(f, token)`
/// completes with `void(std::exception_ptr, session_result<R>)`.
template <class H>
concept backend_session_host =
    backend_runtime_cache<H> && requires(H& host, detail::archetype_body body, detail::archetype_handler handler) {
        host.with_backend_session(body, handler);
        { host.name() } -> std::convertible_to<std::string_view>;
    };

}  // namespace tenferro
