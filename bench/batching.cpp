// The batching benchmark (docs/benchmarks.md, "Batching"): the
// embedding-search server of examples/embedding_search/ in-process on a
// loopback port, one server per batching policy, driven with the HTTP
// requests the real server gets, the policies side by side in one run:
//
//   batcher     max_batch 16, max_delay 0 (batches formed from the admission queue, B1/B2)
//   timer-1ms   max_batch 16, max_delay 1 ms (B6: the timer policy of Triton-style servers)
//   timer-5ms   max_batch 16, max_delay 5 ms
//   unbatched   max_batch 1
//
// 1. one client, closed loop: p50 / p99 latency;
// 2. 256 connections, closed loop: throughput, mean batch, /healthz p99;
// 3. open loop (Poisson arrivals) at fractions of saturation, saturation being
//    the batcher's closed-loop throughput from step 2 of the same run:
//    p50 / p99 per policy, a Markdown table and an SVG plot.
//
// Rounds alternate the policies (A B C D, then B C D A, ...) so that drift on a
// shared machine falls on all of them alike.

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <tenferro/tenferro.hpp>
#include "cpu_model.hpp"
#include "kernels/hwy_control.hpp"

#include "batching_load.hpp"
#include "batching_report.hpp"
#include "corpus.hpp"
#include "demo.hpp"
#include "demo_trial.hpp"
#include "http_server.hpp"
#include "latency_histogram.hpp"
#include "load_generator.hpp"
#include "permit_usage.hpp"
#include "run_blocking.hpp"
#include "search_engine.hpp"

namespace tf = tenferro;
namespace es = embedding_search;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace batching_bench {
namespace {

struct options {
    std::int64_t rows = 200'000, dim = 128, k = 10;
    std::uint64_t seed = 42;
    std::size_t permits = 2;
    std::size_t max_batch = 16;
    int compute_nice = 19;
    bool pin_workers = false;
    double single_seconds = 4.0;
    int single_rounds = 3;
    double closed_seconds = 4.0;
    int closed_rounds = 3;
    std::size_t connections = 256;
    double sweep_seconds = 4.0;
    int sweep_rounds = 1;
    std::size_t open_connections = 1024;
    std::vector<double> loads{0.10, 0.50, 0.90, 1.20};
    std::string report_path, svg_path;
};

std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string a, b, c;
    in >> a >> b >> c;
    return a + " " + b + " " + c;
}

/// The best target Highway's dynamic dispatch picks in this process: the
/// best one that is both compiled in and supported (better targets have lower
/// bits). The library's kernels are compiled with the same HWY_TARGETS (as
/// bench/kernels.cpp reports it).
const char* highway_target() {
    return tenferro::kernels::hwy_control::target_name(tenferro::kernels::hwy_control::dispatched_target());
}

/// CPU seconds this process has used (every thread: server, compute workers, load generator).
double process_cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/// The mean of a histogram's samples, each taken at its bucket's upper edge (ms).
double mean_ms(const es::histogram_snapshot& h) {
    double sum = 0;
    for (std::size_t i = 0; i < h.counts.size(); ++i) {
        sum += double(h.counts[i]) * double(es::latency_histogram::upper_edge(int(i)));
    }
    return h.total ? sum / double(h.total) / 1e6 : 0.0;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    if (v.empty()) return 0.0;
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

es::histogram_snapshot merged(const es::histogram_snapshot& a, const es::histogram_snapshot& b) {
    if (a.counts.empty()) return b;
    es::histogram_snapshot m = a;
    for (std::size_t i = 0; i < m.counts.size() && i < b.counts.size(); ++i) m.counts[i] += b.counts[i];
    m.total += b.total;
    m.max_ns = std::max(m.max_ns, b.max_ns);
    return m;
}

/// One policy's server: its own backend (permits, nice-19 workers), engine
/// (batcher) and HTTP server on an ephemeral loopback port, alive for the
/// whole run. Members are destroyed in reverse: the server drains first.
struct live_server {
    policy pol;
    std::shared_ptr<es::permit_usage_observer> usage = std::make_shared<es::permit_usage_observer>();
    std::unique_ptr<tf::cpu_backend> cpu;
    std::unique_ptr<es::search_engine> engine;
    std::unique_ptr<es::search_server> server;

    live_server(const policy& p, const tf::tensor& corpus, const options& o) : pol(p) {
        es::server_mode mode;
        mode.io_threads = 1;
        mode.permits = o.permits;
        mode.max_batch = p.max_batch;
        mode.max_delay = p.max_delay;
        mode.compute_nice = o.compute_nice;
        tf::cpu_backend_options bo = es::backend_options_for(mode, usage, std::size_t(corpus.size()) * sizeof(float));
        if (o.pin_workers) {
            // Diagnostic: compute worker i on CPU i (mod the CPU count), after the server's own hook.
            bo.on_worker_start = [hook = bo.on_worker_start](std::size_t i) {
                if (hook) hook(i);
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(int(i % std::max(1u, std::thread::hardware_concurrency())), &set);
                pthread_setaffinity_np(pthread_self(), sizeof set, &set);
            };
        }
        cpu = std::make_unique<tf::cpu_backend>(std::move(bo));
        engine = std::make_unique<es::search_engine>(*cpu, corpus, es::engine_options_for(mode), usage);
        es::server_options so;
        so.port = 0;
        so.io_threads = 1;
        server = std::make_unique<es::search_server>(*engine, so);
        server->start();
    }
    ~live_server() {
        server->drain();
        server->wait();
    }

    std::uint16_t port() const { return server->port(); }

    /// Waits until nothing is in flight: every submitted item completed and
    /// every connection of the last load closed; then lets the machine settle.
    void settle() const {
        const auto give_up = clock_type::now() + std::chrono::seconds(30);
        while (clock_type::now() < give_up) {
            const tf::batch_stats b = engine->snapshot().batcher;
            if (b.waiting == 0 && b.submitted == b.completed + b.cancelled + b.rejected &&
                server->snapshot().connections_open == 0) {
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
};

/// The order of the policies in round `r`: rotated by one each round.
std::vector<std::size_t> order_for(int r, std::size_t n) {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < n; ++i) order.push_back((i + std::size_t(r)) % n);
    return order;
}

void print_errors(const char* what, const policy& p, std::uint64_t errors, const std::vector<std::string>& samples) {
    if (!errors) return;
    std::printf("  %s %s: %llu errors\n", what, p.name.c_str(), static_cast<unsigned long long>(errors));
    for (const auto& e : samples) std::printf("      %s\n", e.c_str());
}

int run(const options& o) {
    std::printf("tenferro-bench-batching\n");
    std::printf("cpu: %s (%u hardware threads)\n", tenferro::bench::cpu_model_name().c_str(),
                std::thread::hardware_concurrency());
    std::printf("highway target: %s\n", highway_target());
    std::printf("load average at start: %s\n", load_average().c_str());
    std::printf(
        "workload: corpus %lld x %lld f32 (generated, seed %llu), k = %lld, permits = %zu, 1 I/O thread, "
        "compute nice %d\n",
        static_cast<long long>(o.rows), static_cast<long long>(o.dim), static_cast<unsigned long long>(o.seed),
        static_cast<long long>(o.k), o.permits, o.compute_nice);
    std::fflush(stdout);

    report rep;
    rep.cpu = tenferro::bench::cpu_model_name();
    rep.highway = highway_target();
    rep.load_start = load_average();
    rep.rows = o.rows;
    rep.dim = o.dim;
    rep.k = o.k;
    rep.permits = o.permits;
    rep.max_batch = o.max_batch;
    rep.connections = o.connections;
    rep.open_connections = o.open_connections;
    rep.single_seconds = o.single_seconds;
    rep.single_rounds = o.single_rounds;
    rep.closed_seconds = o.closed_seconds;
    rep.closed_rounds = o.closed_rounds;
    rep.sweep_seconds = o.sweep_seconds;
    rep.sweep_rounds = o.sweep_rounds;

    const auto started = clock_type::now();
    tf::tensor corpus;
    {
        tf::cpu_backend generator(tf::cpu_backend_options{});
        es::corpus_source source;
        source.generate = true;
        source.rows = o.rows;
        source.dim = o.dim;
        source.seed = o.seed;
        corpus = es::run_blocking(es::obtain_corpus(generator, source));
    }
    const std::vector<std::string> requests = es::make_requests(corpus, 512, o.k, o.seed);

    rep.policies = {
        {"batcher", o.max_batch, std::chrono::microseconds(0)},
        {"timer-1ms", o.max_batch, std::chrono::microseconds(1000)},
        {"timer-5ms", o.max_batch, std::chrono::microseconds(5000)},
        {"unbatched", 1, std::chrono::microseconds(0)},
    };
    const std::size_t n = rep.policies.size();
    std::vector<std::unique_ptr<live_server>> servers;
    for (const policy& p : rep.policies) {
        servers.push_back(std::make_unique<live_server>(p, corpus, o));
        // Warm up: the first matmul packs the corpus into the backend's cache.
        es::load_options warm;
        warm.port = servers.back()->port();
        warm.connections = 32;
        warm.duration = std::chrono::duration<double>(0.5);
        warm.requests = requests;
        warm.expected_results = o.k;
        warm.healthz_interval = std::chrono::milliseconds(0);
        es::run_load(warm, {});
        servers.back()->settle();
    }
    std::printf("corpus generated and %zu servers started and warmed up in %.1f s\n", n,
                std::chrono::duration<double>(clock_type::now() - started).count());

    rep.floor_before_ms = es::wakeup_lateness_p99_ms(100);
    std::printf("scheduler floor: a 10 ms sleep wakes up late by %.2f ms (p99)\n\n", rep.floor_before_ms);
    std::fflush(stdout);
    std::uint64_t errors = 0;

    // 1. One client, closed loop.
    std::printf("1. one client, closed loop, %d rounds x %.1f s per policy\n", o.single_rounds, o.single_seconds);
    rep.single.resize(n);
    for (int r = 0; r < o.single_rounds; ++r) {
        for (const std::size_t i : order_for(r, n)) {
            closed_loop_options c;
            c.port = servers[i]->port();
            c.duration = std::chrono::duration<double>(o.single_seconds);
            c.requests = requests;
            c.first_request = std::size_t(r) * 97;
            c.expected_results = o.k;
            const run_stats s = run_single_client(c);
            servers[i]->settle();
            std::printf("  round %d %-10s %5llu requests  p50 %7.2f ms  p99 %7.2f ms\n", r,
                        rep.policies[i].name.c_str(), static_cast<unsigned long long>(s.ok), s.latency.quantile(0.5),
                        s.latency.quantile(0.99));
            print_errors("single", rep.policies[i], s.errors, s.error_samples);
            errors += s.errors;
            rep.single[i].latency.append(s.latency);
            rep.single[i].round_p50.push_back(s.latency.quantile(0.5));
            std::fflush(stdout);
        }
    }

    // 2. Closed loop, many connections.
    std::printf("\n2. %zu connections, closed loop, /healthz every 10 ms, %d rounds x %.1f s per policy\n",
                o.connections, o.closed_rounds, o.closed_seconds);
    rep.closed.resize(n);
    for (int r = 0; r < o.closed_rounds; ++r) {
        for (const std::size_t i : order_for(r, n)) {
            live_server& sv = *servers[i];
            const es::engine_snapshot before = sv.engine->snapshot();
            es::load_options lo;
            lo.port = sv.port();
            lo.connections = o.connections;
            lo.duration = std::chrono::duration<double>(o.closed_seconds);
            lo.requests = requests;
            lo.expected_results = o.k;
            lo.healthz_interval = std::chrono::milliseconds(10);
            const auto load_start = clock_type::now();
            const double cpu0 = process_cpu_seconds();
            const es::load_result l = es::run_load(lo, {});
            const double cpu = process_cpu_seconds() - cpu0;
            const auto load_end = clock_type::now();
            const es::engine_snapshot after = sv.engine->snapshot();
            sv.settle();
            const double rps = l.seconds > 0 ? double(l.ok) / l.seconds : 0.0;
            const double window = std::chrono::duration<double>(load_end - load_start).count();
            const double utilisation =
                (after.busy_permit_seconds - before.busy_permit_seconds) / (double(o.permits) * window);
            const es::histogram_snapshot compute = after.batch_compute.since(before.batch_compute);
            const auto completed = after.batcher.completed - before.batcher.completed;
            const auto batches = after.batcher.batches - before.batcher.batches;
            closed_result& c = rep.closed[i];
            c.round_rps.push_back(rps);
            c.completed += completed;
            c.batches += batches;
            c.latency = merged(c.latency, l.latency);
            c.healthz = merged(c.healthz, l.healthz);
            c.round_healthz_p99.push_back(l.healthz.percentile_ms(0.99));
            c.round_utilisation.push_back(utilisation);
            c.ok += l.ok;
            c.cpu_seconds += cpu;
            c.batch_compute = merged(c.batch_compute, compute);
            c.shed += l.shed;
            c.errors += l.errors + l.healthz_errors;
            std::printf(
                "  round %d %-10s %7.0f req/s  mean batch %5.2f  permits busy %5.1f %%  session p50 %6.1f mean %6.1f "
                "ms  "
                "cpu %.2f ms/req  search p50 %7.1f ms p99 %7.1f ms  healthz p99 %6.2f ms\n",
                r, rep.policies[i].name.c_str(), rps, batches ? double(completed) / double(batches) : 0.0,
                100 * utilisation, compute.percentile_ms(0.5), mean_ms(compute), l.ok ? 1000 * cpu / double(l.ok) : 0.0,
                l.latency.percentile_ms(0.5), l.latency.percentile_ms(0.99), l.healthz.percentile_ms(0.99));
            print_errors("closed", rep.policies[i], l.errors, l.error_samples);
            errors += l.errors;
            std::fflush(stdout);
        }
    }
    for (auto& c : rep.closed) c.rps = median(c.round_rps);
    rep.saturation_rps = rep.closed[0].rps;

    // 3. Open-loop sweep.
    std::printf(
        "\n3. open loop, Poisson arrivals, %zu connections, %.1f s per point; saturation = the batcher's closed-loop "
        "throughput above = %.0f req/s\n",
        o.open_connections, o.sweep_seconds, rep.saturation_rps);
    rep.loads = o.loads;
    rep.sweep.assign(n, std::vector<sweep_point>(o.loads.size()));
    for (int r = 0; r < o.sweep_rounds; ++r) {
        for (std::size_t li = 0; li < o.loads.size(); ++li) {
            for (const std::size_t i : order_for(r + int(li), n)) {
                open_loop_options op;
                op.port = servers[i]->port();
                op.rate_per_s = o.loads[li] * rep.saturation_rps;
                op.duration = std::chrono::duration<double>(o.sweep_seconds);
                op.connections = o.open_connections;
                op.requests = requests;
                op.expected_results = o.k;
                op.seed = o.seed * 1000 + std::uint64_t(li) * 10 + std::uint64_t(r);  // same arrivals for every policy
                const es::engine_snapshot before = servers[i]->engine->snapshot();
                const auto t0 = clock_type::now();
                const double cpu0 = process_cpu_seconds();
                const run_stats s = run_open_loop(op);
                const double cpu = process_cpu_seconds() - cpu0;
                const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
                const es::engine_snapshot after = servers[i]->engine->snapshot();
                servers[i]->settle();
                const auto completed = after.batcher.completed - before.batcher.completed;
                const auto batches = after.batcher.batches - before.batcher.batches;
                sweep_point& pt = rep.sweep[i][li];
                pt.offered_rps = op.rate_per_s;
                pt.latency.append(s.latency);
                pt.ok += s.ok;
                pt.seconds += s.seconds;
                pt.shed += s.shed;
                pt.errors += s.errors;
                pt.completed += completed;
                pt.batches += batches;
                pt.cpu_seconds += cpu;
                bool lb50 = false, lb99 = false;
                const double p50 = s.latency.quantile(0.5, &lb50), p99 = s.latency.quantile(0.99, &lb99);
                std::printf(
                    "  %3.0f %% %-10s offered %6.0f req/s  answered %6.0f req/s  p50 %s%8.1f ms  p99 %s%8.1f ms  "
                    "never sent %zu  mean batch %5.2f  cpu %.1f ms/req  (%.1f s)\n",
                    100 * o.loads[li], rep.policies[i].name.c_str(), op.rate_per_s,
                    s.seconds > 0 ? double(s.ok) / s.seconds : 0.0, lb50 ? ">=" : "  ", p50, lb99 ? ">=" : "  ", p99,
                    s.latency.censored_ms.size(), batches ? double(completed) / double(batches) : 0.0,
                    s.ok ? 1000 * cpu / double(s.ok) : 0.0, wall);
                print_errors("open", rep.policies[i], s.errors, s.error_samples);
                errors += s.errors;
                std::fflush(stdout);
            }
        }
    }

    rep.floor_after_ms = es::wakeup_lateness_p99_ms(100);
    rep.load_end = load_average();
    rep.total_seconds = std::chrono::duration<double>(clock_type::now() - started).count();
    servers.clear();

    const std::string md = markdown(rep);
    std::printf("\n%s", md.c_str());
    std::ofstream(o.report_path) << md;
    std::ofstream(o.svg_path) << sweep_svg(rep);
    std::printf("\nreport: %s\nplot:   %s\n", o.report_path.c_str(), o.svg_path.c_str());
    if (errors) std::printf("errors during the runs: %llu\n", static_cast<unsigned long long>(errors));
    return errors == 0 ? 0 : 1;
}

fs::path self_dir() {
    std::error_code ec;
    const fs::path p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::current_path() : p.parent_path();
}

}  // namespace
}  // namespace batching_bench

int main(int argc, char** argv) {
    // Both ends of every load connection live in this process (2 x 1024 open-loop
    // connections by default): lift the soft descriptor limit to the hard one.
    if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
    batching_bench::options o;
    const fs::path dir = batching_bench::self_dir();
    o.report_path = (dir / "batching-report.md").string();
    o.svg_path = (dir / "batching-sweep.svg").string();

    CLI::App app{"tenferro-bench-batching: batcher vs timer batching vs none, on the embedding-search server"};
    app.add_option("--rows", o.rows, "corpus rows")
        ->capture_default_str()
        ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 30));
    app.add_option("--dim", o.dim, "corpus dimension")->capture_default_str()->check(CLI::Range(1, 65536));
    app.add_option("--k", o.k, "results per query")->capture_default_str()->check(CLI::Range(1, 1000));
    app.add_option("--seed", o.seed, "corpus and arrival seed")->capture_default_str();
    app.add_option("--permits", o.permits, "tenferro permits per server")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    app.add_option("--max-batch", o.max_batch, "max_batch of the batched policies")
        ->capture_default_str()
        ->check(CLI::Range(2, 4096));
    app.add_option("--compute-nice", o.compute_nice, "nice value of the compute workers (as tenferro-search)")
        ->capture_default_str()
        ->check(CLI::Range(0, 19));
    app.add_flag("--pin-workers", o.pin_workers,
                 "diagnostic: pin compute worker i of each server to CPU i (the server does not pin)");
    app.add_option("--single-seconds", o.single_seconds, "step 1: seconds per policy and round")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--single-rounds", o.single_rounds, "step 1: rounds")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    app.add_option("--closed-seconds", o.closed_seconds, "step 2: seconds per policy and round")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--closed-rounds", o.closed_rounds, "step 2: rounds")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    app.add_option("--connections", o.connections, "step 2: closed-loop connections")
        ->capture_default_str()
        ->check(CLI::Range(1, 8192));
    app.add_option("--sweep-seconds", o.sweep_seconds, "step 3: seconds of arrivals per point")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--sweep-rounds", o.sweep_rounds, "step 3: rounds")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    app.add_option("--open-connections", o.open_connections, "step 3: connection pool of the open-loop load")
        ->capture_default_str()
        ->check(CLI::Range(1, 8192));
    app.add_option("--loads", o.loads, "step 3: offered loads as fractions of saturation")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::Range(0.001, 100.0));
    app.add_option("--report", o.report_path, "write the Markdown tables here")->capture_default_str();
    app.add_option("--svg", o.svg_path, "write the sweep's plot (SVG) here")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        return batching_bench::run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tenferro-bench-batching: %s\n", e.what());
        return 1;
    }
}
