#pragma once
// One trial of the demo and the benchmark: a fresh server on an ephemeral
// loopback port under one run of the built-in load generator, what it
// measured, and the search requests that load sends.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "latency_histogram.hpp"
#include "load_generator.hpp"
#include "search_engine.hpp"

namespace embedding_search {

struct trial_result {
    server_mode mode;
    std::size_t permits = 0;
    std::uint16_t port = 0;
    load_result load;
    histogram_snapshot admission_wait;
    double utilisation = 0.0;
    double mean_batch = 0.0;
    std::string stats_json;

    // Over the load's window (from its start to its end):
    double server_cpu_seconds = 0.0;  ///< CPU time of the process less the load generator's thread
    double load_cpu_seconds = 0.0;    ///< the load generator's thread
    std::uint64_t computed = 0;       ///< queries computed by batch bodies
    std::uint64_t batches = 0;  ///< batch bodies that ran (stopped ones included)
    std::uint64_t abandoned_waiting = 0, abandoned_taken = 0, stopped_batches = 0;
    histogram_snapshot queue_head_age;  ///< engine_snapshot::queue_head_age
    std::uint64_t patience_shed = 0;    ///< queries the patience policy answered 503 instead of computing
    double patience_seconds = 0.0;      ///< the patience learned by the end (0: none)

    bool sample_ran = false;
    std::int64_t sample_row = 0;
    std::vector<search_hit> sample_hits, sample_reference;
    reference_check sample_check;
};

struct trial_setup {
    std::size_t connections = 256;
    double duration_seconds = 10.0;
    std::int64_t k = 10;
    int healthz_interval_ms = 10;
    std::uint64_t seed = 42;
    bool sample_query = false;
    std::function<void(const load_progress&)> progress;
    /// Connection sets with their own requests (load_options::tenants); empty:
    /// `connections` sending the trial's `requests`.
    std::vector<load_tenant> tenants;
    /// server_options::notice_closed of the trial's server.
    bool notice_closed = true;
    /// Impatient clients: load_options::client_timeout and offered_per_second.
    std::chrono::milliseconds client_timeout{0};
    double offered_per_second = 0.0;
};

/// `count` requests for queries near random corpus rows, each with
/// `extra_headers` (see make_request).
std::vector<std::string> make_requests(const tenferro::tensor& corpus, std::size_t count, std::int64_t k,
                                       std::uint64_t seed, std::string_view extra_headers = {});

/// One server (fresh tenferro backend, engine and HTTP server) under one load run.
trial_result run_trial(const tenferro::tensor& corpus, const std::vector<std::string>& requests,
                       const server_mode& mode, const trial_setup& setup);

}  // namespace embedding_search
