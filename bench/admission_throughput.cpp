// tenferro-bench-admission, the throughput workloads (roundtrip, fanin, dot):
// C client coroutines on one asio::io_context run by T threads, each doing M
// entries, ours (cpu.with_backend_session) or the floor (asio::post hops).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <tenferro/tenferro.hpp>

#include "admission_alloc_count.hpp"
#include "admission_common.hpp"

namespace admission_bench {
namespace {

thread_local std::uint32_t t_io_thread = 0;  // index of the I/O thread running this code

// ---------------------------------------------------------------------------
// roundtrip / fanin / dot
// ---------------------------------------------------------------------------
struct run_state {
    config cfg;
    std::vector<record> recs;
    std::vector<float> work;
    std::atomic<std::uint64_t> next_ticket{0};
    std::atomic<std::uint64_t> next_admit{0};
    std::atomic<std::uint64_t> errors{0};
    std::atomic<std::uint64_t> exceptions{0};
    std::uint64_t count_from_ticket = 0;  // allocation counting starts at this ticket
    std::atomic<std::uint64_t> allocs_at_start{0}, bytes_at_start{0};
    std::atomic<bool> counting_started{false};
    clock_type::time_point epoch;
    tf::cpu_backend* cpu = nullptr;
    asio::io_context* io = nullptr;
    asio::thread_pool* pool = nullptr;
    std::atomic<double> sink{0.0};
};

// The session body (and the floors' body): records when it started, then
// returns a counter (or the sum of squares of the work vector for `dot`).
double body(run_state& s, std::uint64_t ticket, clock_type::time_point t0) noexcept {
    const auto start = clock_type::now();
    record& r = s.recs[ticket];
    r.admit = s.next_admit.fetch_add(1, std::memory_order_relaxed);
    r.wait_ns = ns_between(t0, start);
    r.done = 1;
    double result = static_cast<double>(ticket) + 1.0;
    if (!s.work.empty()) {
        float acc = 0.0f;
        for (float x : s.work) acc += x * x;
        result = static_cast<double>(acc) + static_cast<double>(ticket);
    }
    r.body_end_ns = ns_between(s.epoch, clock_type::now());
    return result;
}

// In the client, once resumed after the entry: how long the way back took.
void note_resumed(run_state& s, std::uint64_t ticket) noexcept {
    record& r = s.recs[ticket];
    r.return_ns = ns_between(s.epoch + std::chrono::nanoseconds(r.body_end_ns), clock_type::now());
}

// Not inlined: GCC may cache a thread_local's address across a coroutine's
// suspension points, and the client coroutines migrate between I/O threads.
[[gnu::noinline]] std::uint64_t take_ticket(run_state& s) {
    const std::uint64_t ticket = s.next_ticket.fetch_add(1, std::memory_order_relaxed);
    if (ticket == s.count_from_ticket) {
        // Steady state reached: count allocations from here to the end of the run.
        s.allocs_at_start.store(g_allocs.load(std::memory_order_relaxed), std::memory_order_relaxed);
        s.bytes_at_start.store(g_alloc_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
        s.counting_started.store(true, std::memory_order_relaxed);
        g_counting.store(true, std::memory_order_relaxed);
    }
    s.recs[ticket].thread = t_io_thread;
    return ticket;
}

asio::awaitable<void> client_ours(run_state& s) {
    const tf::session_options opts{1, tf::wait_policy::fifo, s.cfg.where};
    double acc = 0.0;
    for (std::size_t i = 0; i < s.cfg.ops; ++i) {
        const std::uint64_t ticket = take_ticket(s);
        const auto t0 = clock_type::now();
        try {
            tf::session_result<double> r = co_await s.cpu->with_backend_session(
                opts, [&s, ticket, t0](tf::backend_session&) { return body(s, ticket, t0); });
            note_resumed(s, ticket);
            if (r)
                acc += *r;
            else
                s.errors.fetch_add(1, std::memory_order_relaxed);
        } catch (...) {
            s.exceptions.fetch_add(1, std::memory_order_relaxed);
        }
    }
    s.sink.store(acc, std::memory_order_relaxed);
}

asio::awaitable<void> client_floor(run_state& s) {
    const auto io_ex = s.io->get_executor();
    double acc = 0.0;
    for (std::size_t i = 0; i < s.cfg.ops; ++i) {
        const std::uint64_t ticket = take_ticket(s);
        const auto t0 = clock_type::now();
        if (s.cfg.where == tf::placement::compute) {
            // Hop to the pool (the coroutine resumes on a pool thread), run
            // the body there, hop back to the I/O executor.
            co_await asio::post(asio::bind_executor(s.pool->get_executor(), asio::use_awaitable));
            acc += body(s, ticket, t0);
            co_await asio::post(io_ex, asio::use_awaitable);
        } else {
            co_await asio::post(io_ex, asio::use_awaitable);
            acc += body(s, ticket, t0);
        }
        note_resumed(s, ticket);
    }
    s.sink.store(acc, std::memory_order_relaxed);
}

}  // namespace

int run_throughput(const config& cfg) {
    run_state s;
    s.cfg = cfg;
    const std::uint64_t total = static_cast<std::uint64_t>(cfg.clients) * cfg.ops;
    s.recs.assign(total, record{});
    if (cfg.vec > 0) {
        s.work.resize(cfg.vec);
        for (std::size_t i = 0; i < cfg.vec; ++i) s.work[i] = static_cast<float>(i % 7) * 0.5f;
    }
    s.count_from_ticket = total / 5;  // the first fifth is warm-up for the allocation count

    asio::io_context io(static_cast<int>(cfg.io_threads));
    s.io = &io;
    std::optional<tf::cpu_backend> cpu;
    std::optional<asio::thread_pool> pool;
    if (!cfg.floor)
        cpu.emplace(tf::cpu_backend_options{.permits = cfg.permits});
    else if (cfg.where == tf::placement::compute)
        pool.emplace(cfg.permits);
    s.cpu = cpu ? &*cpu : nullptr;
    s.pool = pool ? &*pool : nullptr;

    reset_alloc_histogram();
    const auto t0 = clock_type::now();
    s.epoch = t0;
    for (std::size_t c = 0; c < cfg.clients; ++c)
        asio::co_spawn(io, cfg.floor ? client_floor(s) : client_ours(s), asio::detached);
    {
        watchdog dog(std::string(system_name(cfg)) + " " + cfg.workload, std::chrono::seconds(300),
                     [&]() -> std::string {
                         char buf[160];
                         std::snprintf(buf, sizeof buf, "tickets=%llu bodies=%llu ",
                                       static_cast<unsigned long long>(s.next_ticket.load()),
                                       static_cast<unsigned long long>(s.next_admit.load()));
                         return buf + (s.cpu ? stats_string(*s.cpu) : std::string());
                     });
        std::vector<std::thread> threads;
        for (std::size_t k = 1; k < cfg.io_threads; ++k)
            threads.emplace_back([&io, k] {
                t_io_thread = static_cast<std::uint32_t>(k);
                io.run();
            });
        t_io_thread = 0;
        io.run();
        for (auto& t : threads) t.join();
    }
    const auto t1 = clock_type::now();
    g_counting.store(false, std::memory_order_relaxed);
    const std::uint64_t allocs = g_allocs.load() - s.allocs_at_start.load();
    const std::uint64_t bytes = g_alloc_bytes.load() - s.bytes_at_start.load();
    const std::uint64_t counted_entries = total - s.count_from_ticket;
    print_alloc_histogram((std::string(system_name(cfg)) + " " + cfg.workload + ", after warm-up").c_str());

    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    const fifo_result fifo = count_fifo(s.recs, cfg.permits + cfg.io_threads, cfg.io_threads);
    if (const char* dump = std::getenv("TENFERRO_BENCH_DUMP")) {
        // One line per entry, in ticket (initiation) order, for inspecting FIFO reports.
        if (FILE* f = std::fopen(dump, "w")) {
            std::fprintf(f, "# ticket io_thread admit_seq wait_ns return_ns\n");
            for (std::size_t t = 0; t < s.recs.size(); ++t)
                std::fprintf(f, "%zu %u %llu %llu %llu\n", t, s.recs[t].thread,
                             static_cast<unsigned long long>(s.recs[t].admit),
                             static_cast<unsigned long long>(s.recs[t].wait_ns),
                             static_cast<unsigned long long>(s.recs[t].return_ns));
            std::fclose(f);
        }
    }
    std::uint64_t ran = 0;
    for (const record& r : s.recs) ran += r.done;
    const bool balanced = s.cpu ? stats_balanced(*s.cpu) : true;

    print_common(cfg, seconds, total, wait_percentiles(s.recs));
    const percentiles back = wait_percentiles(s.recs, &record::return_ns);
    std::uint64_t slow_returns = 0;
    for (const record& r : s.recs) slow_returns += r.done && r.return_ns > 100000;
    std::printf(",\"return_p50_us\":%.2f,\"return_p99_us\":%.2f,\"returns_over_100us\":%llu", back.p50_us, back.p99_us,
                static_cast<unsigned long long>(slow_returns));
    std::printf(",\"fifo_violations\":%llu,\"fifo_violations_same_thread\":%llu,\"fifo_max_inversion\":%llu",
                static_cast<unsigned long long>(fifo.violations),
                static_cast<unsigned long long>(fifo.violations_same_thread),
                static_cast<unsigned long long>(fifo.max_inversion));
    if (malloc_interposed && s.counting_started.load() && counted_entries > 0)
        std::printf(",\"allocs_per_entry\":%.3f,\"alloc_bytes_per_entry\":%.1f",
                    static_cast<double>(allocs) / static_cast<double>(counted_entries),
                    static_cast<double>(bytes) / static_cast<double>(counted_entries));
    std::printf(",\"bodies_run\":%llu,\"errors\":%llu,\"exceptions\":%llu,\"stats_balanced\":%s}\n",
                static_cast<unsigned long long>(ran), static_cast<unsigned long long>(s.errors.load()),
                static_cast<unsigned long long>(s.exceptions.load()), balanced ? "true" : "false");
    std::fflush(stdout);
    const bool ok = ran == total && s.errors.load() == 0 && s.exceptions.load() == 0 && balanced;
    if (!ok && s.cpu)
        std::fprintf(stderr, "tenferro-bench-admission: %s: %s\n", cfg.workload.c_str(), stats_string(*s.cpu).c_str());
    return ok ? 0 : 1;
}

}  // namespace admission_bench
