// tenferro-bench-policies: the admission policies of docs/contract.md (P1-P8)
// measured through a host, with sessions of known duration (each body holds its
// permit for D by sleeping, so the two cores stay free for the I/O thread).
//
//   tenferro-bench-policies [--duration-us D] [--seconds S] [--only isolation|shares|deadlines|resizing]
//
// Four experiments, each side by side with its reference in the same run, on a
// cpu_backend of 2 permits and one I/O thread:
//   isolation  group A keeps 500 entries waiting, group B is one closed-loop
//              client: B's admission wait (p50 / p99) under plain FIFO and under
//              groups 1:1;
//   shares     three backlogged groups weighted 4:2:1: the worst window of 100
//              consecutive grants against 57/29/14, then durations 10x apart
//              (D, 2D, 10D): busy permit-seconds against the weights;
//   deadlines  arrivals at twice the capacity, each with a deadline of 4D:
//              goodput (bodies started by their deadline, per second) and bodies
//              started late, without and with reject_late;
//   resizing   100 closed-loop clients while a thread sets the permits 2 -> 1 ->
//              2 every 200 ms: completions lost or doubled, and the throughput in
//              the 100 ms after each resize against the new capacity.
// Prints one JSON object per experiment, then a table. Targets: docs/bench-protocol.md.

#include <tenferro/cpu_backend.hpp>
#if TENFERRO_ASIO_BOOST
#include <boost/asio/steady_timer.hpp>
#else
#include <asio/steady_timer.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

struct config {
    std::chrono::microseconds d{1000};
    double seconds = 3;
    std::string only;
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
    return v[i];
}

void spawn(asio::io_context& io, auto fn) {
    asio::co_spawn(io, std::move(fn), [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    });
}

tf::session_options in_group(std::size_t g) {
    tf::session_options o;
    o.group = g;
    return o;
}

// ---- isolation -------------------------------------------------------------------

struct isolation_result {
    double p50_us, p99_us;
    std::size_t samples;
};

isolation_result isolation(const config& c, bool groups) {
    asio::io_context io;
    tf::cpu_backend_options o{.permits = 2};
    if (groups) o.groups = {{"bulk", 1}, {"interactive", 1}};
    tf::cpu_backend cpu(std::move(o));
    const auto end = clock_type::now() + std::chrono::duration<double>(c.seconds);
    const std::size_t b_group = groups ? 1 : 0;
    std::atomic<bool> stop{false};
    for (int i = 0; i < 500; ++i)
        spawn(io, [&]() -> asio::awaitable<void> {
            while (!stop.load(std::memory_order_relaxed))
                (void)co_await cpu.with_backend_session(
                    in_group(0), [&](tf::backend_session&) { std::this_thread::sleep_for(c.d); });
        });
    std::vector<double> waits;
    spawn(io, [&]() -> asio::awaitable<void> {
        while (clock_type::now() < end) {
            const auto t0 = clock_type::now();
            clock_type::time_point started;
            (void)co_await cpu.with_backend_session(in_group(b_group), [&](tf::backend_session&) {
                started = clock_type::now();
                std::this_thread::sleep_for(c.d);
            });
            waits.push_back(std::chrono::duration<double, std::micro>(started - t0).count());
        }
        stop = true;
    });
    io.run();
    // The first tenth is the flood building up.
    waits.erase(waits.begin(), waits.begin() + static_cast<std::ptrdiff_t>(waits.size() / 10));
    return {percentile(waits, 0.5), percentile(waits, 0.99), waits.size()};
}

// ---- shares ----------------------------------------------------------------------

struct shares_result {
    int worst_window_deviation;  // max over windows of |grants - expected|, any group
    std::size_t grants;
    double busy[3];
    double worst_busy_error;  // max over groups of |share - weight share| / weight share
};

shares_result shares(const config& c, bool unequal) {
    asio::io_context io;
    tf::cpu_backend cpu({.permits = 2, .groups = {{"4", 4}, {"2", 2}, {"1", 1}}});
    const auto end = clock_type::now() + std::chrono::duration<double>(c.seconds);
    std::mutex m;
    std::vector<int> order;
    const std::chrono::microseconds dur[3] = {c.d, unequal ? 2 * c.d : c.d, unequal ? 10 * c.d : c.d};
    // Busy permit-seconds over a steady window: from a tenth of the run to 2 s later (or the
    // run's end less a tenth), leaving out the start (queues filling) and the end (the long
    // group's queue draining alone once the others stop).
    const double window_start = c.seconds / 10, window = std::min(2.0, c.seconds * 0.8);
    double busy_at_start[3] = {}, busy_at_end[3] = {};
    std::thread sampler([&] {
        const auto t0 = clock_type::now();
        std::this_thread::sleep_until(t0 + std::chrono::duration<double>(window_start));
        for (int g = 0; g < 3; ++g) busy_at_start[g] = cpu.group_stats(static_cast<std::size_t>(g)).busy_permit_seconds;
        std::this_thread::sleep_until(t0 + std::chrono::duration<double>(window_start + window));
        for (int g = 0; g < 3; ++g) busy_at_end[g] = cpu.group_stats(static_cast<std::size_t>(g)).busy_permit_seconds;
    });
    for (int g = 0; g < 3; ++g)
        for (int i = 0; i < 50; ++i)
            spawn(io, [&, g]() -> asio::awaitable<void> {
                while (clock_type::now() < end)
                    (void)co_await cpu.with_backend_session(in_group(static_cast<std::size_t>(g)),
                                                            [&, g](tf::backend_session&) {
                                                                {
                                                                    std::lock_guard lock(m);
                                                                    order.push_back(g);
                                                                }
                                                                std::this_thread::sleep_for(dur[g]);
                                                            });
            });
    io.run();
    sampler.join();
    shares_result r{};
    r.grants = order.size();
    // Steady state: the windows of the middle 80 % (the start fills the queues, the end drains them).
    const std::size_t lo = order.size() / 10, hi = order.size() - order.size() / 10;
    const int expected[3] = {57, 29, 14};
    for (std::size_t s = lo; s + 100 <= hi; ++s) {
        int n[3] = {};
        for (std::size_t i = s; i < s + 100; ++i) ++n[order[i]];
        for (int g = 0; g < 3; ++g)
            r.worst_window_deviation = std::max(r.worst_window_deviation, std::abs(n[g] - expected[g]));
    }
    double total = 0;
    for (int g = 0; g < 3; ++g) total += r.busy[g] = busy_at_end[g] - busy_at_start[g];
    const double weights[3] = {4.0 / 7, 2.0 / 7, 1.0 / 7};
    for (int g = 0; g < 3; ++g)
        r.worst_busy_error = std::max(r.worst_busy_error, std::abs(r.busy[g] / total - weights[g]) / weights[g]);
    return r;
}

// ---- deadlines -------------------------------------------------------------------

struct deadline_result {
    double goodput_per_s, capacity_per_s;
    std::uint64_t arrivals, started_in_time, started_late, expired;
};

/// The host's throughput with these sessions, saturated by closed-loop clients (sleeps
/// overshoot D, so this is below the nominal 2 / D).
double measured_capacity(const config& c) {
    asio::io_context io;
    tf::cpu_backend cpu({.permits = 2});
    const auto end = clock_type::now() + std::chrono::duration<double>(std::min(c.seconds, 2.0));
    std::uint64_t done = 0;
    const auto t0 = clock_type::now();
    for (int i = 0; i < 16; ++i)
        spawn(io, [&]() -> asio::awaitable<void> {
            while (clock_type::now() < end) {
                (void)co_await cpu.with_backend_session(
                    [&](tf::backend_session&) { std::this_thread::sleep_for(c.d); });
                ++done;
            }
        });
    io.run();
    return static_cast<double>(done) / std::chrono::duration<double>(clock_type::now() - t0).count();
}

deadline_result deadlines(const config& c, bool reject_late, double capacity) {
    asio::io_context io;
    tf::cpu_backend cpu({.permits = 2, .reject_late = reject_late});
    const auto end = clock_type::now() + std::chrono::duration<double>(c.seconds);
    std::atomic<std::uint64_t> in_time{0}, late{0}, arrivals{0};
    // Arrivals at twice the nominal capacity: every D, four entries.
    spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer t(io);
        auto next = clock_type::now();
        while (next < end) {
            for (int i = 0; i < 4; ++i) {
                arrivals.fetch_add(1);
                tf::session_options o;
                o.deadline = clock_type::now() + 4 * c.d;
                spawn(io, [&, o]() -> asio::awaitable<void> {
                    (void)co_await cpu.with_backend_session(o, [&, o](tf::backend_session&) {
                        (clock_type::now() <= o.deadline ? in_time : late).fetch_add(1);
                        std::this_thread::sleep_for(c.d);
                    });
                });
            }
            next += c.d;
            t.expires_at(next);
            co_await t.async_wait(asio::use_awaitable);
        }
    });
    io.run();
    return {static_cast<double>(in_time.load()) / c.seconds,
            capacity,
            arrivals.load(),
            in_time.load(),
            late.load(),
            cpu.stats().expired};
}

// ---- resizing --------------------------------------------------------------------

struct resize_result {
    std::uint64_t submitted, completed;
    double worst_follow_error;  // max over resizes of |rate in next 100 ms - capacity| / capacity
    int resizes;
};

resize_result resizing(const config& c) {
    asio::io_context io;
    tf::cpu_backend cpu({.permits = 2});
    const auto start = clock_type::now();
    const auto end = start + std::chrono::duration<double>(c.seconds);
    std::mutex m;
    std::vector<double> completions_at;  // seconds since start
    std::atomic<std::uint64_t> submitted{0}, completed{0};
    for (int i = 0; i < 100; ++i)
        spawn(io, [&]() -> asio::awaitable<void> {
            while (clock_type::now() < end) {
                submitted.fetch_add(1);
                auto r =
                    co_await cpu.with_backend_session([&](tf::backend_session&) { std::this_thread::sleep_for(c.d); });
                if (r) {
                    completed.fetch_add(1);
                    std::lock_guard lock(m);
                    completions_at.push_back(std::chrono::duration<double>(clock_type::now() - start).count());
                }
            }
        });
    std::vector<std::pair<double, std::size_t>> changes;  // (time, permits)
    std::thread resizer([&] {
        std::size_t p = 2;
        while (clock_type::now() + 200ms < end) {
            std::this_thread::sleep_for(200ms);
            p = p == 2 ? 1 : 2;
            cpu.set_permits(p);
            std::lock_guard lock(m);
            changes.emplace_back(std::chrono::duration<double>(clock_type::now() - start).count(), p);
        }
    });
    io.run();
    resizer.join();
    resize_result r{submitted.load(), completed.load(), 0, static_cast<int>(changes.size())};
    const double per_permit = 1.0 / std::chrono::duration<double>(c.d).count();
    for (auto [t, p] : changes) {
        // The window starts one session after the resize: a shrink preempts nothing.
        const double from = t + std::chrono::duration<double>(c.d).count(), to = t + 0.1;
        const auto n =
            std::count_if(completions_at.begin(), completions_at.end(), [&](double x) { return x >= from && x < to; });
        const double rate = static_cast<double>(n) / (to - from), cap = per_permit * static_cast<double>(p);
        r.worst_follow_error = std::max(r.worst_follow_error, std::abs(rate - cap) / cap);
    }
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    config c;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--duration-us" && i + 1 < argc)
            c.d = std::chrono::microseconds(std::atol(argv[++i]));
        else if (a == "--seconds" && i + 1 < argc)
            c.seconds = std::atof(argv[++i]);
        else if (a == "--only" && i + 1 < argc)
            c.only = argv[++i];
        else {
            std::fprintf(stderr,
                         "usage: %s [--duration-us D] [--seconds S] [--only isolation|shares|deadlines|resizing]\n",
                         argv[0]);
            return 2;
        }
    }
    const double d_us = static_cast<double>(c.d.count());
    auto want = [&](const char* name) { return c.only.empty() || c.only == name; };
    std::string table;
    char line[512];
    if (want("isolation")) {
        const isolation_result fifo = isolation(c, false), grouped = isolation(c, true);
        std::printf(
            "{\"experiment\": \"isolation\", \"d_us\": %.0f, \"fifo_p50_us\": %.1f, \"fifo_p99_us\": %.1f, "
            "\"groups_p50_us\": %.1f, \"groups_p99_us\": %.1f, \"samples\": [%zu, %zu]}\n",
            d_us, fifo.p50_us, fifo.p99_us, grouped.p50_us, grouped.p99_us, fifo.samples, grouped.samples);
        std::snprintf(
            line, sizeof line,
            "isolation  B's p99 wait: FIFO %.0f us, groups 1:1 %.0f us = %.2f D (target <= 2 D) and 1/%.0f of "
            "FIFO (target >= 20)\n",
            fifo.p99_us, grouped.p99_us, grouped.p99_us / d_us, fifo.p99_us / std::max(grouped.p99_us, 1.0));
        table += line;
    }
    if (want("shares")) {
        const shares_result eq = shares(c, false), uneq = shares(c, true);
        std::printf(
            "{\"experiment\": \"shares\", \"d_us\": %.0f, \"grants\": %zu, \"worst_window_deviation\": %d, "
            "\"unequal_busy\": [%.3f, %.3f, %.3f], \"unequal_worst_busy_error\": %.3f, "
            "\"equal_worst_busy_error\": %.3f}\n",
            d_us, eq.grants, eq.worst_window_deviation, uneq.busy[0], uneq.busy[1], uneq.busy[2], uneq.worst_busy_error,
            eq.worst_busy_error);
        std::snprintf(line, sizeof line,
                      "shares     4:2:1, equal durations: worst window of 100 off by %d grants (target <= 5); "
                      "durations D/2D/10D: busy permit-seconds off by %.1f %% (target <= 10 %%)\n",
                      eq.worst_window_deviation, 100 * uneq.worst_busy_error);
        table += line;
    }
    if (want("deadlines")) {
        const double capacity = measured_capacity(c);
        const deadline_result plain = deadlines(c, false, capacity), early = deadlines(c, true, capacity);
        std::printf(
            "{\"experiment\": \"deadlines\", \"d_us\": %.0f, \"capacity_per_s\": %.0f, "
            "\"plain\": {\"goodput_per_s\": %.0f, \"arrivals\": %llu, \"in_time\": %llu, \"late\": %llu, "
            "\"expired\": %llu}, \"reject_late\": {\"goodput_per_s\": %.0f, \"arrivals\": %llu, \"in_time\": "
            "%llu, \"late\": %llu, \"expired\": %llu}}\n",
            d_us, plain.capacity_per_s, plain.goodput_per_s, (unsigned long long)plain.arrivals,
            (unsigned long long)plain.started_in_time, (unsigned long long)plain.started_late,
            (unsigned long long)plain.expired, early.goodput_per_s, (unsigned long long)early.arrivals,
            (unsigned long long)early.started_in_time, (unsigned long long)early.started_late,
            (unsigned long long)early.expired);
        std::snprintf(line, sizeof line,
                      "deadlines  2x overload, deadline 4 D: goodput %.0f%% of the measured capacity without "
                      "reject_late, %.0f%% with (target >= 95 %%); bodies started late: %llu / %llu (target 0)\n",
                      100 * plain.goodput_per_s / plain.capacity_per_s,
                      100 * early.goodput_per_s / early.capacity_per_s, (unsigned long long)plain.started_late,
                      (unsigned long long)early.started_late);
        table += line;
    }
    if (want("resizing")) {
        const resize_result r = resizing(c);
        std::printf(
            "{\"experiment\": \"resizing\", \"d_us\": %.0f, \"submitted\": %llu, \"completed\": %llu, "
            "\"resizes\": %d, \"worst_follow_error\": %.3f}\n",
            d_us, (unsigned long long)r.submitted, (unsigned long long)r.completed, r.resizes, r.worst_follow_error);
        std::snprintf(line, sizeof line,
                      "resizing   2->1->2 every 200 ms, %d resizes: %llu submitted, %llu completed; throughput in the "
                      "100 ms after a resize off its capacity by %.0f %% at worst\n",
                      r.resizes, (unsigned long long)r.submitted, (unsigned long long)r.completed,
                      100 * r.worst_follow_error);
        table += line;
    }
    std::fputs(table.c_str(), stdout);
    return 0;
}
