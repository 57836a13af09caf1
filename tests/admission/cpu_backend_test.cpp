// cpu_backend: what a body gets and gives back (S2, S6, S15): its value or its
// exception, the thread it runs on, the parallelism of a weighted session; the
// backend's own options (permits, cpus, runtime caches); a deep queue (S5).
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

using namespace tenferro;
using tenferro::test::gate;
using tenferro::test::holder;
using tenferro::test::on_caller;
using tenferro::test::run_until;
using tenferro::test::spawn;

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
        co_await cpu.with_backend_session(on_caller(),
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
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    constexpr int n = 100000;
    int completed = 0;
    long sum = 0;
    for (int i = 0; i < n; ++i)
        spawn(io, [&, i]() -> asio::awaitable<void> {
            auto r = co_await cpu.with_backend_session(on_caller(), [i](test_session&) { return i; });
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
