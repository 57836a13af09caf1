#include <tenferro/batcher.hpp>
#include <tenferro/cpu_backend.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <variant>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "spawn.hpp"
#include "test_allocator.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace asio::experimental::awaitable_operators;
using tenferro::test::gate;
using tenferro::test::run_until;
using tenferro::test::spawn;

TEST_CASE("use_future: the value, an admission error, and the body's exception") {
    test_host cpu({.permits = 1});
    std::future<session_result<int>> ok = cpu.with_backend_session([](test_session&) { return 5; }, asio::use_future);
    CHECK(ok.get().value() == 5);
    auto rejected = cpu.with_backend_session(
        {2, wait_policy::fifo, placement::compute}, [](test_session&) { return 5; }, asio::use_future);
    CHECK(rejected.get().error() == session_entry_errc::incompatible_context);
    auto thrown =
        cpu.with_backend_session([](test_session&) -> int { throw std::domain_error("f"); }, asio::use_future);
    CHECK_THROWS_AS(thrown.get(), std::domain_error);
    std::future<session_result<void>> v = cpu.with_backend_session([](test_session&) {}, asio::use_future);
    CHECK(v.get().has_value());
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 3);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE(
    "S19 with use_future: an entry or a submit whose op cannot be allocated completes the future with bad_alloc") {
    // use_future's allocator makes the promise's state (served) and the op's
    // block (refused). The initiating function must not throw then: the
    // handler, destroyed uncalled, would break its promise, whose error
    // libstdc++ allocates inside a noexcept destructor. It completes the
    // future with the bad_alloc instead.
    test_host cpu({.permits = 1});
    // The promise's small state is served, an operation's block is not.
    auto st = std::make_shared<tenferro::test::allocation_policy>();
    st->refuse_above = 128;
    const asio::use_future_t<tenferro::test::test_allocator<void>> token(tenferro::test::test_allocator<void>{st});
    std::optional<std::future<session_result<int>>> f;
    REQUIRE_NOTHROW(f.emplace(cpu.with_backend_session([](test_session&) { return 5; }, token)));
    CHECK(st->refused == 1);
    REQUIRE(f->wait_for(std::chrono::seconds(0)) == std::future_status::ready);  // completed inside
    CHECK_THROWS_AS(f->get(), std::bad_alloc);
    batcher<test_host, int, int> b(
        cpu, {}, [](test_session&, std::span<int> items) { return std::vector<int>(items.begin(), items.end()); });
    std::optional<std::future<session_result<int>>> g;
    REQUIRE_NOTHROW(g.emplace(b.submit(1, token)));
    CHECK(st->refused == 2);
    CHECK_THROWS_AS(g->get(), std::bad_alloc);
    CHECK(b.stats().submitted == 0);
    // Nothing was queued or held: the host serves the next entry.
    CHECK(cpu.with_backend_session([](test_session&) { return 6; }, asio::use_future).get().value() == 6);
    CHECK(cpu.stats().available == 1);
}

TEST_CASE("A plain callback receives (exception_ptr, session_result)") {
    test_host cpu({.permits = 1});
    std::promise<std::pair<bool, int>> p;
    cpu.with_backend_session([](test_session&) { return 11; },
                             [&](std::exception_ptr e, session_result<int> r) {
                                 p.set_value({e == nullptr, r.value()});
                             });
    const auto [no_exception, value] = p.get_future().get();
    CHECK(no_exception);
    CHECK(value == 11);
}

TEST_CASE("deferred: nothing happens until the deferred operation is launched") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    int runs = 0;
    auto op = cpu.with_backend_session([&](test_session&) { return ++runs; }, tenferro::test::deferred);
    CHECK(cpu.stats().admitted == 0);
    std::optional<session_result<int>> r;
    spawn(io, [&]() -> asio::awaitable<void> { r = co_await std::move(op)(asio::use_awaitable); });
    REQUIRE(run_until(io, [&] { return r.has_value(); }));
    CHECK(r->value() == 1);
    CHECK(runs == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("as_tuple: the exception and the result arrive as a tuple") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    bool done = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        auto [e, r] = co_await cpu.with_backend_session([](test_session&) { return 2; },
                                                        tenferro::test::as_tuple(asio::use_awaitable));
        CHECK(e == nullptr);
        CHECK(r.value() == 2);
        auto [e2, r2] = co_await cpu.with_backend_session([](test_session&) -> int { throw std::range_error("x"); },
                                                          tenferro::test::as_tuple(asio::use_awaitable));
        CHECK(e2 != nullptr);
        CHECK_FALSE(r2.has_value());  // a valid object carrying no value
        done = true;
    });
    REQUIRE(run_until(io, [&] { return done; }));
}

TEST_CASE("A timeout with awaitable_operators || cancels a waiting entry; its body never runs") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    gate g;
    std::optional<session_result<int>> holder;
    spawn(io, [&]() -> asio::awaitable<void> {
        holder = co_await cpu.with_backend_session([&](test_session&) {
            g.wait();
            return 1;
        });
    });
    io.poll();
    REQUIRE(g.wait_for_waiters(1));
    bool ran = false;
    std::optional<std::variant<session_result<int>, std::monostate>> raced;
    spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(20));
        raced = co_await (cpu.with_backend_session([&](test_session&) {
            ran = true;
            return 2;
        }) || timer.async_wait(asio::use_awaitable));
    });
    REQUIRE(run_until(io, [&] { return raced.has_value(); }));
    CHECK(raced->index() == 1);  // the timer won
    CHECK_FALSE(ran);
    CHECK(cpu.stats().cancelled == 1);
    CHECK(cpu.stats().waiting == 0);
    g.open();
    REQUIRE(run_until(io, [&] { return holder.has_value(); }));
    const admission_stats st = cpu.stats();
    CHECK(st.admitted == st.completed);
    CHECK(st.available == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);  // the holder's only
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("bind_cancellation_slot with a callback handler cancels a waiter from another thread") {
    test_host cpu({.permits = 1});
    gate g;
    auto first = cpu.with_backend_session([&](test_session&) { g.wait(); }, asio::use_future);
    REQUIRE(g.wait_for_waiters(1));
    asio::cancellation_signal signal;
    std::promise<session_result<void>> p;
    cpu.with_backend_session([](test_session&) {}, asio::bind_cancellation_slot(
                                                       signal.slot(), [&](std::exception_ptr, session_result<void> r) {
                                                           p.set_value(std::move(r));
                                                       }));
    signal.emit(asio::cancellation_type::terminal);
    CHECK(p.get_future().get().error() == session_entry_errc::cancelled);
    g.open();
    CHECK(first.get().has_value());
}
