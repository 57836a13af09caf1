#include <tenferro/backend_session_host.hpp>

#include <catch2/catch.hpp>
#include <tenferro/cpu_backend.hpp>

#include "testing_access.hpp"

using namespace tenferro;

namespace {
template <backend_session_host B>
std::string_view accepts_session_host(B& host) {
    return host.name();
}

struct not_a_cache {};
struct host_without_cache {};
struct host_with_bad_cache {
    using runtime_cache = not_a_cache;
};
}  // namespace

static_assert(runtime_cache_control<cpu_runtime_cache>);
static_assert(!runtime_cache_control<not_a_cache>);
static_assert(backend_runtime_cache<cpu_backend>);
static_assert(!backend_runtime_cache<host_without_cache>);
static_assert(!backend_runtime_cache<host_with_bad_cache>);
static_assert(backend_session_host<cpu_backend>);
static_assert(!backend_session_host<host_without_cache>);
static_assert(std::is_abstract_v<backend_session>);
static_assert(!std::is_copy_constructible_v<backend_session>);

TEST_CASE("cpu_backend models backend_session_host and a constrained template accepts it") {
    cpu_backend cpu({.permits = 1});
    CHECK(accepts_session_host(cpu) == "cpu");
}

TEST_CASE("session_options defaults: one permit, FIFO, compute placement") {
    const session_options o;
    CHECK(o.permits == 1);
    CHECK(o.wait == wait_policy::fifo);
    CHECK(o.where == placement::compute);
}

TEST_CASE("cpu_runtime_cache models runtime_cache_control") {
    cpu_runtime_cache cache;
    cache.clear();
    const cache_stats s = cache.stats();
    CHECK(s.clears == 1);
    CHECK(s.entries == 0);
    CHECK(detail::testing_access::try_claim(cache));
    CHECK_FALSE(detail::testing_access::try_claim(cache));
    CHECK(cache.in_use());
    detail::testing_access::release_claim(cache);
    CHECK_FALSE(cache.in_use());
}
