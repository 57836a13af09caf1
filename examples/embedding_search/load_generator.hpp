#pragma once
// A closed-loop HTTP load generator: `connections` keep-alive connections, each
// sending the next search request as soon as the previous answer arrives, for
// `duration`; plus one connection probing /healthz at a fixed interval, which
// shows whether the server's I/O threads stay responsive under the load.
// Connections may form several tenants, each with its own requests (e.g. its
// own X-Tenferro-Group header), measured apart.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "latency_histogram.hpp"

namespace embedding_search {

/// A set of connections sending their own requests, measured apart.
struct load_tenant {
    std::string name;
    std::size_t connections = 1;
    std::vector<std::string> requests;  ///< complete HTTP requests, sent round-robin
};

struct load_options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
    std::size_t connections = 256;
    std::chrono::duration<double> duration{10.0};
    std::vector<std::string> requests;  ///< complete HTTP requests, sent round-robin
    std::int64_t expected_results = 10;  ///< a 200 must carry exactly this many results, best first
    std::chrono::milliseconds healthz_interval{10};  ///< 0: no probe
    std::chrono::milliseconds progress_interval{100};
    /// Empty: one anonymous tenant of `connections` sending `requests`.
    /// Otherwise these, and `connections` and `requests` are ignored.
    std::vector<load_tenant> tenants;
    /// Impatient clients (`demo --impatient`; tenants are then ignored): each
    /// connection gives up on a search after this long without telling the
    /// server, closes the connection (a full close) and connects again for its
    /// next search. 0: every answer is waited for.
    std::chrono::milliseconds client_timeout{0};
    /// With client_timeout: searches per second offered by all the connections
    /// together, each connection sending on its own fixed schedule (one every
    /// connections / offered seconds, or at once when it is behind: a closed
    /// loop then). 0: a closed loop.
    double offered_per_second = 0.0;
};

/// What one tenant's connections measured.
struct tenant_load {
    std::string name;
    std::size_t connections = 0;
    std::uint64_t ok = 0, shed = 0, errors = 0;
    histogram_snapshot latency;  ///< client-side latency of its 200s
};

struct load_progress {
    double elapsed_seconds = 0.0, duration_seconds = 0.0;
    std::uint64_t ok = 0, shed = 0, errors = 0;
};

struct load_result {
    double seconds = 0.0;  ///< from the first request to the last answer (impatient: to the end of the load)
    std::uint64_t ok = 0;      ///< 200 with a well-formed result list
    std::uint64_t shed = 0;    ///< 503
    std::uint64_t errors = 0;  ///< anything else: other statuses, bad bodies, broken connections
    std::uint64_t connects = 0;
    std::uint64_t gave_up = 0;  ///< searches an impatient client gave up on (load_options::client_timeout)
    std::uint64_t sent = 0;     ///< searches sent
    std::vector<std::string> error_samples;  ///< the first few errors, for the report
    histogram_snapshot latency;              ///< client-side latency of the 200s
    histogram_snapshot healthz;              ///< client-side latency of the /healthz probes
    std::uint64_t healthz_errors = 0;
    std::vector<tenant_load> tenants;  ///< one per load_options::tenants (none without)
};

/// Runs the load on the calling thread (its own io_context) and returns when
/// every connection has received its last answer. `progress` is called every
/// `progress_interval` from that thread.
load_result run_load(const load_options& options, const std::function<void(const load_progress&)>& progress);

/// True when `body` is `{"results": [...]}` with `expected` entries, each an
/// object with an integer "id" and a numeric "score", scores non-increasing.
bool valid_search_response(std::string_view body, std::int64_t expected);

}  // namespace embedding_search
