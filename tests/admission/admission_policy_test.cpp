// Admission policies through a host (docs/contract.md P1-P8): groups, deadlines
// and early rejection, byte budgets, resizing, per-group stats. Runs against
// cpu_backend and the generic device host (admission_policy_generic). The queue's
// arithmetic (shares, idle groups) is stepped exactly in permit_queue_policy_test.
#include <tenferro/batcher.hpp>
#include <tenferro/cpu_backend.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "entry_helpers.hpp"
#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace std::chrono_literals;
using tenferro::test::holder;
using tenferro::test::on_caller;
using tenferro::test::run_until;
using tenferro::test::spawn;

namespace {

session_options in_group(std::size_t g) {
    session_options o = on_caller();
    o.group = g;
    return o;
}

session_options with_deadline(std::chrono::steady_clock::time_point d) {
    session_options o = on_caller();
    o.deadline = d;
    return o;
}

std::vector<group_options> two_groups() { return {{"bulk", 1}, {"interactive", 3}}; }

}  // namespace

TEST_CASE("P1: a group out of range is incompatible_context; groups() and group_stats name them") {
    asio::io_context io;
    test_host host({.permits = 1, .groups = two_groups()});
    CHECK(host.groups() == 2);
    std::optional<session_result<int>> r;
    spawn(io, [&]() -> asio::awaitable<void> {
        r = co_await host.with_backend_session(in_group(2), [](test_session&) { return 1; });
    });
    io.run();
    REQUIRE(r);
    REQUIRE(!r->has_value());
    CHECK(r->error() == session_entry_errc::incompatible_context);
    CHECK(host.group_stats(1).name == "interactive");
    CHECK(host.group_stats(1).weight == 3);
    CHECK(host.group_stats(0).rejected == 1);  // an out-of-range group is counted on group 0
    CHECK_THROWS_AS(host.group_stats(2), std::out_of_range);
    test_host plain({.permits = 1});
    CHECK(plain.groups() == 1);
    CHECK(plain.group_stats(0).name == "default");
    // A weight of 0 is refused at construction.
    CHECK_THROWS_AS(test_host({.permits = 1, .groups = {{"idle", 0}}}), std::invalid_argument);
}

TEST_CASE("P1/P2: a light group is served before a heavy group's flood") {
    asio::io_context io;
    test_host host({.permits = 1, .groups = two_groups()});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await host.with_backend_session(in_group(0), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    std::vector<std::string> order;
    for (int i = 0; i < 20; ++i)
        spawn(io, [&, i]() -> asio::awaitable<void> {
            co_await host.with_backend_session(in_group(0),
                                               [&, i](test_session&) { order.push_back("bulk" + std::to_string(i)); });
        });
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await host.with_backend_session(in_group(1), [&](test_session&) { order.push_back("interactive"); });
    });
    for (int i = 0; i < 21; ++i) io.poll_one();
    CHECK(host.stats().waiting == 21);
    CHECK(host.group_stats(0).waiting == 20);
    CHECK(host.group_stats(1).waiting == 1);
    release.cancel();
    io.run();
    REQUIRE(order.size() == 21);
    // The interactive group had been charged nothing: it is served within the first two grants.
    const auto at = std::find(order.begin(), order.end(), "interactive") - order.begin();
    CHECK(at <= 1);
    // FIFO within the bulk group.
    std::vector<std::string> bulk;
    for (const auto& s : order)
        if (s != "interactive") bulk.push_back(s);
    for (std::size_t i = 0; i < bulk.size(); ++i) CHECK(bulk[i] == "bulk" + std::to_string(i));
    const group_stats g0 = host.group_stats(0), g1 = host.group_stats(1);
    CHECK(g0.admitted == 21);
    CHECK(g0.completed == 21);
    CHECK(g1.admitted == 1);
    CHECK(g1.completed == 1);
    CHECK(g0.busy_permit_seconds > 0);
}

TEST_CASE("P4: a deadline already passed completes with deadline_exceeded without queueing") {
    asio::io_context io;
    test_host host({.permits = 1});
    bool ran = false;
    std::optional<session_result<void>> r;
    spawn(io, [&]() -> asio::awaitable<void> {
        r = co_await host.with_backend_session(with_deadline(std::chrono::steady_clock::now() - 1ms),
                                               [&](test_session&) { ran = true; });
    });
    io.run();
    REQUIRE(r);
    REQUIRE(!r->has_value());
    CHECK(r->error() == session_entry_errc::deadline_exceeded);
    CHECK(!ran);
    const admission_stats s = host.stats();
    CHECK(s.expired == 1);
    CHECK(s.rejected == 1);
    CHECK(s.admitted == 0);
}

TEST_CASE("P4: a waiter not granted by its deadline leaves; those behind it keep their order") {
    asio::io_context io;
    test_host host({.permits = 1});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await host.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    std::vector<std::string> events;
    const auto deadline = std::chrono::steady_clock::now() + 30ms;
    spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await host.with_backend_session(with_deadline(deadline),
                                                    [&](test_session&) { events.push_back("late body"); });
        events.push_back(!r && r.error() == session_entry_errc::deadline_exceeded ? "expired" : "other");
        events.push_back(std::chrono::steady_clock::now() >= deadline ? "after deadline" : "before deadline");
        CHECK(std::chrono::steady_clock::now() - deadline < 500ms);
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await host.with_backend_session(on_caller(), [&](test_session&) { events.push_back("next"); });
    });
    io.poll();
    CHECK(host.stats().waiting == 2);
    REQUIRE(run_until(io, [&] { return events.size() >= 2; }));
    CHECK(events == std::vector<std::string>{"expired", "after deadline"});
    CHECK(host.stats().waiting == 1);
    release.cancel();
    io.run();
    CHECK(events == std::vector<std::string>{"expired", "after deadline", "next"});
    const admission_stats s = host.stats();
    CHECK(s.expired == 1);
    CHECK(s.admitted == s.completed);
    CHECK(s.available == s.permits);
}

TEST_CASE("P4: an entry granted by its deadline but reaching its start after it does not run") {
    asio::io_context io;
    test_host host({.permits = 1});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await host.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    bool ran = false;
    std::optional<session_result<void>> r;
    spawn(io, [&]() -> asio::awaitable<void> {
        r = co_await host.with_backend_session(with_deadline(std::chrono::steady_clock::now() + 20ms),
                                               [&](test_session&) { ran = true; });
    });
    io.poll();
    REQUIRE(host.stats().waiting == 1);
    release.cancel();
    // Step until the waiter is granted: its runner is then posted to this io_context, not yet run.
    while (host.stats().waiting != 0) REQUIRE(io.poll_one() == 1);
    std::this_thread::sleep_for(40ms);
    io.run();
    REQUIRE(r);
    REQUIRE(!r->has_value());
    CHECK(r->error() == session_entry_errc::deadline_exceeded);
    CHECK(!ran);
    const admission_stats s = host.stats();
    CHECK(s.expired == 1);
    CHECK(s.admitted == s.completed);
    CHECK(s.available == s.permits);
}

TEST_CASE("P5: with reject_late, an entry predicted to miss its deadline is rejected at once") {
    asio::io_context io;
    test_host host({.permits = 1, .reject_late = true});
    // Teach the host its sessions' duration: a few of about 20 ms.
    for (int i = 0; i < 3; ++i)
        spawn(io, [&]() -> asio::awaitable<void> {
            co_await host.with_backend_session(on_caller(), [](test_session&) { std::this_thread::sleep_for(20ms); });
        });
    io.run();
    io.restart();
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await host.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    for (int i = 0; i < 10; ++i)
        spawn(io, [&]() -> asio::awaitable<void> {
            co_await host.with_backend_session(on_caller(), [](test_session&) {});
        });
    io.poll();
    // Ten sessions of ~20 ms are ahead: 50 ms cannot be met.
    std::optional<session_result<void>> r;
    const auto start = std::chrono::steady_clock::now();
    spawn(io, [&]() -> asio::awaitable<void> {
        r = co_await host.with_backend_session(with_deadline(std::chrono::steady_clock::now() + 50ms),
                                               [](test_session&) {});
    });
    REQUIRE(run_until(io, [&] { return r.has_value(); }));
    CHECK(std::chrono::steady_clock::now() - start < 40ms);  // at once, not at the deadline
    REQUIRE(!r->has_value());
    CHECK(r->error() == session_entry_errc::deadline_exceeded);
    CHECK(std::string(r->error().detail()).find("predicted wait") != std::string::npos);
    // A generous deadline still queues.
    std::optional<session_result<void>> ok;
    spawn(io, [&]() -> asio::awaitable<void> {
        ok = co_await host.with_backend_session(with_deadline(std::chrono::steady_clock::now() + 60s),
                                                [](test_session&) {});
    });
    io.poll();
    CHECK(!ok);
    release.cancel();
    io.run();
    REQUIRE(ok);
    CHECK(ok->has_value());
    CHECK(host.stats().expired == 1);
}

TEST_CASE("P6: bytes are granted with permits; oversized and scoped declarations are incompatible") {
    asio::io_context io;
    test_host host({.permits = 2, .memory_budget = 100});
    CHECK(host.stats().memory_budget == 100);
    CHECK(host.stats().memory_available == 100);
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    session_options big = on_caller();
    big.bytes = 70;
    spawn(io, [&]() -> asio::awaitable<void> { co_await host.with_backend_session(big, holder(release, held)); });
    io.poll();
    REQUIRE(held);
    CHECK(host.stats().memory_available == 30);
    std::optional<session_result<std::size_t>> second, huge;
    spawn(io, [&]() -> asio::awaitable<void> {
        second = co_await host.with_backend_session(big, [](test_session&) { return std::size_t{1}; });
    });
    session_options too_big = on_caller();
    too_big.bytes = 101;
    spawn(io, [&]() -> asio::awaitable<void> {
        huge = co_await host.with_backend_session(too_big, [](test_session&) { return std::size_t{1}; });
    });
    io.poll();
    CHECK(!second);  // a permit is free, the bytes are not
    REQUIRE(huge);
    CHECK(huge->error() == session_entry_errc::incompatible_context);
    release.cancel();
    io.run();
    REQUIRE(second);
    CHECK(second->has_value());
    CHECK(host.stats().memory_available == 100);
    // Inside a scope a session declares no bytes of its own.
    io.restart();
    std::optional<session_result<int>> nested;
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await host.with_execution_scope([&](execution_scope&) -> asio::awaitable<void> {
            session_options o = on_caller();
            o.bytes = 1;
            nested = co_await host.with_backend_session(o, [](test_session&) { return 1; });
        });
    });
    io.run();
    REQUIRE(nested);
    CHECK(nested->error() == session_entry_errc::incompatible_context);
}

TEST_CASE("P7: set_permits grows at once, shrinks without preemption, rejects what no longer fits") {
    asio::io_context io;
    test_host host({.permits = 1});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await host.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    int ran = 0;
    for (int i = 0; i < 2; ++i)
        spawn(io, [&]() -> asio::awaitable<void> {
            co_await host.with_backend_session(on_caller(), [&](test_session&) { ++ran; });
        });
    io.poll();
    CHECK(host.stats().waiting == 2);
    host.set_permits(3);
    CHECK(host.permits() == 3);
    io.poll();
    CHECK(ran == 2);  // granted while the holder still runs
    CHECK_THROWS_AS(host.set_permits(0), std::invalid_argument);
    // Shrink to 1 while 1 is held: a waiter of 2 permits can never fit.
    host.set_permits(2);
    std::optional<session_result<void>> two;
    spawn(io, [&]() -> asio::awaitable<void> {
        two = co_await host.with_backend_session(on_caller(2), [](test_session&) {});
    });
    io.poll();
    CHECK(!two);
    host.set_permits(1);
    io.poll();
    REQUIRE(two);
    CHECK(two->error() == session_entry_errc::incompatible_context);
    CHECK(host.stats().available == 0);
    release.cancel();
    io.run();
    const admission_stats s = host.stats();
    CHECK(s.permits == 1);
    CHECK(s.available == 1);
    CHECK(s.admitted == s.completed);
}

TEST_CASE("Batcher: batch_options::session carries the group and the bytes to every batch") {
    asio::io_context io;
    test_host host({.permits = 1, .groups = two_groups(), .memory_budget = 1000});
    batch_options bo;
    bo.session = in_group(1);
    bo.session.bytes = 10;
    batcher<test_host, int, int> b(
        host, bo, [](test_session&, std::span<int> in) { return std::vector<int>(in.begin(), in.end()); });
    int done = 0;
    for (int i = 0; i < 3; ++i)
        spawn(io, [&, i]() -> asio::awaitable<void> {
            auto r = co_await b.submit(i);
            CHECK(r.has_value());
            ++done;
        });
    io.run();
    CHECK(done == 3);
    CHECK(host.group_stats(1).admitted >= 1);
    CHECK(host.group_stats(0).admitted == 0);
    CHECK(host.stats().memory_available == 1000);
}
