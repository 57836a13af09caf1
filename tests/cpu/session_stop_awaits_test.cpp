// S20, asynchronous bodies and scopes: the stop of an entry reaches the
// body's own `co_await`s (the entry emits `terminal` into the body's slot, on
// the body's executor), cancelling an execution scope stops the session
// running inside it and cancels the scope body's awaits, and a session entered
// inside a stopped scope completes with `cancelled` at once.
//
// Every body here waits on something that would take an hour: only the stop
// can end it, so a test that passes shows the stop arrived. The test's thread
// is the only one running the caller's io_context; it emits once the body is
// inside its await (announced through an atomic), then runs the context until
// the completion.
#include "tenferro/detail/admission/session_context.hpp"

#include <tenferro/backend_session.hpp>
#include <tenferro/cpu_backend.hpp>
#include <tenferro/execution_scope.hpp>
#include <tenferro/tensor.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include "entry_outcome.hpp"
#include "spawn.hpp"
#include "test_asio.hpp"

using namespace tenferro;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

using tenferro::test::deliver_to;
using tenferro::test::wait_for;
template <class R>
using outcome = tenferro::test::entry_outcome<R>;

/// Runs `io` until `done` holds (the completions the test waits for are
/// posted to it from the host's threads).
template <class Pred>
void run_until(asio::io_context& io, Pred done) {
    while (!done()) {
        io.restart();
        io.run_for(milliseconds(5));
    }
}

/// An asynchronous body that announces itself and then waits an hour on a
/// timer of its own executor (the compute pool's, or the caller's).
auto hour_long_wait(std::atomic<bool>& waiting, std::atomic<bool>& aborted) {
    return [&waiting, &aborted](backend_session&) -> asio::awaitable<int> {
        asio::steady_timer timer(co_await asio::this_coro::executor, hours(1));
        waiting.store(true, std::memory_order_release);
        try {
            co_await timer.async_wait(asio::use_awaitable);
        } catch (const asio_system_error& e) {
            aborted.store(e.code() == asio::error::operation_aborted, std::memory_order_release);
            throw;
        }
        co_return 1;
    };
}

}  // namespace

TEST_CASE("S20: a terminal cancellation cancels an asynchronous body's own await; cancelled, counted stopped") {
    for (const placement where : {placement::compute, placement::caller}) {
        INFO("placement " << (where == placement::compute ? "compute" : "caller"));
        cpu_backend cpu({.permits = 1});
        asio::io_context io;
        asio::cancellation_signal signal;
        outcome<int> out;
        std::atomic<bool> waiting{false}, aborted{false};
        cpu.with_backend_session({.where = where}, hour_long_wait(waiting, aborted), deliver_to(io, signal, out));
        // (Caller placement: the body runs on this io_context.)
        run_until(io, [&] { return waiting.load(std::memory_order_acquire); });
        const auto asked = steady_clock::now();
        signal.emit(asio::cancellation_type::terminal);
        run_until(io, [&] { return out.result.has_value(); });
        CHECK(steady_clock::now() - asked < std::chrono::seconds(10));
        CHECK(aborted.load());
        CHECK_FALSE(out.exception);
        REQUIRE_FALSE(out.result->has_value());
        CHECK(out.result->error() == session_entry_errc::cancelled);
        CHECK(std::string(out.result->error().detail()).find("stopped while running") != std::string::npos);
        const admission_stats st = cpu.stats();
        CHECK(st.stopped == 1);
        CHECK(st.admitted == 1);
        CHECK(st.completed == 1);
        CHECK(st.available == st.permits);
    }
}

TEST_CASE("S20: the deadline cancels an asynchronous body's own await, with no cancellation slot") {
    cpu_backend cpu({.permits = 1});
    asio::io_context io;
    std::optional<session_result<int>> result;
    std::atomic<bool> waiting{false}, aborted{false};
    cpu.with_backend_session({.deadline = steady_clock::now() + milliseconds(30)}, hour_long_wait(waiting, aborted),
                             asio::bind_executor(io, [&](std::exception_ptr e, session_result<int> r) {
                                 CHECK_FALSE(e);
                                 result.emplace(std::move(r));
                             }));
    run_until(io, [&] { return result.has_value(); });
    CHECK(waiting.load());
    CHECK(aborted.load());
    REQUIRE_FALSE(result->has_value());
    CHECK(result->error() == session_entry_errc::deadline_exceeded);
    CHECK(cpu.stats().stopped == 1);
    CHECK(cpu.stats().expired == 0);  // it started in time
}

TEST_CASE("S20: an asynchronous body that catches the aborted await and returns delivers its value (S2)") {
    cpu_backend cpu({.permits = 1});
    asio::io_context io;
    asio::cancellation_signal signal;
    outcome<int> out;
    std::atomic<bool> waiting{false};
    cpu.with_backend_session(
        [&](backend_session& s) -> asio::awaitable<int> {
            asio::steady_timer timer(co_await asio::this_coro::executor, hours(1));
            waiting.store(true, std::memory_order_release);
            tenferro::asio_error_code ec;
            co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            // The session stays stopped (sticky): its operations throw.
            co_return ec == asio::error::operation_aborted&& s.stop_requested() ? 7 : 0;
        },
        deliver_to(io, signal, out));
    wait_for(waiting);
    signal.emit(asio::cancellation_type::terminal);
    run_until(io, [&] { return out.result.has_value(); });
    REQUIRE(out.result->has_value());
    CHECK(out.result->value() == 7);
    CHECK(cpu.stats().stopped == 0);
}

TEST_CASE("S20: a total cancellation does not reach a running asynchronous body's awaits") {
    cpu_backend cpu({.permits = 1});
    asio::io_context io;
    asio::cancellation_signal signal;
    outcome<int> out;
    std::atomic<bool> waiting{false};
    cpu.with_backend_session(
        [&](backend_session&) -> asio::awaitable<int> {
            asio::steady_timer timer(co_await asio::this_coro::executor, milliseconds(50));
            waiting.store(true, std::memory_order_release);
            co_await timer.async_wait(asio::use_awaitable);  // the whole 50 ms
            co_return 3;
        },
        deliver_to(io, signal, out));
    wait_for(waiting);
    signal.emit(asio::cancellation_type::total);
    run_until(io, [&] { return out.result.has_value(); });
    REQUIRE(out.result->has_value());
    CHECK(out.result->value() == 3);
    CHECK(cpu.stats().stopped == 0);
}

TEST_CASE("S20: a stop asked before the body's first await still cancels that await") {
    // The body is asked to stop while it computes, before it ever suspends:
    // the emit waits for that turn to end, and then cancels the await it began.
    cpu_backend cpu({.permits = 1});
    asio::io_context io;
    asio::cancellation_signal signal;
    outcome<int> out;
    std::atomic<bool> computing{false}, asked{false}, aborted{false};
    cpu.with_backend_session(
        [&](backend_session&) -> asio::awaitable<int> {
            computing.store(true, std::memory_order_release);
            wait_for(asked);  // the request arrives while this turn runs
            asio::steady_timer timer(co_await asio::this_coro::executor, hours(1));
            try {
                co_await timer.async_wait(asio::use_awaitable);
            } catch (const asio_system_error& e) {
                aborted.store(e.code() == asio::error::operation_aborted, std::memory_order_release);
                throw;
            }
            co_return 1;
        },
        deliver_to(io, signal, out));
    wait_for(computing);
    signal.emit(asio::cancellation_type::terminal);
    asked.store(true, std::memory_order_release);
    run_until(io, [&] { return out.result.has_value(); });
    CHECK(aborted.load());
    REQUIRE_FALSE(out.result->has_value());
    CHECK(out.result->error() == session_entry_errc::cancelled);
    CHECK(cpu.stats().stopped == 1);
}

// ---- Execution scopes

TEST_CASE("S20: cancelling a scope stops its running session and cancels the scope body's own await") {
    cpu_backend cpu({.permits = 2});
    asio::io_context io;
    asio::cancellation_signal signal;
    std::optional<session_result<int>> scope_result, inner_result;
    std::atomic<bool> inner_running{false}, scope_waiting{false}, scope_aborted{false};
    const std::vector<float> v(256 * 256, 0.5f);
    const tensor a = tensor::from(std::span<const float>(v), {256, 256});
    cpu.with_execution_scope(
        [&](execution_scope&) -> asio::awaitable<int> {
            const auto ex = co_await asio::this_coro::executor;
            // The inner session is entered with a callback that has no
            // slot: only the scope's stop can reach it.
            cpu.with_backend_session(
                [&](backend_session& s) -> int {
                    inner_running.store(true, std::memory_order_release);
                    for (;;) (void)s.matmul(a, a);
                },
                asio::bind_executor(ex, [&](std::exception_ptr, session_result<int> r) { inner_result = r; }));
            asio::steady_timer timer(ex, hours(1));
            scope_waiting.store(true, std::memory_order_release);
            try {
                co_await timer.async_wait(asio::use_awaitable);
            } catch (const asio_system_error& e) {
                scope_aborted.store(e.code() == asio::error::operation_aborted, std::memory_order_release);
                throw;
            }
            co_return 1;
        },
        asio::bind_cancellation_slot(signal.slot(),
                                     asio::bind_executor(io, [&](std::exception_ptr e, session_result<int> r) {
                                         CHECK_FALSE(e);
                                         scope_result = r;
                                     })));
    run_until(io, [&] { return scope_waiting.load() && inner_running.load(); });
    signal.emit(asio::cancellation_type::terminal);
    run_until(io, [&] { return scope_result.has_value() && inner_result.has_value(); });
    CHECK(scope_aborted.load());
    REQUIRE_FALSE(scope_result->has_value());
    CHECK(scope_result->error() == session_entry_errc::cancelled);
    REQUIRE_FALSE(inner_result->has_value());
    CHECK(inner_result->error() == session_entry_errc::cancelled);
    CHECK(std::string(inner_result->error().detail()).find("stopped while running") != std::string::npos);
    const admission_stats st = cpu.stats();
    CHECK(st.stopped == 2);  // the scope and its session
    CHECK(st.admitted == 2);
    CHECK(st.completed == 2);
    CHECK(st.available == st.permits);
}

TEST_CASE("S20: a session entered inside a stopped scope completes with cancelled at once; its body never runs") {
    cpu_backend cpu({.permits = 1});
    asio::io_context io;
    asio::cancellation_signal signal;
    std::optional<session_result<int>> scope_result, late;
    std::atomic<bool> scope_waiting{false};
    bool late_body_ran = false;
    cpu.with_execution_scope(
        [&](execution_scope&) -> asio::awaitable<int> {
            asio::steady_timer timer(co_await asio::this_coro::executor, hours(1));
            scope_waiting.store(true, std::memory_order_release);
            tenferro::asio_error_code ec;
            co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            // Stopped: a session entered now never runs. (The coroutine's own
            // cancellation state is reset first, so that the entry itself,
            // not Asio's throw_if_cancelled, answers.)
            co_await asio::this_coro::reset_cancellation_state();
            late = co_await cpu.with_backend_session(
                [&](backend_session&) {
                    late_body_ran = true;
                    return 1;
                },
                asio::use_awaitable);
            co_return ec == asio::error::operation_aborted ? 5 : 0;
        },
        asio::bind_cancellation_slot(signal.slot(),
                                     asio::bind_executor(io, [&](std::exception_ptr e, session_result<int> r) {
                                         CHECK_FALSE(e);
                                         scope_result = r;
                                     })));
    run_until(io, [&] { return scope_waiting.load(); });
    signal.emit(asio::cancellation_type::terminal);
    run_until(io, [&] { return scope_result.has_value(); });
    REQUIRE(scope_result->has_value());
    CHECK(scope_result->value() == 5);  // it caught the stop and returned (S2)
    REQUIRE(late.has_value());
    REQUIRE_FALSE(late->has_value());
    CHECK(late->error() == session_entry_errc::cancelled);
    CHECK_FALSE(late_body_ran);
    const admission_stats st = cpu.stats();
    CHECK(st.cancelled == 1);
    CHECK(st.stopped == 0);
    CHECK(st.available == st.permits);
}

TEST_CASE("S20: a stoppable asynchronous body's context is freed once its entry completed") {
    // From Asio 1.26 (not 1.22), co_spawn leaves a cancellation handler in the body's
    // slot (the context's body_signal) holding the body's executor, which
    // holds the context: until the slot was cleared at the body's end, the
    // context of every stoppable asynchronous body leaked (LeakSanitizer saw
    // it on Asio 1.30). Asio 1.22's co_spawn installs no handler there.
    asio::io_context io;
    cpu_backend cpu({.permits = 1});
    std::weak_ptr<tenferro::detail::session_context> context;
    bool captured = false;
    std::optional<session_result<int>> result;
    asio::cancellation_signal signal;  // connected: the entry can be stopped
    cpu.with_backend_session(
        [&](backend_session&) -> asio::awaitable<int> {
            tenferro::detail::session_context* ctx = tenferro::detail::context_of(co_await asio::this_coro::executor);
            if (ctx != nullptr) {
                context = ctx->weak_from_this();
                captured = true;
            }
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
            co_return 7;
        },
        asio::bind_cancellation_slot(signal.slot(),
                                     asio::bind_executor(io, [&](std::exception_ptr e, session_result<int> r) {
                                         CHECK_FALSE(e);
                                         result = r;
                                     })));
    run_until(io, [&] { return result.has_value(); });
    REQUIRE(result->has_value());
    CHECK(result->value() == 7);
    REQUIRE(captured);
    // The pool's thread may still be unwinding co_spawn's frame: give it a moment.
    for (int i = 0; i < 200 && !context.expired(); ++i) std::this_thread::sleep_for(milliseconds(5));
    CHECK(context.expired());
}
