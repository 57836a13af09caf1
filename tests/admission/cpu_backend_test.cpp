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

#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"
#include "testing_access.hpp"

using namespace tenferro;
using tenferro::test::gate;
using tenferro::test::run_until;
using tenferro::test::spawn;

namespace {

constexpr session_options caller_placed{1, wait_policy::fifo, placement::caller};

/// An async body that holds its permits until `release` is cancelled/expires.
auto holder(asio::steady_timer& release, std::atomic<bool>& started) {
    return [&](test_session&) -> asio::awaitable<int> {
        started = true;
        tenferro::asio_error_code ec;
        co_await release.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        co_return 1;
    };
}

}  // namespace

TEST_CASE("cpu_backend basics: name, permits, a body runs once and its value comes back") {
    test_host cpu({.permits = 2});
    CHECK(cpu.name() == test_host_name);
    CHECK(cpu.permits() == 2);
    asio::io_context io;
    std::optional<session_result<int>> out;
    int runs = 0;
    spawn(io, [&]() -> asio::awaitable<void> {
        out = co_await cpu.with_backend_session([&](test_session& s) {
            ++runs;
            return static_cast<int>(s.parallelism()) + 40 + (s.backend() == test_host_name);
        });
    });
    REQUIRE(run_until(io, [&] { return out.has_value(); }));
    REQUIRE(out->has_value());
    CHECK(out->value() == 42);
    CHECK(runs == 1);
    const admission_stats st = cpu.stats();
    CHECK(st.admitted == 1);
    CHECK(st.completed == 1);
    CHECK(st.available == 2);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("permits = 0 means hardware_concurrency") {
    test_host cpu(test_host_options{});
    const unsigned hw = std::thread::hardware_concurrency();
    CHECK(cpu.permits() == (hw == 0 ? 1 : hw));
}

TEST_CASE("FIFO: waiting entries are admitted in initiation order (stepped io_context)") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(caller_placed, holder(release, held)); });
    io.poll();
    REQUIRE(held);
    std::vector<int> order;
    int done = 0;
    for (int i = 0; i < 6; ++i) {
        spawn(io, [&, i]() -> asio::awaitable<void> {
            auto r = co_await cpu.with_backend_session(caller_placed, [&, i](test_session&) { order.push_back(i); });
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
            caller_placed, [&](test_session&) { events.push_back("body"); },
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
        const session_result<int> r = co_await cpu.with_backend_session(caller_placed, [&](test_session&) {
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
            const session_result<void> r = co_await cpu.with_backend_session(caller_placed, [&](test_session&) {});
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
            co_await cpu.with_backend_session(caller_placed,
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
        auto a1 = co_await cpu.with_backend_session(caller_placed, [&](test_session&) { order.push_back("A1"); });
        auto a2 = co_await cpu.with_backend_session(caller_placed, [&](test_session&) { order.push_back("A2"); });
        CHECK((a1 && a2));
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        auto b = co_await cpu.with_backend_session(caller_placed, [&](test_session&) { order.push_back("B1"); });
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
        e1 = co_await cpu.with_backend_session(caller_placed, [&](test_session&) { order.push_back("E1"); });
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
        e2 = co_await cpu.with_backend_session(caller_placed, [&](test_session&) { order.push_back("E2"); });
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
                    co_await cpu.with_backend_session(caller_placed, [&, i](test_session&) { started.push_back(i); });
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
        co_await cpu.with_backend_session(caller_placed, [&](test_session&) { events.push_back("first"); });
        events.push_back("between");
        co_await cpu.with_backend_session(caller_placed, [&](test_session&) { events.push_back("second"); });
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
        co_await cpu.with_backend_session(caller_placed, holder(release, held));
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
        co_await cpu.with_backend_session(caller_placed, [&](test_session&) { order.push_back("light"); });
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
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(caller_placed, holder(release, held)); });
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

TEST_CASE("Result passthrough: the body's own expected, error_code, move-only and void values") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    bool finished = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        session_result<tl::expected<int, std::string>> a = co_await cpu.with_backend_session(
            [](test_session&) -> tl::expected<int, std::string> { return tl::make_unexpected(std::string("own")); });
        REQUIRE(a.has_value());  // admission succeeded
        CHECK(a->error() == "own");

        session_result<std::error_code> b =
            co_await cpu.with_backend_session([](test_session&) { return std::make_error_code(std::errc::timed_out); });
        REQUIRE(b.has_value());
        CHECK(b.value() == std::errc::timed_out);

        session_result<std::unique_ptr<int>> c =
            co_await cpu.with_backend_session([](test_session&) { return std::make_unique<int>(5); });
        REQUIRE(c.has_value());
        CHECK(*c.value() == 5);

        session_result<void> d = co_await cpu.with_backend_session([](test_session&) {});
        CHECK(d.has_value());

        // A body returning a session_result of its own: still just a value.
        session_result<session_result<int>> e = co_await cpu.with_backend_session([](test_session&) {
            return session_result<int>(tl::make_unexpected(session_entry_error(session_entry_errc::contended, "x")));
        });
        REQUIRE(e.has_value());
        CHECK(e->error() == session_entry_errc::contended);
        finished = true;
    });
    REQUIRE(run_until(io, [&] { return finished; }));
}

TEST_CASE("A throwing body: its exception is rethrown at co_await, permits come back, host healthy") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::string caught;
    bool after = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        try {
            co_await cpu.with_backend_session([](test_session&) -> int { throw std::logic_error("body failed"); });
        } catch (const std::logic_error& e) {
            caught = e.what();
        }
        try {
            co_await cpu.with_backend_session([](test_session&) -> asio::awaitable<int> {
                throw std::out_of_range("async body failed");
                co_return 1;
            });
        } catch (const std::out_of_range& e) {
            caught += std::string("|") + e.what();
        }
        auto r = co_await cpu.with_backend_session([](test_session&) { return 1; });
        after = r.has_value() && *r == 1;
    });
    REQUIRE(run_until(io, [&] { return after; }));
    CHECK(caught == "body failed|async body failed");
    const admission_stats st = cpu.stats();
    CHECK(st.available == 1);
    CHECK(st.admitted == 3);
    CHECK(st.completed == 3);
    CHECK(st.rejected == 0);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 3);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("Resumption: compute bodies run on a worker, the caller resumes on its own thread") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    std::thread::id io_thread, body_thread, resumed_thread, caller_body_thread;
    bool worker_flag = true;
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await cpu.with_backend_session([&](test_session&) { body_thread = std::this_thread::get_id(); });
        resumed_thread = std::this_thread::get_id();
        co_await cpu.with_backend_session(caller_placed,
                                          [&](test_session&) { caller_body_thread = std::this_thread::get_id(); });
        worker_flag = false;
    });
    std::thread runner([&] {
        io_thread = std::this_thread::get_id();
        io.run();
    });
    runner.join();
    CHECK_FALSE(worker_flag);
    CHECK(body_thread != io_thread);
    CHECK(resumed_thread == io_thread);
    CHECK(caller_body_thread == io_thread);
}

#ifndef TENFERRO_TEST_GENERIC_HOST
// CPU only: parallel_for is backend_session's (the generic host's session has
// no kernels); the generic counterpart below checks parallelism() alone.
TEST_CASE("A weighted session gets parallelism() == k and a parallel_for on up to k threads") {
    asio::io_context io;
    test_host cpu({.permits = 3});
    std::set<std::thread::id> threads;
    std::mutex m;
    std::size_t parallelism = 0;
    long sum = -1;
    spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await cpu.with_backend_session({3, wait_policy::fifo, placement::compute}, [&](test_session& s) {
            parallelism = s.parallelism();
            std::atomic<long> total{0};
            s.parallel_for(3000, 1, [&](std::int64_t b, std::int64_t e) {
                {
                    std::lock_guard lock(m);
                    threads.insert(std::this_thread::get_id());
                }
                long local = 0;
                for (std::int64_t i = b; i < e; ++i) local += i;
                total += local;
                std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the helpers join in
            });
            return total.load();
        });
        sum = r.value();
    });
    REQUIRE(run_until(io, [&] { return sum >= 0; }));
    CHECK(parallelism == 3);
    CHECK(sum == 3000L * 2999 / 2);
    CHECK(threads.size() >= 2);
    CHECK(threads.size() <= 3);
}
#else
TEST_CASE("A weighted session gets parallelism() == k, on a compute worker") {
    asio::io_context io;
    test_host cpu({.permits = 3});
    std::size_t parallelism = 0;
    std::thread::id body_thread;
    bool done = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await cpu.with_backend_session({3, wait_policy::fifo, placement::compute}, [&](test_session& s) {
            parallelism = s.parallelism();
            body_thread = std::this_thread::get_id();
        });
        CHECK(r.has_value());
        done = true;
    });
    REQUIRE(run_until(io, [&] { return done; }));
    CHECK(parallelism == 3);
    CHECK(body_thread != std::this_thread::get_id());
    CHECK(tenferro::test::all_sessions_closed(cpu));
}
#endif

TEST_CASE("Re-entry: a nested entry inside a sync body completes with reentered, without waiting") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    test_host other({.permits = 1});
    std::future<session_result<int>> nested_same, nested_other;
    std::atomic<bool> ran_nested{false};
    bool done = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await cpu.with_backend_session([&](test_session&) {
            // From inside the body (a sync body cannot co_await). With one
            // permit held by this very body, waiting would deadlock.
            nested_same = cpu.with_backend_session(
                [&](test_session&) {
                    ran_nested = true;
                    return 1;
                },
                asio::use_future);
            nested_other = other.with_backend_session(
                [&](test_session&) {
                    ran_nested = true;
                    return 2;
                },
                asio::use_future);
            return 0;
        });
        CHECK(r.has_value());
        done = true;
    });
    REQUIRE(run_until(io, [&] { return done; }));
    const session_result<int> same = nested_same.get();
    const session_result<int> foreign = nested_other.get();
    CHECK_FALSE(ran_nested);
    CHECK(same.error() == session_entry_errc::reentered);
    CHECK(foreign.error() == session_entry_errc::reentered);
    CHECK(same.error().backend() == test_host_name);
    CHECK(cpu.stats().rejected == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);
    TENFERRO_CHECK_SESSIONS_OPENED(other, 0);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

namespace {
asio::awaitable<session_result<int>> deep(test_host& cpu, int depth) {
    if (depth == 0) co_return co_await cpu.with_backend_session([](test_session&) { return 7; });
    co_return co_await deep(cpu, depth - 1);
}
}  // namespace

TEST_CASE("Re-entry: anywhere in an async body's coroutine chain, on either placement") {
    for (placement where : {placement::compute, placement::caller}) {
        asio::io_context io;
        test_host cpu({.permits = 2});
        test_host other({.permits = 1});
        std::optional<session_result<int>> direct, chained, foreign;
        bool done = false;
        spawn(io, [&]() -> asio::awaitable<void> {
            auto r = co_await cpu.with_backend_session({1, wait_policy::fifo, where},
                                                       [&](test_session&) -> asio::awaitable<int> {
                                                           direct = co_await deep(cpu, 0);
                                                           chained = co_await deep(cpu, 4);
                                                           foreign = co_await deep(other, 2);
                                                           co_return 1;
                                                       });
            CHECK(r.has_value());
            // Outside the body again: not flagged any more.
            auto after = co_await deep(cpu, 2);
            CHECK(after.has_value());
            done = true;
        });
        REQUIRE(run_until(io, [&] { return done; }));
        CHECK(direct->error() == session_entry_errc::reentered);
        CHECK(chained->error() == session_entry_errc::reentered);
        CHECK(foreign->error() == session_entry_errc::reentered);
        CHECK(cpu.stats().available == 2);
        TENFERRO_CHECK_SESSIONS_OPENED(cpu, 2);  // the body, and `after`
        TENFERRO_CHECK_SESSIONS_OPENED(other, 0);
        TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
    }
}

TEST_CASE("Re-entry: an unrelated coroutine on the same thread is never flagged") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    std::optional<session_result<int>> unrelated;
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(caller_placed, holder(release, held)); });
    io.poll();
    REQUIRE(held);  // an async body is suspended on this very thread
    spawn(io, [&]() -> asio::awaitable<void> {
        unrelated = co_await cpu.with_backend_session(caller_placed, [](test_session&) { return 3; });
    });
    io.poll();
    REQUIRE(unrelated.has_value());
    CHECK(unrelated->value() == 3);
    release.cancel();
    io.run();
}

TEST_CASE("contended: wait_policy::never and the max_waiters bound shed load") {
    asio::io_context io;
    test_host cpu({.permits = 1, .max_waiters = 2});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(caller_placed, holder(release, held)); });
    io.poll();
    REQUIRE(held);
    std::vector<std::optional<session_result<int>>> results(4);
    int ran = 0;
    for (int i = 0; i < 3; ++i)
        spawn(io, [&, i]() -> asio::awaitable<void> {
            results[i] = co_await cpu.with_backend_session(caller_placed, [&](test_session&) { return ++ran; });
        });
    spawn(io, [&]() -> asio::awaitable<void> {
        results[3] = co_await cpu.with_backend_session({1, wait_policy::never, placement::caller},
                                                       [&](test_session&) { return ++ran; });
    });
    io.poll();
    REQUIRE(results[2].has_value());
    CHECK(results[2]->error() == session_entry_errc::contended);
    CHECK(results[2]->error().detail().find("max_waiters") != std::string::npos);
    REQUIRE(results[3].has_value());
    CHECK(results[3]->error() == session_entry_errc::contended);
    CHECK(ran == 0);
    release.cancel();
    io.run();
    CHECK(results[0]->value() == 1);
    CHECK(results[1]->value() == 2);
    CHECK(cpu.stats().rejected == 2);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 3);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("incompatible_context: zero permits, or more than the host has") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    std::optional<session_result<int>> zero, many;
    bool ran = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        zero = co_await cpu.with_backend_session({0, wait_policy::fifo, placement::compute}, [&](test_session&) {
            ran = true;
            return 0;
        });
        many = co_await cpu.with_backend_session({3, wait_policy::fifo, placement::compute}, [&](test_session&) {
            ran = true;
            return 0;
        });
    });
    io.run();
    CHECK(zero->error() == session_entry_errc::incompatible_context);
    CHECK(many->error() == session_entry_errc::incompatible_context);
    CHECK(many->error().detail().find("3 permits") != std::string::npos);
    CHECK_FALSE(ran);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 0);
}

namespace {
struct throwing_observer final : admission_observer {
    std::atomic<int> admissions{0}, releases{0};
    int throw_on_admission = -1;  // 1-based admission number that throws
    bool throw_on_release = false;
    void on_admitted(std::size_t) override {
        if (++admissions == throw_on_admission) throw std::runtime_error("metrics backend down");
    }
    void on_released(std::size_t) override {
        ++releases;
        if (throw_on_release) throw std::runtime_error("metrics backend down");
    }
};
}  // namespace

TEST_CASE("Poisoning: an observer throwing in on_admitted poisons the entry, the queue and later entries") {
    asio::io_context io;
    auto observer = std::make_shared<throwing_observer>();
    observer->throw_on_admission = 2;
    test_host cpu({.permits = 1, .observer = observer});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    std::optional<session_result<int>> running;
    spawn(io, [&]() -> asio::awaitable<void> {
        running = co_await cpu.with_backend_session(caller_placed, holder(release, held));
    });
    io.poll();
    REQUIRE(held);
    std::vector<std::optional<session_result<int>>> queued(3);
    int ran = 0;
    for (int i = 0; i < 3; ++i)
        spawn(io, [&, i]() -> asio::awaitable<void> {
            queued[i] = co_await cpu.with_backend_session(caller_placed, [&](test_session&) { return ++ran; });
        });
    io.poll();
    CHECK(cpu.stats().waiting == 3);
    // The running session finishes normally; granting the next entry calls the
    // throwing hook: that entry and the queue behind it are poisoned.
    release.cancel();
    io.run();
    REQUIRE(running.has_value());
    CHECK(running->value() == 1);
    for (auto& q : queued) {
        REQUIRE(q.has_value());
        CHECK(q->error() == session_entry_errc::resource_poisoned);
    }
    CHECK(ran == 0);
    CHECK(cpu.poisoned());
    std::optional<session_result<int>> later;
    io.restart();
    spawn(io, [&]() -> asio::awaitable<void> {
        later = co_await cpu.with_backend_session([&](test_session&) { return ++ran; });
    });
    io.run();
    CHECK(later->error() == session_entry_errc::resource_poisoned);
    const admission_stats st = cpu.stats();
    CHECK(st.available == st.permits);
    CHECK(st.admitted == st.completed);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);  // the running one only
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("Poisoning: an observer throwing in on_released lets the session finish and poisons the rest") {
    asio::io_context io;
    auto observer = std::make_shared<throwing_observer>();
    observer->throw_on_release = true;
    test_host cpu({.permits = 1, .observer = observer});
    std::optional<session_result<int>> first, second, third;
    spawn(io, [&]() -> asio::awaitable<void> {
        first = co_await cpu.with_backend_session(caller_placed, [](test_session&) { return 1; });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        second = co_await cpu.with_backend_session(caller_placed, [](test_session&) { return 2; });
    });
    io.run();
    CHECK(first->value() == 1);
    CHECK(second->error() == session_entry_errc::resource_poisoned);
    CHECK(cpu.poisoned());
    io.restart();
    spawn(io, [&]() -> asio::awaitable<void> {
        third = co_await cpu.with_backend_session([](test_session&) { return 3; });
    });
    io.run();
    CHECK(third->error() == session_entry_errc::resource_poisoned);
    CHECK(cpu.stats().available == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("S18: an entry granted in the same release as one whose hook threw never starts its body") {
    // Seastar's test_broken_semaphore shape: two permits held by a caller-placed
    // async body; a and b (one permit each) queue; the holder releases and
    // grants both; a's on_admitted (the hook's second call) throws. b was
    // granted in that very release, but no body may start once a hook threw.
    for (placement where : {placement::caller, placement::compute}) {
        INFO((where == placement::caller ? "caller placement" : "compute placement"));
        asio::io_context io;
        auto observer = std::make_shared<throwing_observer>();
        observer->throw_on_admission = 2;
        test_host cpu({.permits = 2, .observer = observer});
        asio::steady_timer release(io, std::chrono::hours(1));
        std::atomic<bool> held{false};
        std::optional<session_result<int>> holder_result, a, b;
        spawn(io, [&]() -> asio::awaitable<void> {
            holder_result = co_await cpu.with_backend_session(session_options{2, wait_policy::fifo, placement::caller},
                                                              holder(release, held));
        });
        io.poll();
        REQUIRE(held);
        std::atomic<int> ran{0};
        const session_options one{1, wait_policy::fifo, where};
        spawn(io, [&]() -> asio::awaitable<void> {
            a = co_await cpu.with_backend_session(one, [&](test_session&) { return ++ran; });
        });
        spawn(io, [&]() -> asio::awaitable<void> {
            b = co_await cpu.with_backend_session(one, [&](test_session&) { return ++ran; });
        });
        io.poll();
        REQUIRE(cpu.stats().waiting == 2);
        release.cancel();
        REQUIRE(run_until(io, [&] { return a.has_value() && b.has_value() && holder_result.has_value(); }));
        CHECK(holder_result->value() == 1);
        CHECK(a->error() == session_entry_errc::resource_poisoned);
        CHECK(b->error() == session_entry_errc::resource_poisoned);
        CHECK(ran == 0);
        CHECK(cpu.poisoned());
        CHECK(observer->admissions == 2);  // b's admission was never announced
        const admission_stats st = cpu.stats();
        CHECK(st.available == 2);
        CHECK(st.admitted == st.completed);
        TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);  // the holder's
        TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
    }
}

TEST_CASE("S18: an entry already granted and handed to its executor does not start once a hook threw") {
    // a is granted (hook call 3 succeeds) and its runner is posted to the
    // caller's context, which the test does not run yet; then b's grant calls
    // the hook a fourth time, which throws. When the context runs a's runner,
    // the host is poisoned: a's body must not start.
    asio::io_context io;
    auto observer = std::make_shared<throwing_observer>();
    observer->throw_on_admission = 4;
    test_host cpu({.permits = 2, .observer = observer});
    gate first, second;
    std::atomic<int> ran{0};
    std::optional<session_result<int>> h1, h2, a, b;
    spawn(io, [&]() -> asio::awaitable<void> {
        h1 = co_await cpu.with_backend_session([&](test_session&) {
            first.wait();
            return 1;
        });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        h2 = co_await cpu.with_backend_session([&](test_session&) {
            second.wait();
            return 2;
        });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        a = co_await cpu.with_backend_session(caller_placed, [&](test_session&) { return ++ran; });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        b = co_await cpu.with_backend_session(caller_placed, [&](test_session&) { return ++ran; });
    });
    io.poll();
    REQUIRE(first.wait_for_waiters(1));
    REQUIRE(second.wait_for_waiters(1));
    REQUIRE(cpu.stats().waiting == 2);
    first.open();  // h1 releases on its worker: a is granted, its runner posted to `io`
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (observer->admissions < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    REQUIRE(observer->admissions == 3);
    second.open();  // h2 releases: b's grant throws in the hook
    while (!cpu.poisoned() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    REQUIRE(cpu.poisoned());
    REQUIRE(run_until(io, [&] { return h1 && h2 && a && b; }));
    CHECK(h1->value() == 1);
    CHECK(h2->value() == 2);
    CHECK(a->error() == session_entry_errc::resource_poisoned);
    CHECK(b->error() == session_entry_errc::resource_poisoned);
    CHECK(ran == 0);
    CHECK(observer->releases == 3);  // h1, h2, and a's permits (a was announced as admitted)
    const admission_stats st = cpu.stats();
    CHECK(st.available == 2);
    CHECK(st.admitted == st.completed);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 2);  // h1's and h2's
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("shutdown: queued and new entries complete with executor; the running one finishes") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    gate g;
    std::optional<session_result<int>> running, queued, late;
    spawn(io, [&]() -> asio::awaitable<void> {
        running = co_await cpu.with_backend_session([&](test_session&) {
            g.wait();
            return 1;
        });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        queued = co_await cpu.with_backend_session([](test_session&) { return 2; });
    });
    io.poll();
    REQUIRE(g.wait_for_waiters(1));
    REQUIRE(cpu.stats().waiting == 1);
    cpu.shutdown();
    cpu.shutdown();  // idempotent
    spawn(io, [&]() -> asio::awaitable<void> {
        late = co_await cpu.with_backend_session([](test_session&) { return 3; });
    });
    io.poll();
    REQUIRE(queued.has_value());
    CHECK(queued->error() == session_entry_errc::executor);
    REQUIRE(late.has_value());
    CHECK(late->error() == session_entry_errc::executor);
    CHECK_FALSE(running.has_value());
    g.open();
    REQUIRE(run_until(io, [&] { return running.has_value(); }));
    CHECK(running->value() == 1);
    CHECK(cpu.stats().available == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("shutdown with every permit free: an entry that would start inline completes with executor") {
    // The caller-placed entry below would be admitted at once and run inline
    // in its initiation (the inline fast path); after shutdown() it must not.
    asio::io_context io;
    test_host cpu({.permits = 2});
    cpu.shutdown();
    bool ran = false;
    std::optional<session_result<int>> late;
    spawn(io, [&]() -> asio::awaitable<void> {
        late = co_await cpu.with_backend_session(caller_placed, [&](test_session&) {
            ran = true;
            return 3;
        });
    });
    io.run();
    REQUIRE(late.has_value());
    REQUIRE_FALSE(late->has_value());
    CHECK(late->error() == session_entry_errc::executor);
    CHECK(late->error().detail() == "the host was shut down");
    CHECK_FALSE(ran);
    const admission_stats st = cpu.stats();
    CHECK(st.available == 2);
    CHECK(st.admitted == 0);
    CHECK(st.rejected == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 0);
}

TEST_CASE("A compute executor that drops work completes the entry with executor, leaking nothing") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    detail::testing_access::drop_next_runs(cpu, 1);
    std::optional<session_result<int>> dropped, next;
    bool ran = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        dropped = co_await cpu.with_backend_session([&](test_session&) {
            ran = true;
            return 1;
        });
        next = co_await cpu.with_backend_session([&](test_session&) { return 2; });
    });
    REQUIRE(run_until(io, [&] { return next.has_value(); }));
    CHECK(dropped->error() == session_entry_errc::executor);
    CHECK_FALSE(ran);
    CHECK(next->value() == 2);
    const admission_stats st = cpu.stats();
    CHECK(st.available == 1);
    CHECK(st.admitted == st.completed);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);  // `next` only: the dropped runner opened none
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("A caller executor destroyed with a granted caller-placed runner frees everything") {
    auto io = std::make_unique<asio::io_context>();
    test_host cpu({.permits = 1});
    bool ran = false;
    tenferro::test::counted::live = 0;
    {
        tenferro::test::counted probe;
        cpu.with_backend_session(
            caller_placed, [&, probe](test_session&) { ran = true; },
            asio::bind_executor(io->get_executor(), [](std::exception_ptr, session_result<void>) {}));
    }
    CHECK(tenferro::test::counted::live == 1);  // the body is held by the pending operation
    io.reset();                                 // destroys the posted runner unrun
    CHECK_FALSE(ran);
    CHECK(tenferro::test::counted::live == 0);
    const admission_stats st = cpu.stats();
    CHECK(st.available == 1);
    CHECK(st.admitted == st.completed);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 0);
}

TEST_CASE("A caller's io_context may be destroyed as soon as its run() returns (strands, both placements)") {
    // The worker that completes an entry (or grants a caller-placed one) hands
    // a function to the caller's executor; that function may run, finish the
    // last entry and let run() return while the worker is still inside
    // post/dispatch. Destroying the context right then must be safe: ASan
    // reported a use-after-free of the strand's service here before the fix.
    test_host cpu({.permits = 1});
    // About 40 us a round; before the fix, 10,000 rounds failed under ASan
    // every time, 2,000 only sometimes.
    const long rounds = 10 * tenferro::test::stress_iterations(1000);
    long sum = 0, errors = 0;
    for (long i = 0; i < rounds; ++i) {
        auto io = std::make_unique<asio::io_context>();
        std::optional strand(asio::make_strand(*io));
        const session_options opts{1, wait_policy::fifo, i % 2 == 0 ? placement::compute : placement::caller};
        // Three entries contend for one permit: the second and third are
        // granted by the worker releasing the previous one.
        for (int j = 0; j < 3; ++j) {
            auto body = [j](test_session&) { return j + 1; };
            auto done = [&](std::exception_ptr e, session_result<int> r) {
                if (e || !r)
                    ++errors;
                else
                    sum += *r;
            };
            if (j == 2)
                asio::co_spawn(
                    *strand,
                    [&, opts]() -> asio::awaitable<void> {
                        const session_result<int> r =
                            co_await cpu.with_backend_session(opts, [](test_session&) { return 3; });
                        if (r)
                            sum += *r;
                        else
                            ++errors;
                    },
                    asio::detached);
            else
                cpu.with_backend_session(opts, body, asio::bind_executor(*strand, done));
        }
        strand.reset();  // ours only: the entries hold their own copies
        io->run();
        io.reset();  // at once, while a worker may still be returning from post
    }
    CHECK(errors == 0);
    CHECK(sum == 6 * rounds);
    const admission_stats st = cpu.stats();
    CHECK(st.available == 1);
    CHECK(st.admitted == st.completed);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("Destruction waits for running sessions") {
    std::atomic<bool> finished{false};
    std::promise<bool> completed;  // the completion may arrive after the destructor returned
    {
        test_host cpu({.permits = 1});
        gate started;
        cpu.with_backend_session(
            [&](test_session&) {
                started.open();
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                finished = true;
            },
            [&](std::exception_ptr, session_result<void> r) { completed.set_value(r.has_value()); });
        started.wait();
    }
    CHECK(finished);
    CHECK(completed.get_future().get());
}

TEST_CASE("cpus pins the workers; a CPU the process may not use throws system_error") {
    CHECK_THROWS_AS(test_host({.permits = 1, .cpus = {99999}}), std::system_error);
    test_host pinned({.permits = 2, .cpus = {0}});
    asio::io_context io;
    std::optional<session_result<int>> cpu_of_body;
    spawn(io, [&]() -> asio::awaitable<void> {
        cpu_of_body = co_await pinned.with_backend_session([](test_session&) { return sched_getcpu(); });
    });
    REQUIRE(run_until(io, [&] { return cpu_of_body.has_value(); }));
    CHECK(cpu_of_body->value() == 0);
}

#ifndef TENFERRO_TEST_GENERIC_HOST
// CPU only: runtime caches are cpu_backend's (with_backend_session_cached).
TEST_CASE("with_backend_session_cached: a cache held by a running session makes the entry contended") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    cpu_runtime_cache cache;
    gate g;
    std::optional<session_result<int>> first, second, third, uncached;
    spawn(io, [&]() -> asio::awaitable<void> {
        first = co_await cpu.with_backend_session_cached(cache, [&](test_session&) {
            g.wait();
            return 1;
        });
    });
    io.poll();
    REQUIRE(g.wait_for_waiters(1));
    CHECK(cache.in_use());
    bool ran = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        second = co_await cpu.with_backend_session_cached(cache, [&](test_session&) {
            ran = true;
            return 2;
        });
        uncached = co_await cpu.with_backend_session([](test_session&) { return 4; });
    });
    REQUIRE(run_until(io, [&] { return uncached.has_value(); }));
    CHECK(second->error() == session_entry_errc::contended);
    CHECK_FALSE(ran);
    CHECK(uncached->value() == 4);
    g.open();
    REQUIRE(run_until(io, [&] { return first.has_value(); }));
    CHECK_FALSE(cache.in_use());
    spawn(io, [&]() -> asio::awaitable<void> {
        third = co_await cpu.with_backend_session_cached(cache, [](test_session&) { return 3; });
    });
    REQUIRE(run_until(io, [&] { return third.has_value(); }));
    CHECK(third->value() == 3);
    CHECK(cpu.stats().available == 2);
}
#endif

TEST_CASE("One thread can have 100,000 entries waiting at once") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(caller_placed, holder(release, held)); });
    io.poll();
    constexpr int n = 100000;
    int completed = 0;
    long sum = 0;
    for (int i = 0; i < n; ++i)
        spawn(io, [&, i]() -> asio::awaitable<void> {
            auto r = co_await cpu.with_backend_session(caller_placed, [i](test_session&) { return i; });
            sum += r.value();
            ++completed;
        });
    io.poll();
    CHECK(cpu.stats().waiting == static_cast<std::size_t>(n));
    release.cancel();
    io.run();
    CHECK(completed == n);
    CHECK(sum == static_cast<long>(n) * (n - 1) / 2);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}
