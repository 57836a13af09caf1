// The routes of the search server and the /v1/stats body (search_routes.hpp).

#include "search_routes.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "http_server.hpp"
#include "json_writer.hpp"
#include "metrics_page.hpp"

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

namespace embedding_search {

namespace {

void write_histogram(json_writer& w, std::string_view name, const histogram_snapshot& h) {
    w.key(name).begin_object();
    w.field("count", h.total);
    w.field("p50", h.percentile_ms(0.50)).field("p90", h.percentile_ms(0.90));
    w.field("p99", h.percentile_ms(0.99)).field("p999", h.percentile_ms(0.999));
    w.field("max", double(h.max_ns) / 1e6);
    w.end_object();
}

}  // namespace

search_routes::search_routes(search_engine& engine, search_limits limits, const search_server& server)
    : engine_(engine), limits_(std::move(limits)), server_(server) {}

asio::awaitable<http_response> search_routes::handle(std::string_view method, std::string_view target,
                                                     std::string_view body, clock_type::time_point received) {
    const std::string_view path = target.substr(0, target.find('?'));
    http_response r;
    if (path == "/v1/search") {
        if (method != "POST") {
            r.status = 405;
            r.allow = "POST";
            r.body = error_body("method", "use POST for /v1/search");
            co_return r;
        }
        r = co_await handle_search(body);
        if (r.status == 200) search_latency_.record(clock_type::now() - received);
        co_return r;
    }
    if (path == "/metrics") {
        if (method != "GET") {
            r.status = 405;
            r.allow = "GET";
            r.body = error_body("method", "use GET for /metrics");
            co_return r;
        }
        r.body = render_metrics(engine_, server_.snapshot());
        r.content_type = prometheus_content_type;
        co_return r;
    }
    if (path == "/healthz" || path == "/v1/stats") {
        if (method != "GET") {
            r.status = 405;
            r.allow = "GET";
            r.body = error_body("method", "use GET for " + std::string(path));
            co_return r;
        }
        if (path == "/healthz") {
            r.body = "{\"status\":\"ok\"}\n";
            healthz_latency_.record(clock_type::now() - received);
        } else {
            r.body = stats_json();
        }
        co_return r;
    }
    r.status = 404;
    r.body = error_body("path", "no such resource: " + std::string(path));
    co_return r;
}

asio::awaitable<http_response> search_routes::handle_search(std::string_view body) {
    http_response r;
    auto query = parse_search_request(body, limits_);
    if (!query) {
        r.status = 400;
        r.body = render_field_error(query.error()) + '\n';
        co_return r;
    }
    search_outcome out = co_await engine_.search(std::move(*query));
    switch (out.status) {
    case search_status::ok: {
        json_writer w;
        w.begin_object().key("results").begin_array();
        for (const search_hit& h : out.hits)
            w.begin_object().field("index", h.index).field("score", h.score).end_object();
        w.end_array().end_object();
        r.body = w.take();
        r.body += '\n';
        break;
    }
    case search_status::shed:
        r.status = 503;
        r.retry_after = true;
        r.body = error_body("", "overloaded, retry later");
        break;
    case search_status::failed: {
        // The detail (an exception's what()) is the operator's, not the
        // client's: it goes to the log under an id the client also gets.
        static std::atomic<std::uint64_t> next_incident{1};
        const std::uint64_t incident = next_incident.fetch_add(1, std::memory_order_relaxed);
        std::fprintf(stderr, "tenferro-search: search failed (incident %llu): %s\n",
                     static_cast<unsigned long long>(incident), out.error.c_str());
        r.status = 500;
        r.body = error_body("", "internal error (incident " + std::to_string(incident) + ")");
        break;
    }
    }
    co_return r;
}

std::string search_routes::stats_json() const {
    const server_snapshot s = server_.snapshot();
    const engine_snapshot e = engine_.snapshot();
    tf::cpu_backend& cpu = engine_.backend();
    const tf::admission_stats a = cpu.stats();
    const tf::buffer_pool_stats pool = cpu.buffer_pool_stats();

    json_writer w;
    w.begin_object();
    w.field("uptime_s", s.uptime_seconds);
    w.field("mode", engine_.options().inline_compute ? "inline" : "tenferro");
    w.key("corpus").begin_object().field("rows", engine_.rows()).field("dim", engine_.dim()).end_object();
    w.key("requests").begin_object();
    w.field("total", s.requests).field("keepalive_reused", s.keepalive_reused);
    w.key("responses").begin_object();
    for (const auto& [status, n] : s.responses) w.field(std::to_string(status), n);
    w.end_object();
    w.end_object();
    w.key("connections").begin_object();
    w.field("accepted", s.connections_accepted).field("open", s.connections_open);
    w.field("idle_timeouts", s.idle_timeouts).field("request_timeouts", s.request_timeouts);
    w.end_object();
    w.key("latency_ms").begin_object();
    write_histogram(w, "search", s.search_latency);
    write_histogram(w, "healthz", s.healthz_latency);
    w.end_object();
    w.key("admission").begin_object();
    w.field("permits", a.permits).field("available", a.available).field("waiting", a.waiting);
    w.field("admitted", a.admitted).field("completed", a.completed).field("rejected", a.rejected);
    w.field("cancelled", a.cancelled);
    w.field("busy_permit_seconds", e.busy_permit_seconds);
    w.field("utilisation", s.uptime_seconds > 0 ? e.busy_permit_seconds / (double(a.permits) * s.uptime_seconds) : 0.0);
    write_histogram(w, "wait_ms", e.admission_wait);
    w.end_object();
    w.key("batching").begin_object();
    w.field("max_batch", engine_.options().max_batch).field("sessions", e.sessions).field("batches", e.batches);
    w.field("queries", e.batched_queries).field("largest", e.largest_batch).field("handed_over", e.handed_over);
    w.field("mean", e.batches ? double(e.batched_queries) / double(e.batches) : 0.0);
    w.field("max_delay_us", static_cast<std::int64_t>(engine_.options().max_delay.count()));
    w.key("batcher").begin_object();
    w.field("submitted", e.batcher.submitted).field("completed", e.batcher.completed);
    w.field("cancelled", e.batcher.cancelled).field("rejected", e.batcher.rejected);
    w.field("batches", e.batcher.batches).field("largest_batch", e.batcher.largest_batch);
    w.field("waiting", e.batcher.waiting).field("shed", e.shed);
    w.end_object();
    write_histogram(w, "compute_ms", e.batch_compute);
    w.end_object();
    const tf::cache_stats cache = cpu.default_cache().stats();
    w.key("runtime_cache").begin_object();
    w.field("entries", cache.entries).field("retained_bytes", cache.retained_bytes);
    w.field("hits", cache.hits).field("misses", cache.misses).field("evictions", cache.evictions);
    w.end_object();
    w.key("buffer_pool").begin_object();
    w.field("capacity_bytes", pool.capacity_bytes).field("retained_bytes", pool.retained_bytes);
    w.field("outstanding_bytes", pool.outstanding_bytes).field("allocations", pool.allocations);
    w.field("hits", pool.hits).field("misses", pool.misses).field("discarded", pool.discarded);
    w.end_object();
    w.end_object();
    std::string out = w.take();
    out += '\n';
    return out;
}

}  // namespace embedding_search
