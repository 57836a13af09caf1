// The routes of the search server and the /v1/stats body (search_routes.hpp).

#include "search_routes.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "http_server.hpp"
#include "json_writer.hpp"
#include "metrics_page.hpp"
#include "vector_requests.hpp"

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

/// 400 for an X-Tenferro-Group naming no group: the body lists the groups.
std::string unknown_group_body(const search_engine& engine, std::string_view asked) {
    std::string names;
    for (std::size_t g = 0; g < engine.groups(); ++g) names += (g ? ", " : "") + engine.group_name(g);
    // A hostile value is not echoed: only one that could be a group's name.
    const std::string message =
        (valid_group_name(asked) ? "unknown group '" + std::string(asked) + "'"
                                 : std::string("not a group name (1 to ") + std::to_string(max_group_name) +
                                       " characters of A-Z a-z 0-9 _ - .)") +
        "; the groups are: " + names;
    json_writer w;
    w.begin_object().key("error").begin_object();
    w.field("field", group_header).field("message", message);
    w.key("groups").begin_array();
    for (std::size_t g = 0; g < engine.groups(); ++g) w.value(engine.group_name(g));
    w.end_array().end_object().end_object();
    return w.take() + '\n';
}

/// 503 deadline_exceeded: what was missed, where, and the predicted wait.
std::string deadline_body(const search_engine& engine, std::size_t group, const search_outcome& out) {
    json_writer w;
    w.begin_object().key("error").begin_object();
    w.field("code", "deadline_exceeded").field("message", "deadline exceeded: " + out.error);
    w.field("group", engine.group_name(group)).field("stage", expiry_stage_names[std::size_t(out.stage)]);
    w.field("predicted_wait_ms", out.predicted_wait_seconds * 1e3);
    w.end_object().end_object();
    return w.take() + '\n';
}

}  // namespace

search_routes::search_routes(search_engine& engine, search_limits limits, const search_server& server)
    : engine_(engine), limits_(std::move(limits)), server_(server) {
    for (std::size_t g = 0; g < engine_.groups(); ++g) group_latency_.push_back(std::make_unique<latency_histogram>());
}

asio::awaitable<http_response> search_routes::handle(const http_request& request, clock_type::time_point received,
                                                     asio::cancellation_slot gone) {
    const std::string_view method = request.method, target = request.target;
    const std::string_view path = target.substr(0, target.find('?'));
    http_response r;
    if (path == "/v1/search") {
        if (method != "POST") {
            r.status = 405;
            r.allow = "POST";
            r.body = error_body("method", "use POST for /v1/search");
            co_return r;
        }
        r = co_await handle_search(request, received, gone);
        co_return r;
    }
    if (path == "/v1/vectors") {
        if (method != "PUT" && method != "DELETE") {
            r.status = 405;
            r.allow = "PUT, DELETE";
            r.body = error_body("method", "use PUT (upsert) or DELETE (erase) for /v1/vectors");
            co_return r;
        }
        r = co_await handle_write(request);
        co_return r;
    }
    if (path.starts_with("/v1/vectors/")) {
        if (method != "GET") {
            r.status = 405;
            r.allow = "GET";
            r.body = error_body("method", "use GET for " + std::string(path.substr(0, 64)));
            co_return r;
        }
        const std::optional<tf::row_id> id = parse_row_id(path.substr(std::string_view("/v1/vectors/").size()));
        if (!id) {
            r.status = 400;
            r.body = error_body("id", "expected an id: an integer in [0, 18446744073709551615]");
            co_return r;
        }
        std::optional<tf::stored_row> row = engine_.corpus().get(*id);
        if (!row) {
            r.status = 404;
            r.body = error_body("id", "no row has id " + std::to_string(*id));
            co_return r;
        }
        r.body = render_row(*row);
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

asio::awaitable<http_response> search_routes::handle_search(const http_request& request,
                                                            clock_type::time_point received,
                                                            asio::cancellation_slot gone) {
    http_response r;
    // The group: no header, the first one; a name matches exactly.
    std::size_t group = 0;
    if (request.has_tenant_group) {
        group = engine_.group_index(request.tenant_group);
        if (group == engine_.groups()) {
            r.status = 400;
            r.body = unknown_group_body(engine_, request.tenant_group);
            co_return r;
        }
    }
    std::int64_t timeout_ms = -1;  // none
    if (request.has_timeout_ms) {
        const auto parsed = parse_timeout_header(request.timeout_ms);
        if (!parsed) {
            r.status = 400;
            r.body = error_body(timeout_header, parsed.error());
            co_return r;
        }
        timeout_ms = *parsed;
    }
    auto query = parse_search_request(request.body, limits_);
    if (!query) {
        r.status = 400;
        r.body = render_field_error(query.error()) + '\n';
        co_return r;
    }
    // Both given: the shorter one (a proxy's header may tighten the client's body).
    if (query->timeout_ms >= 0)
        timeout_ms = timeout_ms < 0 ? query->timeout_ms : std::min(timeout_ms, query->timeout_ms);
    const auto deadline =
        timeout_ms < 0 ? clock_type::time_point::max() : received + std::chrono::milliseconds(timeout_ms);
    search_outcome out = co_await engine_.search(std::move(*query), group, deadline, gone);
    switch (out.status) {
    case search_status::ok: {
        json_writer w;
        w.begin_object().key("results").begin_array();
        for (const search_hit& h : out.hits) w.begin_object().field("id", h.id).field("score", h.score).end_object();
        w.end_array().field("seq", out.seq).end_object();
        r.body = w.take();
        r.body += '\n';
        const auto took = clock_type::now() - received;
        search_latency_.record(took);
        group_latency_[group]->record(took);
        break;
    }
    case search_status::expired:
        r.status = 503;
        r.retry_after = true;
        r.retry_after_seconds = retry_after_for(out.predicted_wait_seconds);
        r.body = deadline_body(engine_, group, out);
        break;
    case search_status::abandoned:
        // The client is gone: the connection drops this unwritten. (499 is
        // nginx's "client closed request", never sent.)
        r.status = 499;
        r.close = true;
        break;
    case search_status::shed:
        r.status = 503;
        r.retry_after = true;
        r.body = error_body("", out.patience ? out.error : "overloaded, retry later");
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

asio::awaitable<http_response> search_routes::handle_write(const http_request& request) {
    http_response r;
    const bool upsert = request.method == "PUT";
    tf::corpus_write w;
    if (upsert) {
        auto parsed = parse_upsert_request(request.body, engine_.dim());
        if (!parsed) {
            r.status = 400;
            r.body = render_field_error(parsed.error()) + '\n';
            co_return r;
        }
        w = std::move(*parsed);
    } else {
        auto parsed = parse_delete_request(request.body);
        if (!parsed) {
            r.status = 400;
            r.body = render_field_error(parsed.error()) + '\n';
            co_return r;
        }
        for (const tf::row_id id : *parsed) w.erase(id);
    }
    const tf::write_result result = co_await engine_.write(std::move(w));
    if (!result) {
        if (result.error.category() == tf::corpus_category()) {
            // The request's own parse refuses everything the corpus would: this is a bug, but the
            // client still learns which item.
            r.status = 400;
            r.body = render_field_error(
                         {(upsert ? "vectors[" : "ids[") + std::to_string(result.item) + "]", result.error.message()}) +
                     '\n';
        } else {
            // The disk failed (contract L7): nothing was applied.
            r.status = 507;
            json_writer e;
            e.begin_object().key("error").begin_object();
            e.field("code", "storage").field("message", "the write was not applied: " + result.error.message());
            e.end_object().end_object();
            r.body = e.take() + '\n';
        }
        co_return r;
    }
    json_writer ok;
    ok.begin_object();
    if (upsert)
        ok.field("upserted", std::uint64_t(result.upserted));
    else
        ok.field("deleted", std::uint64_t(result.erased));
    ok.field("seq", result.seq).end_object();
    r.body = ok.take() + '\n';
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
    // The live corpus (contract section 10): its rows, sequence number, segments, the rows awaiting
    // compaction, its log, compactions and the searches' counters.
    w.key("corpus").begin_object();
    w.field("rows", e.corpus.rows).field("dim", engine_.dim()).field("seq", e.corpus.seq);
    w.field("segments", e.corpus.segments).field("stored_rows", e.corpus.stored_rows);
    w.field("awaiting_compaction", e.corpus.uncompacted_rows + (e.corpus.stored_rows - e.corpus.rows));
    w.field("bytes", e.corpus.bytes).field("log_bytes", e.corpus.log_bytes).field("writes", e.corpus.writes);
    w.field("compactions", e.corpus.compactions).field("compactions_failed", e.compactions_failed);
    w.field("checkpoints", e.checkpoints).field("checkpoints_failed", e.checkpoints_failed);
    w.key("search").begin_object();
    w.field("queries", e.corpus.queries).field("filtered", e.corpus.filtered_queries);
    w.field("first_pass", e.corpus.first_pass).field("fallback", e.corpus.fallback);
    w.field("rows_scored", e.corpus.rows_scored);
    w.end_object();
    w.end_object();
    w.key("requests").begin_object();
    w.field("total", s.requests).field("keepalive_reused", s.keepalive_reused);
    w.key("responses").begin_object();
    for (const auto& [status, n] : s.responses) w.field(std::to_string(status), n);
    w.end_object();
    w.end_object();
    w.key("connections").begin_object();
    w.field("accepted", s.connections_accepted).field("open", s.connections_open);
    w.field("idle_timeouts", s.idle_timeouts).field("request_timeouts", s.request_timeouts);
    w.field("abandoned", s.abandoned);
    w.end_object();
    w.key("latency_ms").begin_object();
    write_histogram(w, "search", s.search_latency);
    write_histogram(w, "healthz", s.healthz_latency);
    w.end_object();
    w.key("admission").begin_object();
    w.field("permits", a.permits).field("available", a.available).field("waiting", a.waiting);
    w.field("admitted", a.admitted).field("completed", a.completed).field("rejected", a.rejected);
    w.field("cancelled", a.cancelled).field("stopped", a.stopped).field("expired", a.expired);
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
    w.key("abandoned").begin_object();
    w.field("waiting", e.abandoned_waiting).field("taken", e.abandoned_taken);
    w.end_object();
    w.field("stopped_batches", e.stopped_batches).field("stopped_queries", e.stopped_queries);
    w.key("patience").begin_object();
    w.field("enabled", e.patience_enabled).field("shed", e.patience_shed);
    w.field("close_ages", e.patience_samples).field("patience_ms", e.patience_seconds * 1e3);
    w.field("batch_fixed_ms", e.batch_fixed_seconds * 1e3);
    w.field("batch_per_query_ms", e.batch_per_query_seconds * 1e3);
    w.end_object();
    write_histogram(w, "compute_ms", e.batch_compute);
    w.end_object();
    // Per tenant group: the host's group_stats, then the server's own figures.
    w.key("groups").begin_array();
    for (std::size_t g = 0; g < e.groups.size(); ++g) {
        const group_snapshot& gs = e.groups[g];
        const tf::group_stats& ga = gs.admission;
        w.begin_object().field("name", gs.name).field("weight", ga.weight);
        w.key("admission").begin_object();
        w.field("waiting", ga.waiting).field("admitted", ga.admitted).field("completed", ga.completed);
        w.field("rejected", ga.rejected).field("cancelled", ga.cancelled).field("stopped", ga.stopped);
        w.field("expired", ga.expired);
        w.field("busy_permit_seconds", ga.busy_permit_seconds);
        w.end_object();
        w.field("requests", gs.requests).field("waiting", gs.waiting).field("shed", gs.shed);
        w.key("deadline_exceeded").begin_object();
        for (std::size_t i = 0; i < gs.expired.size(); ++i) w.field(expiry_stage_names[i], gs.expired[i]);
        w.end_object();
        w.field("batches", gs.batches).field("mean_batch_ms", gs.mean_batch_seconds * 1e3);
        w.field("predicted_wait_ms", gs.predicted_wait_seconds * 1e3);
        if (g < s.group_latency.size()) write_histogram(w, "latency_ms", s.group_latency[g]);
        w.end_object();
    }
    w.end_array();
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
