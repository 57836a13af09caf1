// The demo's printed results, a trial's JSON fields and the demo's report
// files (demo_report.hpp).

#include "demo_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string_view>
#include <utility>
#include <vector>

#include "demo_live.hpp"
#include "latency_histogram.hpp"

namespace fs = std::filesystem;

namespace embedding_search {

namespace {

void write_latency(json_writer& w, std::string_view key, const histogram_snapshot& h) {
    w.key(key).begin_object();
    w.field("count", h.total).field("p50", h.percentile_ms(0.5)).field("p90", h.percentile_ms(0.9));
    w.field("p99", h.percentile_ms(0.99)).field("p999", h.percentile_ms(0.999)).field("max", double(h.max_ns) / 1e6);
    w.end_object();
}

/// A tick label on the millisecond axis: "100 µs", "10 ms", "1 s".
std::string axis_label(double ms) {
    char text[32];
    if (ms >= 1000.0) {
        std::snprintf(text, sizeof text, "%g s", ms / 1000.0);
    } else if (ms < 1.0) {
        std::snprintf(text, sizeof text, "%g \u00b5s", ms * 1000.0);
    } else {
        std::snprintf(text, sizeof text, "%g ms", ms);
    }
    return text;
}

/// About how wide `text` is at font-size 12 (sans-serif averages below 7 px a
/// character): enough to keep labels apart and inside the picture.
double text_width(std::string_view text) { return 7.0 * double(text.size()); }

/// A small SVG bar chart of the latency distribution on a logarithmic axis,
/// with the p50 / p99 / p99.9 marks. Each mark's label goes right of its line,
/// or left of it where it would leave the picture, on the highest row where it
/// overlaps no other label: percentiles close together (p99 and p99.9 often
/// are) stack instead of writing over each other.
}  // namespace

std::string latency_svg(const histogram_snapshot& h, const std::string& title) {
    constexpr double width = 720, height = 300, left = 60, right = 40, top = 40, bottom = 50;
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
        // Centred under its tick, but kept inside the picture.
        const std::string label = axis_label(ms);
        const double half = text_width(label) / 2;
        const double tx = std::clamp(x_of(ms), half + 2, width - half - 2);
        std::snprintf(buf, sizeof buf,
                      "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"black\"/>"
                      "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n",
                      x_of(ms), top + plot_h, x_of(ms), top + plot_h + 5, tx, top + plot_h + 20, label.c_str());
        add(buf);
    }
    // The marks' lines first, then their labels over them (each on a white
    // ground, so a bar or another mark's line behind it does not hide it).
    struct placed {
        double x0, x1;
        int row;
    };
    std::vector<placed> taken;
    std::string labels;
    const std::pair<double, const char*> marks[] = {{0.5, "p50"}, {0.99, "p99"}, {0.999, "p99.9"}};
    for (const auto& [q, name] : marks) {
        const double ms = h.percentile_ms(q), x = x_of(ms);
        std::snprintf(buf, sizeof buf,
                      "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#c0392b\" "
                      "stroke-dasharray=\"4 3\"/>\n",
                      x, top, x, top + plot_h);
        add(buf);
        char text[64];
        std::snprintf(text, sizeof text, "%s %.2f ms", name, ms);
        const double w = text_width(text);
        const bool right_of_line = x + 4 + w <= width - 2;
        const double x0 = right_of_line ? x + 4 : x - 4 - w, x1 = x0 + w;
        int row = 0;
        for (bool clash = true; clash; row += clash ? 1 : 0) {
            clash = false;
            for (const placed& p : taken) clash = clash || (p.row == row && x0 < p.x1 + 6 && p.x0 < x1 + 6);
        }
        taken.push_back({x0, x1, row});
        const double y = top + 12 + 16 * row;
        std::snprintf(buf, sizeof buf,
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"15\" fill=\"white\" "
                      "fill-opacity=\"0.85\"/><text x=\"%.1f\" y=\"%.0f\" fill=\"#c0392b\">%s</text>\n",
                      x0 - 2, y - 11.5, w + 4, x0, y, text);
        labels += buf;
    }
    add(labels);
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">latency (log scale), %llu requests</text>\n",
                  left + plot_w / 2, height - 8, static_cast<unsigned long long>(h.total));
    add(buf);
    return svg + "</svg>\n";
}

namespace {

void print_latency_line(const char* label, const histogram_snapshot& h) {
    std::printf("  %-20s p50 %7.2f ms   p90 %7.2f ms   p99 %7.2f ms   p99.9 %7.2f ms\n", label, h.percentile_ms(0.5),
                h.percentile_ms(0.9), h.percentile_ms(0.99), h.percentile_ms(0.999));
}

}  // namespace

double requests_per_second(const load_result& r) { return r.seconds > 0 ? double(r.ok) / r.seconds : 0.0; }

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

void print_demo_results(const demo_options& o, const trial_result& t) {
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
        const search_hit served = i < t.sample_hits.size() ? t.sample_hits[i] : search_hit{~std::uint64_t{0}, 0.0f};
        std::printf("  %4zu  %10lld %10.6f   %10lld %10.6f\n", i + 1, static_cast<long long>(served.id),
                    double(served.score), static_cast<long long>(t.sample_reference[i].id),
                    double(t.sample_reference[i].score));
    }
    if (t.sample_check.ok) {
        std::printf("  matches the brute-force reference (max |score difference| %.1e)\n",
                    t.sample_check.max_score_error);
    } else {
        std::printf("  MISMATCH with the brute-force reference: %s\n", t.sample_check.detail.c_str());
    }
}

demo_report_files write_demo_report(const demo_options& o, const corpus_origin& origin, const std::string& corpus_path,
                                    const trial_result& t, const live_result* live) {
    json_writer w;
    w.begin_object();
    w.key("corpus").begin_object();
    w.field("rows", o.rows).field("dim", o.dim).field("seed", o.seed);
    w.field("source", origin.generated ? "generated" : "file")
        .field("path", origin.written || !origin.generated ? corpus_path : "");
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
    for (const auto& h : t.sample_hits) w.begin_object().field("id", h.id).field("score", h.score).end_object();
    w.end_array();
    w.key("reference").begin_array();
    for (const auto& h : t.sample_reference) w.begin_object().field("id", h.id).field("score", h.score).end_object();
    w.end_array();
    w.end_object();
    w.key("server_stats").raw(t.stats_json.empty() ? "null" : t.stats_json);
    if (live) {
        w.key("live");
        write_live_results(w, *live);
    }
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
    return {report_json, report_svg};
}

}  // namespace embedding_search
