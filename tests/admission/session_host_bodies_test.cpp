// What section 6 of the contract (custom backends, session_host.hpp) adds to
// S1-S20, for bodies: an async body's session lives until its
// awaitable finishes and goes before the permits return; compute-placed bodies
// run on host_options::compute_executor, and one it destroys unrun completes
// with executor.
#include <tenferro/session_host.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#include <catch2/catch.hpp>
#include <tenferro/cpu_backend.hpp>
#include "test_asio.hpp"

#include "entry_helpers.hpp"
#include "probe_backend.hpp"
#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace tenferro::test::probe;
using tenferro::test::gate;
using tenferro::test::on_caller;
using tenferro::test::on_compute;
using tenferro::test::placed;
using tenferro::test::run_until;
using tenferro::test::spawn;

namespace {
/// Records, at each release, how many sessions are alive.
struct live_at_release final : admission_observer {
    explicit live_at_release(probe_log& l) : log(&l) {}
    probe_log* log;
    std::mutex m;
    std::vector<int> live;
    void on_released(std::size_t) override {
        std::lock_guard lock(m);
        live.push_back(log->live.load());
    }
};

asio::awaitable<bool> still_alive_after_a_hop(probe_session& s) {
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    co_return s.alive();
}
}  // namespace

TEST_CASE("An async body's session lives until its awaitable finishes, and goes before the permits return") {
    for (placement where : {placement::caller, placement::compute}) {
        INFO(name_of(where));
        probe_log log;
        auto observer = std::make_shared<live_at_release>(log);
        asio::io_context io;
        probe_host host({.permits = 1, .observer = observer}, log);
        std::optional<session_result<int>> a, b;
        std::atomic<int> a_live_before{-1}, a_live_after{-1}, b_live{-1}, b_closed{-1};
        std::atomic<bool> a_alive_after{false}, a_alive_in_chain{false};
        spawn(io, [&]() -> asio::awaitable<void> {
            a = co_await host.with_backend_session(placed(where), [&](probe_session& s) -> asio::awaitable<int> {
                a_live_before = log.live.load();
                asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(20));
                co_await t.async_wait(asio::use_awaitable);
                a_alive_in_chain = co_await still_alive_after_a_hop(s);
                a_alive_after = s.alive();
                a_live_after = log.live.load();
                co_return s.id();
            });
        });
        spawn(io, [&]() -> asio::awaitable<void> {
            b = co_await host.with_backend_session(placed(where), [&](probe_session& s) {
                b_live = log.live.load();  // its own session only
                b_closed = log.closed.load();
                return s.id();
            });
        });
        if (where == placement::caller) {
            io.poll();
            if (!a.has_value()) CHECK(log.live == 1);  // suspended on its timer, the session open
        }
        REQUIRE(run_until(io, [&] { return a.has_value() && b.has_value(); }));
        CHECK(a->value() == 1);
        CHECK(b->value() == 2);
        CHECK(a_live_before == 1);
        CHECK(a_alive_in_chain);
        CHECK(a_alive_after);
        CHECK(a_live_after == 1);
        CHECK(b_live == 1);
        CHECK(b_closed == 1);  // a's session was destroyed before b was granted a's permit
        {
            std::lock_guard lock(observer->m);
            CHECK(observer->live == std::vector<int>{0, 0});
        }
        CHECK(log.live == 0);
        CHECK(log.take_events() == std::vector<std::string>{"open #1 k=1", "close #1", "open #2 k=1", "close #2"});
        CHECK(balanced(host.stats()));
    }
}

TEST_CASE("host_options::compute_executor: compute-placed bodies run on the given executor, sync and async") {
    asio::io_context io, compute_io;
    session_host<test::device_backend> host({.permits = 2, .compute_executor = compute_io.get_executor()});
    bool sync_on_it = false, async_on_it = false, async_resumed_on_it = false;
    std::optional<session_result<int>> r1, r2;
    host.with_backend_session(
        on_compute(2),
        [&](test::device_session& s) {
            sync_on_it = compute_io.get_executor().running_in_this_thread();
            return static_cast<int>(s.parallelism());
        },
        asio::bind_executor(io, [&](std::exception_ptr, session_result<int> r) { r1 = std::move(r); }));
    CHECK(io.poll() == 0);  // posted to compute_io, not run inline, not on the caller's context
    CHECK_FALSE(r1.has_value());
    CHECK(compute_io.poll() > 0);
    CHECK(io.poll() > 0);
    REQUIRE(r1.has_value());
    CHECK(r1->value() == 2);
    CHECK(sync_on_it);
    host.with_backend_session(
        on_compute(1),
        [&](test::device_session&) -> asio::awaitable<int> {
            async_on_it = compute_io.get_executor().running_in_this_thread();
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
            async_resumed_on_it = compute_io.get_executor().running_in_this_thread();
            co_return 7;
        },
        asio::bind_executor(io, [&](std::exception_ptr, session_result<int> r) { r2 = std::move(r); }));
    for (int i = 0; i < 100 && !r2; ++i) {
        // (An io_context that ran out of work stopped: the host tracks no
        // work on its compute executor, and the caller's ran dry after r1.)
        compute_io.restart();
        compute_io.poll();
        io.restart();
        io.poll();
    }
    REQUIRE(r2.has_value());
    CHECK(r2->value() == 7);
    CHECK(async_on_it);
    CHECK(async_resumed_on_it);
    CHECK(host.stats().available == 2);
    CHECK(host.stats().admitted == host.stats().completed);
    TENFERRO_CHECK_SESSIONS_CLOSED(host);
}

TEST_CASE("host_options::compute_executor: a body the executor destroys unrun completes with executor") {
    asio::io_context io;
    std::optional<asio::io_context> compute_io(std::in_place);
    session_host<test::device_backend> host({.permits = 1, .compute_executor = compute_io->get_executor()});
    bool ran = false;
    std::optional<session_result<int>> r;
    host.with_backend_session(
        on_compute(),
        [&](test::device_session&) {
            ran = true;
            return 1;
        },
        asio::bind_executor(io, [&](std::exception_ptr, session_result<int> x) { r = std::move(x); }));
    compute_io.reset();  // its destructor destroys the queued body unrun
    CHECK(io.poll() > 0);
    REQUIRE(r.has_value());
    REQUIRE_FALSE(r->has_value());
    CHECK(r->error() == session_entry_errc::executor);
    CHECK_FALSE(ran);
    CHECK(host.stats().available == 1);
    CHECK(host.stats().admitted == host.stats().completed);
}
