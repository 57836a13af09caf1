// The async-mutex suites of cppcoro (test/async_mutex_tests.cpp) and
// libunifex (test/async_mutex_v1_test.cpp, test/async_mutex_v2_test.cpp),
// ported to cpu_backend.
//
// The mapping: the mutex is a host of one permit; `async_lock()` ... `unlock()`
// is an entry whose body is the critical section (`peer::holder`, or a local
// `crit_sec` mirroring libunifex's critSecTask: an async body on the caller's
// io_context that holds until the test releases it); `try_lock()` is
// `wait_policy::never`; libunifex's `stop_when(task, schedule_after(timer,
// d))` is `entry || timer.async_wait()` (awaitable_operators), which cancels
// the entry through its cancellation slot; events (single_consumer_event,
// async_manual_reset_event) are steady_timers or flags the test controls.
// Holds that libunifex expresses in milliseconds are held until the test
// releases them, so the interleavings are fixed, not timed.
//
// Deliberate differences:
// * libunifex's cancel_running cancels a task *inside* its critical section:
//   the stop request reaches the lock holder's wait and ends it. Our entry's
//   cancellation slot only removes a *waiting* entry; once admitted, the body
//   runs to completion (S13; "Once admitted, an async body is not cancelled
//   by the entry's cancellation slot" in docs/design/session-entry.md). Both
//   are pinned below: the entry-level stop does not cut the body short, and
//   a body that awaits its own cancellable operation gives the lock up early.
// * libunifex's try_lock_fails_while_async_locked calls try_lock from inside
//   the critical section: for us that is an entry inside a running session of
//   the same task, rejected as `reentered` (S7), not `contended`; an
//   unrelated coroutine's try gets `contended`.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <thread>
#include <variant>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "peer_support.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace asio::experimental::awaitable_operators;
using peer::holder;
using peer::on_caller;
using peer::probe;
using peer::settle;
using peer::try_on_caller;

namespace {

using namespace std::chrono_literals;

/// libunifex's critSecTask, optionally wrapped in stop_when and preceded by
/// a delay (delayedCritSecTask). The critical section holds until release().
class crit_sec {
public:
    explicit crit_sec(asio::io_context& io) : io_(io), gate_(io, 24h) {}
    crit_sec(const crit_sec&) = delete;
    crit_sec& operator=(const crit_sec&) = delete;

    /// `stop_after`: stop_when(..., schedule_after(timer, stop_after));
    /// `delayed`: a delay the test never ends comes first (delayedCritSecTask
    /// whose 200 ms outlast the 100 ms stop).
    void start(test_host& cpu, std::optional<std::chrono::milliseconds> stop_after = std::nullopt,
               bool delayed = false) {
        peer::spawn(io_, [this, &cpu, stop_after, delayed]() -> asio::awaitable<void> {
            auto task = [this, &cpu, delayed]() -> asio::awaitable<void> {
                if (delayed) {
                    asio::steady_timer delay(io_, 24h);
                    co_await delay.async_wait(asio::use_awaitable);
                }
                entered_ = true;
                auto body = [this](test_session&) -> asio::awaitable<void> {
                    acquired = true;
                    tenferro::asio_error_code ec;
                    co_await gate_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
                    finished = released_;  // not when a stop cancelled the wait (S20)
                };
                result = co_await cpu.with_backend_session(on_caller(), std::move(body));
            };
            if (stop_after) {
                asio::steady_timer stop(io_, *stop_after);
                auto v = co_await (task() || stop.async_wait(asio::use_awaitable));
                cancelled = v.index() == 1;
            } else {
                co_await task();
            }
            done = true;
        });
    }
    void release() {
        released_ = true;  // (the wait ends with operation_aborted either way)
        gate_.expires_at(std::chrono::steady_clock::time_point::min());
    }

    bool acquired = false, finished = false, cancelled = false, done = false;
    std::optional<session_result<void>> result;
    bool entered() const { return entered_; }

private:
    bool released_ = false;
    asio::io_context& io_;
    asio::steady_timer gate_;
    bool entered_ = false;
};

/// Owns the crit_secs of one test; releases them all and settles on the way
/// out (see peer::holders).
class crit_secs {
public:
    explicit crit_secs(asio::io_context& io) : io_(io) {}
    ~crit_secs() {
        for (auto& c : all_) c.release();
        settle(io_);
    }
    crit_sec& make() { return all_.emplace_back(io_); }

private:
    asio::io_context& io_;
    std::deque<crit_sec> all_;
};

}  // namespace

TEST_CASE("cppcoro: async_mutex try_lock / libunifex: async_mutex_v2 try_lock_* and unlock_empty_queue") {
    // try_lock_succeeds_when_unlocked, try_lock_fails_when_locked,
    // try_lock_succeeds_after_unlock, unlock_empty_queue.
    asio::io_context io;
    test_host cpu({.permits = 1});
    probe second, third;
    peer::holders hs(io);
    holder& first = hs.make();
    first.enter(cpu, io, try_on_caller());
    REQUIRE(settle(io));
    CHECK(first.started());
    second.enter(cpu, io, try_on_caller());
    REQUIRE(settle(io));
    CHECK(second.error() == session_entry_errc::contended);
    first.release();  // unlock with an empty queue
    REQUIRE(settle(io));
    third.enter(cpu, io, try_on_caller());
    REQUIRE(settle(io));
    CHECK(third.succeeded());
    CHECK(cpu.stats().available == 1);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("cppcoro: async_mutex multiple lockers") {
    // a, b, c lock and each waits for its own event before leaving; d queues
    // while b holds the lock. Setting the events in turn lets exactly one
    // more locker through each time, in locking order.
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::vector<std::string> order;
    peer::holders hs(io);
    holder& a = hs.make("a");
    holder& b = hs.make("b");
    holder& c = hs.make("c");
    holder& d = hs.make("d");
    a.enter(cpu, io, on_caller(), &order);
    b.enter(cpu, io, on_caller(), &order);
    c.enter(cpu, io, on_caller(), &order);
    REQUIRE(settle(io));
    auto value = [&] { return a.finished() + b.finished() + c.finished() + d.finished(); };
    CHECK(value() == 0);
    a.release();  // a.set()
    REQUIRE(settle(io));
    CHECK(value() == 1);
    CHECK(b.started());
    d.enter(cpu, io, on_caller(), &order);  // queued behind c while b holds
    REQUIRE(settle(io));
    b.release();
    REQUIRE(settle(io));
    CHECK(value() == 2);
    c.release();
    REQUIRE(settle(io));
    CHECK(value() == 3);
    CHECK(d.started());
    d.release();
    REQUIRE(settle(io));
    CHECK(value() == 4);
    CHECK(order == std::vector<std::string>{"a", "b", "c", "d"});
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 async_lock_no_contention") {
    // The fast path: on a free host the entry is admitted inside its
    // initiation and (caller placement) the body runs right there, in the
    // coroutine's first step, without ever queueing.
    asio::io_context io;
    test_host cpu({.permits = 1});
    bool acquired = false, resumed = false;
    std::size_t waiting_inside = 99;
    peer::spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await cpu.with_backend_session(on_caller(), [&](test_session&) {
            acquired = true;
            waiting_inside = cpu.stats().waiting;
        });
        resumed = r.has_value();
    });
    io.poll_one();  // the coroutine's first step
    CHECK(acquired);
    CHECK(waiting_inside == 0);
    REQUIRE(settle(io));
    CHECK(resumed);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 try_lock_fails_while_async_locked (differs: from inside it is re-entry)") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::optional<session_result<int>> inside, outside;
    bool release = false, done = false;
    peer::spawn(io, [&]() -> asio::awaitable<void> {
        auto body = [&](test_session&) -> asio::awaitable<void> {
            inside = co_await cpu.with_backend_session(try_on_caller(), [](test_session&) { return 1; });
            while (!release) co_await asio::post(io, asio::use_awaitable);
        };
        auto r = co_await cpu.with_backend_session(on_caller(), std::move(body));
        done = r.has_value();
    });
    REQUIRE(peer::step_until(io, [&] { return inside.has_value(); }));
    peer::spawn(io, [&]() -> asio::awaitable<void> {
        outside = co_await cpu.with_backend_session(try_on_caller(), [](test_session&) { return 2; });
    });
    REQUIRE(peer::step_until(io, [&] { return outside.has_value(); }));
    release = true;
    REQUIRE(settle(io));
    CHECK(done);
    CHECK(inside->error() == session_entry_errc::reentered);
    CHECK(outside->error() == session_entry_errc::contended);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 destruction") {
    { test_host unused({.permits = 1}); }
    {
        asio::io_context io;
        test_host cpu({.permits = 1});
        probe cycle;
        cycle.enter(cpu, io, try_on_caller());
        REQUIRE(settle(io));
        CHECK(cycle.succeeded());
    }
    SUCCEED("destroyed without waiting for anything");
}

TEST_CASE("libunifex: async_mutex_v2 cancel_awaiting") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    crit_secs cs(io);
    crit_sec& first = cs.make();
    crit_sec& second = cs.make();
    first.start(cpu);
    second.start(cpu, 1ms);
    REQUIRE(tenferro::test::run_until(io, [&] { return second.done; }));
    CHECK(second.cancelled);
    CHECK_FALSE(second.acquired);
    CHECK_FALSE(second.finished);
    CHECK(cpu.stats().cancelled == 1);
    first.release();
    REQUIRE(settle(io));
    CHECK(first.acquired);
    CHECK(first.finished);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 cancel_running (S20: the stop cuts the running critical section short)") {
    // As libunifex's stop_when reaches the critical section: the `||` asks
    // the entry to stop, the stop cancels the body's own await, and the lock
    // goes to the second task without the first being released.
    asio::io_context io;
    test_host cpu({.permits = 1});
    crit_secs cs(io);
    crit_sec& first = cs.make();
    crit_sec& second = cs.make();
    first.start(cpu, 1ms);
    second.start(cpu);
    REQUIRE(tenferro::test::run_until(io, [&] { return first.done && second.acquired; }));
    CHECK(first.acquired);
    CHECK_FALSE(first.finished);  // cut short, as in libunifex
    CHECK(first.cancelled);       // the stop timer won the race
    CHECK(cpu.stats().cancelled == 0);  // it had started: a stop, not a cancellation before the start
    second.release();
    REQUIRE(settle(io));
    CHECK(second.finished);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 cancel_running (mapped: a body awaiting its own stop gives the lock up)") {
    // The nearest mapping of libunifex's stop reaching the critical section:
    // the body races its own wait against the stop, so it ends early, its
    // permit returns, and the second task gets the lock without the test
    // releasing anything.
    asio::io_context io;
    test_host cpu({.permits = 1});
    bool first_acquired = false, first_finished = false, first_cancelled = false, first_done = false;
    crit_secs cs(io);
    crit_sec& second = cs.make();
    peer::spawn(io, [&]() -> asio::awaitable<void> {
        auto body = [&](test_session&) -> asio::awaitable<void> {
            first_acquired = true;
            asio::steady_timer hold(io, 24h), stop(io, 1ms);
            auto v = co_await (hold.async_wait(asio::use_awaitable) || stop.async_wait(asio::use_awaitable));
            first_cancelled = v.index() == 1;
            first_finished = v.index() == 0;
        };
        auto r = co_await cpu.with_backend_session(on_caller(), std::move(body));
        first_done = r.has_value();
    });
    second.start(cpu);
    REQUIRE(tenferro::test::run_until(io, [&] { return first_done && second.acquired; }));
    CHECK(first_acquired);
    CHECK_FALSE(first_finished);
    CHECK(first_cancelled);
    CHECK(second.acquired);
    second.release();
    REQUIRE(settle(io));
    CHECK(second.finished);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 cancel_awaiting_middle") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    crit_secs cs(io);
    crit_sec& first = cs.make();
    crit_sec& second = cs.make();
    crit_sec& third = cs.make();
    first.start(cpu);
    second.start(cpu, 1ms);
    third.start(cpu);
    REQUIRE(tenferro::test::run_until(io, [&] { return second.done; }));
    CHECK(second.cancelled);
    CHECK_FALSE(third.acquired);
    first.release();
    REQUIRE(settle(io));
    CHECK(first.finished);
    CHECK_FALSE(second.acquired);
    CHECK_FALSE(second.finished);
    CHECK(third.acquired);
    third.release();
    REQUIRE(settle(io));
    CHECK(third.finished);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 cancel_early") {
    // Stopped during the delay, before it ever asked for the lock.
    asio::io_context io;
    test_host cpu({.permits = 1});
    crit_secs cs(io);
    crit_sec& first = cs.make();
    first.start(cpu, 1ms, true);
    REQUIRE(tenferro::test::run_until(io, [&] { return first.done; }));
    CHECK(first.cancelled);
    CHECK_FALSE(first.entered());
    CHECK_FALSE(first.acquired);
    CHECK_FALSE(first.finished);
    CHECK(cpu.stats().admitted == 0);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 cancel_awaiting_early") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    crit_secs cs(io);
    crit_sec& first = cs.make();
    crit_sec& second = cs.make();
    first.start(cpu);
    second.start(cpu, 1ms, true);
    REQUIRE(tenferro::test::run_until(io, [&] { return second.done; }));
    CHECK(second.cancelled);
    CHECK_FALSE(second.entered());
    CHECK_FALSE(second.acquired);
    first.release();
    REQUIRE(settle(io));
    CHECK(first.acquired);
    CHECK(first.finished);
    CHECK(cpu.stats().admitted == 1);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 cancel_multiple_waiters") {
    // Two adjacent waiters leave; the holder and the fourth complete.
    asio::io_context io;
    test_host cpu({.permits = 1});
    crit_secs cs(io);
    crit_sec& first = cs.make();
    crit_sec& second = cs.make();
    crit_sec& third = cs.make();
    crit_sec& fourth = cs.make();
    first.start(cpu);
    second.start(cpu, 1ms);
    third.start(cpu, 1ms);
    fourth.start(cpu);
    REQUIRE(tenferro::test::run_until(io, [&] { return second.done && third.done; }));
    CHECK(second.cancelled);
    CHECK(third.cancelled);
    CHECK(cpu.stats().waiting == 1);
    first.release();
    REQUIRE(settle(io));
    CHECK(first.finished);
    CHECK_FALSE(second.acquired);
    CHECK_FALSE(third.acquired);
    CHECK(fourth.acquired);
    fourth.release();
    REQUIRE(settle(io));
    CHECK(fourth.finished);
    CHECK(cpu.stats().cancelled == 2);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 try_lock_then_async_lock_waiter") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    probe waiter;
    peer::holders hs(io);
    holder& locked = hs.make();
    locked.enter(cpu, io, try_on_caller());
    REQUIRE(settle(io));
    REQUIRE(locked.started());  // EXPECT_TRUE(mutex.try_lock()); gate.set()
    waiter.enter(cpu, io);      // co_await mutex.async_lock()
    REQUIRE(settle(io));
    CHECK_FALSE(waiter.completed());
    asio::steady_timer later(io, 1ms);
    later.async_wait([&](tenferro::asio_error_code) { locked.release(); });  // unlock after a while
    REQUIRE(tenferro::test::run_until(io, [&] { return waiter.completed(); }));
    CHECK(waiter.succeeded());
    CHECK(waiter.runs() == 1);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v2 dekker_pattern (real threads)") {
    // The holder's body runs on a compute worker, signals, and returns: its
    // release happens on the worker while the waiter, woken by the signal,
    // initiates on the I/O thread. Repeated (TENFERRO_STRESS_ITERATIONS / 4
    // rounds, default 500) to give the race room; every waiter must get the
    // lock (no lost wake-up).
    const long rounds = std::max(1L, tenferro::test::stress_iterations(2000) / 4);
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::atomic<bool> holder_ready{false};
    long holders_ok = 0, waiters_ok = 0, rounds_done = 0;
    peer::spawn(io, [&]() -> asio::awaitable<void> {
        for (long i = 0; i < rounds; ++i) {
            holder_ready.store(false);
            cpu.with_backend_session([&](test_session&) { holder_ready.store(true); },
                                     asio::bind_executor(io, [&](std::exception_ptr e, session_result<void> r) {
                                         holders_ok += !e && r.has_value();
                                     }));
            while (!holder_ready.load()) co_await asio::post(io, asio::use_awaitable);  // holder_ready.async_wait()
            auto r = co_await cpu.with_backend_session(on_caller(), [](test_session&) {});
            waiters_ok += r.has_value();
            ++rounds_done;
        }
    });
    REQUIRE(tenferro::test::run_until(
        io, [&] { return rounds_done == rounds && holders_ok == rounds; }, std::chrono::seconds(120)));
    CHECK(waiters_ok == rounds);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("libunifex: async_mutex_v1 / async_mutex_v2 multiple_threads") {
    // Two threads, each with its own io_context, take the lock in a loop and
    // bump a plain int inside it (on a compute worker every other time: the
    // `co_await schedule(scheduler)` hop). Mutual exclusion makes the count
    // exact; an `inside` counter catches overlap directly. 2 x
    // TENFERRO_STRESS_ITERATIONS entries per thread (default 4000).
    const long iterations = 2 * tenferro::test::stress_iterations(2000);
    test_host cpu({.permits = 1});
    long shared_state = 0;
    std::atomic<int> inside{0};
    std::atomic<long> overlaps{0}, failures{0}, finished{0};
    auto make_task = [&](int id) {
        return [&, id] {
            asio::io_context io;
            peer::spawn(io, [&, id]() -> asio::awaitable<void> {
                for (long i = 0; i < iterations; ++i) {
                    const session_options opts{1, wait_policy::fifo,
                                               (i + id) % 2 == 0 ? placement::compute : placement::caller};
                    auto r = co_await cpu.with_backend_session(opts, [&](test_session&) {
                        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
                        ++shared_state;
                        inside.fetch_sub(1);
                    });
                    if (!r) failures.fetch_add(1);
                }
                finished.fetch_add(1);
            });
            io.run_for(std::chrono::seconds(300));
        };
    };
    std::thread t1(make_task(0)), t2(make_task(1));
    t1.join();
    t2.join();
    REQUIRE(finished.load() == 2);
    CHECK(overlaps.load() == 0);
    CHECK(failures.load() == 0);
    CHECK(shared_state == 2 * iterations);
    CHECK(peer::quiescent(cpu));
}
