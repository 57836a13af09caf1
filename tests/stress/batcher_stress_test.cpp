#include <tenferro/batcher.hpp>

// The batcher under real threads: several I/O threads submit, a random quarter
// of the items is cancelled at a random moment, batch bodies throw or return
// the wrong number of results now and then, plain entries compete for the
// same host, and some rounds destroy the batcher with items still waiting.
// Every item must complete exactly once with an outcome that fits (B3), and
// the counters must balance at quiescence. Rounds: TENFERRO_STRESS_ITERATIONS / 10.
// Catch2 is not thread-safe: workers record, the main thread asserts.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;

namespace {

using int_batcher = batcher<test_host, int, int>;

struct item_record {
    std::atomic<int> completions{0};
    bool bad = false;  // an outcome that fits no rule
    std::string why;
};

struct round_result {
    int items = 0;
    int bad = 0;
    int not_once = 0;
    std::string first_problem;
    bool balanced = true;
    bool destroyed = false;
    batch_stats stats{};  // rounds that were not destroyed early
};

round_result run_round(test_host& host, std::mt19937& rng, int items) {
    const std::size_t max_batch = std::uniform_int_distribution<std::size_t>(1, 8)(rng);
    const bool caller = rng() % 2 == 0;
    const bool destroy_early = rng() % 4 == 0;
    const unsigned seed = rng();

    asio::io_context io;
    auto work = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) threads.emplace_back([&] { io.run(); });

    std::vector<item_record> records(static_cast<std::size_t>(items));
    std::vector<asio::cancellation_signal> signals(static_cast<std::size_t>(items));
    std::vector<asio::strand<asio::io_context::executor_type>> strands;
    for (int i = 0; i < items; ++i) strands.push_back(asio::make_strand(io));

    std::atomic<int> body_calls{0};
    auto b = std::make_unique<int_batcher>(
        host,
        batch_options{.max_batch = max_batch,
                      .session = {1, wait_policy::fifo, caller ? placement::caller : placement::compute}},
        [&body_calls, seed](test_session&, std::span<int> in) -> std::vector<int> {
            const unsigned k = static_cast<unsigned>(body_calls.fetch_add(1)) * 2654435761u + seed;
            if (k % 17 == 0) throw std::runtime_error("body failed");
            std::vector<int> out;
            for (int v : in) out.push_back(2 * v);
            if (k % 23 == 0) out.push_back(0);  // one too many
            return out;
        });

    std::atomic<int> submitted{0};
    std::atomic<int> plain_done{0};
    int plain = 0;
    for (int i = 0; i < items; ++i) {
        const bool cancel = rng() % 4 == 0;
        const int delay_spins = static_cast<int>(rng() % 200);
        asio::post(strands[i], [&, i, cancel, delay_spins] {
            item_record& rec = records[i];
            b->submit(i, asio::bind_cancellation_slot(
                             signals[i].slot(),
                             asio::bind_executor(strands[i], [&rec, i](std::exception_ptr e, session_result<int> r) {
                                 if (rec.completions.fetch_add(1) != 0) return;
                                 if (e) {
                                     try {
                                         std::rethrow_exception(e);
                                     } catch (const std::runtime_error&) {  // length_error is a logic_error
                                     } catch (const std::length_error&) {
                                     } catch (...) {
                                         rec.bad = true;
                                         rec.why = "unexpected exception";
                                     }
                                     if (r.has_value()) rec.bad = true, rec.why = "a value with an exception";
                                 } else if (r.has_value()) {
                                     if (*r != 2 * i) rec.bad = true, rec.why = "wrong value";
                                 } else {
                                     const auto c = r.error().code();
                                     if (c != session_entry_errc::cancelled && c != session_entry_errc::executor)
                                         rec.bad = true, rec.why = "unexpected error " + r.error().message();
                                 }
                             })));
            submitted.fetch_add(1);
            if (cancel) {
                // Later, on the item's strand (Asio's rule for emitting).
                asio::post(strands[i], [&, i, delay_spins] {
                    for (int s = 0; s < delay_spins; ++s) std::atomic_signal_fence(std::memory_order_seq_cst);
                    signals[i].emit(asio::cancellation_type::terminal);
                });
            }
        });
        if (i % 16 == 0) {
            ++plain;
            asio::post(io, [&] {
                host.with_backend_session(
                    [](test_session&) { return 1; },
                    asio::bind_executor(io, [&](std::exception_ptr, session_result<int>) { plain_done.fetch_add(1); }));
            });
        }
    }

    round_result out;
    out.items = items;
    out.destroyed = destroy_early;
    while (submitted.load() != items) std::this_thread::yield();
    if (destroy_early) b.reset();  // items may still wait: they complete with executor

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto all_completed = [&] {
        for (auto& r : records)
            if (r.completions.load() == 0) return false;
        return plain_done.load() == plain;
    };
    while (!all_completed() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (b) {
        // Quiescent once every item completed: the counters must balance.
        const auto quiet_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        batch_stats s = b->stats();
        while ((s.waiting != 0 || s.submitted != s.completed + s.cancelled + s.rejected) &&
               std::chrono::steady_clock::now() < quiet_deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            s = b->stats();
        }
        out.stats = s;
        out.balanced = s.waiting == 0 && s.submitted == static_cast<std::uint64_t>(items) &&
                       s.submitted == s.completed + s.cancelled + s.rejected && s.largest_batch <= max_batch;
        b.reset();
    }
    work.reset();
    for (auto& t : threads) t.join();
    for (auto& r : records) {
        if (r.completions.load() != 1) ++out.not_once;
        if (r.bad) {
            ++out.bad;
            if (out.first_problem.empty()) out.first_problem = r.why;
        }
    }
    return out;
}

}  // namespace

TEST_CASE("batcher stress: exactly-once completion, fitting outcomes, balanced stats", "[batcher][stress]") {
    // A round is 64 items on three fresh threads: TENFERRO_STRESS_ITERATIONS / 10
    // rounds (300 by default, 200 in CI's sanitizer stages: 12,800 items).
    const long rounds = std::max(20L, tenferro::test::stress_iterations(3000) / 10);
    test_host host(test_host_options{.permits = 2});
    std::mt19937 rng(20261201);
    int bad = 0, not_once = 0, unbalanced = 0;
    batch_stats total{};
    std::string first_problem;
    for (long r = 0; r < rounds; ++r) {
        const round_result res = run_round(host, rng, 64);
        bad += res.bad;
        not_once += res.not_once;
        if (!res.balanced) ++unbalanced;
        if (first_problem.empty()) first_problem = res.first_problem;
        total.completed += res.stats.completed;
        total.cancelled += res.stats.cancelled;
        total.rejected += res.stats.rejected;
        total.batches += res.stats.batches;
        total.largest_batch = std::max(total.largest_batch, res.stats.largest_batch);
    }
    WARN("completed " << total.completed << ", cancelled " << total.cancelled << ", rejected " << total.rejected
                      << ", batches " << total.batches << ", largest " << total.largest_batch);
    // The scenario must exercise what it claims to (a stress test that never
    // cancels or batches would pass vacuously).
    CHECK(total.cancelled > 0);
    CHECK(total.batches > 0);
    CHECK(total.completed > total.batches);
    INFO(first_problem);
    CHECK(not_once == 0);
    CHECK(bad == 0);
    CHECK(unbalanced == 0);
    const admission_stats hs = host.stats();
    CHECK(hs.available == hs.permits);
    CHECK(hs.waiting == 0);
}
