// A host driven by a timer of the program's own (host_options::timer): the
// deadlines (P4), the early rejection (P5) and the groups' permit-time (P2)
// read its clock, and the deadlines wake through its wake_at, never through
// a thread of the host's. The clock here is a number the test moves, so each
// case runs the same way every time.
#include <tenferro/batcher.hpp>
#include <tenferro/cpu_backend.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
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
using tenferro::test::spawn;

namespace {

using time_point = std::chrono::steady_clock::time_point;

/// A clock that moves only when told, and the wake-ups asked of it.
class manual_timer final : public admission_timer {
public:
    time_point now() override {
        std::lock_guard lock(mutex_);
        return now_;
    }
    void wake_at(time_point when, std::function<void()> fire) override {
        std::lock_guard lock(mutex_);
        pending_.push_back({when, std::move(fire)});
    }
    void advance(std::chrono::steady_clock::duration d) {
        std::lock_guard lock(mutex_);
        now_ += d;
    }
    /// Moves the clock to `to` and makes the wake-ups due by then; returns how many.
    int run_until(time_point to) {
        {
            std::lock_guard lock(mutex_);
            now_ = std::max(now_, to);
        }
        int fired = 0;
        for (;;) {
            std::function<void()> f;
            {
                std::lock_guard lock(mutex_);
                auto due =
                    std::find_if(pending_.begin(), pending_.end(), [&](const auto& p) { return p.when <= now_; });
                if (due == pending_.end()) return fired;
                f = std::move(due->fire);
                pending_.erase(due);
            }
            f();
            ++fired;
        }
    }
    std::size_t pending() {
        std::lock_guard lock(mutex_);
        return pending_.size();
    }
    time_point earliest() {
        std::lock_guard lock(mutex_);
        time_point e = time_point::max();
        for (const auto& p : pending_) e = std::min(e, p.when);
        return e;
    }

private:
    struct wake {
        time_point when;
        std::function<void()> fire;
    };
    std::mutex mutex_;
    time_point now_{std::chrono::hours(1)};
    std::vector<wake> pending_;
};

std::size_t threads_of_this_process() {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
}

session_options deadline_options(time_point d) {
    session_options o = on_caller();
    o.deadline = d;
    return o;
}

}  // namespace

TEST_CASE("P4 on a host timer: the deadline is its clock's, its wake-up its wake_at, and no thread starts") {
    asio::io_context io;
    auto timer = std::make_shared<manual_timer>();
    test_host host({.permits = 1, .timer = timer});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await host.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    const std::size_t threads = threads_of_this_process();
    const time_point deadline = timer->now() + 10ms;
    std::vector<std::string> events;
    spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await host.with_backend_session(deadline_options(deadline),
                                                    [&](test_session&) { events.push_back("late body"); });
        events.push_back(!r && r.error() == session_entry_errc::deadline_exceeded ? "expired" : "other");
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        co_await host.with_backend_session(on_caller(), [&](test_session&) { events.push_back("next"); });
    });
    io.poll();
    CHECK(host.stats().waiting == 2);
    CHECK(threads_of_this_process() == threads);  // the timer's, not a thread of the host's
    REQUIRE(timer->pending() == 1);
    CHECK(timer->earliest() == deadline);
    // A millisecond early, nothing is due (a wake-up asked again is allowed).
    timer->advance(9ms);
    io.poll();
    CHECK(host.stats().waiting == 2);
    CHECK(timer->run_until(deadline - 1ms) == 0);
    // At the deadline the waiter leaves, and the one behind it keeps its place.
    CHECK(timer->run_until(deadline) == 1);
    io.poll();
    CHECK(events == std::vector<std::string>{"expired"});
    CHECK(host.stats().waiting == 1);
    CHECK(host.stats().expired == 1);
    CHECK(timer->pending() == 0);  // no deadline left, no wake-up asked
    release.cancel();
    io.run();
    CHECK(events == std::vector<std::string>{"expired", "next"});
    const admission_stats s = host.stats();
    CHECK(s.admitted == s.completed);
    CHECK(s.available == s.permits);
}

TEST_CASE("P4 on a host timer: granted in time, started after the deadline on its clock: the body does not run") {
    asio::io_context io;
    auto timer = std::make_shared<manual_timer>();
    test_host host({.permits = 1, .timer = timer});
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await host.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    bool ran = false;
    std::optional<session_result<void>> r;
    spawn(io, [&]() -> asio::awaitable<void> {
        r = co_await host.with_backend_session(deadline_options(timer->now() + 20ms),
                                               [&](test_session&) { ran = true; });
    });
    io.poll();
    REQUIRE(host.stats().waiting == 1);
    release.cancel();
    while (host.stats().waiting != 0) REQUIRE(io.poll_one() == 1);
    timer->advance(30ms);  // between its grant and its start, on the host's clock
    io.run();
    REQUIRE(r);
    REQUIRE(!r->has_value());
    CHECK(r->error() == session_entry_errc::deadline_exceeded);
    CHECK(!ran);
    CHECK(host.stats().expired == 1);
    CHECK(host.stats().available == 1);
    // The stale wake-up still fires, and finds nothing to do.
    timer->run_until(timer->now() + 1h);
    CHECK(host.stats().expired == 1);
}

TEST_CASE("P5 on a host timer: the mean session duration and the time left are read on its clock") {
    asio::io_context io;
    auto timer = std::make_shared<manual_timer>();
    test_host host({.permits = 1, .reject_late = true, .timer = timer});
    // Three sessions of exactly 20 ms on the host's clock.
    for (int i = 0; i < 3; ++i)
        spawn(io, [&]() -> asio::awaitable<void> {
            co_await host.with_backend_session(on_caller(), [&](test_session&) { timer->advance(20ms); });
        });
    io.run();
    io.restart();
    asio::steady_timer release(io, std::chrono::hours(1));
    std::atomic<bool> held{false};
    spawn(io,
          [&]() -> asio::awaitable<void> { co_await host.with_backend_session(on_caller(), holder(release, held)); });
    io.poll();
    REQUIRE(held);
    for (int i = 0; i < 4; ++i)
        spawn(io, [&]() -> asio::awaitable<void> {
            co_await host.with_backend_session(on_caller(), [&](test_session&) { timer->advance(20ms); });
        });
    io.poll();
    auto entry = [&](std::chrono::milliseconds left, std::optional<session_result<void>>& out) {
        spawn(io, [&, left]() -> asio::awaitable<void> {
            out = co_await host.with_backend_session(deadline_options(timer->now() + left), [](test_session&) {});
        });
        io.poll();
    };
    std::optional<session_result<void>> tight, loose;
    entry(60ms, tight);
    REQUIRE(tight);  // at once: no wait on any clock
    REQUIRE(!tight->has_value());
    CHECK(tight->error() == session_entry_errc::deadline_exceeded);
    // Four sessions waiting and half of the one held, at the 20 ms mean: 90 ms.
    const std::string detail(tight->error().detail());
    const std::string marker = "predicted wait is ";
    const auto at = detail.find(marker);
    REQUIRE(at != std::string::npos);
    const long predicted_us = std::stol(detail.substr(at + marker.size()));
    CHECK(predicted_us >= 89'990);
    CHECK(predicted_us <= 90'010);
    CHECK(detail.find("us and 60000 us are left") != std::string::npos);
    entry(200ms, loose);
    CHECK(!loose);  // queued
    release.cancel();
    io.run();
    REQUIRE(loose);
    CHECK(loose->has_value());
    CHECK(host.stats().expired == 1);
}

// ---- The library's one timer thread (docs/contract.md, "The library's threads")

TEST_CASE("One timer thread for the library: 50 hosts with deadlines and 100 batchers with a delay start none") {
    asio::io_context io;
    std::vector<std::unique_ptr<test_host>> hosts;
    for (int i = 0; i < 50; ++i) hosts.push_back(std::make_unique<test_host>(test_host_options{.permits = 1}));
    // Every host is built (its workers run); from here on, nothing may start
    // a thread: the deadlines and the delays are the library timer's.
    const std::size_t threads = threads_of_this_process();
    std::vector<std::unique_ptr<batcher<test_host, int, int>>> batchers;
    for (int i = 0; i < 100; ++i)
        batchers.push_back(std::make_unique<batcher<test_host, int, int>>(
            *hosts[static_cast<std::size_t>(i % 50)], batch_options{.max_batch = 4, .max_delay = 2ms},
            [](test_session&, std::span<int> items) { return std::vector<int>(items.begin(), items.end()); }));
    int expired = 0, answered = 0;
    for (auto& h : hosts) {
        // A deadline already passed expires at once; a distant one arms the timer.
        spawn(io, [&]() -> asio::awaitable<void> {
            auto r = co_await h->with_backend_session(deadline_options(std::chrono::steady_clock::now() + 1h),
                                                      [](test_session&) { return 1; });
            if (r) ++answered;
        });
    }
    for (auto& b : batchers)
        spawn(io, [&]() -> asio::awaitable<void> {
            auto r = co_await b->submit(7);  // a partial batch: the delay enters it
            if (r && *r == 7) ++answered;
        });
    REQUIRE(tenferro::test::run_until(io, [&] { return answered == 150; }));
    CHECK(threads_of_this_process() == threads);
    // Deadlines that pass while entries wait: each host's holder keeps its
    // permit, and its waiter expires on the shared thread.
    std::vector<std::unique_ptr<asio::steady_timer>> releases;
    std::atomic<int> held{0};
    for (auto& h : hosts) {
        releases.push_back(std::make_unique<asio::steady_timer>(io, 1h));
        spawn(io, [&, release = releases.back().get()]() -> asio::awaitable<void> {
            co_await h->with_backend_session(on_caller(), [&, release](test_session&) -> asio::awaitable<void> {
                ++held;
                tenferro::asio_error_code ec;
                co_await release->async_wait(asio::redirect_error(asio::use_awaitable, ec));
            });
        });
        spawn(io, [&]() -> asio::awaitable<void> {
            auto r = co_await h->with_backend_session(deadline_options(std::chrono::steady_clock::now() + 5ms),
                                                      [](test_session&) { return 1; });
            if (!r && r.error() == session_entry_errc::deadline_exceeded) ++expired;
        });
    }
    REQUIRE(tenferro::test::run_until(io, [&] { return expired == 50; }));
    CHECK(held == 50);
    CHECK(threads_of_this_process() == threads);
    for (auto& r : releases) r->cancel();
    io.run();
}
