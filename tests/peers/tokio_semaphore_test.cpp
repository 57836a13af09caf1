// tokio's semaphore suites, ported to cpu_backend:
// tokio/tests/sync_semaphore.rs, tokio/tests/sync_semaphore_owned.rs and
// tokio/src/sync/tests/semaphore_batch.rs. (loom_semaphore_batch.rs is ported
// as a real-thread stress test in peers_stress_test.cpp.)
//
// The mapping: `Semaphore::new(n)` is `cpu_backend({.permits = n})`; a permit
// is an entry whose body holds it (`peer::holder`, an async body on the
// caller's io_context that holds until release()); `acquire(k)` is an entry
// with `session_options::permits = k`; `try_acquire` is `wait_policy::never`;
// `close()` is `shutdown()` (entries fail with `executor`); dropping a pending
// acquire future is per-operation cancellation; `available_permits()` is
// `stats().available`. "Ready on the first poll" is checked by running the
// initiating coroutine once (poll_one) and seeing the body started.
//
// Deliberate differences, and what is not ported:
// * tokio hands permits to a waiting head one by one, so `available_permits()`
//   reads 0 while a large request waits; we grant a request whole or not at
//   all, so the free permits stay counted as available, yet nobody may take
//   them (no barging, S4). Those tests assert our reading plus a try-entry
//   that fails with `contended`, which is what tokio's 0 means to a caller.
// * Permits are fixed at construction: `add_permits`, `forget`,
//   `forget_permits`, `merge`, `split`, `MAX_PERMITS` and the permit-count
//   overflow panics have no counterpart (add_permits_open/closed, forget*,
//   merge*, split, add_max_amount_permits, add_more_than_max_amount_permits*,
//   panic_when_exceeds_maxpermits, no_panic_at_maxpermits, max_permits_doesnt_
//   panic, validates_max_permits, forget_permits_basic). A request for more
//   permits than the host has cannot be satisfied by a later add_permits, so
//   it is rejected at once (update_permits_many_times, adapted below).
// * `Semaphore::new(0)` is valid in tokio; our `permits = 0` means
//   hardware_concurrency (no_permits, adapted below), and a fully held host
//   stands in for a zero-permit semaphore.
// * Blocking acquires map to `asio::use_future` + `get()` from a plain
//   thread. tokio panics when one is made inside its runtime
//   (blocking_acquire*_in_async_context); Asio has no such check, not ported.
// * release_permits_at_drop exercises a Rust waker that owns a permit; there
//   is no waker object to drop in Asio, not ported.

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>
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

TEST_CASE("tokio: sync_semaphore::no_permits (adapted: permits = 0 means hardware_concurrency)") {
    // tokio: Semaphore::new(0) must not panic. Ours must not throw either, but
    // 0 asks for one permit per hardware thread, and a 0-permit *entry* is
    // rejected (S10), never left waiting forever.
    test_host cpu({.permits = 0});
    const unsigned hw = std::thread::hardware_concurrency();
    CHECK(cpu.permits() == std::max(1u, hw));
    asio::io_context io;
    probe zero;
    zero.enter(cpu, io, {0, wait_policy::fifo, placement::caller});
    REQUIRE(settle(io));
    REQUIRE(zero.completed());
    CHECK(zero.error() == session_entry_errc::incompatible_context);
    CHECK(zero.runs() == 0);
}

TEST_CASE("tokio: sync_semaphore::try_acquire / sync_semaphore_owned::try_acquire") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    probe p2, p3;
    peer::holders hs(io);
    holder& p1 = hs.make("p1");
    p1.enter(cpu, io, try_on_caller());
    REQUIRE(settle(io));
    CHECK(p1.started());  // admitted at once
    p2.enter(cpu, io, try_on_caller());
    REQUIRE(settle(io));
    CHECK(p2.error() == session_entry_errc::contended);
    CHECK(p2.runs() == 0);
    p1.release();  // the scope holding p1 ends
    REQUIRE(settle(io));
    p3.enter(cpu, io, try_on_caller());
    REQUIRE(settle(io));
    CHECK(p3.succeeded());
    CHECK(p3.runs() == 1);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: sync_semaphore::acquire / sync_semaphore_owned::acquire") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    probe j;
    peer::holders hs(io);
    holder& p1 = hs.make("p1");
    p1.enter(cpu, io, try_on_caller());
    REQUIRE(settle(io));
    REQUIRE(p1.started());
    j.enter(cpu, io);
    REQUIRE(settle(io));
    CHECK_FALSE(j.completed());  // pending
    CHECK(cpu.stats().waiting == 1);
    p1.release();  // drop(p1)
    REQUIRE(settle(io));
    CHECK(j.succeeded());
    CHECK(j.runs() == 1);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: sync_semaphore_owned::try_acquire_many") {
    asio::io_context io;
    test_host cpu({.permits = 42});
    probe p2, p5;
    peer::holders hs(io);
    holder& p1 = hs.make("p1");
    p1.enter(cpu, io, try_on_caller(42));
    REQUIRE(settle(io));
    REQUIRE(p1.started());
    CHECK(p1.parallelism() == 42);
    p2.enter(cpu, io, try_on_caller(1));
    REQUIRE(settle(io));
    CHECK(p2.error() == session_entry_errc::contended);
    p1.release();
    REQUIRE(settle(io));
    holder& p3 = hs.make("p3");
    holder& p4 = hs.make("p4");
    p3.enter(cpu, io, try_on_caller(32));
    p4.enter(cpu, io, try_on_caller(10));
    REQUIRE(settle(io));
    CHECK(p3.started());
    CHECK(p4.started());
    CHECK(cpu.stats().available == 0);
    p5.enter(cpu, io, try_on_caller(1));
    REQUIRE(settle(io));
    CHECK(p5.error() == session_entry_errc::contended);
    hs.release_all();
    REQUIRE(settle(io));
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: sync_semaphore_owned::acquire_many") {
    // 42 permits, 32 held by the test. The task takes 10 (granted at once),
    // signals, and then asks for 32 more while still holding its 10: it is
    // admitted when the test drops its 32, with its 10 still held. (Our task
    // asks for the 32 from outside its first body: from inside, the entry
    // would be re-entry, S7.)
    asio::io_context io;
    test_host cpu({.permits = 42});
    peer::holders hs(io);
    holder& permit32 = hs.make("permit32");
    holder& permit10 = hs.make("permit10");
    holder& second32 = hs.make("second32");
    permit32.enter(cpu, io, try_on_caller(32));
    REQUIRE(settle(io));
    REQUIRE(permit32.started());
    permit10.enter(cpu, io, on_caller(10));
    REQUIRE(settle(io));
    REQUIRE(permit10.started());  // receiver.await
    second32.enter(cpu, io, on_caller(32));
    REQUIRE(settle(io));
    CHECK_FALSE(second32.started());
    CHECK(cpu.stats().waiting == 1);
    permit32.release();  // drop(permit32)
    REQUIRE(settle(io));
    CHECK(second32.started());
    CHECK_FALSE(permit10.finished());
    CHECK(cpu.stats().available == 0);
    hs.release_all();
    REQUIRE(settle(io));
    CHECK(second32.succeeded());
    CHECK(permit10.succeeded());
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: sync_semaphore::stress_test / sync_semaphore_owned::stress_test") {
    // 1000 tasks through 5 permits (compute placement: real workers), then
    // exactly 5 permits can be held at once and a sixth try fails.
    asio::io_context io;
    test_host cpu({.permits = 5});
    std::atomic<int> active{0}, max_active{0};
    int done = 0, ok = 0;
    for (int i = 0; i < 1000; ++i)
        peer::spawn(io, [&]() -> asio::awaitable<void> {
            auto body = [&](test_session&) {
                const int now = active.fetch_add(1) + 1;
                int seen = max_active.load();
                while (now > seen && !max_active.compare_exchange_weak(seen, now)) {
                }
                active.fetch_sub(1);
            };
            auto r = co_await cpu.with_backend_session(std::move(body));
            ok += r.has_value();
            ++done;
        });
    REQUIRE(tenferro::test::run_until(io, [&] { return done == 1000; }));
    CHECK(ok == 1000);
    CHECK(max_active.load() <= 5);
    CHECK(cpu.stats().available == 5);
    probe sixth;
    peer::holders hs(io);
    std::vector<holder*> five;
    for (int i = 0; i < 5; ++i) {
        five.push_back(&hs.make());
        five.back()->enter(cpu, io, try_on_caller());
    }
    REQUIRE(settle(io));
    for (holder* h : five) CHECK(h->started());
    sixth.enter(cpu, io, try_on_caller());
    REQUIRE(settle(io));
    CHECK(sixth.error() == session_entry_errc::contended);
    hs.release_all();
    REQUIRE(settle(io));
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: sync_semaphore::blocking_acquire / blocking_acquire_many (use_future from a plain thread)") {
    test_host cpu({.permits = 5});
    std::size_t inside_one = 99, inside_three = 99;
    auto one = cpu.with_backend_session([&](test_session&) { inside_one = cpu.stats().available; }, asio::use_future);
    REQUIRE(one.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    CHECK(one.get().has_value());
    CHECK(inside_one == 4);
    CHECK(cpu.stats().available == 5);  // drop(permit)
    auto three = cpu.with_backend_session(
        {3, wait_policy::fifo, placement::compute}, [&](test_session&) { inside_three = cpu.stats().available; },
        asio::use_future);
    REQUIRE(three.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    CHECK(three.get().has_value());
    CHECK(inside_three == 2);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: sync_semaphore::blocking_acquire_waits_for_permit") {
    // The permit is held by a body blocked on a gate (tokio: a semaphore of 0);
    // a plain thread blocks on its entry until the test lets the permit go
    // (tokio: add_permits(1)).
    test_host cpu({.permits = 1});
    tenferro::test::gate held;
    auto holding = cpu.with_backend_session([&](test_session&) { held.wait(); }, asio::use_future);
    REQUIRE(held.wait_for_waiters(1));
    std::atomic<int> outcome{0};  // 1 ok, 2 error, 3 timed out
    std::thread waiter([&] {
        auto f = cpu.with_backend_session([](test_session&) { return 7; }, asio::use_future);
        if (f.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
            outcome = 3;
            return;
        }
        auto r = f.get();
        outcome = r.has_value() && *r == 7 ? 1 : 2;
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (cpu.stats().waiting == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    CHECK(cpu.stats().waiting == 1);
    CHECK(outcome.load() == 0);  // still blocked
    held.open();
    waiter.join();
    CHECK(outcome.load() == 1);
    CHECK(holding.get().has_value());
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: sync_semaphore::blocking_acquire_closed (close() is shutdown())") {
    test_host cpu({.permits = 2});
    cpu.shutdown();
    std::atomic<int> ran{0};
    auto single = cpu.with_backend_session([&](test_session&) { ++ran; }, asio::use_future);
    auto many = cpu.with_backend_session(
        {2, wait_policy::fifo, placement::compute}, [&](test_session&) { ++ran; }, asio::use_future);
    REQUIRE(single.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    REQUIRE(many.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    CHECK(single.get().error() == session_entry_errc::executor);
    CHECK(many.get().error() == session_entry_errc::executor);
    CHECK(ran == 0);
    CHECK(cpu.stats().available == 2);
}

TEST_CASE("tokio: semaphore_batch::poll_acquire_one_available / poll_acquire_many_available") {
    asio::io_context io;
    test_host cpu({.permits = 100});
    peer::holders hs(io);
    CHECK(cpu.stats().available == 100);
    holder& one = hs.make();
    one.enter(cpu, io, on_caller(1));
    io.poll_one();  // the first poll of the initiating coroutine
    CHECK(one.started());
    CHECK(cpu.stats().available == 99);
    holder& five_a = hs.make();
    five_a.enter(cpu, io, on_caller(5));
    io.poll_one();
    CHECK(five_a.started());
    CHECK(cpu.stats().available == 94);
    holder& five_b = hs.make();
    five_b.enter(cpu, io, on_caller(5));
    io.poll_one();
    CHECK(five_b.started());
    CHECK(cpu.stats().available == 89);
    CHECK(cpu.stats().waiting == 0);
    hs.release_all();
    REQUIRE(settle(io));
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: semaphore_batch::try_acquire_one_available / try_acquire_many_available") {
    asio::io_context io;
    test_host cpu({.permits = 100});
    peer::holders hs(io);
    const std::size_t sizes[] = {1, 1, 5, 5};
    std::size_t expect = 100;
    for (std::size_t k : sizes) {
        holder& h = hs.make();
        h.enter(cpu, io, try_on_caller(k));
        REQUIRE(settle(io));
        CHECK(h.started());
        expect -= k;
        CHECK(cpu.stats().available == expect);
    }
    CHECK(expect == 88);
    hs.release_all();
    REQUIRE(settle(io));
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: semaphore_batch::poll_acquire_one_unavailable / poll_acquire_one_zero_permits") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    peer::holders hs(io);
    holder& first = hs.make();
    first.enter(cpu, io);
    REQUIRE(settle(io));
    REQUIRE(first.started());
    CHECK(cpu.stats().available == 0);
    holder& second = hs.make();
    second.enter(cpu, io);
    REQUIRE(settle(io));
    CHECK_FALSE(second.started());  // pending
    CHECK(cpu.stats().available == 0);
    first.release();
    REQUIRE(settle(io));
    CHECK(second.started());  // woken and ready
    CHECK(cpu.stats().available == 0);
    second.release();
    REQUIRE(settle(io));
    CHECK(cpu.stats().available == 1);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: semaphore_batch::poll_acquire_many_unavailable (adapted: no partial assignment)") {
    asio::io_context io;
    test_host cpu({.permits = 5});
    probe barger;
    peer::holders hs(io);
    holder& one = hs.make("one");
    one.enter(cpu, io, on_caller(1));
    REQUIRE(settle(io));
    REQUIRE(one.started());
    CHECK(cpu.stats().available == 4);
    holder& five = hs.make("five");
    five.enter(cpu, io, on_caller(5));
    REQUIRE(settle(io));
    CHECK_FALSE(five.started());
    // tokio reads 0 here (the 4 free permits are assigned to the waiting
    // head); ours stay available but nobody may take them.
    CHECK(cpu.stats().available == 4);
    holder& three = hs.make("three");
    three.enter(cpu, io, on_caller(3));
    REQUIRE(settle(io));
    CHECK_FALSE(three.started());  // 3 fit, but the head waits for 5
    barger.enter(cpu, io, try_on_caller(1));
    REQUIRE(settle(io));
    CHECK(barger.error() == session_entry_errc::contended);
    CHECK(cpu.stats().waiting == 2);
    one.release();
    REQUIRE(settle(io));
    CHECK(five.started());
    CHECK(five.parallelism() == 5);
    CHECK_FALSE(three.started());  // acquire_3 not woken
    CHECK(cpu.stats().available == 0);
    five.release();  // tokio releases 1 and then 2; our entry gives back all 5 at once
    REQUIRE(settle(io));
    CHECK(three.started());
    CHECK(cpu.stats().available == 2);
    three.release();
    REQUIRE(settle(io));
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: semaphore_batch::try_acquire_one_unavailable / try_acquire_many_unavailable") {
    asio::io_context io;
    test_host cpu({.permits = 5});
    probe five_fails, one_fails;
    peer::holders hs(io);
    holder& one = hs.make();
    one.enter(cpu, io, try_on_caller(1));
    REQUIRE(settle(io));
    REQUIRE(one.started());
    CHECK(cpu.stats().available == 4);
    five_fails.enter(cpu, io, try_on_caller(5));
    REQUIRE(settle(io));
    CHECK(five_fails.error() == session_entry_errc::contended);
    one.release();
    REQUIRE(settle(io));
    CHECK(cpu.stats().available == 5);
    holder& five = hs.make();
    five.enter(cpu, io, try_on_caller(5));
    REQUIRE(settle(io));
    CHECK(five.started());
    one_fails.enter(cpu, io, try_on_caller(1));
    REQUIRE(settle(io));
    CHECK(one_fails.error() == session_entry_errc::contended);
    five.release();
    REQUIRE(settle(io));
    CHECK(cpu.stats().available == 5);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: semaphore_batch::close_semaphore_prevents_acquire (close() is shutdown())") {
    asio::io_context io;
    test_host cpu({.permits = 5});
    cpu.shutdown();
    CHECK(cpu.stats().available == 5);
    probe a, b;
    a.enter(cpu, io);
    REQUIRE(settle(io));
    CHECK(a.error() == session_entry_errc::executor);
    CHECK(cpu.stats().available == 5);
    b.enter(cpu, io);
    REQUIRE(settle(io));
    CHECK(b.error() == session_entry_errc::executor);
    CHECK(cpu.stats().available == 5);
    CHECK(a.runs() + b.runs() == 0);
}

TEST_CASE("tokio: semaphore_batch::close_semaphore_notifies_permit1") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    peer::holders hs(io);
    holder& held = hs.make();  // tokio: Semaphore::new(0)
    held.enter(cpu, io);
    holder& acquire = hs.make();
    acquire.enter(cpu, io);
    REQUIRE(settle(io));
    REQUIRE(held.started());
    REQUIRE_FALSE(acquire.completed());
    cpu.shutdown();
    REQUIRE(settle(io));
    CHECK(acquire.error() == session_entry_errc::executor);  // woken with an error, no release needed
    CHECK_FALSE(acquire.started());
    CHECK_FALSE(held.finished());  // the running session is not disturbed
    held.release();
    REQUIRE(settle(io));
    CHECK(held.succeeded());
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: semaphore_batch::close_semaphore_notifies_permit2") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    probe later;
    peer::holders hs(io);
    holder& h1 = hs.make();
    holder& h2 = hs.make();
    holder& acquire3 = hs.make();
    holder& acquire4 = hs.make();
    h1.enter(cpu, io);
    h2.enter(cpu, io);
    acquire3.enter(cpu, io);
    acquire4.enter(cpu, io);
    REQUIRE(settle(io));
    REQUIRE(h1.started());
    REQUIRE(h2.started());
    CHECK(cpu.stats().waiting == 2);
    cpu.shutdown();
    REQUIRE(settle(io));
    CHECK(acquire3.error() == session_entry_errc::executor);
    CHECK(acquire4.error() == session_entry_errc::executor);
    CHECK(cpu.stats().available == 0);
    h1.release();
    REQUIRE(settle(io));
    CHECK(cpu.stats().available == 1);
    later.enter(cpu, io);
    REQUIRE(settle(io));
    CHECK(later.error() == session_entry_errc::executor);
    h2.release();
    REQUIRE(settle(io));
    CHECK(cpu.stats().available == 2);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: semaphore_batch::cancel_acquire_releases_permits") {
    asio::io_context io;
    test_host cpu({.permits = 10});
    probe barger, eight;
    peer::holders hs(io);
    holder& four = hs.make();
    four.enter(cpu, io, try_on_caller(4));
    REQUIRE(settle(io));
    REQUIRE(four.started());
    CHECK(cpu.stats().available == 6);
    eight.enter(cpu, io, on_caller(8));
    REQUIRE(settle(io));
    CHECK_FALSE(eight.completed());
    // tokio reads 0 available here; ours reads 6 that nobody may take.
    barger.enter(cpu, io, try_on_caller(1));
    REQUIRE(settle(io));
    CHECK(barger.error() == session_entry_errc::contended);
    eight.cancel();  // drop(acquire)
    REQUIRE(settle(io));
    CHECK(eight.error() == session_entry_errc::cancelled);
    CHECK(eight.runs() == 0);
    CHECK(cpu.stats().available == 6);
    holder& six = hs.make();
    six.enter(cpu, io, try_on_caller(6));
    REQUIRE(settle(io));
    CHECK(six.started());
    hs.release_all();
    REQUIRE(settle(io));
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio: semaphore_batch::update_permits_many_times (adapted: more permits than the host has)") {
    // tokio: acquire(7) on a semaphore of 5 waits until add_permits makes 7
    // possible. Our permits are fixed, so such an entry could never be
    // admitted: it is rejected at once with incompatible_context (S10) and
    // does not block the queue.
    asio::io_context io;
    test_host cpu({.permits = 5});
    probe seven, after;
    seven.enter(cpu, io, on_caller(7));
    after.enter(cpu, io, on_caller(5));
    REQUIRE(settle(io));
    CHECK(seven.error() == session_entry_errc::incompatible_context);
    CHECK(seven.runs() == 0);
    CHECK(after.succeeded());
    CHECK(cpu.stats().available == 5);
    CHECK(peer::quiescent(cpu));
}
