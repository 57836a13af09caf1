// cpu_backend: entries admission refuses, decided before the body starts (S3,
// S7, S9-S11, S18): re-entry, contention, an incompatible request, and
// poisoning by a throwing observer hook.
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
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);  // an async body is suspended on this very thread
    spawn(io, [&]() -> asio::awaitable<void> {
        unrelated = co_await cpu.with_backend_session(on_caller(), [](test_session&) { return 3; });
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
          [&]() -> asio::awaitable<void> { co_await cpu.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    std::vector<std::optional<session_result<int>>> results(4);
    int ran = 0;
    for (int i = 0; i < 3; ++i)
        spawn(io, [&, i]() -> asio::awaitable<void> {
            results[i] = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { return ++ran; });
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
        running = co_await cpu.with_backend_session(on_caller(), holder(release, held));
    });
    io.poll();
    REQUIRE(held);
    std::vector<std::optional<session_result<int>>> queued(3);
    int ran = 0;
    for (int i = 0; i < 3; ++i)
        spawn(io, [&, i]() -> asio::awaitable<void> {
            queued[i] = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { return ++ran; });
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
        first = co_await cpu.with_backend_session(on_caller(), [](test_session&) { return 1; });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        second = co_await cpu.with_backend_session(on_caller(), [](test_session&) { return 2; });
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
        a = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { return ++ran; });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        b = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { return ++ran; });
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
