// tokio's loom model tests of its batch semaphore
// (tokio/src/sync/tests/loom_semaphore_batch.rs), ported as real-thread
// stress tests of cpu_backend. loom explores every
// interleaving of a small model; we cannot, so each scenario is repeated
// many times on real threads (each with its own io_context, the way a
// server's I/O threads are), and its invariants are checked on every round.
// A final chaos scenario mixes random weights, placements, try-entries,
// throws and cancellations (timeouts) across threads.
//
// Iterations: TENFERRO_STRESS_ITERATIONS (default 2000); each scenario scales
// its rounds from it. Catch2 is not thread-safe: threads only record into
// atomics; every assertion runs on the main thread. At the end of each
// scenario: S14 accounting (available == permits, admitted == completed).
//
// Mapping as in tokio_semaphore_test.cpp: close() is shutdown() (entries
// fail with `executor`); a future polled once and dropped is an entry whose
// cancellation signal is emitted right after initiation; release(n) on a
// semaphore of 0 is a held body (on a gate) finishing. Not ported:
// concurrent_permit_updates (add_permits / forget_permits do not exist).

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
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

namespace {

constexpr auto thread_budget = std::chrono::seconds(240);

long iterations() { return tenferro::test::stress_iterations(2000); }

/// Runs `body(index, io)` on `n` threads, each with its own io_context that
/// it runs until out of work (bounded). Returns how many io_contexts ran out
/// of work in time.
template <class Body>
int on_threads(int n, Body body) {
    std::atomic<int> drained{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t)
        threads.emplace_back([&, t] {
            asio::io_context io;
            body(t, io);
            io.run_for(thread_budget);
            if (io.stopped()) drained.fetch_add(1);
        });
    for (auto& th : threads) th.join();
    return drained.load();
}

session_options opts(std::size_t k, placement where, wait_policy wait = wait_policy::fifo) { return {k, wait, where}; }

}  // namespace

TEST_CASE("tokio loom: loom_semaphore_batch::basic_usage") {
    // NUM permits, NUM + 1 actors: never more than NUM inside at once.
    constexpr int num = 2;
    const long rounds = iterations();
    test_host cpu({.permits = num});
    std::atomic<int> active{0};
    std::atomic<long> over{0}, ok{0}, bad{0};
    const int drained = on_threads(num + 1, [&](int t, asio::io_context& io) {
        peer::spawn(io, [&, t]() -> asio::awaitable<void> {
            for (long i = 0; i < rounds; ++i) {
                const placement where = (i + t) % 2 ? placement::caller : placement::compute;
                auto r = co_await cpu.with_backend_session(opts(1, where), [&](test_session&) {
                    if (active.fetch_add(1) > num - 1) over.fetch_add(1);
                    if (active.fetch_sub(1) > num) over.fetch_add(1);
                });
                (r ? ok : bad).fetch_add(1);
            }
        });
    });
    CHECK(drained == num + 1);
    CHECK(over.load() == 0);
    CHECK(bad.load() == 0);
    CHECK(ok.load() == (num + 1) * rounds);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio loom: loom_semaphore_batch::release") {
    const long rounds = iterations();
    test_host cpu({.permits = 1});
    std::atomic<int> active{0};
    std::atomic<long> over{0}, ok{0};
    const int drained = on_threads(2, [&](int t, asio::io_context& io) {
        peer::spawn(io, [&, t]() -> asio::awaitable<void> {
            for (long i = 0; i < rounds; ++i) {
                const placement where = t == 0 ? placement::caller : placement::compute;
                auto r = co_await cpu.with_backend_session(opts(1, where), [&](test_session&) {
                    if (active.fetch_add(1) != 0) over.fetch_add(1);
                    active.fetch_sub(1);
                });
                if (r) ok.fetch_add(1);
            }
        });
    });
    CHECK(drained == 2);
    CHECK(over.load() == 0);
    CHECK(ok.load() == 2 * rounds);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio loom: loom_semaphore_batch::basic_closing") {
    // Two threads acquire twice each while the main thread closes the
    // semaphore: every entry either runs or fails with `executor`, a thread
    // stops at its first failure, and nothing is left held or waiting.
    const long rounds = std::max(50L, iterations() / 20);
    std::atomic<long> ran{0}, closed{0}, other{0}, runs_after_close{0};
    long leaked = 0;
    for (long round = 0; round < rounds; ++round) {
        test_host cpu({.permits = 1});
        std::atomic<bool> shut{false};
        std::thread closer;
        const int drained = on_threads(2, [&](int t, asio::io_context& io) {
            if (t == 0)
                closer = std::thread([&] {
                    cpu.shutdown();
                    shut = true;
                });
            peer::spawn(io, [&, t]() -> asio::awaitable<void> {
                for (int i = 0; i < 2; ++i) {
                    const placement where = (round + t + i) % 2 ? placement::caller : placement::compute;
                    auto r = co_await cpu.with_backend_session(opts(1, where), [](test_session&) {});
                    if (r) {
                        ran.fetch_add(1);
                        continue;
                    }
                    (r.error() == session_entry_errc::executor ? closed : other).fetch_add(1);
                    co_return;  // map_err(...)?
                }
            });
        });
        closer.join();
        if (drained != 2) ++leaked;
        // After shutdown returned, nothing more is admitted.
        auto late = cpu.with_backend_session([](test_session&) {}, asio::use_future);
        if (late.wait_for(std::chrono::seconds(20)) != std::future_status::ready ||
            late.get().error() != session_entry_errc::executor)
            runs_after_close.fetch_add(1);
        if (!peer::quiescent(cpu)) ++leaked;
    }
    CHECK(leaked == 0);
    CHECK(other.load() == 0);
    CHECK(runs_after_close.load() == 0);
    CHECK(ran.load() + closed.load() > 0);
}

TEST_CASE("tokio loom: loom_semaphore_batch::concurrent_close") {
    // Three threads: acquire, release, close. Whoever comes first gets in;
    // later ones may find the semaphore closed.
    const long rounds = std::max(50L, iterations() / 20);
    long no_success = 0, leaked = 0;
    std::atomic<long> other{0};
    for (long round = 0; round < rounds; ++round) {
        test_host cpu({.permits = 1});
        std::atomic<int> successes{0};
        const int drained = on_threads(3, [&](int t, asio::io_context& io) {
            peer::spawn(io, [&, t]() -> asio::awaitable<void> {
                const placement where = (round + t) % 2 ? placement::caller : placement::compute;
                auto r = co_await cpu.with_backend_session(opts(1, where), [](test_session&) {});
                if (!r) {
                    if (r.error() != session_entry_errc::executor) other.fetch_add(1);
                    co_return;
                }
                successes.fetch_add(1);
                cpu.shutdown();
            });
        });
        if (drained != 3 || !peer::quiescent(cpu)) ++leaked;
        if (successes.load() == 0) ++no_success;
    }
    CHECK(leaked == 0);
    CHECK(other.load() == 0);
    CHECK(no_success == 0);  // nobody closes before someone got in
}

TEST_CASE("tokio loom: loom_semaphore_batch::concurrent_cancel") {
    // A host whose only permit is held (tokio: a semaphore of 0). Three
    // threads each start two entries and cancel them at once (polled once,
    // then dropped). After the first thread is done, the permit is released
    // (release(10)) while the other two may still be cancelling. Each entry
    // completes exactly once: cancelled, or — if the release granted it and
    // its body started before the cancellation — run once.
    const long rounds = std::max(50L, iterations() / 20);
    std::atomic<long> not_once{0}, ran_but_cancelled{0}, other{0}, cancelled{0}, admitted{0};
    long leaked = 0;
    for (long round = 0; round < rounds; ++round) {
        test_host cpu({.permits = 1});
        tenferro::test::gate g;
        auto held = cpu.with_backend_session([&](test_session&) { g.wait(); }, asio::use_future);
        g.wait_for_waiters(1);
        struct record {
            std::atomic<int> completions{0}, runs{0};
        };
        std::array<record, 6> records;
        auto poll_and_cancel = [&](int t) {
            return [&, t] {
                asio::io_context io;
                std::array<asio::cancellation_signal, 2> signals;
                asio::post(io, [&] {
                    for (int k = 0; k < 2; ++k) {
                        record& rec = records[2 * t + k];
                        const placement where = (round + k) % 2 ? placement::caller : placement::compute;
                        cpu.with_backend_session(
                            opts(1, where), [&rec](test_session&) { rec.runs.fetch_add(1); },
                            asio::bind_cancellation_slot(
                                signals[k].slot(),
                                asio::bind_executor(io, [&rec](std::exception_ptr, session_result<void> r) {
                                    rec.completions.fetch_add(1);
                                    if (r) return;
                                    if (r.error() != session_entry_errc::cancelled) return;
                                    if (rec.runs.load() != 0) rec.completions.fetch_add(100);
                                })));
                    }
                    for (auto& s : signals) s.emit(asio::cancellation_type::terminal);
                });
                io.run_for(thread_budget);
            };
        };
        std::thread t1(poll_and_cancel(0));
        std::thread t2(poll_and_cancel(1));
        std::thread t3(poll_and_cancel(2));
        t1.join();
        g.open();  // semaphore.release(10)
        t2.join();
        t3.join();
        if (held.wait_for(std::chrono::seconds(20)) != std::future_status::ready) ++leaked;
        for (auto& rec : records) {
            if (rec.completions.load() != 1) not_once.fetch_add(1);
            if (rec.runs.load() > 1) ran_but_cancelled.fetch_add(1);
        }
        long ran = 0;
        for (auto& rec : records) ran += rec.runs.load();
        const admission_stats st = cpu.stats();
        cancelled.fetch_add(static_cast<long>(st.cancelled));
        admitted.fetch_add(static_cast<long>(st.admitted) - 1);
        // Each entry ran, or was cancelled: while waiting, or granted and
        // cancelled before its body started (S20; then also in admitted).
        if (ran + static_cast<long>(st.cancelled) != 6 || static_cast<long>(st.admitted) - 1 < ran) other.fetch_add(1);
        if (!peer::quiescent(cpu)) ++leaked;
    }
    INFO("cancelled " << cancelled.load() << ", admitted " << admitted.load());
    CHECK(leaked == 0);
    CHECK(not_once.load() == 0);
    CHECK(ran_but_cancelled.load() == 0);
    CHECK(other.load() == 0);
    CHECK(cancelled.load() > 0);
}

TEST_CASE("tokio loom: loom_semaphore_batch::batch") {
    // 10 permits; two threads each take 4, 10 and 8 in turn: never more than
    // 10 held at once, all 10 back at the end.
    const long rounds = std::max(100L, iterations() / 2);
    test_host cpu({.permits = 10});
    std::atomic<int> active{0};
    std::atomic<long> over{0}, ok{0}, parallelism_wrong{0};
    const int drained = on_threads(2, [&](int t, asio::io_context& io) {
        peer::spawn(io, [&, t]() -> asio::awaitable<void> {
            for (long i = 0; i < rounds; ++i) {
                for (int n : {4, 10, 8}) {
                    const placement where = (i + t) % 3 == 0 ? placement::caller : placement::compute;
                    auto r = co_await cpu.with_backend_session(opts(n, where), [&, n](test_session& s) {
                        if (s.parallelism() != static_cast<std::size_t>(n)) parallelism_wrong.fetch_add(1);
                        active.fetch_add(n);
                        if (active.load() > 10) over.fetch_add(1);
                        std::this_thread::yield();
                        active.fetch_sub(n);
                    });
                    if (r) ok.fetch_add(1);
                }
            }
        });
    });
    CHECK(drained == 2);
    CHECK(over.load() == 0);
    CHECK(parallelism_wrong.load() == 0);
    CHECK(ok.load() == 2 * 3 * rounds);
    CHECK(cpu.stats().available == 10);
    CHECK(peer::quiescent(cpu));
}

TEST_CASE("tokio loom: loom_semaphore_batch::release_during_acquire") {
    // 8 of 10 permits held; a thread asks for 4 while the 8 are released.
    const long rounds = std::max(50L, iterations() / 10);
    test_host cpu({.permits = 10});
    long failed = 0, not_back = 0;
    for (long round = 0; round < rounds; ++round) {
        tenferro::test::gate g;
        auto eight = cpu.with_backend_session(
            opts(8, placement::compute), [&](test_session&) { g.wait(); }, asio::use_future);
        g.wait_for_waiters(1);
        std::atomic<int> outcome{0};
        std::thread th([&] {
            auto four = cpu.with_backend_session(
                opts(4, placement::compute), [](test_session& s) { return s.parallelism(); }, asio::use_future);
            if (four.wait_for(std::chrono::seconds(20)) != std::future_status::ready) return;
            auto r = four.get();
            outcome = r && *r == 4 ? 1 : 2;
        });
        g.open();  // semaphore.release(8), racing the acquire
        th.join();
        if (outcome.load() != 1) ++failed;
        if (eight.wait_for(std::chrono::seconds(20)) != std::future_status::ready || !eight.get()) ++failed;
        if (!peer::quiescent(cpu)) ++not_back;
    }
    CHECK(failed == 0);
    CHECK(not_back == 0);
    CHECK(cpu.stats().available == 10);
}

namespace {
struct chaos_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
struct chaos_record {
    std::atomic<int> completions{0}, runs{0};
    std::atomic<int> kind{0};  // 1 value, 2 body threw, 3 rejected, 4 timed out
    std::atomic<int> errc{0};
};
}  // namespace

TEST_CASE("tokio loom: batch semaphore chaos (threads, weights, throws, cancellations)") {
    // Four I/O threads with eight client coroutines each hit a 3-permit host
    // with random weights (1-3), both placements, sync and async bodies,
    // throws, try-entries and timeouts. Every entry completes exactly once,
    // admitted bodies run exactly once, rejected ones never, never more than
    // 3 permits are held, and the counters balance (S1, S2, S3, S13, S14).
    constexpr int threads = 4, clients = 8;
    const long per_client = std::max(20L, iterations() / (threads * clients) * 4);
    test_host cpu({.permits = 3, .max_waiters = 24});
    std::vector<chaos_record> records(static_cast<std::size_t>(threads * clients * per_client));
    std::atomic<int> held{0};
    std::atomic<long> over{0}, clients_done{0};
    const int drained = on_threads(threads, [&](int t, asio::io_context& io) {
        for (int c = 0; c < clients; ++c) {
            peer::spawn(io, [&, t, c]() -> asio::awaitable<void> {
                std::mt19937 rng(static_cast<unsigned>(t * 7919 + c * 104729 + 1));
                for (long i = 0; i < per_client; ++i) {
                    chaos_record& rec = records[static_cast<std::size_t>((t * clients + c) * per_client + i)];
                    const unsigned roll = rng();
                    const std::size_t k = 1 + roll % 3;
                    const session_options o{k, roll % 9 == 0 ? wait_policy::never : wait_policy::fifo,
                                            (roll >> 4) % 2 ? placement::caller : placement::compute};
                    const bool async_body = (roll >> 5) % 3 == 0;
                    const bool throws = (roll >> 7) % 11 == 0;
                    const bool timeout = (roll >> 9) % 4 == 0;
                    const auto timeout_us = std::chrono::microseconds((roll >> 11) % 300);
                    auto sync_body = [&rec, &held, &over, k, throws](test_session&) {
                        rec.runs.fetch_add(1);
                        if (held.fetch_add(static_cast<int>(k)) + static_cast<int>(k) > 3) over.fetch_add(1);
                        std::this_thread::yield();
                        held.fetch_sub(static_cast<int>(k));
                        if (throws) throw chaos_error("chaos");
                        return static_cast<int>(k);
                    };
                    auto async_fn = [&rec, &held, &over, k, throws](test_session&) -> asio::awaitable<int> {
                        rec.runs.fetch_add(1);
                        if (held.fetch_add(static_cast<int>(k)) + static_cast<int>(k) > 3) over.fetch_add(1);
                        // Given back however the body ends: the timeout's `||`
                        // stops it, and its pause then throws (S20).
                        struct give_back {
                            std::atomic<int>& held;
                            int k;
                            ~give_back() { held.fetch_sub(k); }
                        } const holding{held, static_cast<int>(k)};
                        asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::microseconds(30));
                        co_await pause.async_wait(asio::use_awaitable);
                        if (throws) throw chaos_error("chaos");
                        co_return static_cast<int>(k);
                    };
                    auto record = [&rec](const session_result<int>& r) {
                        rec.kind = r ? 1 : 3;
                        if (!r) rec.errc = static_cast<int>(r.error().code());
                    };
                    try {
                        if (timeout) {
                            asio::steady_timer timer(io, timeout_us);
                            std::variant<session_result<int>, std::monostate> v;
                            if (async_body)
                                v = co_await (cpu.with_backend_session(o, async_fn) ||
                                              timer.async_wait(asio::use_awaitable));
                            else
                                v = co_await (cpu.with_backend_session(o, sync_body) ||
                                              timer.async_wait(asio::use_awaitable));
                            if (v.index() == 0)
                                record(std::get<0>(v));
                            else
                                rec.kind = 4;
                        } else if (async_body) {
                            session_result<int> r = co_await cpu.with_backend_session(o, async_fn);
                            record(r);
                        } else {
                            session_result<int> r = co_await cpu.with_backend_session(o, sync_body);
                            record(r);
                        }
                    } catch (const chaos_error&) {
                        rec.kind = 2;
                    }
                    rec.completions.fetch_add(1);
                }
                clients_done.fetch_add(1);
            });
        }
    });
    CHECK(drained == threads);
    REQUIRE(clients_done.load() == threads * clients);
    long not_once = 0, ran_wrong = 0, values = 0, throws = 0, rejections = 0, timeouts = 0, runs = 0;
    for (auto& r : records) {
        if (r.completions.load() != 1) ++not_once;
        runs += r.runs.load();
        switch (r.kind.load()) {
        case 1:
        case 2:
            if (r.runs.load() != 1) ++ran_wrong;
            r.kind.load() == 1 ? ++values : ++throws;
            break;
        case 3:
            if (r.runs.load() != 0) ++ran_wrong;
            ++rejections;
            break;
        case 4:
            if (r.runs.load() > 1) ++ran_wrong;
            ++timeouts;
            break;
        default:
            ++not_once;
        }
    }
    INFO("values " << values << ", throws " << throws << ", rejections " << rejections << ", timeouts " << timeouts);
    CHECK(not_once == 0);
    CHECK(ran_wrong == 0);
    CHECK(over.load() == 0);
    CHECK(values > 0);
    CHECK(throws > 0);
    CHECK(rejections > 0);
    CHECK(timeouts > 0);
    const admission_stats st = cpu.stats();
    CHECK(st.available == st.permits);
    CHECK(st.waiting == 0);
    CHECK(st.admitted == st.completed);
    // Each entry ran once, or was rejected, or cancelled (while waiting, or
    // granted and cancelled before its body started: S20, also admitted).
    CHECK(runs + static_cast<long>(st.rejected + st.cancelled) == static_cast<long>(records.size()));
    CHECK(static_cast<long>(st.admitted) >= runs);
    CHECK(static_cast<long>(st.admitted) - runs <= static_cast<long>(st.cancelled));
}
