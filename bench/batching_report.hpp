#pragma once
// What the batching benchmark (bench/batching.cpp) measured, and its outputs:
// the Markdown tables with the batching targets, and the SVG plot of the
// open-loop sweep (latency against offered load, one line per policy).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "batching_load.hpp"
#include "latency_histogram.hpp"

namespace batching_bench {

struct policy {
    std::string name;
    std::size_t max_batch = 16;
    std::chrono::microseconds max_delay{0};
};

/// Step 1, one policy: every round's samples pooled.
struct single_result {
    samples latency;
    std::vector<double> round_p50;
};

/// Step 2, one policy.
struct closed_result {
    std::vector<double> round_rps;
    double rps = 0.0;  ///< median over the rounds
    std::uint64_t completed = 0, batches = 0;  ///< the batcher's counters over the load windows
    embedding_search::histogram_snapshot latency, healthz;  ///< pooled over the rounds
    std::vector<double> round_healthz_p99;
    std::vector<double> round_utilisation;  ///< busy permit-seconds / (permits x window)
    embedding_search::histogram_snapshot batch_compute;  ///< one session's matmul + top_k, pooled
    std::uint64_t ok = 0;
    double cpu_seconds = 0.0;  ///< the whole process's CPU time over the load windows
    double cpu_ms_per_request() const { return ok ? 1000 * cpu_seconds / double(ok) : 0.0; }
    std::uint64_t shed = 0, errors = 0;
    double mean_batch() const { return batches ? double(completed) / double(batches) : 0.0; }
};

/// Step 3, one policy at one offered load: every round pooled.
struct sweep_point {
    double offered_rps = 0.0;
    samples latency;
    std::uint64_t ok = 0, shed = 0, errors = 0;
    double seconds = 0.0;
    std::uint64_t completed = 0, batches = 0;  ///< the batcher's counters over the runs
    double cpu_seconds = 0.0;                  ///< the whole process's CPU time over the runs
    double mean_batch() const { return batches ? double(completed) / double(batches) : 0.0; }
    double answered_rps() const { return seconds > 0 ? double(ok) / seconds : 0.0; }
};

struct report {
    std::string cpu, highway, load_start, load_end;
    std::int64_t rows = 0, dim = 0, k = 0;
    std::size_t permits = 0, max_batch = 0, connections = 0, open_connections = 0;
    double single_seconds = 0, closed_seconds = 0, sweep_seconds = 0;
    int single_rounds = 0, closed_rounds = 0, sweep_rounds = 0;
    double floor_before_ms = 0, floor_after_ms = 0, total_seconds = 0;

    std::vector<policy> policies;  ///< [0] the batcher, [n-1] unbatched; the timers between
    std::vector<single_result> single;
    std::vector<closed_result> closed;
    double saturation_rps = 0.0;  ///< the batcher's closed-loop req/s (step 2)
    std::vector<double> loads;    ///< fractions of saturation
    std::vector<std::vector<sweep_point>> sweep;  ///< [policy][load]
};

/// The tables of all three steps and the targets, as Markdown.
std::string markdown(const report& r);
/// Latency (log scale) against offered load, p50 and p99 per policy.
std::string sweep_svg(const report& r);

}  // namespace batching_bench
