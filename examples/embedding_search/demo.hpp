#pragma once
// `tenferro-search demo` and `tenferro-search bench`: the server started
// in-process on an ephemeral loopback port and driven by the built-in load
// generator; the demo prints and saves a report, the benchmark compares the
// tenferro build against compute done inline on the I/O threads.

#include <cstdint>
#include <string>

#include "search_engine.hpp"

namespace embedding_search {

struct demo_options {
    std::int64_t rows = 200'000, dim = 128;
    std::uint64_t seed = 42;
    std::string data_dir = ".";  ///< the corpus file and the reports go here
    std::size_t connections = 256;
    double duration_seconds = 10.0;
    std::int64_t k = 10;
    int healthz_interval_ms = 10;
    bool progress = true;
    server_mode mode;
    /// `--tenants`: the two-tenant demo (demo_tenants.hpp) instead of the plain one.
    bool tenants = false;
    std::size_t bulk_connections = 240, interactive_connections = 16;
    /// `--impatient`: clients that give up (demo_impatient.hpp).
    bool impatient = false;
    int client_timeout_ms = 50;     ///< the impatient client's timeout, never told to the server
    double overload = 2.0;          ///< offered rate / measured capacity
    double capacity_seconds = 3.0;  ///< the capacity measurement's duration
    /// The live phase after the main trial (demo_live.hpp): `--no-live` skips it;
    /// `--live-seconds`: its load's duration, half searches alone, half with writers.
    bool live = true;
    double live_seconds = 10.0;
};

/// `demo --impatient` defaults, where --duration and --rows are not given:
/// seconds per variant, and a corpus whose closed-loop capacity on the 2-vCPU
/// reference machine (docs/benchmarks.md) is near 256 connections / (2 x the
/// 50 ms timeout) = 2,560 searches/s, so that the impatient clients can offer
/// about twice it (they cannot send more than connections / timeout).
inline constexpr double impatient_default_duration_seconds = 8.0;
inline constexpr std::int64_t impatient_default_rows = 300'000;

/// `demo --tenants` defaults, where the flags are not given: a corpus and a
/// duration that keep both variants well under a minute on two cores, and
/// batches small enough that a tenant's queue is several batches deep.
inline constexpr std::int64_t tenants_default_rows = 100'000;
inline constexpr double tenants_default_duration_seconds = 8.0;
inline constexpr std::size_t tenants_default_max_batch = 32;

struct bench_options {
    std::int64_t rows = 200'000, dim = 128;
    std::uint64_t seed = 42;
    std::size_t connections = 256;
    double duration_seconds = 5.0;
    int rounds = 2;
    std::int64_t k = 10;
    int healthz_interval_ms = 10;
    std::size_t tenferro_io_threads = 1;
    std::size_t inline_io_threads = 0;  ///< 0: one per core
    std::size_t max_batch = 256;
    int compute_nice = 19;
    std::string json_path;  ///< also write every run as JSON lines here
};

/// Returns the process exit status: 0 when the run had no errors and the
/// sample query matched the brute-force reference.
int run_demo(const demo_options& options);
int run_bench(const bench_options& options);

/// How late a thread sleeping 10 ms wakes up, p99 over `samples` sleeps (ms):
/// the floor that the machine's other load puts under any latency measured
/// here (an idle machine shows about 0.1 ms). Also used by bench/batching.cpp.
double wakeup_lateness_p99_ms(int samples = 200);

}  // namespace embedding_search
