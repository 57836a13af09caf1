// tenferro-bench-admission: the session-entry benchmark of
// docs/bench-protocol.md ("Admission").
//
//   tenferro-bench-admission [--workload roundtrip|fanin|dot|waiters]
//                            [--placement compute|caller] [--floor] [--with-floors]
//                            [--permits P] [--clients C] [--ops M] [--io-threads T] [--vec N]
//
// Without any flag it runs every workload in both placements plus the matching
// floors. With flags it runs the selected workload(s)/placement(s) (all of
// them where a flag is absent): ours, or the floor only with --floor, or both
// with --with-floors. Each run prints one JSON object on its own line.
// See docs/benchmarks.md for every field and for the FIFO-violation rule.

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <latch>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <asio/redirect_error.hpp>
#include <tenferro/tenferro.hpp>

#include "malloc_interpose.hpp"

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Heap-allocation counting. malloc and friends are interposed for the whole
// process (the library and Asio resolve to these): Asio's recycled handler and
// coroutine-frame memory bypasses operator new (it calls aligned_alloc), so
// counting operator new alone would miss exactly what we want to see. The
// counters move only while `g_counting` is set, i.e. in a measured window.
// The replacements are tests/support/malloc_interpose.hpp's; they are off
// under sanitizers, whose runtimes own malloc themselves.
// ---------------------------------------------------------------------------

namespace {
constinit std::atomic<bool> g_counting{false};
constinit std::atomic<std::uint64_t> g_allocs{0};
constinit std::atomic<std::uint64_t> g_alloc_bytes{0};
constexpr std::size_t hist_buckets = 128;  // 32-byte buckets; the last one is "4064 and more"
constinit std::atomic<std::uint64_t> g_hist[hist_buckets] = {};

[[maybe_unused]] inline void note_alloc(std::size_t n) noexcept {
    if (g_counting.load(std::memory_order_relaxed)) [[unlikely]] {
        g_allocs.fetch_add(1, std::memory_order_relaxed);
        g_alloc_bytes.fetch_add(n, std::memory_order_relaxed);
        g_hist[std::min(n / 32, hist_buckets - 1)].fetch_add(1, std::memory_order_relaxed);
    }
}

void print_alloc_histogram(const char* what) {
    if (!TENFERRO_MALLOC_INTERPOSED || std::getenv("TENFERRO_BENCH_ALLOC_HIST") == nullptr) return;
    std::fprintf(stderr, "allocation sizes (%s):", what);
    for (std::size_t i = 0; i < hist_buckets; ++i)
        if (const auto n = g_hist[i].load())
            std::fprintf(stderr, " [%zu,%zu):%llu", i * 32, i * 32 + 32, static_cast<unsigned long long>(n));
    std::fprintf(stderr, "\n");
}
void reset_alloc_histogram() {
    for (auto& h : g_hist) h.store(0);
}
}  // namespace

// The process-wide replacements of malloc and its kin report here.
void tenferro::malloc_interpose::on_block(std::size_t n) noexcept { note_alloc(n); }

namespace {

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------
struct config {
    std::string workload;
    tf::placement where = tf::placement::compute;
    bool floor = false;
    std::size_t permits = 2, clients = 1, ops = 1, io_threads = 1, vec = 0;
};

struct overrides {
    std::optional<std::size_t> permits, clients, ops, io_threads, vec;
};

config defaults_for(const std::string& workload) {
    config c;
    c.workload = workload;
    if (workload == "roundtrip") {
        c.permits = 2, c.clients = 1, c.ops = 50000, c.io_threads = 1, c.vec = 0;
    } else if (workload == "fanin") {
        c.permits = 2, c.clients = 10000, c.ops = 10, c.io_threads = 2, c.vec = 0;
    } else if (workload == "dot") {
        c.permits = 2, c.clients = 1000, c.ops = 20, c.io_threads = 2, c.vec = 16384;
    } else {  // waiters
        c.permits = 1, c.clients = 100000, c.ops = 1, c.io_threads = 1, c.vec = 0;
    }
    return c;
}

const char* system_name(const config& c) {
    if (c.workload == "waiters" && c.floor) return "asio-timer-park";
    if (c.floor) return c.where == tf::placement::compute ? "asio-post-roundtrip" : "asio-post-self";
    return c.where == tf::placement::compute ? "tenferro-compute" : "tenferro-caller";
}

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "tenferro-bench-admission: %s\n"
                 "usage: tenferro-bench-admission [--workload roundtrip|fanin|dot|waiters] "
                 "[--placement compute|caller]\n"
                 "         [--floor | --with-floors] [--permits P] [--clients C] [--ops M] "
                 "[--io-threads T] [--vec N]\n",
                 why);
    std::exit(2);
}

std::uint64_t ns_between(clock_type::time_point a, clock_type::time_point b) {
    auto d = std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
    return d < 0 ? 0 : static_cast<std::uint64_t>(d);
}

// ---------------------------------------------------------------------------
// Per-entry records and the statistics computed from them
// ---------------------------------------------------------------------------
thread_local std::uint32_t t_io_thread = 0;  // index of the I/O thread running this code

struct record {
    std::uint64_t admit = 0;    // admission sequence number, taken when the body starts
    std::uint64_t wait_ns = 0;  // initiation -> body start
    std::uint64_t body_end_ns = 0;  // body end, since the run's epoch (throughput workloads)
    std::uint64_t return_ns = 0;    // body end -> the client coroutine resumed
    std::uint32_t thread = 0;   // I/O thread that took the ticket and initiated the entry
    std::uint32_t done = 0;     // the body ran
};

struct fifo_result {
    std::uint64_t violations = 0;              // global ticket order, slack P+T
    std::uint64_t violations_same_thread = 0;  // per initiating thread, slack P+T
    std::uint64_t max_inversion = 0;           // largest (running max - admit) seen, global order
};

// Sorted by ticket (the vector is indexed by ticket): an entry is a violation
// when an entry initiated before it was admitted more than `slack` positions
// after it (running max of admit over earlier tickets - its admit > slack).
fifo_result count_fifo(const std::vector<record>& recs, std::size_t slack, std::size_t io_threads) {
    fifo_result out;
    std::uint64_t gmax = 0;
    bool gany = false;
    std::vector<std::uint64_t> tmax(io_threads + 1, 0);
    std::vector<bool> tany(io_threads + 1, false);
    for (const record& r : recs) {
        if (!r.done) continue;
        if (gany && gmax > r.admit) {
            out.max_inversion = std::max(out.max_inversion, gmax - r.admit);
            if (gmax - r.admit > slack) ++out.violations;
        }
        gmax = gany ? std::max(gmax, r.admit) : r.admit;
        gany = true;
        const std::size_t t = std::min<std::size_t>(r.thread, io_threads);
        if (tany[t] && tmax[t] > r.admit && tmax[t] - r.admit > slack) ++out.violations_same_thread;
        tmax[t] = tany[t] ? std::max(tmax[t], r.admit) : r.admit;
        tany[t] = true;
    }
    return out;
}

struct percentiles {
    double p50_us = 0, p99_us = 0;
};

percentiles wait_percentiles(const std::vector<record>& recs, std::uint64_t record::*field = &record::wait_ns) {
    std::vector<std::uint64_t> w;
    w.reserve(recs.size());
    for (const record& r : recs)
        if (r.done) w.push_back(r.*field);
    percentiles p;
    if (w.empty()) return p;
    std::sort(w.begin(), w.end());
    auto at = [&](double q) { return static_cast<double>(w[static_cast<std::size_t>((w.size() - 1) * q)]) / 1000.0; };
    p.p50_us = at(0.5);
    p.p99_us = at(0.99);
    return p;
}

// ---------------------------------------------------------------------------
// A watchdog: a run that takes absurdly long is reported as a hang.
// ---------------------------------------------------------------------------
class watchdog {
public:
    watchdog(std::string what, std::chrono::seconds limit, std::function<std::string()> diag)
        : what_(std::move(what)), diag_(std::move(diag)), thread_([this, limit] {
              std::unique_lock lock(m_);
              if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
                  std::fprintf(stderr, "tenferro-bench-admission: HANG: %s still running after %llds; %s\n",
                               what_.c_str(), static_cast<long long>(limit.count()), diag_ ? diag_().c_str() : "");
                  std::fflush(stderr);
                  std::_Exit(3);
              }
          }) {}
    ~watchdog() {
        {
            std::lock_guard lock(m_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

private:
    std::string what_;
    std::function<std::string()> diag_;
    std::mutex m_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

std::string stats_string(const tf::cpu_backend& cpu) {
    const tf::admission_stats s = cpu.stats();
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "stats: permits=%zu available=%zu waiting=%zu admitted=%llu completed=%llu rejected=%llu "
                  "cancelled=%llu",
                  s.permits, s.available, s.waiting, static_cast<unsigned long long>(s.admitted),
                  static_cast<unsigned long long>(s.completed), static_cast<unsigned long long>(s.rejected),
                  static_cast<unsigned long long>(s.cancelled));
    return buf;
}

bool stats_balanced(const tf::cpu_backend& cpu) {
    const tf::admission_stats s = cpu.stats();
    return s.available == s.permits && s.admitted == s.completed && s.waiting == 0;
}

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

void print_common(const config& c, double seconds, std::uint64_t total, const percentiles& p) {
    std::printf(
        "{\"system\":\"%s\",\"workload\":\"%s\",\"permits\":%zu,\"clients\":%zu,\"ops\":%zu,\"io_threads\":%zu,"
        "\"seconds\":%.6f,\"ns_per_op\":%.1f,\"sessions_per_s\":%.0f,\"wait_p50_us\":%.2f,\"wait_p99_us\":%.2f",
        system_name(c), c.workload.c_str(), c.permits, c.clients, c.ops, c.io_threads, seconds,
        total ? seconds * 1e9 / static_cast<double>(total) : 0.0,
        seconds > 0 ? static_cast<double>(total) / seconds : 0.0, p.p50_us, p.p99_us);
}

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
    if (TENFERRO_MALLOC_INTERPOSED && s.counting_started.load() && counted_entries > 0)
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
    const std::string cmd = "'" + self_path() + "' --waiters-phase " + (baseline ? "baseline" : "admission") +
                            " --placement " + (where == tf::placement::compute ? "compute" : "caller") + " --clients " +
                            std::to_string(n);
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
        if (TENFERRO_MALLOC_INTERPOSED)
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
    if (TENFERRO_MALLOC_INTERPOSED) {
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

int run_one(const config& cfg) {
    if (cfg.workload == "waiters") return run_waiters(cfg);
    return run_throughput(cfg);
}

std::size_t parse_size(const char* flag, const char* v) {
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || x == 0) usage((std::string("bad value for ") + flag + ": " + v).c_str());
    return static_cast<std::size_t>(x);
}

}  // namespace

int main(int argc, char** argv) {
    std::optional<std::string> workload, phase;
    std::optional<tf::placement> where;
    bool floor_only = false, with_floors = false;
    overrides ov;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        if (k == "--floor") {
            floor_only = true;
            continue;
        }
        if (k == "--with-floors") {
            with_floors = true;
            continue;
        }
        if (k == "--help" || k == "-h") usage("help");
        if (i + 1 >= argc) usage(("missing value for " + k).c_str());
        const char* v = argv[++i];
        if (k == "--workload") {
            const std::string w = v;
            if (w != "roundtrip" && w != "fanin" && w != "dot" && w != "waiters")
                usage(("unknown workload " + w).c_str());
            workload = w;
        } else if (k == "--placement" || k == "--mode") {
            const std::string p = v;
            if (p == "compute" || p == "spawn_blocking")
                where = tf::placement::compute;
            else if (p == "caller" || p == "inline")
                where = tf::placement::caller;
            else
                usage(("unknown placement " + p).c_str());
        } else if (k == "--permits") {
            ov.permits = parse_size("--permits", v);
        } else if (k == "--clients") {
            ov.clients = parse_size("--clients", v);
        } else if (k == "--ops") {
            ov.ops = parse_size("--ops", v);
        } else if (k == "--io-threads") {
            ov.io_threads = parse_size("--io-threads", v);
        } else if (k == "--vec") {
            ov.vec = static_cast<std::size_t>(std::strtoull(v, nullptr, 10));
        } else if (k == "--waiters-phase") {
            phase = v;
        } else {
            usage(("unknown flag " + k).c_str());
        }
    }

    if (phase) {
        return waiters_phase(*phase == "baseline", where.value_or(tf::placement::compute), ov.clients.value_or(100000));
    }

    const bool no_flags = argc == 1;
    std::vector<std::string> workloads = workload ? std::vector<std::string>{*workload}
                                                  : std::vector<std::string>{"roundtrip", "fanin", "dot", "waiters"};
    std::vector<tf::placement> placements =
        where ? std::vector<tf::placement>{*where}
              : std::vector<tf::placement>{tf::placement::compute, tf::placement::caller};
    int rc = 0;
    for (const std::string& w : workloads) {
        for (tf::placement p : placements) {
            config c = defaults_for(w);
            c.where = p;
            if (ov.permits) c.permits = *ov.permits;
            if (ov.clients) c.clients = *ov.clients;
            if (ov.ops) c.ops = *ov.ops;
            if (ov.io_threads) c.io_threads = *ov.io_threads;
            if (ov.vec) c.vec = *ov.vec;
            if (!floor_only) rc |= run_one(c);
            // The waiters line already carries its baseline (the timer park).
            if (floor_only || ((no_flags || with_floors) && w != "waiters")) {
                config f = c;
                f.floor = true;
                rc |= run_one(f);
            }
        }
    }
    return rc;
}
