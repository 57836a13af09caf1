// cpu_backend: the order of admission and start (S4, S13, S17): FIFO without
// barging, cancellation of a waiter, bodies starting in grant order, and the
// caller-placement fast paths that must keep both.
#include <tenferro/cpu_backend.hpp>

#include <sched.h>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "entry_helpers.hpp"
#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"
#include "testing_access.hpp"

using namespace tenferro;
using tenferro::test::gate;
using tenferro::test::holder;
using tenferro::test::on_caller;
using tenferro::test::run_until;
using tenferro::test::spawn;

TEST_CASE("FIFO: waiting entries are admitted in initiation order (stepped io_context)") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    std::vector<int> order;
    int done = 0;
    for (int i = 0; i < 6; ++i) {
        spawn(io, [&, i]() -> asio::awaitable<void> {
            auto r = co_await cpu.with_backend_session(on_caller(), [&, i](test_session&) { order.push_back(i); });
            CHECK(r.has_value());
            ++done;
        });
    }
    // Start all six coroutines: each queues behind the holder.
    for (int i = 0; i < 6; ++i) io.poll_one();
    CHECK(cpu.stats().waiting == 6);
    CHECK(order.empty());
    release.cancel();
    io.run();
    CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5});
    CHECK(done == 6);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 7);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("Caller placement admitted at once, a handler: the body runs in the initiation, completes by post") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::vector<std::string> events;
    asio::post(io, [&] {
        events.push_back("initiate");
        cpu.with_backend_session(
            on_caller(), [&](test_session&) { events.push_back("body"); },
            asio::bind_executor(
                io, [&](std::exception_ptr, session_result<void> r) { events.push_back(r ? "completed" : "failed"); }));
        events.push_back("returned");
    });
    io.poll_one();  // admission and the body happen inside the initiating function
    CHECK(events == std::vector<std::string>{"initiate", "body", "returned"});
    io.poll_one();  // the completion was posted, never invoked inside the initiating function
    CHECK(events == std::vector<std::string>{"initiate", "body", "returned", "completed"});
}

TEST_CASE("Caller placement admitted at once, co_await: the value is returned to the coroutine without a post") {
    // An awaiting coroutine already runs on its executor: nothing is posted
    // (entry_awaitable.hpp), so a handler queued before the entry has not run
    // when the coroutine resumes.
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::vector<std::string> events;
    detail::testing_access::renew_inline_return_budget();
    spawn(io, [&]() -> asio::awaitable<void> {
        events.push_back("initiate");
        asio::post(io, [&] { events.push_back("queued before"); });
        const session_result<int> r = co_await cpu.with_backend_session(on_caller(), [&](test_session&) {
            events.push_back("body");
            return 7;
        });
        events.push_back(r && *r == 7 ? "resumed with 7" : "resumed wrong");
    });
    io.poll_one();  // the coroutine runs through its co_await
    CHECK(events == std::vector<std::string>{"initiate", "body", "resumed with 7"});
    io.run();
    CHECK(events.back() == "queued before");
    CHECK(cpu.stats().available == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("co_await fast path: a coroutine entering sessions in a loop still gives its thread back") {
    // The fairness budget: at most 32 inline returns in a row on a thread,
    // then one completion goes through the executor, so a handler queued
    // behind the looping coroutine runs long before the loop ends.
    asio::io_context io;
    test_host cpu({.permits = 1});
    int entered = 0;
    int entered_when_other_ran = -1;
    detail::testing_access::renew_inline_return_budget();
    spawn(io, [&]() -> asio::awaitable<void> {
        asio::post(io, [&] { entered_when_other_ran = entered; });
        for (int i = 0; i < 200; ++i) {
            const session_result<void> r = co_await cpu.with_backend_session(on_caller(), [&](test_session&) {});
            if (r) ++entered;
        }
    });
    io.poll_one();  // the coroutine runs until its budget sends one completion through the queue
    CHECK(entered == 31);  // the 32nd body ran too; its completion is queued behind the handler
    CHECK(entered_when_other_ran == -1);
    io.poll_one();  // the handler queued first
    CHECK(entered_when_other_ran == entered);
    io.run();
    CHECK(entered == 200);
    CHECK(cpu.stats().available == 1);
}

TEST_CASE("co_await fast path: a body's exception is rethrown at the co_await, the permit is back") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::string caught;
    std::size_t available_in_catch = 0;
    spawn(io, [&]() -> asio::awaitable<void> {
        try {
            co_await cpu.with_backend_session(on_caller(),
                                              [](test_session&) -> int { throw std::runtime_error("boom"); });
        } catch (const std::runtime_error& e) {
            caught = e.what();
            available_in_catch = cpu.stats().available;
        }
    });
    io.poll_one();
    CHECK(caught == "boom");
    CHECK(available_in_catch == 1);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("S17: bodies start in grant order, even when an earlier grantee initiates again inline") {
    // CPython's test_acquire_fifo_order_2 shape, caller placement, one thread:
    // one release grants A and B (their runners are posted); A's body runs, A's
    // coroutine is resumed inline and enters again; a permit is free and nobody
    // waits, so A2 is admitted at once. Its body must still start after B's,
    // which was granted earlier: A2 may not run inline in its initiation.
    asio::io_context io;
    test_host cpu({.permits = 2});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await cpu.with_backend_session(session_options{2, wait_policy::fifo, placement::caller},
                                          holder(release, held));
    });
    io.poll();
    REQUIRE(held);
    std::vector<std::string> order;
    spawn(io, [&]() -> asio::awaitable<void> {
        auto a1 = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { order.push_back("A1"); });
        auto a2 = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { order.push_back("A2"); });
        CHECK((a1 && a2));
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        auto b = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { order.push_back("B1"); });
        CHECK(b.has_value());
    });
    io.poll();
    REQUIRE(cpu.stats().waiting == 2);
    release.cancel();
    io.run();
    CHECK(order == std::vector<std::string>{"A1", "B1", "A2"});
    const admission_stats st = cpu.stats();
    CHECK(st.available == 2);
    CHECK(st.admitted == st.completed);
}

TEST_CASE("S17: a grant whose hook is still running on another thread keeps its place") {
    // E1 is granted by a worker's release, but its on_admitted hook (and so
    // the hand-off of its runner) takes a while on that worker; meanwhile the
    // other worker releases, and E2 is admitted at once on the caller's
    // thread. E2 was granted later: its body must not start before E1's.
    struct slow_observer final : admission_observer {
        std::atomic<int> admissions{0};
        void on_admitted(std::size_t) override {
            if (++admissions == 3) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    };
    asio::io_context io;
    auto observer = std::make_shared<slow_observer>();
    test_host cpu({.permits = 2, .observer = observer});
    gate first, second;
    std::vector<std::string> order;
    std::optional<session_result<void>> h1, h2, e1, e2;
    spawn(io, [&]() -> asio::awaitable<void> {
        h1 = co_await cpu.with_backend_session([&](test_session&) { first.wait(); });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        h2 = co_await cpu.with_backend_session([&](test_session&) { second.wait(); });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        e1 = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { order.push_back("E1"); });
    });
    io.poll();
    REQUIRE(first.wait_for_waiters(1));
    REQUIRE(second.wait_for_waiters(1));
    REQUIRE(cpu.stats().waiting == 1);
    first.open();  // grants E1; its hook sleeps before the runner is handed off
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (observer->admissions < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    REQUIRE(observer->admissions == 3);
    second.open();  // a permit comes free while nobody waits
    while (cpu.stats().available < 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    REQUIRE(cpu.stats().available == 1);
    spawn(io, [&]() -> asio::awaitable<void> {
        e2 = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { order.push_back("E2"); });
    });
    REQUIRE(run_until(io, [&] { return h1 && h2 && e1 && e2; }));
    CHECK(order == std::vector<std::string>{"E1", "E2"});
    const admission_stats st = cpu.stats();
    CHECK(st.available == 2);
    CHECK(st.admitted == st.completed);
}

TEST_CASE("S17: grants from two releasing workers reach the caller's executor in grant order") {
    // Two compute bodies release at nearly the same time on two workers; each
    // release grants one caller-placed waiter, in FIFO order (2, then 3).
    // Whatever the interleaving of the two workers' hand-offs, the bodies
    // start in that order.
    const long rounds = tenferro::test::stress_iterations(2000) / 4;
    long misordered = 0, failures = 0;
    for (long round = 0; round < rounds; ++round) {
        asio::io_context io;
        test_host cpu({.permits = 2});
        std::atomic<int> ready{0};
        std::atomic<bool> go{false};
        std::vector<int> started;
        std::vector<std::optional<session_result<void>>> results(4);
        for (int i = 0; i < 2; ++i)
            spawn(io, [&, i]() -> asio::awaitable<void> {
                results[i] = co_await cpu.with_backend_session([&](test_session&) {
                    ++ready;
                    while (!go.load()) std::this_thread::yield();
                });
            });
        for (int i = 2; i < 4; ++i)
            spawn(io, [&, i]() -> asio::awaitable<void> {
                results[i] =
                    co_await cpu.with_backend_session(on_caller(), [&, i](test_session&) { started.push_back(i); });
            });
        io.poll();
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (ready < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        go = true;  // both workers release at once
        if (!run_until(io, [&] {
                for (auto& r : results)
                    if (!r) return false;
                return true;
            })) {
            ++failures;
            break;
        }
        if (started != std::vector<int>{2, 3}) ++misordered;
    }
    CHECK(failures == 0);
    CHECK(misordered == 0);
}

TEST_CASE("S17: the inline fast path stays when nothing granted earlier is pending") {
    // The other side of the rule: with nobody waiting and no posted runner,
    // an entry admitted at once still runs its body inside its initiation.
    asio::io_context io;
    test_host cpu({.permits = 2});
    std::vector<std::string> events;
    detail::testing_access::renew_inline_return_budget();
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await cpu.with_backend_session(on_caller(), [&](test_session&) { events.push_back("first"); });
        events.push_back("between");
        co_await cpu.with_backend_session(on_caller(), [&](test_session&) { events.push_back("second"); });
        events.push_back("done");
    });
    io.poll_one();  // both bodies inline, each value returned to the coroutine at once
    CHECK(events == std::vector<std::string>{"first", "between", "second", "done"});
}

TEST_CASE("FIFO: no barging past a weighted head, which blocks later entries until satisfied") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    std::vector<std::string> order;
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await cpu.with_backend_session(on_caller(), holder(release, held));
        order.push_back("holder");
    });
    io.poll();
    REQUIRE(held);
    CHECK(cpu.stats().available == 1);
    spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await cpu.with_backend_session({2, wait_policy::fifo, placement::caller}, [&](test_session& s) {
            order.push_back("heavy:" + std::to_string(s.parallelism()));
        });
        CHECK(r.has_value());
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await cpu.with_backend_session(on_caller(), [&](test_session&) { order.push_back("light"); });
    });
    std::optional<session_result<void>> tried;
    spawn(io, [&]() -> asio::awaitable<void> {
        tried = co_await cpu.with_backend_session({1, wait_policy::never, placement::caller},
                                                  [&](test_session&) { order.push_back("never"); });
    });
    io.poll();
    // One permit is free, yet the light entry waits behind the heavy head, and a
    // never-wait entry may not take it either.
    CHECK(cpu.stats().waiting == 2);
    CHECK(cpu.stats().available == 1);
    REQUIRE(tried.has_value());
    CHECK(tried->error() == session_entry_errc::contended);
    CHECK(order.empty());
    release.cancel();
    io.run();
    CHECK(order == std::vector<std::string>{"holder", "heavy:2", "light"});
    CHECK(cpu.stats().available == 2);
}

TEST_CASE("Cancellation removes a waiter: head, middle, weighted head; others keep their order") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);

    std::vector<std::string> order;
    std::map<std::string, session_entry_errc> errors;
    std::map<std::string, asio::cancellation_signal> signals;
    auto enqueue = [&](std::string name, std::size_t permits) {
        signals[name];
        spawn(io, [&, name, permits]() -> asio::awaitable<void> {
            // A named body: GCC 12 miscompiles a lambda temporary with a
            // std::string capture inside a co_await expression (docs/pitfalls.md).
            auto body = [&order, name](test_session&) { order.push_back(name); };
            auto r = co_await cpu.with_backend_session(
                {permits, wait_policy::fifo, placement::caller}, std::move(body),
                asio::bind_cancellation_slot(signals[name].slot(), asio::use_awaitable));
            if (!r) errors[name] = r.error().code();
        });
        io.poll();
    };
    enqueue("heavy", 2);
    enqueue("a", 1);
    enqueue("b", 1);
    enqueue("c", 1);
    CHECK(cpu.stats().waiting == 4);

    // A cancelled middle entry leaves at once; nothing else moves.
    signals["b"].emit(asio::cancellation_type::partial);
    io.poll();
    CHECK(errors["b"] == session_entry_errc::cancelled);
    CHECK(order.empty());
    CHECK(cpu.stats().waiting == 3);

    // Cancelling the weighted head re-offers the free permit at once: "a" and
    // then "c" run although the holder still holds its permit.
    signals["heavy"].emit(asio::cancellation_type::terminal);
    io.poll();
    CHECK(errors["heavy"] == session_entry_errc::cancelled);
    CHECK(order == std::vector<std::string>{"a", "c"});

    // Cancelling after admission changes nothing.
    signals["a"].emit(asio::cancellation_type::total);
    release.cancel();
    io.run();
    CHECK(order == std::vector<std::string>{"a", "c"});
    CHECK(errors.size() == 2);
    const admission_stats st = cpu.stats();
    CHECK(st.cancelled == 2);
    CHECK(st.admitted == st.completed);
    CHECK(st.available == 2);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 3);  // the holder, a and c
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}
