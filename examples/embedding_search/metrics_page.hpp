#pragma once
// GET /metrics: the server's counters in the Prometheus text exposition format
// (version 0.0.4). Built from what the library already offers every user —
// `cpu_backend::stats()`, `batcher::stats()`, an `admission_observer` — and
// the server's own counters; the library itself knows nothing of Prometheus.
//
// The latency histograms are the server's log-linear ones (latency_histogram.hpp)
// re-binned onto Prometheus' conventional boundaries (5 ms ... 10 s, plus finer
// ones below 5 ms for a compute-bound service): a sample counts in the first
// boundary at or above its log-linear bucket's upper edge, so a bucket's count
// is exact to within that bucket's 6.25 % width, and never too low for its `le`.

#include <string>
#include <string_view>

#include "http_server.hpp"
#include "latency_histogram.hpp"
#include "search_engine.hpp"

namespace embedding_search {

/// Text exposition format 0.0.4: what `GET /metrics` answers with.
inline constexpr std::string_view prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

/// Writes families of samples, each with its HELP and TYPE lines.
class prometheus_writer {
public:
    /// Starts a family. `type` is counter, gauge or histogram.
    prometheus_writer& family(std::string_view name, std::string_view type, std::string_view help);
    /// One sample of the current family; `labels` is `key="value",...` (already escaped) or empty.
    prometheus_writer& sample(std::string_view name, std::string_view labels, double value);
    /// A histogram's `_bucket`, `_sum` and `_count` lines from a latency histogram, in seconds.
    prometheus_writer& histogram(std::string_view name, std::string_view labels, const histogram_snapshot& h);

    std::string take() { return std::move(out_); }

    /// Escapes a label value (backslash, double quote, newline).
    static std::string escape(std::string_view value);

private:
    std::string out_;
};

/// The whole /metrics page.
std::string render_metrics(search_engine& engine, const server_snapshot& server);

}  // namespace embedding_search
