#include <tenferro/execution_scope.hpp>

#include <chrono>
#include <optional>
#include <catch2/catch.hpp>
#include <tenferro/cpu_backend.hpp>
#include "test_asio.hpp"

#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace asio::experimental::awaitable_operators;
using tenferro::test::run_until;
using tenferro::test::spawn;

TEST_CASE("A scope admits once and its sessions reuse the permit without queueing") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::optional<session_result<int>> scope_result, outsider;
    std::vector<std::string> order;
    spawn(io, [&]() -> asio::awaitable<void> {
        scope_result = co_await cpu.with_execution_scope([&](execution_scope& scope) -> asio::awaitable<int> {
            CHECK(scope.backend() == test_host_name);
            CHECK(scope.permits() == 1);
            // The outsider is spawned once the scope is admitted; on a fast
            // worker the body gets here first. Wait (yielding) until it queues.
            const auto ex = co_await asio::this_coro::executor;
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
            while (cpu.stats().waiting == 0 && std::chrono::steady_clock::now() < deadline)
                co_await asio::post(ex, asio::use_awaitable);
            int total = 0;
            for (int i = 0; i < 3; ++i) {
                // The single permit is held by the scope, and an outsider waits
                // for it, yet these sessions are admitted at once.
                auto r = co_await cpu.with_backend_session([&, i](test_session& s) {
                    order.push_back("inner" + std::to_string(i));
                    return static_cast<int>(s.parallelism());
                });
                total += r.value();
                CHECK(cpu.stats().waiting == 1);
            }
            co_return total;
        });
    });
    io.poll_one();  // the scope is admitted; its body is posted
    spawn(io, [&]() -> asio::awaitable<void> {
        outsider = co_await cpu.with_backend_session([&](test_session&) {
            order.push_back("outsider");
            return 9;
        });
    });
    REQUIRE(run_until(io, [&] { return scope_result.has_value() && outsider.has_value(); }));
    CHECK(scope_result->value() == 3);
    CHECK(outsider->value() == 9);
    CHECK(order == std::vector<std::string>{"inner0", "inner1", "inner2", "outsider"});
    const admission_stats st = cpu.stats();
    CHECK(st.admitted == 5);  // the scope, three inner sessions, the outsider
    CHECK(st.completed == 5);
    CHECK(st.available == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 4);  // the scope opens none itself
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("A second session of the scope while one runs completes with contended") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    std::optional<session_result<int>> a, b;
    bool done = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await cpu.with_execution_scope([&](execution_scope&) -> asio::awaitable<void> {
            auto slow = [&]() -> asio::awaitable<void> {
                a = co_await cpu.with_backend_session([](test_session&) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(30));
                    return 1;
                });
            };
            auto quick = [&]() -> asio::awaitable<void> {
                b = co_await cpu.with_backend_session([](test_session&) { return 2; });
            };
            co_await (slow() && quick());
        });
        done = true;
    });
    REQUIRE(run_until(io, [&] { return done; }));
    CHECK(a->value() == 1);
    CHECK(b->error() == session_entry_errc::contended);
    CHECK(cpu.stats().available == 2);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE(
    "Inside a scope: another host is incompatible, a nested scope is reentered, and so is a session in a session") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    test_host other({.permits = 1});
    std::optional<session_result<int>> foreign_session, foreign_scope, nested_scope, in_session, weighted;
    bool done = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await cpu.with_execution_scope([&](execution_scope&) -> asio::awaitable<void> {
            foreign_session = co_await other.with_backend_session([](test_session&) { return 1; });
            foreign_scope =
                co_await other.with_execution_scope([](execution_scope&) -> asio::awaitable<int> { co_return 2; });
            nested_scope =
                co_await cpu.with_execution_scope([](execution_scope&) -> asio::awaitable<int> { co_return 3; });
            weighted = co_await cpu.with_backend_session({2, wait_policy::fifo, placement::compute},
                                                         [](test_session&) { return 4; });
            co_await cpu.with_backend_session([&](test_session&) -> asio::awaitable<void> {
                in_session = co_await cpu.with_backend_session([](test_session&) { return 5; });
            });
        });
        done = true;
    });
    REQUIRE(run_until(io, [&] { return done; }));
    CHECK(foreign_session->error() == session_entry_errc::incompatible_context);
    CHECK(foreign_scope->error() == session_entry_errc::incompatible_context);
    CHECK(nested_scope->error() == session_entry_errc::reentered);
    CHECK(weighted->error() == session_entry_errc::incompatible_context);
    CHECK(in_session->error() == session_entry_errc::reentered);
    CHECK(cpu.stats().available == 2);
    CHECK(other.stats().available == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);  // the async body's own session
    TENFERRO_CHECK_SESSIONS_OPENED(other, 0);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("After the scope ends, sessions of its coroutine queue normally again") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::optional<session_result<int>> after;
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await cpu.with_execution_scope([](execution_scope&) -> asio::awaitable<void> { co_return; });
        after = co_await cpu.with_backend_session([](test_session&) { return 1; });
    });
    REQUIRE(run_until(io, [&] { return after.has_value(); }));
    CHECK(after->value() == 1);
    CHECK(cpu.stats().admitted == 2);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}
