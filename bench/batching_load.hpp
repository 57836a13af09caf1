#pragma once
// The two loads of bench/batching.cpp that the example's closed-loop generator
// (examples/embedding_search/load_generator.hpp) does not offer, both keeping
// every latency sample (exact percentiles: the histogram's 6.25 % buckets are
// too coarse for a 1.05x target):
// - one client, closed loop: one keep-alive connection, the next request sent
//   as soon as the previous answer arrives;
// - open loop: Poisson arrivals at a fixed mean rate, served by a pool of
//   keep-alive connections, so an arrival does not wait for an earlier answer
//   unless every connection is busy. Latency is charged from the arrival's
//   scheduled time (no coordinated omission): time spent waiting for a free
//   connection counts.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace batching_bench {

/// Latency samples of one run, milliseconds. `censored` samples are lower
/// bounds: arrivals that no connection could take before the run's end,
/// charged with the time from their scheduled arrival to that end.
struct samples {
    std::vector<double> ms;
    std::vector<double> censored_ms;

    /// The `q` quantile of all samples (censored ones at their lower bound),
    /// nearest rank. `*lower_bound` is set when a censored sample is at or
    /// below the value: the true quantile may then be higher.
    double quantile(double q, bool* lower_bound = nullptr) const;
    std::size_t count() const noexcept { return ms.size() + censored_ms.size(); }
    void append(const samples& other);
};

struct run_stats {
    samples latency;
    std::uint64_t ok = 0;      ///< 200 with the expected number of results
    std::uint64_t shed = 0;    ///< 503
    std::uint64_t errors = 0;  ///< anything else
    std::vector<std::string> error_samples;
    double seconds = 0.0;  ///< first send to last answer
};

struct closed_loop_options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
    std::chrono::duration<double> duration{5.0};
    std::vector<std::string> requests;  ///< sent round-robin, starting at `first_request`
    std::size_t first_request = 0;
    std::int64_t expected_results = 10;
};

/// One connection, one request at a time, for `duration`.
run_stats run_single_client(const closed_loop_options& options);

struct open_loop_options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
    double rate_per_s = 100.0;  ///< mean arrival rate (Poisson)
    std::chrono::duration<double> duration{5.0};  ///< arrivals are scheduled in [0, duration)
    std::size_t connections = 1024;               ///< the pool; opened before the clock starts
    std::vector<std::string> requests;
    std::int64_t expected_results = 10;
    std::uint64_t seed = 1;
};

/// Open loop: arrivals at `rate_per_s` for `duration`. A connection that comes
/// free takes the oldest arrival not yet taken (a FIFO pool); after `duration`
/// no new arrival is taken, the requests in flight are awaited, and the
/// arrivals never taken are recorded as censored samples.
run_stats run_open_loop(const open_loop_options& options);

}  // namespace batching_bench
