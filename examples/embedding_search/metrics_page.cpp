// GET /metrics (metrics_page.hpp).

#include "metrics_page.hpp"

#include <unistd.h>
#include <sys/resource.h>

#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tf = tenferro;

namespace embedding_search {

namespace {

std::string number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    // Integers print without exponent or fraction; others with enough digits to round-trip.
    if (v == std::floor(v) && std::fabs(v) < 1e15) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.0f", v);
        return buf;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

// Prometheus' default buckets (0.005 ... 10 s) with finer ones below 5 ms:
// a search on a warm corpus takes a few milliseconds, a health check microseconds.
constexpr std::array<double, 16> bucket_bounds_s = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                    0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};

/// What /proc says about this process: CPU seconds, resident and virtual bytes,
/// start time (seconds since the epoch), open and maximum descriptors.
struct process_basics {
    double cpu_seconds = 0, resident_bytes = 0, virtual_bytes = 0, start_time_seconds = 0;
    double open_fds = 0, max_fds = 0;
};

process_basics read_process_basics() {
    process_basics p;
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        p.cpu_seconds = double(ru.ru_utime.tv_sec) + double(ru.ru_stime.tv_sec) +
                        (double(ru.ru_utime.tv_usec) + double(ru.ru_stime.tv_usec)) / 1e6;
    }
    const double page = double(sysconf(_SC_PAGESIZE));
    if (std::ifstream statm("/proc/self/statm"); statm) {
        double size = 0, resident = 0;
        statm >> size >> resident;
        p.virtual_bytes = size * page;
        p.resident_bytes = resident * page;
    }
    // Start time: field 22 of /proc/self/stat (clock ticks after boot) plus the boot time.
    if (std::ifstream stat("/proc/self/stat"); stat) {
        std::string line;
        std::getline(stat, line);
        const auto close = line.rfind(')');
        if (close != std::string::npos) {
            std::istringstream rest(line.substr(close + 2));
            std::string field;
            for (int i = 3; i <= 22 && rest >> field; ++i) {
                if (i == 22) {
                    double btime = 0;
                    std::ifstream proc_stat("/proc/stat");
                    std::string key;
                    while (proc_stat >> key) {
                        if (key == "btime") {
                            proc_stat >> btime;
                            break;
                        }
                    }
                    p.start_time_seconds = btime + std::stod(field) / double(sysconf(_SC_CLK_TCK));
                }
            }
        }
    }
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        p.open_fds += 1;
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0) p.max_fds = double(limit.rlim_cur);
    return p;
}

/// Per tenant group: the host's group_stats (`tenferro_admission_group_*`,
/// labelled host and group) and the server's own figures
/// (`tenferro_search_group_*`, `tenferro_search_deadline_exceeded_total`).
void render_group_metrics(prometheus_writer& w, const engine_snapshot& e, const server_snapshot& s,
                          const std::string& host) {
    std::vector<std::string> labels, host_labels;
    for (const group_snapshot& g : e.groups) {
        labels.push_back("group=\"" + prometheus_writer::escape(g.name) + "\"");
        host_labels.push_back(host + "," + labels.back());
    }
    const auto per_group = [&](std::string_view name, std::string_view type, std::string_view help, bool with_host,
                               auto value) {
        w.family(name, type, help);
        for (std::size_t i = 0; i < e.groups.size(); ++i)
            w.sample(name, with_host ? host_labels[i] : labels[i], double(value(e.groups[i])));
    };
    using gs = const group_snapshot&;
    per_group("tenferro_admission_group_weight", "gauge", "A tenant group's weight.", true,
              [](gs g) { return g.admission.weight; });
    per_group("tenferro_admission_group_waiting", "gauge", "A group's entries queued for permits right now.", true,
              [](gs g) { return g.admission.waiting; });
    per_group("tenferro_admission_group_admitted_total", "counter", "A group's entries granted their permits.", true,
              [](gs g) { return g.admission.admitted; });
    per_group("tenferro_admission_group_completed_total", "counter", "A group's entries whose body finished.", true,
              [](gs g) { return g.admission.completed; });
    per_group("tenferro_admission_group_rejected_total", "counter",
              "A group's entries completed with an admission error other than cancelled.", true,
              [](gs g) { return g.admission.rejected; });
    per_group("tenferro_admission_group_cancelled_total", "counter",
              "A group's entries cancelled before their body started.", true,
              [](gs g) { return g.admission.cancelled; });
    per_group("tenferro_admission_group_stopped_total", "counter", "A group's bodies stopped while running (S20).",
              true, [](gs g) { return g.admission.stopped; });
    per_group("tenferro_admission_group_expired_total", "counter",
              "A group's entries completed with deadline_exceeded.", true, [](gs g) { return g.admission.expired; });
    per_group("tenferro_admission_group_busy_permit_seconds_total", "counter",
              "Permit-seconds held by a group's sessions.", true, [](gs g) { return g.admission.busy_permit_seconds; });
    per_group("tenferro_search_group_requests_total", "counter", "Searches submitted in a tenant group.", false,
              [](gs g) { return g.requests; });
    per_group("tenferro_search_group_shed_total", "counter",
              "Searches answered 503 at once: the group's batcher queue was full.", false, [](gs g) { return g.shed; });
    per_group("tenferro_search_group_waiting", "gauge", "Searches waiting in the group's batcher.", false,
              [](gs g) { return g.waiting; });
    per_group("tenferro_search_group_mean_batch_seconds", "gauge",
              "Moving mean of the group's batch-body durations (the wait prediction's unit).", false,
              [](gs g) { return g.mean_batch_seconds; });
    per_group("tenferro_search_group_predicted_wait_seconds", "gauge",
              "Wait predicted for a search arriving in the group now.", false,
              [](gs g) { return g.predicted_wait_seconds; });
    w.family("tenferro_search_deadline_exceeded_total", "counter",
             "Searches answered 503 deadline_exceeded, by group and by where the deadline was missed.");
    for (std::size_t i = 0; i < e.groups.size(); ++i) {
        for (std::size_t st = 0; st < expiry_stage_names.size(); ++st) {
            w.sample("tenferro_search_deadline_exceeded_total",
                     labels[i] + ",stage=\"" + std::string(expiry_stage_names[st]) + "\"",
                     double(e.groups[i].expired[st]));
        }
    }
    w.family("tenferro_search_group_request_duration_seconds", "histogram",
             "Request received to response ready, 200s of /v1/search, by tenant group.");
    for (std::size_t i = 0; i < e.groups.size() && i < s.group_latency.size(); ++i)
        w.histogram("tenferro_search_group_request_duration_seconds", labels[i], s.group_latency[i]);
}

}  // namespace

prometheus_writer& prometheus_writer::family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;  // (plain text without backslashes or newlines)
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
    return *this;
}

prometheus_writer& prometheus_writer::sample(std::string_view name, std::string_view labels, double value) {
    out_ += name;
    if (!labels.empty()) {
        out_ += '{';
        out_ += labels;
        out_ += '}';
    }
    out_ += ' ';
    out_ += number(value);
    out_ += '\n';
    return *this;
}

prometheus_writer& prometheus_writer::histogram(std::string_view name, std::string_view labels,
                                                const histogram_snapshot& h) {
    const std::string bucket = std::string(name) + "_bucket";
    const std::string prefix = labels.empty() ? std::string() : std::string(labels) + ",";
    std::size_t i = 0;
    std::uint64_t cumulative = 0;
    for (const double bound : bucket_bounds_s) {
        const auto bound_ns = static_cast<std::uint64_t>(bound * 1e9);
        while (i < h.counts.size() && latency_histogram::upper_edge(int(i)) <= bound_ns) cumulative += h.counts[i++];
        sample(bucket, prefix + "le=\"" + number(bound) + "\"", double(cumulative));
    }
    sample(bucket, prefix + "le=\"+Inf\"", double(h.total));
    sample(std::string(name) + "_sum", labels, double(h.sum_ns) / 1e9);
    sample(std::string(name) + "_count", labels, double(h.total));
    return *this;
}

std::string prometheus_writer::escape(std::string_view value) {
    std::string out;
    for (const char c : value) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::string render_metrics(search_engine& engine, const server_snapshot& s) {
    const engine_snapshot e = engine.snapshot();
    tf::cpu_backend& cpu = engine.backend();
    const tf::admission_stats a = cpu.stats();
    const std::string host = "host=\"" + prometheus_writer::escape(cpu.name()) + "\"";

    prometheus_writer w;
    // Admission, per host (the library's stats()).
    w.family("tenferro_admission_permits", "gauge", "Permits of the host.")
        .sample("tenferro_admission_permits", host, double(a.permits));
    w.family("tenferro_admission_available", "gauge", "Permits free right now.")
        .sample("tenferro_admission_available", host, double(a.available));
    w.family("tenferro_admission_waiting", "gauge", "Entries queued for permits right now.")
        .sample("tenferro_admission_waiting", host, double(a.waiting));
    w.family("tenferro_admission_admitted_total", "counter", "Entries granted their permits.")
        .sample("tenferro_admission_admitted_total", host, double(a.admitted));
    w.family("tenferro_admission_completed_total", "counter", "Entries whose body finished.")
        .sample("tenferro_admission_completed_total", host, double(a.completed));
    w.family("tenferro_admission_rejected_total", "counter",
             "Entries completed with an admission error other than cancelled.")
        .sample("tenferro_admission_rejected_total", host, double(a.rejected));
    w.family("tenferro_admission_cancelled_total", "counter", "Entries cancelled before their body started.")
        .sample("tenferro_admission_cancelled_total", host, double(a.cancelled));
    w.family("tenferro_admission_stopped_total", "counter", "Bodies stopped while running (S20).")
        .sample("tenferro_admission_stopped_total", host, double(a.stopped));
    w.family("tenferro_admission_expired_total", "counter", "Entries completed with deadline_exceeded.")
        .sample("tenferro_admission_expired_total", host, double(a.expired));
    w.family("tenferro_admission_busy_permit_seconds_total", "counter",
             "Permit-seconds held by running sessions (from an admission_observer).")
        .sample("tenferro_admission_busy_permit_seconds_total", host, e.busy_permit_seconds);
    w.family("tenferro_admission_wait_seconds", "histogram", "Search submitted to its batch's body started.")
        .histogram("tenferro_admission_wait_seconds", host, e.admission_wait);

    // The batcher (batcher::stats()).
    const tf::batch_stats& b = e.batcher;
    w.family("tenferro_batcher_submitted_total", "counter", "Items submitted to the batcher.")
        .sample("tenferro_batcher_submitted_total", "", double(b.submitted));
    w.family("tenferro_batcher_completed_total", "counter",
             "Items completed with their result or their batch's exception.")
        .sample("tenferro_batcher_completed_total", "", double(b.completed));
    w.family("tenferro_batcher_cancelled_total", "counter", "Items cancelled before being taken into a batch.")
        .sample("tenferro_batcher_cancelled_total", "", double(b.cancelled));
    w.family("tenferro_batcher_rejected_total", "counter", "Items completed with another admission error.")
        .sample("tenferro_batcher_rejected_total", "", double(b.rejected));
    w.family("tenferro_batcher_batches_total", "counter", "Batch sessions whose body ran.")
        .sample("tenferro_batcher_batches_total", "", double(b.batches));
    w.family("tenferro_batcher_largest_batch", "gauge", "Most items one batch body received.")
        .sample("tenferro_batcher_largest_batch", "", double(b.largest_batch));
    w.family("tenferro_batcher_waiting", "gauge", "Items submitted and not yet taken into a batch.")
        .sample("tenferro_batcher_waiting", "", double(b.waiting));
    w.family("tenferro_batch_compute_seconds", "histogram", "One batch's matmul and top_k.")
        .histogram("tenferro_batch_compute_seconds", "", e.batch_compute);

    // The live corpus (contract section 10).
    const auto corpus_gauge = [&](std::string_view name, std::string_view type, std::string_view help, double v) {
        w.family(name, type, help).sample(name, "", v);
    };
    const tf::corpus_stats& c = e.corpus;
    corpus_gauge("tenferro_corpus_rows", "gauge", "Live rows of the corpus.", double(c.rows));
    corpus_gauge("tenferro_corpus_seq", "gauge", "Sequence number of the last applied write.", double(c.seq));
    corpus_gauge("tenferro_corpus_segments", "gauge", "Segments holding the rows.", double(c.segments));
    corpus_gauge("tenferro_corpus_stored_rows", "gauge", "Rows stored, erased and replaced ones included.",
                 double(c.stored_rows));
    corpus_gauge("tenferro_corpus_awaiting_compaction_rows", "gauge",
                 "Rows outside the compacted segment plus erased rows still stored.",
                 double(c.uncompacted_rows + (c.stored_rows - c.rows)));
    corpus_gauge("tenferro_corpus_bytes", "gauge", "Memory held by the corpus's segments.", double(c.bytes));
    corpus_gauge("tenferro_corpus_log_bytes", "gauge", "Size of the write-ahead log.", double(c.log_bytes));
    corpus_gauge("tenferro_corpus_writes_total", "counter", "Writes applied.", double(c.writes));
    corpus_gauge("tenferro_corpus_compactions_total", "counter", "Compactions installed.", double(c.compactions));
    corpus_gauge("tenferro_corpus_compactions_failed_total", "counter", "Compaction sessions that did not finish.",
                 double(e.compactions_failed));
    corpus_gauge("tenferro_corpus_checkpoints_total", "counter", "Checkpoints written.", double(e.checkpoints));
    corpus_gauge("tenferro_corpus_checkpoints_failed_total", "counter", "Checkpoints that failed.",
                 double(e.checkpoints_failed));
    corpus_gauge("tenferro_corpus_queries_total", "counter", "Queries searched.", double(c.queries));
    corpus_gauge("tenferro_corpus_filtered_queries_total", "counter", "Queries with a filter.",
                 double(c.filtered_queries));
    corpus_gauge("tenferro_corpus_first_pass_total", "counter",
                 "Queries answered through the bf16 first pass on the compacted segment.", double(c.first_pass));
    corpus_gauge("tenferro_corpus_fallback_total", "counter", "Queries whose first pass fell back to f32.",
                 double(c.fallback));
    corpus_gauge("tenferro_corpus_rows_scored_total", "counter", "Rows scored in f32.", double(c.rows_scored));

    // The server.
    w.family("tenferro_search_shed_total", "counter", "Searches answered 503 at once: the batcher's queue was full.")
        .sample("tenferro_search_shed_total", "", double(e.shed));
    w.family("tenferro_search_rejected_total", "counter", "Searches completed with an admission error, by reason.");
    static constexpr std::array<std::string_view, 8> reasons = {
        "",         "reentered", "contended",        "incompatible_context", "resource_poisoned",
        "executor", "cancelled", "deadline_exceeded"};
    for (std::size_t i = 1; i < reasons.size(); ++i)
        w.sample("tenferro_search_rejected_total", "reason=\"" + std::string(reasons[i]) + "\"",
                 double(e.rejected_by_reason[i]));
    // Clients that left before their answer (server_options::notice_closed).
    w.family("tenferro_search_abandoned_total", "counter",
             "Searches whose client closed its connection before the answer, by where the query was: waiting "
             "(it left the queue, never computed) or taken (computed, or stopped with its batch).")
        .sample("tenferro_search_abandoned_total", "stage=\"waiting\"", double(e.abandoned_waiting))
        .sample("tenferro_search_abandoned_total", "stage=\"taken\"", double(e.abandoned_taken));
    w.family("tenferro_search_stopped_batches_total", "counter",
             "Batch bodies stopped inside their matmul because every query of the batch was gone (B7).")
        .sample("tenferro_search_stopped_batches_total", "", double(e.stopped_batches));
    w.family("tenferro_search_stopped_queries_total", "counter", "Queries held by the stopped batches.")
        .sample("tenferro_search_stopped_queries_total", "", double(e.stopped_queries));
    w.family("tenferro_search_patience_enabled", "gauge",
             "1 when the patience policy is on: a batch computes only the queries that can finish before their "
             "clients give up.")
        .sample("tenferro_search_patience_enabled", "", e.patience_enabled ? 1.0 : 0.0);
    w.family("tenferro_search_patience_shed_total", "counter",
             "Queries taken into a batch and answered 503 by the patience policy instead of computed.")
        .sample("tenferro_search_patience_shed_total", "", double(e.patience_shed));
    w.family("tenferro_search_patience_seconds", "gauge",
             "The clients' learned patience: a low quantile of the ages at which they left (0: not yet known).")
        .sample("tenferro_search_patience_seconds", "", e.patience_seconds);
    w.family("tenferro_search_patience_close_ages_total", "counter",
             "Ages of queries whose client left while they were pending, recorded for the patience estimate.")
        .sample("tenferro_search_patience_close_ages_total", "", double(e.patience_samples));
    w.family("tenferro_search_batch_cost_seconds", "gauge",
             "The learned batch cost model: seconds = fixed + queries x per_query (0: not yet known).")
        .sample("tenferro_search_batch_cost_seconds", "term=\"fixed\"", e.batch_fixed_seconds)
        .sample("tenferro_search_batch_cost_seconds", "term=\"per_query\"", e.batch_per_query_seconds);
    render_group_metrics(w, e, s, host);
    w.family("tenferro_http_requests_total", "counter", "HTTP responses sent, by status code.");
    for (const auto& [status, n] : s.responses)
        w.sample("tenferro_http_requests_total", "code=\"" + std::to_string(status) + "\"", double(n));
    w.family("tenferro_http_request_duration_seconds", "histogram", "Request received to response ready, by route.")
        .histogram("tenferro_http_request_duration_seconds", "route=\"/v1/search\"", s.search_latency)
        .histogram("tenferro_http_request_duration_seconds", "route=\"/healthz\"", s.healthz_latency);
    w.family("tenferro_http_connections_accepted_total", "counter", "Connections accepted.")
        .sample("tenferro_http_connections_accepted_total", "", double(s.connections_accepted));
    w.family("tenferro_http_connections_open", "gauge", "Connections open right now.")
        .sample("tenferro_http_connections_open", "", double(s.connections_open));
    w.family("tenferro_http_abandoned_total", "counter",
             "Requests whose client was found gone while they were answered: closed unanswered.")
        .sample("tenferro_http_abandoned_total", "", double(s.abandoned));
    w.family("tenferro_http_timeouts_total", "counter", "Connections closed by a timeout, by kind.")
        .sample("tenferro_http_timeouts_total", "kind=\"idle\"", double(s.idle_timeouts))
        .sample("tenferro_http_timeouts_total", "kind=\"request\"", double(s.request_timeouts));

    // Process basics, under the names Prometheus' client libraries use.
    const process_basics p = read_process_basics();
    w.family("process_cpu_seconds_total", "counter", "User and system CPU time spent in seconds.")
        .sample("process_cpu_seconds_total", "", p.cpu_seconds);
    w.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
        .sample("process_resident_memory_bytes", "", p.resident_bytes);
    w.family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.")
        .sample("process_virtual_memory_bytes", "", p.virtual_bytes);
    w.family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.")
        .sample("process_start_time_seconds", "", p.start_time_seconds);
    w.family("process_open_fds", "gauge", "Number of open file descriptors.")
        .sample("process_open_fds", "", p.open_fds);
    w.family("process_max_fds", "gauge", "Maximum number of open file descriptors.")
        .sample("process_max_fds", "", p.max_fds);
    return w.take();
}

}  // namespace embedding_search
