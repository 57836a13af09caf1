// S20, the entry's side: who asks a running session to stop, how its entry
// completes and what the host counts. The operations' side (every operation
// checks, throws session_stopped) is tests/cpu/session_stop_test.cpp.
//
// Deterministic where the order matters: the body runs on a compute worker
// and announces itself; the test's thread, which is the only one running the
// caller's io_context, emits the cancellation only once the body has
// started, then runs the context until the completion.
#include <tenferro/backend_session.hpp>
#include <tenferro/cpu_backend.hpp>
#include <tenferro/tensor.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include "spawn.hpp"
#include "test_asio.hpp"

using namespace tenferro;
using namespace asio::experimental::awaitable_operators;

namespace {

tensor square(std::int64_t n) {
    const std::vector<float> v(static_cast<std::size_t>(n * n), 0.5f);
    return tensor::from(std::span<const float>(v), {n, n});
}

void wait_for(const std::atomic<bool>& flag) {
    while (!flag.load(std::memory_order_acquire)) std::this_thread::yield();
}

/// One entry's outcome, delivered on the io_context.
template <class R>
struct outcome {
    std::exception_ptr exception;
    std::optional<session_result<R>> result;
};

template <class R>
auto deliver_to(asio::io_context& io, asio::cancellation_signal& signal, outcome<R>& out) {
    return asio::bind_cancellation_slot(signal.slot(),
                                        asio::bind_executor(io, [&out](std::exception_ptr e, session_result<R> r) {
                                            out.exception = e;
                                            out.result.emplace(std::move(r));
                                        }));
}

}  // namespace

TEST_CASE(
    "S20: a terminal cancellation stops a running body's operations; the entry completes cancelled, counted "
    "stopped") {
    for (const asio::cancellation_type type : {asio::cancellation_type::terminal, asio::cancellation_type::partial}) {
        INFO("type " << static_cast<int>(type));
        cpu_backend cpu({.permits = 1});
        asio::io_context io;
        asio::cancellation_signal signal;
        outcome<int> out;
        std::atomic<bool> started{false};
        std::atomic<int> matmuls{0};
        const tensor a = square(128);
        cpu.with_backend_session(
            [&](backend_session& s) {
                started.store(true, std::memory_order_release);
                for (;;) {  // never returns by itself: only the stop ends it
                    (void)s.matmul(a, a);
                    matmuls.fetch_add(1, std::memory_order_relaxed);
                }
                return 0;
            },
            deliver_to(io, signal, out));
        wait_for(started);
        signal.emit(type);
        io.run();
        REQUIRE(out.result.has_value());
        CHECK_FALSE(out.exception);
        REQUIRE_FALSE(out.result->has_value());
        CHECK(out.result->error() == session_entry_errc::cancelled);
        CHECK(std::string(out.result->error().detail()).find("stopped while running") != std::string::npos);
        const admission_stats st = cpu.stats();
        CHECK(st.stopped == 1);
        CHECK(st.cancelled == 0);  // cancelled counts bodies that never ran
        CHECK(st.rejected == 0);
        CHECK(st.admitted == 1);
        CHECK(st.completed == 1);
        CHECK(st.available == st.permits);
        CHECK(cpu.group_stats(0).stopped == 1);
    }
}

TEST_CASE("S20: a total cancellation does not stop a running body (it has side effects); its value is delivered") {
    cpu_backend cpu({.permits = 1});
    asio::io_context io;
    asio::cancellation_signal signal;
    outcome<int> out;
    std::atomic<bool> started{false}, emitted{false};
    cpu.with_backend_session(
        [&](backend_session& s) {
            started.store(true, std::memory_order_release);
            wait_for(emitted);
            return s.stop_requested() ? -1 : 7;
        },
        deliver_to(io, signal, out));
    wait_for(started);
    signal.emit(asio::cancellation_type::total);
    emitted.store(true, std::memory_order_release);
    io.run();
    REQUIRE(out.result.has_value());
    REQUIRE(out.result->has_value());
    CHECK(**out.result == 7);
    CHECK(cpu.stats().stopped == 0);
    CHECK(cpu.stats().cancelled == 0);
}

TEST_CASE("S20: a body that catches the stop and returns delivers its value (S2), and is not counted stopped") {
    cpu_backend cpu({.permits = 1});
    asio::io_context io;
    asio::cancellation_signal signal;
    outcome<int> out;
    std::atomic<bool> started{false};
    const tensor a = square(64);
    cpu.with_backend_session(
        [&](backend_session& s) {
            started.store(true, std::memory_order_release);
            try {
                for (;;) (void)s.matmul(a, a);
            } catch (const session_stopped&) {
                return 5;  // what it had so far
            }
        },
        deliver_to(io, signal, out));
    wait_for(started);
    signal.emit(asio::cancellation_type::terminal);
    io.run();
    REQUIRE(out.result.has_value());
    REQUIRE(out.result->has_value());
    CHECK(**out.result == 5);
    CHECK(cpu.stats().stopped == 0);
}

TEST_CASE("S20: session_stopped thrown when no stop was asked is the body's own exception (S2)") {
    cpu_backend cpu({.permits = 1});
    asio::io_context io;
    asio::cancellation_signal signal;  // connected, never emitted
    outcome<int> out;
    cpu.with_backend_session([](backend_session&) -> int { throw session_stopped(); }, deliver_to(io, signal, out));
    io.run();
    REQUIRE(out.result.has_value());
    REQUIRE(out.exception);
    CHECK_THROWS_AS(std::rethrow_exception(out.exception), session_stopped);
    CHECK(cpu.stats().stopped == 0);
}

TEST_CASE("S20: an entry nobody can cancel gives its session a token that cannot stop") {
    cpu_backend cpu({.permits = 1});
    asio::io_context io;
    std::optional<bool> possible;
    cpu.with_backend_session([&](backend_session& s) { possible = s.stop_token().stop_possible(); },
                             asio::bind_executor(io, [](std::exception_ptr, session_result<void>) {}));
    io.run();
    REQUIRE(possible.has_value());
    CHECK_FALSE(*possible);
}

TEST_CASE("S20: `co_await (entry || timer)` returns at the timer, the matmuls stopped mid-run") {
    cpu_backend cpu({.permits = 2});
    asio::io_context io;
    std::atomic<int> matmuls{0};
    bool timer_won = false;
    const tensor a = square(256);
    tenferro::test::spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(io, std::chrono::milliseconds(50));
        auto r = co_await (cpu.with_backend_session([&](backend_session& s) {
            for (;;) {
                (void)s.matmul(a, a);
                matmuls.fetch_add(1, std::memory_order_relaxed);
            }
        }) || timer.async_wait(asio::use_awaitable));
        timer_won = r.index() == 1;
    });
    io.run();  // returns once the entry has completed too: the body was stopped
    CHECK(timer_won);
    CHECK(matmuls.load() > 0);
    CHECK(cpu.stats().stopped == 1);
    CHECK(cpu.stats().admitted == cpu.stats().completed);
}
