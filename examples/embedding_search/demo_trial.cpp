// One trial of the demo and the benchmark, and the requests its load sends
// (demo_trial.hpp).

#include "demo_trial.hpp"

#include <sys/resource.h>
#include <sys/time.h>

#include <algorithm>
#include <memory>
#include <span>

#include <simdjson.h>
#include <asio/awaitable.hpp>
#include <asio/this_coro.hpp>

#include "http_client.hpp"
#include "http_server.hpp"
#include "json_writer.hpp"
#include "permit_usage.hpp"
#include "run_blocking.hpp"

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

namespace embedding_search {

namespace {

asio::awaitable<http_reply> fetch(std::uint16_t port, std::string request) {
    http_client client(co_await asio::this_coro::executor);
    co_await client.connect("127.0.0.1", port);
    co_return co_await client.roundtrip(request);
}

std::string search_body(std::span<const float> vector, std::int64_t k) {
    json_writer w;
    w.begin_object().key("vector").begin_array();
    for (const float v : vector) w.value(v);
    w.end_array().field("k", k).end_object();
    return w.take();
}

std::vector<search_hit> parse_hits(std::string_view body) {
    simdjson::dom::parser parser;
    std::vector<search_hit> hits;
    simdjson::dom::array results;
    if (parser.parse(body.data(), body.size())["results"].get_array().get(results)) return hits;
    for (const simdjson::dom::element e : results) {
        std::uint64_t id = 0;
        double score = 0.0;
        if (e["id"].get_uint64().get(id) || e["score"].get_double().get(score)) return {};
        hits.push_back({id, float(score)});
    }
    return hits;
}

struct cpu_times {
    double process = 0.0, thread = 0.0;  // user + system seconds
};

double seconds_of(const rusage& ru) {
    return double(ru.ru_utime.tv_sec) + double(ru.ru_stime.tv_sec) +
           (double(ru.ru_utime.tv_usec) + double(ru.ru_stime.tv_usec)) / 1e6;
}

cpu_times cpu_now() {
    cpu_times t;
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) == 0) t.process = seconds_of(ru);
    if (getrusage(RUSAGE_THREAD, &ru) == 0) t.thread = seconds_of(ru);
    return t;
}

}  // namespace

std::vector<std::string> make_requests(const tf::tensor& corpus, std::size_t count, std::int64_t k, std::uint64_t seed,
                                       std::string_view extra_headers) {
    std::vector<std::string> requests;
    const std::int64_t rows = corpus.shape()[0];
    std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (std::size_t i = 0; i < count; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const auto row = std::int64_t((state >> 17) % std::uint64_t(rows));
        const std::vector<float> q = query_near_row(corpus, row, 0.5, seed + i);
        requests.push_back(make_request("POST", "/v1/search", search_body(q, k), extra_headers));
    }
    return requests;
}

trial_result run_trial(const tf::tensor& corpus, const std::vector<std::string>& requests, const server_mode& mode,
                       const trial_setup& setup) {
    trial_result t;
    t.mode = mode;
    t.mode.io_threads = std::max<std::size_t>(1, mode.io_threads);

    auto usage = std::make_shared<permit_usage_observer>();
    tf::cpu_backend cpu(backend_options_for(mode, usage, std::size_t(corpus.size()) * sizeof(float)));
    const engine_options eo = engine_options_for(mode);
    t.mode.max_batch = eo.max_batch;
    search_engine engine(cpu, corpus, eo, usage);
    t.permits = cpu.permits();

    server_options so;
    so.port = 0;
    so.io_threads = t.mode.io_threads;
    so.notice_closed = setup.notice_closed;
    search_server server(engine, so);
    server.start();
    t.port = server.port();

    const engine_snapshot before = engine.snapshot();
    const auto window_start = clock_type::now();
    load_options lo;
    lo.port = server.port();
    lo.connections = setup.connections;
    lo.duration = std::chrono::duration<double>(setup.duration_seconds);
    lo.requests = requests;
    lo.expected_results = setup.k;
    lo.healthz_interval = std::chrono::milliseconds(setup.healthz_interval_ms);
    lo.tenants = setup.tenants;
    lo.client_timeout = setup.client_timeout;
    lo.offered_per_second = setup.offered_per_second;
    // The server's CPU time: the process's less this thread's, which runs the
    // load generator (and nothing else) meanwhile; the server's I/O threads,
    // its compute workers and the library's threads are the rest.
    const cpu_times cpu_before = cpu_now();
    t.load = run_load(lo, setup.progress);
    const cpu_times cpu_after = cpu_now();
    const auto window_end = clock_type::now();
    const engine_snapshot after = engine.snapshot();
    t.load_cpu_seconds = cpu_after.thread - cpu_before.thread;
    t.server_cpu_seconds = (cpu_after.process - cpu_before.process) - t.load_cpu_seconds;
    t.computed = after.batched_queries - before.batched_queries;
    t.batches = after.batches - before.batches;
    t.abandoned_waiting = after.abandoned_waiting - before.abandoned_waiting;
    t.abandoned_taken = after.abandoned_taken - before.abandoned_taken;
    t.stopped_batches = after.stopped_batches - before.stopped_batches;
    t.queue_head_age = after.queue_head_age.since(before.queue_head_age);
    t.patience_shed = after.patience_shed - before.patience_shed;
    t.patience_seconds = after.patience_seconds;

    t.admission_wait = after.admission_wait.since(before.admission_wait);
    const double window = std::chrono::duration<double>(window_end - window_start).count();
    t.utilisation = (after.busy_permit_seconds - before.busy_permit_seconds) / (double(t.permits) * window);
    const auto batches = after.batches - before.batches;
    t.mean_batch = batches ? double(after.batched_queries - before.batched_queries) / double(batches) : 0.0;

    if (setup.sample_query) {
        t.sample_ran = true;
        t.sample_row = corpus.shape()[0] / 3;
        const std::vector<float> q = query_near_row(corpus, t.sample_row, 0.5, setup.seed ^ 0xC0FFEEull);
        const http_reply reply =
            run_blocking(fetch(server.port(), make_request("POST", "/v1/search", search_body(q, setup.k))));
        t.sample_hits = parse_hits(reply.body);
        t.sample_reference = brute_force_top_k(corpus, q, setup.k);
        t.sample_check = compare_with_reference(corpus, q, t.sample_hits, t.sample_reference);
        if (reply.status != 200) t.sample_check.detail = "status " + std::to_string(reply.status) + ": " + reply.body;
    }
    t.stats_json = run_blocking(fetch(server.port(), make_request("GET", "/v1/stats"))).body;

    server.drain();
    server.wait();
    return t;
}

}  // namespace embedding_search
