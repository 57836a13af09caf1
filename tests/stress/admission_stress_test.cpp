// Many client coroutines on several I/O threads hammer one cpu_backend with a
// random mix of sync and async bodies, throws, cancellations (timeouts),
// try-entries, weighted entries and both placements. At the end every entry
// completed exactly once, every admitted body ran exactly once, no rejected
// body ran, and the counters balance (S1, S2, S3, S13, S14).
//
// Iterations (total entries): TENFERRO_STRESS_ITERATIONS, default 20000.

#include <atomic>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <variant>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace asio::experimental::awaitable_operators;

namespace {

enum class outcome : int { none, value, body_exception, rejected, timed_out };

struct entry_record {
    std::atomic<int> completions{0};
    std::atomic<int> body_runs{0};
    std::atomic<int> outcome_kind{0};
    std::atomic<int> errc{0};
};

struct body_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace

TEST_CASE("admission stress: exactly-once completion and balanced accounting under chaos") {
    const long total = tenferro::test::stress_iterations(20000);
    constexpr int clients = 64;
    constexpr int io_threads = 3;
    const long per_client = (total + clients - 1) / clients;

    std::vector<entry_record> records(static_cast<std::size_t>(per_client * clients));
    std::atomic<long> bad_resume{0};
    std::atomic<long> clients_done{0};

    asio::io_context io(io_threads);
    test_host cpu({.permits = 3, .max_waiters = 40});

    for (int c = 0; c < clients; ++c) {
        auto strand = asio::make_strand(io);
        asio::co_spawn(
            strand,
            [&, c, strand]() -> asio::awaitable<void> {
                std::mt19937 rng(static_cast<unsigned>(c) * 7919u + 17u);
                for (long i = 0; i < per_client; ++i) {
                    entry_record& rec = records[static_cast<std::size_t>(c * per_client + i)];
                    const int kind = static_cast<int>(rng() % 100);
                    session_options opts;
                    opts.permits = (kind % 7 == 0) ? 2 : 1;
                    opts.wait = (kind % 11 == 0) ? wait_policy::never : wait_policy::fifo;
                    opts.where = (kind % 5 == 0) ? placement::caller : placement::compute;
                    const bool async_body = kind % 3 == 0;
                    const bool throws = kind % 13 == 0;
                    const bool with_timeout = kind % 4 == 0;
                    const int spin = static_cast<int>(rng() % 200);

                    auto sync_body = [&rec, throws, spin](test_session& s) -> long {
                        rec.body_runs.fetch_add(1);
                        volatile long x = 0;
                        for (int k = 0; k < spin; ++k) x = x + k;
                        if (throws) throw body_error("chaos");
                        return static_cast<long>(s.parallelism());
                    };
                    auto async_fn = [&rec, throws](test_session& s) -> asio::awaitable<long> {
                        rec.body_runs.fetch_add(1);
                        asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::microseconds(50));
                        co_await t.async_wait(asio::use_awaitable);
                        if (throws) throw body_error("chaos");
                        co_return static_cast<long>(s.parallelism());
                    };

                    auto record_result = [&rec](const session_result<long>& r) {
                        if (r) {
                            rec.outcome_kind = static_cast<int>(outcome::value);
                        } else {
                            rec.outcome_kind = static_cast<int>(outcome::rejected);
                            rec.errc = static_cast<int>(r.error().code());
                        }
                    };

                    try {
                        if (with_timeout) {
                            asio::steady_timer timer(strand, std::chrono::microseconds(rng() % 300));
                            std::variant<session_result<long>, std::monostate> v;
                            if (async_body)
                                v = co_await (cpu.with_backend_session(opts, async_fn) ||
                                              timer.async_wait(asio::use_awaitable));
                            else
                                v = co_await (cpu.with_backend_session(opts, sync_body) ||
                                              timer.async_wait(asio::use_awaitable));
                            if (v.index() == 0)
                                record_result(std::get<0>(v));
                            else
                                rec.outcome_kind = static_cast<int>(outcome::timed_out);
                        } else {
                            // No `cond ? co_await a : co_await b`: GCC 12 destroys the
                            // result twice (docs/pitfalls.md).
                            if (async_body) {
                                session_result<long> r = co_await cpu.with_backend_session(opts, async_fn);
                                record_result(r);
                            } else {
                                session_result<long> r = co_await cpu.with_backend_session(opts, sync_body);
                                record_result(r);
                            }
                        }
                    } catch (const body_error&) {
                        rec.outcome_kind = static_cast<int>(outcome::body_exception);
                    }
                    rec.completions.fetch_add(1);
                    if (!strand.running_in_this_thread()) bad_resume.fetch_add(1);
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

    // All assertions on the main thread.
    REQUIRE(clients_done.load() == clients);
    CHECK(bad_resume.load() == 0);
    long not_once = 0, rejected_but_ran = 0, admitted_runs_wrong = 0, values = 0, rejections = 0, timeouts = 0,
         throws = 0, cancelled_seen = 0;
    for (auto& r : records) {
        if (r.completions.load() != 1) ++not_once;
        const auto kind = static_cast<outcome>(r.outcome_kind.load());
        switch (kind) {
        case outcome::value:
        case outcome::body_exception:
            if (r.body_runs.load() != 1) ++admitted_runs_wrong;
            kind == outcome::value ? ++values : ++throws;
            break;
        case outcome::rejected:
            if (r.body_runs.load() != 0) ++rejected_but_ran;
            ++rejections;
            if (r.errc.load() == static_cast<int>(session_entry_errc::cancelled)) ++cancelled_seen;
            break;
        case outcome::timed_out:
            // The timer won the race: the entry was either cancelled while
            // waiting (body never ran) or admitted first (ran exactly once).
            if (r.body_runs.load() > 1) ++admitted_runs_wrong;
            ++timeouts;
            break;
        case outcome::none:
            ++not_once;
            break;
        }
    }
    INFO("values " << values << ", throws " << throws << ", rejections " << rejections << ", timeouts " << timeouts);
    CHECK(not_once == 0);
    CHECK(rejected_but_ran == 0);
    CHECK(admitted_runs_wrong == 0);
    CHECK(values > 0);
    CHECK(throws > 0);
    CHECK(timeouts > 0);

    const admission_stats st = cpu.stats();
    CHECK(st.available == st.permits);
    CHECK(st.waiting == 0);
    CHECK(st.admitted == st.completed);
    long runs = 0;
    for (auto& r : records) runs += r.body_runs.load();
    // Every entry either ran its body once, or was rejected, or cancelled:
    // while waiting, or after its grant and before its body started (S20,
    // counted in admitted as well: the only admitted entries that do not run).
    CHECK(runs + static_cast<long>(st.rejected + st.cancelled) == static_cast<long>(records.size()));
    CHECK(static_cast<long>(st.admitted) >= runs);
    CHECK(static_cast<long>(st.admitted) - runs <= static_cast<long>(st.cancelled));
    // Only a timeout's `||` asks a running entry to stop, and only an
    // asynchronous body's await notices it (S20).
    CHECK(static_cast<long>(st.stopped) <= timeouts);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, runs);  // every body in a session of its own
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}
