#pragma once
// The tests' way into a host's admission core: `inspectable<Host>` is `Host`
// (a `session_host<B>`, or a host derived from one such as `cpu_backend`)
// with `session_host`'s protected `core()` made public, so that a test can
// read the permit counters, name the compute pool or make it drop work. A
// test that needs the core builds its host as `inspectable<...>` instead of
// reaching into a plain one; nothing in the library befriends the tests.

#include <cstddef>

#include <tenferro/detail/admission/host_core.hpp>
#include <tenferro/session_host.hpp>

namespace tenferro::test {

template <class Host>
class inspectable : public Host {
public:
    using Host::core;
    using Host::Host;

    /// The next `n` runners handed to the compute workers are dropped unrun,
    /// as an executor that loses work would.
    void drop_next_runs(std::size_t n) noexcept { core().pool().drop_next_for_testing(n); }
    /// The execution context of the compute workers (as a grant's executor names it).
    const void* pool_id() noexcept { return static_cast<asio::execution_context*>(&core().pool()); }
};

}  // namespace tenferro::test
