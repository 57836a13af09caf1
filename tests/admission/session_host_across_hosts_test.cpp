// What section 6 of the contract (custom backends, session_host.hpp) adds to
// S1-S20, across hosts: re-entry (S7) and execution scopes
// (S8) span hosts of different backends, and a scope opens one session per
// entry inside it.
#include <tenferro/session_host.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#include <catch2/catch.hpp>
#include <tenferro/cpu_backend.hpp>
#include "test_asio.hpp"

#include "entry_helpers.hpp"
#include "probe_backend.hpp"
#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace tenferro::test::probe;
using tenferro::test::gate;
using tenferro::test::on_caller;
using tenferro::test::on_compute;
using tenferro::test::placed;
using tenferro::test::run_until;
using tenferro::test::spawn;

namespace {

/// Initiates an entry (of whichever host) when awaited.
using entry_fn = std::function<asio::awaitable<session_result<int>>()>;

/// A coroutine chain `depth` deep that ends in `enter()`. (Not a template: GCC
/// 12 warns about coroutine templates instantiated with local types.)
asio::awaitable<session_result<int>> deep_entry(const entry_fn& enter, int depth) {
    if (depth == 0) co_return co_await enter();
    co_return co_await deep_entry(enter, depth - 1);
}

/// S7 across hosts: entries to `inner` from inside running sessions of
/// `outer` (sync body on its thread, anywhere in an async body's chain; both
/// placements) complete with reentered, without waiting, and run nothing.
template <class Outer, class Inner>
void check_reentry_across_hosts(Outer& outer, Inner& inner) {
    const admission_stats inner_before = inner.stats();
    for (placement where : {placement::compute, placement::caller}) {
        INFO(name_of(where));
        asio::io_context io;
        std::atomic<int> inner_runs{0};
        std::future<session_result<int>> sync_session, sync_scope;
        std::optional<session_result<int>> sync_outer, async_outer, async_session, async_chained, async_scope;
        const entry_fn enter_inner = [&] {
            return inner.with_backend_session([&](auto&) {
                ++inner_runs;
                return 7;
            });
        };
        spawn(io, [&]() -> asio::awaitable<void> {
            sync_outer = co_await outer.with_backend_session(placed(where), [&](auto&) {
                // A sync body cannot co_await: initiate from inside it and
                // look at the results afterwards.
                sync_session = inner.with_backend_session(
                    [&](auto&) {
                        ++inner_runs;
                        return 1;
                    },
                    asio::use_future);
                sync_scope = inner.with_execution_scope(
                    [&](execution_scope&) -> asio::awaitable<int> {
                        ++inner_runs;
                        co_return 2;
                    },
                    asio::use_future);
                return 0;
            });
            async_outer = co_await outer.with_backend_session(placed(where), [&](auto&) -> asio::awaitable<int> {
                async_session = co_await inner.with_backend_session([&](auto&) {
                    ++inner_runs;
                    return 3;
                });
                async_chained = co_await deep_entry(enter_inner, 3);
                async_scope = co_await inner.with_execution_scope([&](execution_scope&) -> asio::awaitable<int> {
                    ++inner_runs;
                    co_return 4;
                });
                co_return 0;
            });
        });
        REQUIRE(run_until(io, [&] { return async_outer.has_value(); }));
        REQUIRE(sync_outer.has_value());
        CHECK(sync_outer->value() == 0);
        CHECK(async_outer->value() == 0);
        for (const session_result<int>& r :
             {sync_session.get(), sync_scope.get(), *async_session, *async_chained, *async_scope}) {
            REQUIRE_FALSE(r.has_value());
            CHECK(r.error() == session_entry_errc::reentered);
            CHECK(r.error().backend() == inner.name());
        }
        CHECK(inner_runs == 0);
    }
    const admission_stats inner_after = inner.stats();
    CHECK(inner_after.admitted == inner_before.admitted);
    CHECK(inner_after.rejected == inner_before.rejected + 10);
    CHECK(balanced(inner_after));
    CHECK(balanced(outer.stats()));
}

/// S8 across hosts: inside a scope of `scoped`, a session or scope of `other`
/// completes with incompatible_context; the scope's own sessions still run.
template <class Scoped, class Other>
void check_scope_across_hosts(Scoped& scoped, Other& other) {
    const admission_stats other_before = other.stats();
    asio::io_context io;
    std::atomic<int> foreign_runs{0};
    std::optional<session_result<int>> own, foreign_session, foreign_scope, result;
    spawn(io, [&]() -> asio::awaitable<void> {
        result = co_await scoped.with_execution_scope([&](execution_scope&) -> asio::awaitable<int> {
            own = co_await scoped.with_backend_session([](auto&) { return 1; });
            foreign_session = co_await other.with_backend_session([&](auto&) {
                ++foreign_runs;
                return 2;
            });
            foreign_scope = co_await other.with_execution_scope([&](execution_scope&) -> asio::awaitable<int> {
                ++foreign_runs;
                co_return 3;
            });
            co_return 0;
        });
    });
    REQUIRE(run_until(io, [&] { return result.has_value(); }));
    CHECK(result->value() == 0);
    CHECK(own->value() == 1);
    REQUIRE_FALSE(foreign_session->has_value());
    CHECK(foreign_session->error() == session_entry_errc::incompatible_context);
    CHECK(foreign_session->error().backend() == other.name());
    REQUIRE_FALSE(foreign_scope->has_value());
    CHECK(foreign_scope->error() == session_entry_errc::incompatible_context);
    CHECK(foreign_runs == 0);
    const admission_stats other_after = other.stats();
    CHECK(other_after.admitted == other_before.admitted);
    CHECK(other_after.rejected == other_before.rejected + 2);
    CHECK(balanced(other_after));
    CHECK(balanced(scoped.stats()));
}

}  // namespace

TEST_CASE("Re-entry spans hosts: session_host<B> inside cpu_backend, and cpu_backend inside session_host<B>") {
    probe_log log;
    probe_host probe({.permits = 1}, log);
    cpu_backend cpu({.permits = 1});
    session_host<test::device_backend> device({.permits = 1}, "gpu1");
    SECTION("cpu_backend from inside a probe session") { check_reentry_across_hosts(probe, cpu); }
    SECTION("a probe host from inside a cpu_backend session") { check_reentry_across_hosts(cpu, probe); }
    SECTION("one session_host from inside another's session") {
        check_reentry_across_hosts(probe, device);
        check_reentry_across_hosts(device, probe);
    }
    CHECK(log.opened == log.closed);
    CHECK(test::all_sessions_closed(device));
}

TEST_CASE("Scopes span hosts: inside a scope of one host, an entry to another is incompatible_context") {
    probe_log log;
    probe_host probe({.permits = 1}, log);
    cpu_backend cpu({.permits = 1});
    session_host<test::device_backend> device({.permits = 2});
    SECTION("cpu_backend inside a probe scope") { check_scope_across_hosts(probe, cpu); }
    SECTION("a probe host inside a cpu_backend scope") { check_scope_across_hosts(cpu, probe); }
    SECTION("one session_host inside another's scope") {
        check_scope_across_hosts(probe, device);
        check_scope_across_hosts(device, probe);
    }
    CHECK(log.opened == log.closed);
}

TEST_CASE("A scope opens no session; each session inside it opens one with the scope's single permit") {
    probe_log log;
    asio::io_context io;
    probe_host host({.permits = 3}, log);
    std::optional<session_result<int>> result, weighted;
    std::vector<std::size_t> parallelism;
    spawn(io, [&]() -> asio::awaitable<void> {
        result = co_await host.with_execution_scope([&](execution_scope& scope) -> asio::awaitable<int> {
            CHECK(scope.permits() == 1);
            CHECK(scope.backend() == "probe");
            CHECK(log.opened == 0);
            for (placement where : {placement::compute, placement::caller}) {
                auto r1 =
                    co_await host.with_backend_session(placed(where), [](probe_session& s) { return s.parallelism(); });
                auto r2 = co_await host.with_backend_session(
                    placed(where), [](probe_session& s) -> asio::awaitable<std::size_t> { co_return s.parallelism(); });
                parallelism.push_back(r1.value());
                parallelism.push_back(r2.value());
            }
            weighted = co_await host.with_backend_session(on_compute(2), [](probe_session&) { return 0; });
            co_return 0;
        });
    });
    REQUIRE(run_until(io, [&] { return result.has_value(); }));
    CHECK(result->value() == 0);
    CHECK(parallelism == std::vector<std::size_t>{1, 1, 1, 1});
    CHECK(weighted->error() == session_entry_errc::incompatible_context);
    CHECK(log.copy(log.grant_permits) == std::vector<std::size_t>{1, 1, 1, 1});
    CHECK(log.copy(log.grant_contexts) ==
          std::vector<const void*>{pool_id(host), pool_id(host), context_id(io), context_id(io)});
    CHECK(log.opened == 4);
    CHECK(log.closed == 4);
    CHECK(balanced(host.stats()));
}
