// tenferro-bench-admission, the `waiters` workload: memory per entry parked in
// the admission queue, against the same coroutine parked on a timer.

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <latch>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <asio/redirect_error.hpp>
#include <tenferro/tenferro.hpp>

#include "admission_alloc_count.hpp"
#include "admission_common.hpp"

namespace admission_bench {
namespace {

// ---------------------------------------------------------------------------
// waiters: 100,000 entries parked in the queue at once (P = 1, held).
//
// Each phase runs in a fresh process (this executable, re-executed with
// --waiters-phase) so the RSS delta is made of fresh pages, not of memory an
// earlier run freed:
//   baseline:  the same coroutines park on one far-expiring steady_timer
//              (one async_wait each; the wait op is Asio's recycled handler
//              memory, like the entry's operation state);
//   admission: they park in cpu.with_backend_session behind a held permit.
// ---------------------------------------------------------------------------
long rss_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10) * 1024;
    return -1;
}

long heap_in_use() {
    struct mallinfo2 mi = mallinfo2();
    return static_cast<long>(mi.uordblks + mi.hblkhd);
}

struct waiter_state {
    bool baseline = false;
    tf::placement where = tf::placement::compute;
    tf::cpu_backend* cpu = nullptr;
    asio::steady_timer* timer = nullptr;
    std::vector<record> recs;
    std::uint64_t next_ticket = 0;  // one I/O thread: plain counters
    std::atomic<std::uint64_t> next_admit{0};
    std::uint64_t parked = 0, completed = 0, errors = 0;
};

// One function for both phases, so the coroutine frame is the same size.
asio::awaitable<void> parked_client(waiter_state& w) {
    const std::uint64_t ticket = w.next_ticket++;
    const auto t0 = clock_type::now();
    ++w.parked;
    if (w.baseline) {
        std::error_code ec;
        co_await w.timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
        record& r = w.recs[ticket];
        r.admit = w.next_admit.fetch_add(1, std::memory_order_relaxed);
        r.wait_ns = ns_between(t0, clock_type::now());
        r.done = 1;
    } else {
        tf::session_result<int> r = co_await w.cpu->with_backend_session(
            tf::session_options{1, tf::wait_policy::fifo, w.where}, [&w, ticket, t0](tf::backend_session&) {
                record& rec = w.recs[ticket];
                rec.admit = w.next_admit.fetch_add(1, std::memory_order_relaxed);
                rec.wait_ns = ns_between(t0, clock_type::now());
                rec.done = 1;
                return 1;
            });
        if (!r) ++w.errors;
    }
    ++w.completed;
}

}  // namespace

// Prints: rss_before rss_after heap_before heap_after allocs bytes park_s drain_s p50 p99 fifo max_inv errors ok
int waiters_phase(bool baseline, tf::placement where, std::size_t n) {
    waiter_state w;
    w.baseline = baseline;
    w.where = where;
    w.recs.assign(n, record{});
    asio::io_context io(1);
    tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 1});
    asio::steady_timer timer(io, std::chrono::hours(24));
    w.cpu = &cpu;
    w.timer = &timer;
    // poll() on an io_context without work would stop it for good.
    auto guard = asio::make_work_guard(io);

    watchdog dog(baseline ? "waiters baseline" : "waiters admission", std::chrono::seconds(300),
                 [&] { return stats_string(cpu); });

    // Hold the only permit with a synchronous body blocked on a latch.
    std::latch release(1);
    std::atomic<bool> holding{false};
    bool holder_done = false;
    if (!baseline) {
        asio::co_spawn(
            io,
            [&]() -> asio::awaitable<void> {
                co_await cpu.with_backend_session([&](tf::backend_session&) {
                    holding.store(true);
                    release.wait();
                    return 0;
                });
                holder_done = true;
            },
            asio::detached);
        while (!holding.load()) {
            io.poll();
            std::this_thread::yield();
        }
    }
    io.poll();

    malloc_trim(0);
    const long rss0 = rss_bytes();
    const long heap0 = heap_in_use();
    reset_alloc_histogram();
    const std::uint64_t a0 = g_allocs.load(), b0 = g_alloc_bytes.load();
    g_counting.store(true);
    const auto p0 = clock_type::now();
    // Spawn in batches so the transient start-up handlers are recycled.
    constexpr std::size_t batch = 1024;
    for (std::size_t spawned = 0; spawned < n;) {
        const std::size_t end = std::min(n, spawned + batch);
        for (; spawned < end; ++spawned) asio::co_spawn(io, parked_client(w), asio::detached);
        io.poll();
    }
    if (baseline) {
        while (w.parked < n) io.poll();
        io.poll();
    } else {
        while (cpu.stats().waiting < n) {
            if (io.poll() == 0) std::this_thread::yield();
        }
    }
    const auto p1 = clock_type::now();
    g_counting.store(false);
    const std::uint64_t allocs = g_allocs.load() - a0, bytes = g_alloc_bytes.load() - b0;
    print_alloc_histogram(baseline ? "waiters baseline, spawn+park" : "waiters admission, spawn+park");
    const long rss1 = rss_bytes();
    const long heap1 = heap_in_use();

    guard.reset();
    const auto d0 = clock_type::now();
    if (baseline)
        timer.cancel();
    else
        release.count_down();
    io.run();
    const auto d1 = clock_type::now();

    const fifo_result fifo = count_fifo(w.recs, 1 + 1, 1);
    const percentiles p = wait_percentiles(w.recs);
    const bool ok = w.completed == n && w.errors == 0 && (baseline || (holder_done && stats_balanced(cpu)));
    std::printf("%ld %ld %ld %ld %llu %llu %.6f %.6f %.2f %.2f %llu %llu %llu %d\n", rss0, rss1, heap0, heap1,
                static_cast<unsigned long long>(allocs), static_cast<unsigned long long>(bytes),
                std::chrono::duration<double>(p1 - p0).count(), std::chrono::duration<double>(d1 - d0).count(),
                p.p50_us, p.p99_us, static_cast<unsigned long long>(fifo.violations),
                static_cast<unsigned long long>(fifo.max_inversion), static_cast<unsigned long long>(w.errors),
                ok ? 1 : 0);
    std::fflush(stdout);
    return ok ? 0 : 1;
}

namespace {

struct phase_result {
    long rss0 = 0, rss1 = 0, heap0 = 0, heap1 = 0;
    unsigned long long allocs = 0, bytes = 0;
    double park_s = 0, drain_s = 0, p50 = 0, p99 = 0;
    unsigned long long fifo = 0, max_inv = 0, errors = 0;
    int ok = 0;
};

std::string self_path() {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "/proc/self/exe";
    buf[n] = '\0';
    return buf;
}

std::optional<phase_result> run_phase(bool baseline, tf::placement where, std::size_t n) {
    // Appended piece by piece: GCC 12 reports a false -Wrestrict for "'" + std::string here.
    std::string cmd = "'";
    cmd += self_path();
    cmd += "' --waiters-phase ";
    cmd += baseline ? "baseline" : "admission";
    cmd += " --placement ";
    cmd += where == tf::placement::compute ? "compute" : "caller";
    cmd += " --clients " + std::to_string(n);
    std::fflush(stdout);
    FILE* f = popen(cmd.c_str(), "r");
    if (f == nullptr) return std::nullopt;
    phase_result r;
    const int got = std::fscanf(f, "%ld %ld %ld %ld %llu %llu %lf %lf %lf %lf %llu %llu %llu %d", &r.rss0, &r.rss1,
                                &r.heap0, &r.heap1, &r.allocs, &r.bytes, &r.park_s, &r.drain_s, &r.p50, &r.p99, &r.fifo,
                                &r.max_inv, &r.errors, &r.ok);
    const int status = pclose(f);
    if (got != 14) {
        std::fprintf(stderr, "tenferro-bench-admission: waiters %s phase failed (status %d): %s\n",
                     baseline ? "baseline" : "admission", status, cmd.c_str());
        return std::nullopt;
    }
    return r;
}

}  // namespace

int run_waiters(const config& cfg) {
    const std::size_t n = cfg.clients;
    const double dn = static_cast<double>(n);
    auto per = [dn](double x) { return x / dn; };
    if (cfg.floor) {
        const auto b = run_phase(true, cfg.where, n);
        if (!b) return 1;
        print_common(cfg, b->drain_s, n, percentiles{b->p50, b->p99});
        std::printf(",\"fifo_violations\":%llu,\"rss_per_waiter_bytes\":%.1f,\"heap_bytes_per_waiter\":%.1f", b->fifo,
                    per(static_cast<double>(b->rss1 - b->rss0)), per(static_cast<double>(b->heap1 - b->heap0)));
        if (malloc_interposed)
            std::printf(",\"allocs_per_waiter\":%.3f,\"alloc_bytes_per_waiter\":%.1f",
                        per(static_cast<double>(b->allocs)), per(static_cast<double>(b->bytes)));
        std::printf(",\"park_ns_per_waiter\":%.1f}\n", b->park_s * 1e9 / dn);
        std::fflush(stdout);
        return b->ok ? 0 : 1;
    }
    const auto b = run_phase(true, cfg.where, n);
    const auto a = run_phase(false, cfg.where, n);
    if (!a || !b) return 1;
    config shown = cfg;
    shown.permits = 1;
    shown.ops = 1;
    shown.io_threads = 1;
    print_common(shown, a->drain_s, n, percentiles{a->p50, a->p99});
    std::printf(
        ",\"fifo_violations\":%llu,\"fifo_max_inversion\":%llu,\"rss_per_waiter_bytes\":%.1f,"
        "\"heap_bytes_per_waiter\":%.1f,\"park_ns_per_waiter\":%.1f,\"baseline_rss_per_waiter_bytes\":%.1f,"
        "\"baseline_heap_bytes_per_waiter\":%.1f",
        a->fifo, a->max_inv, per(static_cast<double>(a->rss1 - a->rss0)), per(static_cast<double>(a->heap1 - a->heap0)),
        a->park_s * 1e9 / dn, per(static_cast<double>(b->rss1 - b->rss0)),
        per(static_cast<double>(b->heap1 - b->heap0)));
    if (malloc_interposed) {
        const double da = static_cast<double>(a->allocs), db = static_cast<double>(b->allocs);
        const double ba = static_cast<double>(a->bytes), bb = static_cast<double>(b->bytes);
        std::printf(
            ",\"allocs_per_waiter\":%.3f,\"alloc_bytes_per_waiter\":%.1f,\"baseline_allocs_per_waiter\":%.3f,"
            "\"baseline_alloc_bytes_per_waiter\":%.1f,\"admission_allocs_per_entry\":%.3f,"
            "\"admission_alloc_bytes_per_entry\":%.1f",
            per(da), per(ba), per(db), per(bb), std::round(per(da - db) * 1000.0) / 1000.0 + 0.0, per(ba - bb) + 0.0);
    }
    std::printf(",\"errors\":%llu,\"stats_balanced\":%s}\n", a->errors, a->ok ? "true" : "false");
    std::fflush(stdout);
    return a->ok && b->ok ? 0 : 1;
}

}  // namespace admission_bench
