// The tenants demo (demo_tenants.hpp).

#include "demo_tenants.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include "demo_progress.hpp"
#include "demo_report.hpp"
#include "demo_trial.hpp"
#include "json_writer.hpp"
#include "tenant_groups.hpp"

namespace tf = tenferro;
namespace fs = std::filesystem;

namespace embedding_search {

namespace {

struct variant_run {
    std::string name;  // "fifo" or "groups"
    trial_result trial;
};

double tenant_rps(const tenant_load& t, double seconds) { return seconds > 0 ? double(t.ok) / seconds : 0.0; }

void write_tenants(json_writer& w, const variant_run& v) {
    w.begin_object().field("variant", v.name);
    w.key("groups").begin_array();
    for (const tf::group_options& g : v.trial.mode.groups)
        w.begin_object().field("name", g.name).field("weight", g.weight).end_object();
    w.end_array();
    w.field("max_batch", v.trial.mode.max_batch).field("permits", v.trial.permits);
    w.field("seconds", v.trial.load.seconds);
    w.key("tenants").begin_array();
    for (const tenant_load& t : v.trial.load.tenants) {
        w.begin_object().field("name", t.name).field("connections", t.connections);
        w.field("requests", t.ok).field("requests_per_s", tenant_rps(t, v.trial.load.seconds));
        w.key("latency_ms").begin_object();
        w.field("p50", t.latency.percentile_ms(0.5)).field("p90", t.latency.percentile_ms(0.9));
        w.field("p99", t.latency.percentile_ms(0.99)).field("p999", t.latency.percentile_ms(0.999));
        w.field("max", double(t.latency.max_ns) / 1e6);
        w.end_object();
        w.field("shed_503", t.shed).field("errors", t.errors);
        w.end_object();
    }
    w.end_array();
    w.field("mean_batch", v.trial.mean_batch).field("permit_utilisation", v.trial.utilisation);
    w.key("healthz_ms").begin_object();
    w.field("p50", v.trial.load.healthz.percentile_ms(0.5)).field("p99", v.trial.load.healthz.percentile_ms(0.99));
    w.end_object();
    w.key("server_stats").raw(v.trial.stats_json.empty() ? "null" : v.trial.stats_json);
    w.end_object();
}

/// Bars of p50 and p99 per tenant and variant on a logarithmic axis, req/s
/// under each pair.
std::string tenants_svg(const std::vector<variant_run>& runs, const std::string& title) {
    constexpr double width = 760, height = 360, left = 70, right = 20, top = 50, bottom = 70;
    const double plot_w = width - left - right, plot_h = height - top - bottom;
    struct bar_group {
        std::string label;
        double p50, p99, rps;
    };
    std::vector<bar_group> bars;
    for (std::size_t t = 0; t < runs.front().trial.load.tenants.size(); ++t) {
        for (const variant_run& v : runs) {
            if (t >= v.trial.load.tenants.size()) continue;
            const tenant_load& tl = v.trial.load.tenants[t];
            bars.push_back({tl.name + " / " + v.name, tl.latency.percentile_ms(0.5), tl.latency.percentile_ms(0.99),
                            tenant_rps(tl, v.trial.load.seconds)});
        }
    }
    double lo = 1e9, hi = 0;
    for (const bar_group& b : bars) {
        lo = std::min(lo, std::max(b.p50, 1e-3));
        hi = std::max(hi, std::max(b.p99, 1e-3));
    }
    if (bars.empty()) lo = hi = 1;
    const double lo_decade = std::floor(std::log10(lo)), hi_decade = std::max(lo_decade + 1, std::ceil(std::log10(hi)));
    const auto y_of = [&](double ms) {
        const double f = (std::log10(std::max(ms, 1e-3)) - lo_decade) / (hi_decade - lo_decade);
        return top + plot_h * (1.0 - std::clamp(f, 0.0, 1.0));
    };
    std::string svg;
    char buf[600];
    std::snprintf(buf, sizeof buf,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                  "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" "
                  "y=\"22\" font-size=\"14\">%s</text>\n<text x=\"%.0f\" y=\"40\">p50 (light) and p99 (dark), "
                  "milliseconds, log scale; req/s under each</text>\n",
                  width, height, left, title.c_str(), left);
    svg += buf;
    for (double d = lo_decade; d <= hi_decade + 1e-9; d += 1) {
        const double y = y_of(std::pow(10.0, d));
        std::snprintf(buf, sizeof buf,
                      "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.0f\" "
                      "y=\"%.1f\" text-anchor=\"end\">%g ms</text>\n",
                      left, y, left + plot_w, y, left - 6, y + 4, std::pow(10.0, d));
        svg += buf;
    }
    const double slot = bars.empty() ? plot_w : plot_w / double(bars.size());
    for (std::size_t i = 0; i < bars.size(); ++i) {
        const bar_group& b = bars[i];
        const bool groups = b.label.find("groups") != std::string::npos;
        const char* light = groups ? "#9cc3e6" : "#f2b8a0";
        const char* dark = groups ? "#2e6da4" : "#c0392b";
        const double x = left + slot * double(i) + slot * 0.15, bw = slot * 0.35, base = top + plot_h;
        const std::pair<double, const char*> parts[] = {{b.p50, light}, {b.p99, dark}};
        for (int j = 0; j < 2; ++j) {
            const double y = y_of(parts[j].first);
            std::snprintf(buf, sizeof buf,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/><text x=\"%.1f\" "
                          "y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%.1f</text>\n",
                          x + bw * j, y, bw - 2, base - y, parts[j].second, x + bw * j + bw / 2 - 1, y - 3,
                          parts[j].first);
            svg += buf;
        }
        std::snprintf(buf, sizeof buf,
                      "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text><text x=\"%.1f\" y=\"%.0f\" "
                      "text-anchor=\"middle\">%.0f req/s</text>\n",
                      x + bw, base + 18, b.label.c_str(), x + bw, base + 34, b.rps);
        svg += buf;
    }
    std::snprintf(buf, sizeof buf, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", left,
                  top + plot_h, left + plot_w, top + plot_h);
    svg += buf;
    return svg + "</svg>\n";
}

}  // namespace

std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("model name", 0) == 0) {
            const std::size_t colon = line.find(':');
            if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
        }
    }
    return "unknown CPU";
}

int run_tenants_demo(const demo_options& o, const tf::tensor& corpus, const corpus_origin& origin,
                     const std::string& corpus_path) {
    const std::string cpu = cpu_model_name();
    std::printf("  tenants    bulk: %zu connections, interactive: %zu connections, %.0f s per variant (k = %lld)\n",
                o.bulk_connections, o.interactive_connections, o.duration_seconds, static_cast<long long>(o.k));
    std::printf("  server     %zu I/O thread%s, batches of up to %zu, compute workers at nice %d; %s\n",
                o.mode.io_threads, o.mode.io_threads == 1 ? "" : "s", o.mode.max_batch, o.mode.compute_nice,
                cpu.c_str());
    std::fflush(stdout);

    std::vector<variant_run> runs;
    for (const bool grouped : {false, true}) {
        server_mode mode = o.mode;
        mode.inline_compute = false;
        mode.groups.clear();
        // Under FIFO the requests carry no header: both tenants share the one queue.
        const auto header = [grouped](std::string_view name) {
            return grouped ? std::string(group_header) + ": " + std::string(name) + "\r\n" : std::string();
        };
        if (grouped) mode.groups = {{.name = "bulk", .weight = 1}, {.name = "interactive", .weight = 1}};
        trial_setup setup;
        setup.duration_seconds = o.duration_seconds;
        setup.k = o.k;
        setup.healthz_interval_ms = o.healthz_interval_ms;
        setup.seed = o.seed;
        setup.tenants = {
            {.name = "bulk",
             .connections = o.bulk_connections,
             .requests = make_requests(corpus, 512, o.k, o.seed, header("bulk"))},
            {.name = "interactive",
             .connections = o.interactive_connections,
             .requests = make_requests(corpus, 512, o.k, o.seed + 1, header("interactive"))},
        };
        progress_bar bar(o.progress);
        setup.progress = [&bar](const load_progress& p) { bar(p); };
        std::printf("  running    %s ...\n", grouped ? "groups bulk:1, interactive:1" : "FIFO (one queue)");
        std::fflush(stdout);
        trial_result t = run_trial(corpus, {}, mode, setup);
        bar.finish();
        runs.push_back({grouped ? "groups" : "fifo", std::move(t)});
    }

    std::printf("\n%-12s %5s | %28s | %28s\n", "", "", "FIFO (one queue)", "groups bulk:1, interactive:1");
    std::printf("%-12s %5s | %9s %9s %8s | %9s %9s %8s\n", "tenant", "conns", "p50 ms", "p99 ms", "req/s", "p50 ms",
                "p99 ms", "req/s");
    bool ok = true;
    for (std::size_t t = 0; t < runs[0].trial.load.tenants.size(); ++t) {
        const tenant_load& a = runs[0].trial.load.tenants[t];
        const tenant_load& b = runs[1].trial.load.tenants[t];
        std::printf("%-12s %5zu | %9.1f %9.1f %8.0f | %9.1f %9.1f %8.0f\n", a.name.c_str(), a.connections,
                    a.latency.percentile_ms(0.5), a.latency.percentile_ms(0.99),
                    tenant_rps(a, runs[0].trial.load.seconds), b.latency.percentile_ms(0.5),
                    b.latency.percentile_ms(0.99), tenant_rps(b, runs[1].trial.load.seconds));
        ok = ok && a.ok > 0 && b.ok > 0;
    }
    std::uint64_t errors = 0;
    for (const variant_run& v : runs) {
        errors += v.trial.load.errors;
        std::printf(
            "%-8s total %.0f req/s, mean batch %.1f, permit utilisation %.0f %%, /healthz p99 %.2f ms, "
            "503s %llu, errors %llu\n",
            v.name.c_str(), requests_per_second(v.trial.load), v.trial.mean_batch, 100.0 * v.trial.utilisation,
            v.trial.load.healthz.percentile_ms(0.99), static_cast<unsigned long long>(v.trial.load.shed),
            static_cast<unsigned long long>(v.trial.load.errors));
        for (const auto& e : v.trial.load.error_samples) std::printf("      %s\n", e.c_str());
    }

    json_writer w;
    w.begin_object().field("cpu", cpu);
    w.key("corpus").begin_object().field("rows", o.rows).field("dim", o.dim).field("seed", o.seed);
    w.field("source", origin.generated ? "generated" : "file").field("path", corpus_path).end_object();
    w.key("load").begin_object().field("duration_s", o.duration_seconds).field("k", o.k);
    w.field("bulk_connections", o.bulk_connections).field("interactive_connections", o.interactive_connections);
    w.end_object();
    w.key("variants").begin_array();
    for (const variant_run& v : runs) write_tenants(w, v);
    w.end_array().end_object();
    const fs::path json_path = fs::path(o.data_dir) / "embedding_search_tenants.json";
    const fs::path svg_path = fs::path(o.data_dir) / "embedding_search_tenants.svg";
    std::ofstream(json_path) << w.str() << '\n';
    std::ofstream(svg_path) << tenants_svg(runs, "tenferro-search demo --tenants: FIFO vs groups (" + cpu + ")");
    std::printf("\nreport: %s\n        %s\n", json_path.string().c_str(), svg_path.string().c_str());

    ok = ok && errors == 0;
    if (!ok) std::printf("\ndemo FAILED: %s\n", errors ? "errors during the load" : "a tenant was not served");
    return ok ? 0 : 1;
}

}  // namespace embedding_search
