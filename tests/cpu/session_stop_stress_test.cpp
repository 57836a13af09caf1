// S20 under chaos: client coroutines on several I/O threads enter sessions of
// one cpu_backend whose bodies run the backend's operations for a random
// while, with random deadlines (stopping or not), random cancellations (a
// terminal or partial emit, at a random moment, from the client's strand),
// synchronous and asynchronous bodies (which also wait on timers of their own,
// cancelled by the stop from whichever thread asks), both placements, and
// bodies that catch the stop and return. At the end: every entry completed exactly once; every
// body ran at most once; an entry completes "stopped while running" only when
// something asked it to stop, with the code of a cause it had; the counters
// balance (stopped counts exactly the stopped completions, and every admitted
// entry completed); no permit is held. Under ThreadSanitizer (CI's stage runs
// suite `admission`) this is where the deadline timer, the cancellation
// handlers and the bodies' ends race.
//
// Entries: TENFERRO_STRESS_ITERATIONS, default 3000.

#include <tenferro/backend_session.hpp>
#include <tenferro/cpu_backend.hpp>
#include <tenferro/tensor.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"
#include "test_support.hpp"

// GCC 12 pairs Asio's awaitable frame's sized operator delete with the
// global operator new in this coroutine lambda and warns; the frame's new and
// delete are Asio's own pair (a false positive of -Wmismatched-new-delete).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

using namespace tenferro;
using std::chrono::microseconds;
using std::chrono::steady_clock;

namespace {

enum class stop_outcome : int { none, value, caught_stop, body_exception, stopped, rejected };

struct entry_record {
    std::atomic<int> completions{0};
    std::atomic<int> body_runs{0};
    std::atomic<int> kind{0};
    std::atomic<int> errc{0};
    // What could ask it to stop.
    bool stops_at_deadline = false;
    bool cancel_may_stop = false;  // a terminal or partial emit was scheduled
};

struct body_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace

TEST_CASE("S20 stress: random stops, deadlines and cancellations; exactly once, counted, permits back") {
    const long total = tenferro::test::stress_iterations(3000);
    constexpr int clients = 8;
    constexpr int io_threads = 3;
    const long per_client = (total + clients - 1) / clients;

    std::vector<entry_record> records(static_cast<std::size_t>(per_client * clients));
    std::atomic<long> clients_done{0};
    asio::io_context io(io_threads);
    cpu_backend cpu({.permits = 2});
    const std::vector<float> values(1 << 16, 0.25f);
    const tensor small = tensor::from(std::span<const float>(values), {256, 256});

    for (int c = 0; c < clients; ++c) {
        auto strand = asio::make_strand(io);
        asio::co_spawn(
            strand,
            [&, c, strand]() -> asio::awaitable<void> {
                std::mt19937 rng(static_cast<unsigned>(c) * 104729u + 3u);
                for (long i = 0; i < per_client; ++i) {
                    entry_record& rec = records[static_cast<std::size_t>(c * per_client + i)];
                    const unsigned pick = rng();
                    session_options opts;
                    opts.where = pick % 5 == 0 ? placement::caller : placement::compute;
                    const int deadline_kind = static_cast<int>(rng() % 4);  // none, stopping, admission only, none
                    if (deadline_kind == 1 || deadline_kind == 2) {
                        opts.deadline = steady_clock::now() + microseconds(rng() % 3000);
                        opts.stop_at_deadline = deadline_kind == 1;
                        rec.stops_at_deadline = deadline_kind == 1;
                    }
                    const bool async_body = pick % 3 == 0;
                    const bool catches = pick % 7 == 0;
                    const bool throws = pick % 11 == 0;
                    const int rounds = 1 + static_cast<int>(rng() % 60);  // ~20 us each
                    const int cancel_kind = static_cast<int>(rng() % 4);  // none, terminal, partial, total
                    rec.cancel_may_stop = cancel_kind == 1 || cancel_kind == 2;

                    auto sync_body = [&rec, &small, rounds, catches, throws](backend_session& s) -> int {
                        rec.body_runs.fetch_add(1);
                        try {
                            for (int k = 0; k < rounds; ++k) (void)s.exp(small);
                        } catch (const session_stopped&) {
                            if (catches) return -1;
                            throw;
                        }
                        if (throws) throw body_error("chaos");
                        return 1;
                    };
                    auto async_fn = [&rec, &small, rounds, catches,
                                     throws](backend_session& s) -> asio::awaitable<int> {
                        rec.body_runs.fetch_add(1);
                        for (int k = 0; k < rounds; ++k) {
                            if (catches && s.stop_requested()) co_return -1;
                            (void)s.exp(small);
                            if (k % 16 == 15) {
                                // A timer of the body's own: a stop cancels it
                                // (S20), from whichever thread asks.
                                asio::steady_timer wait(co_await asio::this_coro::executor, microseconds(40));
                                co_await wait.async_wait(asio::use_awaitable);
                            } else if (k % 8 == 7) {
                                co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                            }
                        }
                        if (throws) throw body_error("chaos");
                        co_return 1;
                    };

                    // The cancellation: a timer on this strand emits at a random moment.
                    auto signal = std::make_shared<asio::cancellation_signal>();
                    asio::steady_timer timer(strand, microseconds(rng() % 1500));
                    if (cancel_kind != 0) {
                        const auto type = cancel_kind == 1   ? asio::cancellation_type::terminal
                                          : cancel_kind == 2 ? asio::cancellation_type::partial
                                                             : asio::cancellation_type::total;
                        timer.async_wait([signal, type](std::error_code ec) {
                            if (!ec) signal->emit(type);
                        });
                    }
                    const auto token = [&] {
                        return asio::bind_cancellation_slot(signal->slot(), asio::use_awaitable);
                    };
                    try {
                        // (No `cond ? co_await a : co_await b`: GCC 12 destroys the result twice.)
                        session_result<int> r;
                        if (async_body)
                            r = co_await cpu.with_backend_session(opts, async_fn, token());
                        else
                            r = co_await cpu.with_backend_session(opts, sync_body, token());
                        if (r) {
                            rec.kind = static_cast<int>(*r == -1 ? stop_outcome::caught_stop : stop_outcome::value);
                        } else {
                            const bool stopped =
                                std::string(r.error().detail()).find("stopped while running") != std::string::npos;
                            rec.kind = static_cast<int>(stopped ? stop_outcome::stopped : stop_outcome::rejected);
                            rec.errc = static_cast<int>(r.error().code());
                        }
                    } catch (const body_error&) {
                        rec.kind = static_cast<int>(stop_outcome::body_exception);
                    }
                    timer.cancel();  // the emit, if it has not run, never will (the signal outlives it)
                    rec.completions.fetch_add(1);
                }
                clients_done.fetch_add(1);
            },
            [](std::exception_ptr e) {
                if (e) std::rethrow_exception(e);
            });
    }

    std::vector<std::thread> threads;
    for (int t = 0; t < io_threads; ++t) threads.emplace_back([&] { io.run(); });
    for (auto& t : threads) t.join();

    REQUIRE(clients_done.load() == clients);
    long not_once = 0, ran_twice = 0, rejected_but_ran = 0, outcome_without_run = 0, stopped_without_cause = 0,
         wrong_code = 0, stopped = 0, runs = 0, caught = 0, by_deadline = 0, by_cancel = 0;
    for (auto& r : records) {
        if (r.completions.load() != 1) ++not_once;
        const int ran = r.body_runs.load();
        runs += ran;
        if (ran > 1) ++ran_twice;
        switch (static_cast<stop_outcome>(r.kind.load())) {
        case stop_outcome::value:
        case stop_outcome::body_exception:
        case stop_outcome::caught_stop:
            if (ran != 1) ++outcome_without_run;
            if (static_cast<stop_outcome>(r.kind.load()) == stop_outcome::caught_stop) ++caught;
            break;
        case stop_outcome::stopped:
            ++stopped;
            if (ran != 1) ++outcome_without_run;
            if (r.errc.load() == static_cast<int>(session_entry_errc::deadline_exceeded)) {
                ++by_deadline;
                if (!r.stops_at_deadline) ++stopped_without_cause;
            } else if (r.errc.load() == static_cast<int>(session_entry_errc::cancelled)) {
                ++by_cancel;
                if (!r.cancel_may_stop) ++stopped_without_cause;
            } else {
                ++wrong_code;
            }
            break;
        case stop_outcome::rejected:
            if (ran != 0) ++rejected_but_ran;
            break;
        case stop_outcome::none:
            ++not_once;
            break;
        }
    }
    INFO("runs " << runs << ", stopped " << stopped << " (deadline " << by_deadline << ", cancel " << by_cancel
                 << "), caught " << caught);
    CHECK(not_once == 0);
    CHECK(ran_twice == 0);
    CHECK(rejected_but_ran == 0);
    CHECK(outcome_without_run == 0);
    CHECK(stopped_without_cause == 0);
    CHECK(wrong_code == 0);
    CHECK(by_deadline > 0);
    CHECK(by_cancel > 0);

    const admission_stats st = cpu.stats();
    CHECK(st.available == st.permits);
    CHECK(st.waiting == 0);
    CHECK(st.admitted == st.completed);
    CHECK(st.stopped == static_cast<std::uint64_t>(stopped));
    // Every entry either ran its body once or completed without running it
    // (rejected, cancelled or expired before or after its grant).
    long never_ran = 0;
    for (auto& r : records) never_ran += r.body_runs.load() == 0 ? 1 : 0;
    CHECK(runs + never_ran == static_cast<long>(records.size()));
}
