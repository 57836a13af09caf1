#include "demo.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <stdexcept>
#include <thread>

#include <simdjson.h>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "http_client.hpp"
#include "http_server.hpp"
#include "json_writer.hpp"
#include "load_generator.hpp"
#include "permit_usage.hpp"
#include "run_blocking.hpp"
#include "search_engine.hpp"

namespace tf = tenferro;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace embedding_search {

namespace {

asio::awaitable<http_reply> fetch(std::uint16_t port, std::string request) {
    http_client client(co_await asio::this_coro::executor);
    co_await client.connect("127.0.0.1", port);
    co_return co_await client.roundtrip(request);
}

std::size_t cores() { return std::max(1u, std::thread::hardware_concurrency()); }

std::string search_body(std::span<const float> vector, std::int64_t k) {
    json_writer w;
    w.begin_object().key("vector").begin_array();
    for (const float v : vector) w.value(v);
    w.end_array().field("k", k).end_object();
    return w.take();
}

/// `count` requests for queries near random corpus rows.
std::vector<std::string> make_requests(const tf::tensor& corpus, std::size_t count, std::int64_t k,
                                       std::uint64_t seed) {
    std::vector<std::string> requests;
    const std::int64_t rows = corpus.shape()[0];
    std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (std::size_t i = 0; i < count; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const auto row = std::int64_t((state >> 17) % std::uint64_t(rows));
        const std::vector<float> q = query_near_row(corpus, row, 0.5, seed + i);
        requests.push_back(make_request("POST", "/v1/search", search_body(q, k)));
    }
    return requests;
}

std::vector<search_hit> parse_hits(std::string_view body) {
    simdjson::dom::parser parser;
    std::vector<search_hit> hits;
    simdjson::dom::array results;
    if (parser.parse(body.data(), body.size())["results"].get_array().get(results)) return hits;
    for (const simdjson::dom::element e : results) {
        std::int64_t index = 0;
        double score = 0.0;
        if (e["index"].get_int64().get(index) || e["score"].get_double().get(score)) return {};
        hits.push_back({index, float(score)});
    }
    return hits;
}

struct trial_result {
    server_mode mode;
    std::size_t permits = 0;
    std::uint16_t port = 0;
    load_result load;
    histogram_snapshot admission_wait;
    double utilisation = 0.0;
    double mean_batch = 0.0;
    std::string stats_json;

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
};

/// One server (fresh tenferro backend, engine and HTTP server) under one load run.
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
    t.load = run_load(lo, setup.progress);
    const auto window_end = clock_type::now();
    const engine_snapshot after = engine.snapshot();

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

class progress_bar {
public:
    explicit progress_bar(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {}

    void operator()(const load_progress& p) {
        if (!enabled_) return;
        const double rate = p.elapsed_seconds > 0 ? double(p.ok) / p.elapsed_seconds : 0.0;
        if (tty_) {
            constexpr int width = 32;
            const int filled = std::clamp(int(width * p.elapsed_seconds / p.duration_seconds + 0.5), 0, width);
            std::fprintf(stderr, "\r  [%s%s] %4.1f / %.0f s  %7.0f req/s  503s %llu  errors %llu ",
                         std::string(std::size_t(filled), '#').c_str(),
                         std::string(std::size_t(width - filled), '.').c_str(), p.elapsed_seconds, p.duration_seconds,
                         rate, static_cast<unsigned long long>(p.shed), static_cast<unsigned long long>(p.errors));
            std::fflush(stderr);
            shown_ = true;
        } else if (p.elapsed_seconds >= next_line_) {
            std::fprintf(stderr, "  %4.1f / %.0f s  %7.0f req/s  503s %llu  errors %llu\n", p.elapsed_seconds,
                         p.duration_seconds, rate, static_cast<unsigned long long>(p.shed),
                         static_cast<unsigned long long>(p.errors));
            next_line_ += 2.0;
        }
    }
    void finish() {
        if (shown_) std::fputc('\n', stderr);
    }

private:
    bool enabled_, tty_;
    bool shown_ = false;
    double next_line_ = 0.0;
};

double requests_per_second(const load_result& r) { return r.seconds > 0 ? double(r.ok) / r.seconds : 0.0; }

void write_latency(json_writer& w, std::string_view key, const histogram_snapshot& h) {
    w.key(key).begin_object();
    w.field("count", h.total).field("p50", h.percentile_ms(0.5)).field("p90", h.percentile_ms(0.9));
    w.field("p99", h.percentile_ms(0.99)).field("p999", h.percentile_ms(0.999)).field("max", double(h.max_ns) / 1e6);
    w.end_object();
}

void write_mode(json_writer& w, const trial_result& t) {
    w.key("server").begin_object();
    w.field("mode", t.mode.inline_compute ? "inline" : "tenferro");
    w.field("io_threads", t.mode.io_threads).field("permits", t.permits);
    w.field("max_batch", t.mode.max_batch);
    if (!t.mode.inline_compute) w.field("max_waiters", t.mode.max_waiters).field("compute_nice", t.mode.compute_nice);
    w.end_object();
}

void write_results(json_writer& w, const trial_result& t) {
    w.key("results").begin_object();
    w.field("requests", t.load.ok).field("seconds", t.load.seconds);
    w.field("requests_per_s", requests_per_second(t.load));
    write_latency(w, "latency_ms", t.load.latency);
    w.key("admission_wait_ms").begin_object();
    w.field("p50", t.admission_wait.percentile_ms(0.5)).field("p99", t.admission_wait.percentile_ms(0.99));
    w.end_object();
    w.field("permit_utilisation", t.utilisation);
    w.field("mean_batch", t.mean_batch);
    w.field("shed_503", t.load.shed).field("errors", t.load.errors);
    w.key("error_samples").begin_array();
    for (const auto& e : t.load.error_samples) w.value(e);
    w.end_array();
    write_latency(w, "healthz_ms", t.load.healthz);
    w.field("healthz_errors", t.load.healthz_errors);
    w.end_object();
}

/// A small SVG bar chart of the latency distribution on a logarithmic axis,
/// with the p50 / p99 / p99.9 marks.
std::string latency_svg(const histogram_snapshot& h, const std::string& title) {
    constexpr double width = 720, height = 300, left = 60, right = 20, top = 40, bottom = 50;
    const double plot_w = width - left - right, plot_h = height - top - bottom;
    std::string svg;
    auto add = [&svg](const std::string& s) { svg += s; };
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                  "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
                  "fill=\"white\"/>\n<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s</text>\n",
                  width, height, left, title.c_str());
    add(buf);
    if (h.total == 0) return svg + "</svg>\n";

    // Decades from the smallest to the largest sample (milliseconds).
    double lo_ms = 1e9, hi_ms = 0;
    for (std::size_t i = 0; i < h.counts.size(); ++i) {
        if (!h.counts[i]) continue;
        const double ms = double(latency_histogram::upper_edge(int(i))) / 1e6;
        lo_ms = std::min(lo_ms, ms);
        hi_ms = std::max(hi_ms, ms);
    }
    const double lo_decade = std::floor(std::log10(std::max(lo_ms, 1e-3)));
    const double hi_decade = std::max(lo_decade + 1, std::ceil(std::log10(std::max(hi_ms, 1e-3))));
    constexpr int bins = 60;
    std::vector<std::uint64_t> counts(bins, 0);
    for (std::size_t i = 0; i < h.counts.size(); ++i) {
        if (!h.counts[i]) continue;
        const double ms = std::max(double(latency_histogram::upper_edge(int(i))) / 1e6, 1e-3);
        const int b = std::clamp(int((std::log10(ms) - lo_decade) / (hi_decade - lo_decade) * bins), 0, bins - 1);
        counts[std::size_t(b)] += h.counts[i];
    }
    const double peak = double(*std::max_element(counts.begin(), counts.end()));
    const auto x_of = [&](double ms) {
        return left + (std::log10(std::max(ms, 1e-3)) - lo_decade) / (hi_decade - lo_decade) * plot_w;
    };
    for (int b = 0; b < bins; ++b) {
        if (!counts[std::size_t(b)]) continue;
        const double bar_h = plot_h * double(counts[std::size_t(b)]) / peak;
        std::snprintf(buf, sizeof buf,
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#4a7ab5\"/>\n",
                      left + plot_w * b / bins, top + plot_h - bar_h, plot_w / bins - 1, bar_h);
        add(buf);
    }
    std::snprintf(buf, sizeof buf, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", left,
                  top + plot_h, left + plot_w, top + plot_h);
    add(buf);
    for (double d = lo_decade; d <= hi_decade + 1e-9; d += 1) {
        const double ms = std::pow(10.0, d);
        std::snprintf(buf, sizeof buf,
                      "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"black\"/>"
                      "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%g ms</text>\n",
                      x_of(ms), top + plot_h, x_of(ms), top + plot_h + 5, x_of(ms), top + plot_h + 20, ms);
        add(buf);
    }
    const std::pair<double, const char*> marks[] = {{0.5, "p50"}, {0.99, "p99"}, {0.999, "p99.9"}};
    int row = 0;
    for (const auto& [q, name] : marks) {
        const double ms = h.percentile_ms(q);
        std::snprintf(buf, sizeof buf,
                      "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#c0392b\" "
                      "stroke-dasharray=\"4 3\"/><text x=\"%.1f\" y=\"%.0f\" fill=\"#c0392b\">%s %.2f ms</text>\n",
                      x_of(ms), top, x_of(ms), top + plot_h, x_of(ms) + 4, top + 12 + 14 * row++, name, ms);
        add(buf);
    }
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">latency (log scale), %llu requests</text>\n",
                  left + plot_w / 2, height - 8, static_cast<unsigned long long>(h.total));
    add(buf);
    return svg + "</svg>\n";
}

fs::path self_path() {
    std::error_code ec;
    fs::path p = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return "tenferro-search";
    const fs::path relative = p.lexically_relative(fs::current_path(ec));
    return !ec && !relative.empty() && *relative.begin() != ".." ? relative : p;
}

std::string corpus_file(const std::string& dir, std::int64_t rows, std::int64_t dim, std::uint64_t seed) {
    return (fs::path(dir) / ("embedding-corpus-" + std::to_string(rows) + "x" + std::to_string(dim) + "-seed" +
                             std::to_string(seed) + ".npy"))
        .string();
}

tf::tensor load_corpus_for_demo(std::int64_t rows, std::int64_t dim, std::uint64_t seed, const std::string& path,
                                corpus_origin& origin) {
    corpus_source source;
    source.rows = rows;
    source.dim = dim;
    source.seed = seed;
    source.path = path;
    std::error_code ec;
    tf::cpu_backend generator(tf::cpu_backend_options{});  // every core, just for building the corpus
    if (!path.empty() && fs::exists(path, ec)) {
        try {
            tf::tensor corpus = run_blocking(obtain_corpus(generator, source, &origin));
            if (corpus.shape()[0] == rows && corpus.shape()[1] == dim) return corpus;
            std::printf("  (%s holds a %s corpus, not %lld x %lld: generating it again)\n", path.c_str(),
                        tf::to_string(corpus.shape()).c_str(), static_cast<long long>(rows),
                        static_cast<long long>(dim));
        } catch (const std::exception& e) {
            std::printf("  (%s: generating it again)\n", e.what());
        }
    }
    source.generate = true;
    return run_blocking(obtain_corpus(generator, source, &origin));
}

void print_latency_line(const char* label, const histogram_snapshot& h) {
    std::printf("  %-20s p50 %7.2f ms   p90 %7.2f ms   p99 %7.2f ms   p99.9 %7.2f ms\n", label, h.percentile_ms(0.5),
                h.percentile_ms(0.9), h.percentile_ms(0.99), h.percentile_ms(0.999));
}

}  // namespace

int run_demo(const demo_options& o) {
    std::error_code ec;
    fs::create_directories(o.data_dir, ec);
    const std::string path = corpus_file(o.data_dir, o.rows, o.dim, o.seed);

    std::printf("tenferro-search demo\n");
    corpus_origin origin;
    const tf::tensor corpus = load_corpus_for_demo(o.rows, o.dim, o.seed, path, origin);
    std::printf("  corpus     %lld x %lld f32, unit rows, seed %llu: %s in %.2f s%s%s\n",
                static_cast<long long>(o.rows), static_cast<long long>(o.dim), static_cast<unsigned long long>(o.seed),
                origin.generated ? "generated" : ("read from " + path).c_str(), origin.seconds,
                origin.written ? (", saved to " + path).c_str() : "",
                origin.note.empty() ? "" : (" (" + origin.note + ")").c_str());

    const std::vector<std::string> requests = make_requests(corpus, 512, o.k, o.seed);
    trial_setup setup;
    setup.connections = o.connections;
    setup.duration_seconds = o.duration_seconds;
    setup.k = o.k;
    setup.healthz_interval_ms = o.healthz_interval_ms;
    setup.seed = o.seed;
    setup.sample_query = true;
    progress_bar bar(o.progress);
    setup.progress = [&bar](const load_progress& p) { bar(p); };

    const std::size_t permits = backend_options_for(o.mode, nullptr).permits;
    std::printf(
        "  server     127.0.0.1 (ephemeral port), %s: %zu permit%s, %zu I/O thread%s, batches of up to %zu, "
        "queue bound %zu, compute workers at nice %d\n",
        o.mode.inline_compute ? "inline compute on the I/O threads" : "tenferro sessions", permits,
        permits == 1 ? "" : "s", o.mode.io_threads, o.mode.io_threads == 1 ? "" : "s",
        o.mode.inline_compute ? std::size_t{1} : o.mode.max_batch, o.mode.max_waiters,
        o.mode.inline_compute ? 0 : o.mode.compute_nice);
    std::printf("  load       %zu keep-alive connections for %.0f s (k = %lld), /healthz probed every %d ms\n",
                o.connections, o.duration_seconds, static_cast<long long>(o.k), o.healthz_interval_ms);
    std::fflush(stdout);

    const trial_result t = run_trial(corpus, requests, o.mode, setup);
    bar.finish();

    std::printf("\nresults (port %u)\n", unsigned(t.port));
    std::printf("  %-20s %llu in %.2f s = %.0f req/s\n", "requests", static_cast<unsigned long long>(t.load.ok),
                t.load.seconds, requests_per_second(t.load));
    print_latency_line("latency", t.load.latency);
    std::printf("  %-20s p50 %7.2f ms   p99 %7.2f ms\n", "admission wait", t.admission_wait.percentile_ms(0.5),
                t.admission_wait.percentile_ms(0.99));
    std::printf("  %-20s %.1f %% of %zu permits (mean batch %.1f queries per session)\n", "permit utilisation",
                100.0 * t.utilisation, t.permits, t.mean_batch);
    std::printf("  %-20s %llu\n", "503 (shed)", static_cast<unsigned long long>(t.load.shed));
    std::printf("  %-20s %llu\n", "errors", static_cast<unsigned long long>(t.load.errors));
    for (const auto& e : t.load.error_samples) std::printf("      %s\n", e.c_str());
    std::printf("  %-20s p50 %7.2f ms   p99 %7.2f ms   max %.2f ms (%llu probes, %llu failed)\n", "/healthz",
                t.load.healthz.percentile_ms(0.5), t.load.healthz.percentile_ms(0.99),
                double(t.load.healthz.max_ns) / 1e6, static_cast<unsigned long long>(t.load.healthz.total),
                static_cast<unsigned long long>(t.load.healthz_errors));

    std::printf("\nsample query: corpus row %lld plus noise, k = %lld\n", static_cast<long long>(t.sample_row),
                static_cast<long long>(o.k));
    std::printf("  %4s  %10s %10s   %10s %10s\n", "rank", "index", "score", "reference", "score");
    for (std::size_t i = 0; i < t.sample_reference.size(); ++i) {
        const search_hit served = i < t.sample_hits.size() ? t.sample_hits[i] : search_hit{-1, 0.0f};
        std::printf("  %4zu  %10lld %10.6f   %10lld %10.6f\n", i + 1, static_cast<long long>(served.index),
                    double(served.score), static_cast<long long>(t.sample_reference[i].index),
                    double(t.sample_reference[i].score));
    }
    if (t.sample_check.ok) {
        std::printf("  matches the brute-force reference (max |score difference| %.1e)\n",
                    t.sample_check.max_score_error);
    } else {
        std::printf("  MISMATCH with the brute-force reference: %s\n", t.sample_check.detail.c_str());
    }

    // The report files.
    json_writer w;
    w.begin_object();
    w.key("corpus").begin_object();
    w.field("rows", o.rows).field("dim", o.dim).field("seed", o.seed);
    w.field("source", origin.generated ? "generated" : "file")
        .field("path", origin.written || !origin.generated ? path : "");
    w.field("seconds", origin.seconds);
    w.end_object();
    write_mode(w, t);
    w.key("load").begin_object();
    w.field("connections", o.connections).field("duration_s", o.duration_seconds).field("k", o.k);
    w.field("healthz_interval_ms", o.healthz_interval_ms);
    w.end_object();
    write_results(w, t);
    w.key("sample_query").begin_object();
    w.field("row", t.sample_row).field("matches_reference", t.sample_check.ok);
    w.field("max_score_error", t.sample_check.max_score_error);
    w.key("results").begin_array();
    for (const auto& h : t.sample_hits) w.begin_object().field("index", h.index).field("score", h.score).end_object();
    w.end_array();
    w.key("reference").begin_array();
    for (const auto& h : t.sample_reference)
        w.begin_object().field("index", h.index).field("score", h.score).end_object();
    w.end_array();
    w.end_object();
    w.key("server_stats").raw(t.stats_json.empty() ? "null" : t.stats_json);
    w.end_object();

    const fs::path report_json = fs::path(o.data_dir) / "embedding_search_report.json";
    const fs::path report_svg = fs::path(o.data_dir) / "embedding_search_latency.svg";
    {
        std::ofstream(report_json) << w.str() << '\n';
        char title[160];
        std::snprintf(title, sizeof title, "tenferro-search: /v1/search latency, %zu connections, %.0f req/s",
                      o.connections, requests_per_second(t.load));
        std::ofstream(report_svg) << latency_svg(t.load.latency, title);
    }
    std::printf("\nreport: %s\n        %s\n", report_json.string().c_str(), report_svg.string().c_str());

    const std::string exe = self_path().string();
    std::printf("\nrun the server alone:\n");
    if (origin.written || !origin.generated) {
        std::printf("  %s --corpus %s --port 8080\n", exe.c_str(), path.c_str());
    } else {
        std::printf("  %s --generate %lld %lld --port 8080\n", exe.c_str(), static_cast<long long>(o.rows),
                    static_cast<long long>(o.dim));
    }
    std::printf("and query it from another shell:\n");
    std::printf("  curl -s localhost:8080/healthz\n");
    std::printf(
        "  python3 -c 'import json, random; print(json.dumps({\"vector\": [random.gauss(0, 1) for _ in "
        "range(%lld)], \"k\": 5}))' | curl -s -d @- localhost:8080/v1/search\n",
        static_cast<long long>(o.dim));
    std::printf("  curl -s localhost:8080/v1/stats\n");
    std::printf("(Ctrl-C drains the requests in flight and exits.)\n");

    const bool ok = t.load.errors == 0 && t.sample_check.ok && t.load.ok > 0;
    if (!ok) std::printf("\ndemo FAILED: %s\n", t.load.errors ? "errors during the load" : "the sample query");
    return ok ? 0 : 1;
}

namespace {

/// How late a thread sleeping 10 ms wakes up, p99 over `samples` sleeps (ms):
/// the floor that the machine's other load puts under any latency measured
/// here. An idle machine shows about 0.1 ms.
double wakeup_lateness_p99_ms(int samples = 200) {
    std::vector<double> late;
    for (int i = 0; i < samples; ++i) {
        const auto t = clock_type::now() + std::chrono::milliseconds(10);
        std::this_thread::sleep_until(t);
        late.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t).count());
    }
    std::sort(late.begin(), late.end());
    return late[std::size_t(0.99 * double(samples - 1))];
}

}  // namespace

int run_bench(const bench_options& o) {
    std::printf("tenferro-search bench: %zu connections, %.0f s per run, %d rounds, corpus %lld x %lld\n",
                o.connections, o.duration_seconds, o.rounds, static_cast<long long>(o.rows),
                static_cast<long long>(o.dim));
    corpus_origin origin;
    const tf::tensor corpus = load_corpus_for_demo(o.rows, o.dim, o.seed, "", origin);
    const std::vector<std::string> requests = make_requests(corpus, 512, o.k, o.seed);

    struct variant {
        std::string name;
        server_mode mode;
    };
    std::vector<variant> variants;
    server_mode tenferro_mode;
    tenferro_mode.io_threads = o.tenferro_io_threads;
    tenferro_mode.max_batch = o.max_batch;
    tenferro_mode.compute_nice = o.compute_nice;
    variants.push_back({"tenferro", tenferro_mode});
    if (o.max_batch > 1) {
        server_mode single = tenferro_mode;
        single.max_batch = 1;
        variants.push_back({"tenferro-batch1", single});
    }
    server_mode inline_mode;
    inline_mode.inline_compute = true;
    inline_mode.io_threads = o.inline_io_threads ? o.inline_io_threads : cores();
    variants.push_back({"inline", inline_mode});

    trial_setup setup;
    setup.connections = o.connections;
    setup.duration_seconds = o.duration_seconds;
    setup.k = o.k;
    setup.healthz_interval_ms = o.healthz_interval_ms;
    setup.seed = o.seed;

    const double floor_before = wakeup_lateness_p99_ms();
    std::printf("scheduler floor before the runs: a 10 ms sleep wakes up late by %.2f ms (p99)\n", floor_before);
    std::fflush(stdout);

    std::ofstream json_lines;
    if (!o.json_path.empty()) json_lines.open(o.json_path);
    std::map<std::string, std::vector<trial_result>> results;
    std::uint64_t errors = 0;
    // A B C A B C ...: drift on a shared machine hits every variant alike.
    for (int round = 0; round < o.rounds; ++round) {
        for (const variant& v : variants) {
            trial_result t = run_trial(corpus, requests, v.mode, setup);
            json_writer w;
            w.begin_object().field("variant", v.name).field("round", round);
            write_mode(w, t);
            write_results(w, t);
            w.end_object();
            std::printf("%s\n", w.str().c_str());
            std::fflush(stdout);
            if (json_lines) json_lines << w.str() << '\n';
            errors += t.load.errors;
            results[v.name].push_back(std::move(t));
        }
    }

    const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
    };
    std::printf("\n%-16s %10s %10s %10s %12s %12s %8s\n", "variant", "req/s", "p50 ms", "p99 ms", "healthz p50",
                "healthz p99", "503s");
    std::map<std::string, std::pair<double, double>> summary;  // req/s, p99
    std::map<std::string, double> healthz_p99;
    for (const variant& v : variants) {
        std::vector<double> rps, p50, p99, h50, h99;
        std::uint64_t shed = 0;
        for (const auto& t : results[v.name]) {
            rps.push_back(requests_per_second(t.load));
            p50.push_back(t.load.latency.percentile_ms(0.5));
            p99.push_back(t.load.latency.percentile_ms(0.99));
            h50.push_back(t.load.healthz.percentile_ms(0.5));
            h99.push_back(t.load.healthz.percentile_ms(0.99));
            shed += t.load.shed;
        }
        summary[v.name] = {median(rps), median(p99)};
        healthz_p99[v.name] = median(h99);
        std::printf("%-16s %10.0f %10.2f %10.2f %12.2f %12.2f %8llu\n", v.name.c_str(), median(rps), median(p50),
                    median(p99), median(h50), median(h99), static_cast<unsigned long long>(shed));
    }
    const auto& [tf_rps, tf_p99] = summary["tenferro"];
    const auto& [in_rps, in_p99] = summary["inline"];
    std::printf("\ntenferro / inline: req/s x%.2f, p99 x%.2f; /healthz p99 %.2f ms vs %.2f ms\n",
                in_rps > 0 ? tf_rps / in_rps : 0.0, in_p99 > 0 ? tf_p99 / in_p99 : 0.0, healthz_p99["tenferro"],
                healthz_p99["inline"]);
    const double floor_after = wakeup_lateness_p99_ms();
    std::printf("scheduler floor after the runs: %.2f ms (p99 wake-up lateness of a 10 ms sleep)\n", floor_after);
    const bool healthz_ok = healthz_p99["tenferro"] < 5.0;
    std::printf("/healthz p99 under 5 ms: tenferro %s, inline %s\n", healthz_ok ? "yes" : "NO",
                healthz_p99["inline"] < 5.0 ? "yes" : "no");
    if (errors) std::printf("errors during the runs: %llu\n", static_cast<unsigned long long>(errors));
    return errors == 0 ? 0 : 1;
}

}  // namespace embedding_search
