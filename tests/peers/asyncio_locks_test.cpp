// CPython's Lib/test/test_asyncio/test_locks.py (LockTests and
// SemaphoreTests), ported to cpu_backend, including the
// regression tests of bpo-32734 (a cancelled waiter and a release in the same
// step let two tasks in), bpo-45997 (FIFO order after re-acquiring) and
// gh-90155 (fairness: cancelled waiters, wake-ups lost or doubled).
//
// The mapping: `asyncio.Lock()` is a host of one permit, `Semaphore(n)` of n
// (`Semaphore(0)`, which we cannot build, is a host whose permits a holder
// already has); `await acquire()` is an entry whose body holds the permit
// (`peer::holder`, an async body on the caller's io_context, until
// release()); a task that acquires and releases at once is an entry with a
// synchronous body (`peer::probe`); `task.cancel()` is per-operation
// cancellation of the entry; `await asyncio.sleep(0)` / `run_briefly` is
// running the io_context until no handler is ready (`settle`), which steps
// the scenario deterministically on one thread.
//
// asyncio's `release()` only wakes a waiter, which takes the lock when it
// next runs; if it is cancelled in between, the lock passes to the next
// waiter (test_finished_waiter_cancelled, test_acquire_no_hang). Ours agrees
// since S20: a granted entry whose body has not started never starts once
// cancelled, and its permit goes to the next waiter at its turn.
//
// Deliberate differences:
// * Lock/Semaphore API details with no counterpart: repr, `locked()` (we read
//   `stats().available`), `release()` of an unacquired lock, `await lock`,
//   `with lock`, the `loop` parameter, BoundedSemaphore, a negative initial
//   value (test_repr, test_lock*, test_release_not_acquired,
//   test_semaphore_value, test_initial_value_zero — not ported).

#include <chrono>
#include <string>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "peer_support.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using peer::holder;
using peer::on_caller;
using peer::probe;
using peer::settle;
using peer::try_on_caller;
using log_t = std::vector<std::string>;

TEST_CASE("asyncio: LockTests.test_acquire") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    log_t result;
    peer::holders hs(io);
    holder& main_lock = hs.make("main");
    main_lock.enter(cpu, io);
    REQUIRE(settle(io));
    REQUIRE(main_lock.started());
    holder& c1 = hs.make("1");
    holder& c2 = hs.make("2");
    holder& c3 = hs.make("3");
    c1.enter(cpu, io, on_caller(), &result);
    c2.enter(cpu, io, on_caller(), &result);
    REQUIRE(settle(io));
    CHECK(result.empty());
    main_lock.release();
    REQUIRE(settle(io));
    CHECK(result == log_t{"1"});
    REQUIRE(settle(io));
    CHECK(result == log_t{"1"});
    c3.enter(cpu, io, on_caller(), &result);
    c1.release();
    REQUIRE(settle(io));
    CHECK(result == log_t{"1", "2"});
    c2.release();
    REQUIRE(settle(io));
    CHECK(result == log_t{"1", "2", "3"});
    c3.release();
    REQUIRE(settle(io));
    CHECK(c1.succeeded());
    CHECK(c2.succeeded());
    CHECK(c3.succeeded());
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: LockTests.test_acquire_cancel / SemaphoreTests.test_acquire_cancel") {
    for (std::size_t permits : {1, 3}) {
        asio::io_context io;
        test_host cpu({.permits = permits});
        probe task;
        peer::holders hs(io);
        holder& held = hs.make();
        held.enter(cpu, io, on_caller(permits));
        REQUIRE(settle(io));
        task.enter(cpu, io);
        REQUIRE(settle(io));
        CHECK(cpu.stats().waiting == 1);
        task.cancel();  // call_soon(task.cancel)
        REQUIRE(settle(io));
        CHECK(task.error() == session_entry_errc::cancelled);
        CHECK(task.runs() == 0);
        CHECK(cpu.stats().waiting == 0);  // assertFalse(lock._waiters)
        held.release();
        REQUIRE(settle(io));
        CHECK(peer::quiescent(cpu));
    }
}

TEST_CASE("asyncio: LockTests.test_cancel_race") {
    // A holds the lock, B and C wait. In the same step B is cancelled and A
    // releases: the lock must go to C, not be handed to cancelled B and lost.
    asio::io_context io;
    test_host cpu({.permits = 1});
    log_t order;
    probe b("B"), c("C");
    peer::holders hs(io);
    holder& a = hs.make("A");
    a.enter(cpu, io, on_caller(), &order);
    REQUIRE(settle(io));
    REQUIRE(a.started());  // lock.locked()
    b.enter(cpu, io, on_caller(), &order);
    REQUIRE(settle(io));
    CHECK(cpu.stats().waiting == 1);
    c.enter(cpu, io, on_caller(), &order);
    REQUIRE(settle(io));
    CHECK(cpu.stats().waiting == 2);
    a.release();  // fa.set_result(None)
    b.cancel();   // tb.cancel()
    REQUIRE(settle(io));
    CHECK(cpu.stats().available == 1);  // assertFalse(lock.locked())
    CHECK(a.succeeded());
    CHECK(b.error() == session_entry_errc::cancelled);
    CHECK(c.succeeded());
    CHECK(order == log_t{"A", "C"});
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: LockTests.test_cancel_release_race (bpo-32734)") {
    // The lock is held; t1, t2, t3 wait (and keep the lock once they have
    // it). In one callback t1 is cancelled and the lock released: exactly one
    // task (t2) may take it.
    asio::io_context io;
    test_host cpu({.permits = 1});
    log_t locked;
    peer::holders hs(io);
    holder& main_lock = hs.make("main");
    main_lock.enter(cpu, io);
    REQUIRE(settle(io));
    holder& t1 = hs.make("t1");
    holder& t2 = hs.make("t2");
    holder& t3 = hs.make("t3");
    t1.enter(cpu, io, on_caller(), &locked);
    t2.enter(cpu, io, on_caller(), &locked);
    t3.enter(cpu, io, on_caller(), &locked);
    REQUIRE(settle(io));
    CHECK(t1.initiated() + t2.initiated() + t3.initiated() == 3);  // call_count == 3
    asio::post(io, [&] {  // loop.call_soon(trigger)
        t1.cancel();
        main_lock.release();
    });
    REQUIRE(settle(io));
    CHECK(t1.error() == session_entry_errc::cancelled);
    CHECK(locked == log_t{"t2"});  // lock_count == 1
    CHECK_FALSE(t3.completed());
    CHECK(cpu.stats().available == 0);
    t3.cancel();  // cleanup of the task stuck on acquire
    REQUIRE(settle(io));
    CHECK(t3.error() == session_entry_errc::cancelled);
    t2.release();
    REQUIRE(settle(io));
    CHECK(locked == log_t{"t2"});
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: LockTests.test_cancel_release_race, release first") {
    // The same race in the other order: the release has already granted t1
    // (its body is posted, not yet started) when t1 is cancelled. As in
    // asyncio, the lock passes on to t2: t1's body never starts (S20), its
    // permit returns at its turn, and t2 is granted it; t3 keeps waiting.
    // Still exactly one task holds the lock.
    asio::io_context io;
    test_host cpu({.permits = 1});
    log_t locked;
    peer::holders hs(io);
    holder& main_lock = hs.make("main");
    main_lock.enter(cpu, io);
    REQUIRE(settle(io));
    holder& t1 = hs.make("t1");
    holder& t2 = hs.make("t2");
    holder& t3 = hs.make("t3");
    t1.enter(cpu, io, on_caller(), &locked);
    t2.enter(cpu, io, on_caller(), &locked);
    t3.enter(cpu, io, on_caller(), &locked);
    REQUIRE(settle(io));
    REQUIRE(cpu.stats().waiting == 3);
    main_lock.release();
    REQUIRE(peer::step_until(io, [&] { return cpu.stats().waiting == 2; }));
    REQUIRE_FALSE(t1.started());  // granted, not yet started
    t1.cancel();
    REQUIRE(settle(io));
    CHECK_FALSE(t1.started());
    CHECK(t1.error() == session_entry_errc::cancelled);
    CHECK(locked == log_t{"t2"});
    CHECK(cpu.stats().waiting == 1);
    CHECK(cpu.stats().cancelled == 1);
    CHECK(cpu.stats().stopped == 0);  // it never ran
    hs.release_all();
    REQUIRE(settle(io));
    CHECK(locked == log_t{"t2", "t3"});
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: LockTests.test_finished_waiter_cancelled") {
    // tb waits; tc queues; tb is cancelled and the lock released in the same
    // step: tc must be woken and take the lock.
    asio::io_context io;
    test_host cpu({.permits = 1});
    peer::holders hs(io);
    holder& main_lock = hs.make();
    main_lock.enter(cpu, io);
    REQUIRE(settle(io));
    holder& tb = hs.make();
    tb.enter(cpu, io);
    REQUIRE(settle(io));
    CHECK(cpu.stats().waiting == 1);
    holder& tc = hs.make();
    tc.enter(cpu, io);
    tb.cancel();
    main_lock.release();
    REQUIRE(settle(io));
    CHECK(tc.started());  // lock.locked(), by tc
    CHECK(cpu.stats().available == 0);
    CHECK(tb.error() == session_entry_errc::cancelled);
    CHECK_FALSE(tb.started());
    tc.release();
    REQUIRE(settle(io));
    CHECK(peer::quiescent(cpu));
}

TEST_CASE(
    "asyncio: LockTests.test_release_no_waiters / test_context_manager / SemaphoreTests.test_release_no_waiters") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    std::size_t available_inside = 99;
    bool done = false;
    peer::spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await cpu.with_backend_session(on_caller(),
                                                   [&](test_session&) { available_inside = cpu.stats().available; });
        CHECK(r.has_value());
        done = true;
    });
    REQUIRE(settle(io));
    REQUIRE(done);
    CHECK(available_inside == 0);        // locked inside
    CHECK(cpu.stats().available == 1);  // unlocked after
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: SemaphoreTests.test_acquire") {
    asio::io_context io;
    test_host cpu({.permits = 3});
    log_t result;
    peer::holders hs(io);
    holder& m1 = hs.make();
    holder& m2 = hs.make();
    m1.enter(cpu, io);
    m2.enter(cpu, io);
    REQUIRE(settle(io));
    REQUIRE(m1.started());
    REQUIRE(m2.started());
    CHECK(cpu.stats().available == 1);  // assertFalse(sem.locked())
    holder& c1 = hs.make("1");
    holder& c2 = hs.make("2");
    holder& c3 = hs.make("3");
    holder& c4 = hs.make("4");
    c1.enter(cpu, io, on_caller(), &result);
    c2.enter(cpu, io, on_caller(), &result);
    c3.enter(cpu, io, on_caller(), &result);
    REQUIRE(settle(io));
    CHECK(result == log_t{"1"});
    CHECK(cpu.stats().available == 0);
    CHECK(cpu.stats().waiting == 2);
    c4.enter(cpu, io, on_caller(), &result);
    m1.release();
    m2.release();
    REQUIRE(settle(io));
    // asyncio only promises that two of t2, t3, t4 got in; our FIFO says which.
    CHECK(result == log_t{"1", "2", "3"});
    CHECK(cpu.stats().available == 0);
    CHECK(cpu.stats().waiting == 1);
    c1.release();  // cleanup: sem.release()
    REQUIRE(settle(io));
    CHECK(result == log_t{"1", "2", "3", "4"});
    hs.release_all();
    REQUIRE(settle(io));
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: SemaphoreTests.test_acquire_cancel_before_awoken (gh-90155)") {
    // Semaphore(0) with four waiters; t1 and t2 are cancelled, then one
    // release: exactly t3 wakes, t4 keeps waiting.
    asio::io_context io;
    test_host cpu({.permits = 1});
    peer::holders hs(io);
    holder& zero = hs.make();
    zero.enter(cpu, io);
    REQUIRE(settle(io));
    holder& t1 = hs.make();
    holder& t2 = hs.make();
    holder& t3 = hs.make();
    holder& t4 = hs.make();
    for (holder* t : {&t1, &t2, &t3, &t4}) t->enter(cpu, io);
    REQUIRE(settle(io));
    CHECK(cpu.stats().waiting == 4);
    t1.cancel();
    t2.cancel();
    zero.release();
    REQUIRE(settle(io));
    CHECK(t1.error() == session_entry_errc::cancelled);
    CHECK(t2.error() == session_entry_errc::cancelled);
    CHECK(t3.started());
    CHECK_FALSE(t4.started());
    CHECK_FALSE(t4.completed());
    // Running (S20): the cancellation stops t3, whose await of its release is
    // cancelled; the holder takes that as its release and returns its value
    // (S2), as an asyncio task cancelled inside `async with` gives the
    // semaphore back.
    t3.cancel();
    t4.cancel();
    REQUIRE(settle(io));
    CHECK(t4.error() == session_entry_errc::cancelled);
    CHECK(t3.succeeded());
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: SemaphoreTests.test_acquire_hang (gh-90155)") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    peer::holders hs(io);
    holder& zero = hs.make();
    zero.enter(cpu, io);
    REQUIRE(settle(io));
    holder& t1 = hs.make();
    holder& t2 = hs.make();
    t1.enter(cpu, io);
    t2.enter(cpu, io);
    REQUIRE(settle(io));
    t1.cancel();
    zero.release();
    REQUIRE(settle(io));
    CHECK(cpu.stats().available == 0);  // sem.locked()
    CHECK(t2.started());                // t2.done(): not hung behind cancelled t1
    CHECK(t1.error() == session_entry_errc::cancelled);
    t2.release();
    REQUIRE(settle(io));
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: SemaphoreTests.test_acquire_no_hang") {
    // c1 holds the semaphore briefly; c2 waits; after leaving, c1 cancels c2.
    // c1's release granted c2, whose body is posted but has not started when
    // c1's continuation cancels it: as in asyncio, the cancellation wins, c2's
    // body never runs (S20) and the semaphore is free again.
    asio::io_context io;
    test_host cpu({.permits = 1});
    probe c2("c2"), final_acquire;
    bool c1_done = false;
    peer::spawn(io, [&]() -> asio::awaitable<void> {
        auto body = [&io](test_session&) -> asio::awaitable<void> {
            asio::steady_timer t(io, std::chrono::milliseconds(0));
            co_await t.async_wait(asio::use_awaitable);  // await asyncio.sleep(0)
        };
        auto r = co_await cpu.with_backend_session(on_caller(), std::move(body));
        CHECK(r.has_value());
        c2.cancel();
        c1_done = true;
    });
    c2.enter(cpu, io);
    REQUIRE(tenferro::test::run_until(io, [&] { return c1_done && c2.completed(); }));
    CHECK(c2.error() == session_entry_errc::cancelled);
    CHECK(c2.runs() == 0);
    CHECK(cpu.stats().cancelled == 1);
    final_acquire.enter(cpu, io, try_on_caller());  // wait_for(sem.acquire(), timeout=1.0)
    REQUIRE(settle(io));
    CHECK(final_acquire.succeeded());
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: SemaphoreTests.test_acquire_fifo_order (bpo-45997)") {
    // Semaphore(1); c1, c2, c3 each acquire, sleep, release, then acquire and
    // sleep again: a task that comes back queues behind those already waiting.
    asio::io_context io;
    test_host cpu({.permits = 1});
    log_t result;
    int done = 0;
    for (const char* tag : {"c1", "c2", "c3"}) {
        peer::spawn(io, [&, tag]() -> asio::awaitable<void> {
            for (const char* round : {"_1", "_2"}) {
                auto body = [&, tag, round](test_session&) -> asio::awaitable<void> {
                    result.push_back(std::string(tag) + round);
                    asio::steady_timer t(io, std::chrono::milliseconds(1));
                    co_await t.async_wait(asio::use_awaitable);  // await asyncio.sleep(0.01)
                };
                auto r = co_await cpu.with_backend_session(on_caller(), std::move(body));
                CHECK(r.has_value());
            }
            ++done;
        });
    }
    REQUIRE(tenferro::test::run_until(io, [&] { return done == 3; }));
    CHECK(result == log_t{"c1_1", "c2_1", "c3_1", "c1_2", "c2_2", "c3_2"});
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: SemaphoreTests.test_acquire_fifo_order_2 (gh-90155; S17: start order follows grant order) [S17]") {
    // asyncio: c1 keeps the only permit; c2 and c3 wait; two releases wake
    // both; c2 appends 2, releases, and acquires again — it must queue behind
    // c3, which was granted before it came back: [1, 2, 3, 4].
    // Ours, S17's shape on one thread with caller placement: a holder has both
    // permits; A (c2) and B (c3) queue for one each; the holder finishes, so
    // one release grants both. A's first body runs; A's coroutine then
    // initiates a second entry. B was granted first, so B's body must start
    // before A's second body — even though a permit is free again when A
    // comes back, and A's initiation could run its body inline.
    asio::io_context io;
    test_host cpu({.permits = 2});
    log_t result;
    bool a_done = false, b_done = false;
    peer::holders hs(io);
    holder& c1 = hs.make("1");
    c1.enter(cpu, io, on_caller(2), &result);
    REQUIRE(settle(io));
    REQUIRE(c1.started());
    peer::spawn(io, [&]() -> asio::awaitable<void> {
        auto first = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { result.push_back("2"); });
        auto second = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { result.push_back("4"); });
        a_done = first.has_value() && second.has_value();
    });
    peer::spawn(io, [&]() -> asio::awaitable<void> {
        auto r = co_await cpu.with_backend_session(on_caller(), [&](test_session&) { result.push_back("3"); });
        b_done = r.has_value();
    });
    REQUIRE(settle(io));
    REQUIRE(cpu.stats().waiting == 2);
    c1.release();  // sem.release(); sem.release()
    REQUIRE(settle(io));
    CHECK(a_done);
    CHECK(b_done);
    CHECK(result == log_t{"1", "2", "3", "4"});
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("asyncio: SemaphoreTests.test_acquire_fifo_order_3 (gh-90155)") {
    // Semaphore(0); t1, t2, t3 wait; t1 is cancelled; two releases: [2, 3].
    asio::io_context io;
    test_host cpu({.permits = 2});
    log_t result;
    probe t1("1"), t2("2"), t3("3");
    peer::holders hs(io);
    holder& zero = hs.make();
    zero.enter(cpu, io, on_caller(2));
    REQUIRE(settle(io));
    t1.enter(cpu, io, on_caller(), &result);
    t2.enter(cpu, io, on_caller(), &result);
    t3.enter(cpu, io, on_caller(), &result);
    REQUIRE(settle(io));
    t1.cancel();
    REQUIRE(settle(io));
    zero.release();
    REQUIRE(settle(io));
    CHECK(result == log_t{"2", "3"});
    CHECK(t1.error() == session_entry_errc::cancelled);
    CHECK(t2.succeeded());
    CHECK(t3.succeeded());
    CHECK(peer::quiescent(cpu));
}
