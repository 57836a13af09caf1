// The impatient-clients demo (demo_impatient.hpp).

#include "demo_impatient.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>
#include <vector>

#include "demo_progress.hpp"
#include "demo_report.hpp"
#include "demo_tenants.hpp"
#include "demo_trial.hpp"
#include "json_writer.hpp"

namespace tf = tenferro;
namespace fs = std::filesystem;

namespace embedding_search {

namespace {

struct variant_run {
    std::string name;   // "keep", "stop" or "patient"
    std::string label;  // for people
    trial_result trial;

    double seconds() const { return trial.load.seconds > 0 ? trial.load.seconds : 1.0; }
    double delivered_per_s() const { return double(trial.load.ok) / seconds(); }
    double offered_per_s() const { return double(trial.load.sent) / seconds(); }
    double computed_per_s() const { return double(trial.computed) / seconds(); }
    /// Computed answers no client received: every delivered answer was
    /// computed, so the rest of the computed ones went to clients that had left.
    double unreceived_share() const {
        return trial.computed
                   ? double(trial.computed - std::min(trial.computed, trial.load.ok)) / double(trial.computed)
                   : 0.0;
    }
    /// Queries scored per batch body that was not stopped (a stopped one scores none).
    double computed_per_batch() const {
        const std::uint64_t ran = trial.batches - std::min(trial.batches, trial.stopped_batches);
        return ran ? double(trial.computed) / double(ran) : 0.0;
    }
    /// Infinite when nothing was delivered (null in the JSON).
    double cpu_ms_per_delivered() const {
        return trial.load.ok ? 1e3 * trial.server_cpu_seconds / double(trial.load.ok)
                             : std::numeric_limits<double>::infinity();
    }
};

void write_variant(json_writer& w, const variant_run& v) {
    const trial_result& t = v.trial;
    w.begin_object().field("variant", v.name).field("notice_closed", v.name != "keep");
    w.field("patience", v.name == "patient");
    w.field("seconds", t.load.seconds);
    w.field("sent", t.load.sent).field("offered_per_s", v.offered_per_s());
    w.field("delivered_in_time", t.load.ok).field("delivered_in_time_per_s", v.delivered_per_s());
    w.field("gave_up", t.load.gave_up).field("shed_503", t.load.shed).field("errors", t.load.errors);
    w.field("connects", t.load.connects);
    w.field("computed", t.computed).field("computed_per_s", v.computed_per_s());
    w.field("computed_unreceived_share", v.unreceived_share());
    w.field("server_cpu_s", t.server_cpu_seconds).field("load_generator_cpu_s", t.load_cpu_seconds);
    w.field("server_cpu_ms_per_delivered", v.cpu_ms_per_delivered());
    w.field("abandoned_waiting", t.abandoned_waiting).field("abandoned_taken", t.abandoned_taken);
    w.field("batches", t.batches).field("stopped_batches", t.stopped_batches);
    w.field("queries_per_completed_batch", v.computed_per_batch()).field("permit_utilisation", t.utilisation);
    w.field("patience_shed", t.patience_shed).field("patience_shed_per_s", double(t.patience_shed) / v.seconds());
    w.field("learned_patience_ms", t.patience_seconds * 1e3);
    w.key("queue_head_age_ms").begin_object();
    w.field("count", t.queue_head_age.total).field("p50", t.queue_head_age.percentile_ms(0.5));
    w.field("p90", t.queue_head_age.percentile_ms(0.9)).field("p99", t.queue_head_age.percentile_ms(0.99));
    w.field("max", double(t.queue_head_age.max_ns) / 1e6);
    w.end_object();
    w.key("delivered_latency_ms").begin_object();
    w.field("p50", t.load.latency.percentile_ms(0.5)).field("p99", t.load.latency.percentile_ms(0.99));
    w.end_object();
    w.key("error_samples").begin_array();
    for (const auto& e : t.load.error_samples) w.value(e);
    w.end_array();
    w.key("server_stats").raw(t.stats_json.empty() ? "null" : t.stats_json);
    w.end_object();
}

std::string escape_xml(std::string_view s) {
    std::string out;
    for (const char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

/// Four panels side by side, one figure each, a bar per variant (the server
/// that keeps abandoned searches, the one that stops them, the one that also
/// serves by patience), each bar's value
/// above it: linear scales from 0, so the bars compare by length.
std::string impatient_svg(const std::vector<variant_run>& runs, const std::string& title, const std::string& subtitle) {
    constexpr double width = 900, height = 380, left = 20, right = 20, top = 92, bottom = 64, gap = 36;
    struct panel {
        const char* name;
        const char* unit;
        double (*value)(const variant_run&);
        const char* format;
    };
    const panel panels[] = {
        {"delivered in time", "answers/s", [](const variant_run& v) { return v.delivered_per_s(); }, "%.0f"},
        {"computed for no one", "% of computed answers",
         [](const variant_run& v) { return 100.0 * v.unreceived_share(); }, "%.1f %%"},
        {"CPU per delivered answer", "server CPU ms", [](const variant_run& v) { return v.cpu_ms_per_delivered(); },
         "%.2f"},
        {"queue head's age", "ms when served, p50",
         [](const variant_run& v) { return v.trial.queue_head_age.percentile_ms(0.5); }, "%.0f"},
    };
    constexpr int n_panels = int(std::size(panels));
    const double panel_w = (width - left - right - gap * (n_panels - 1)) / n_panels, plot_h = height - top - bottom;
    const char* colours[] = {"#c0392b", "#7f8c8d", "#2e6da4"};
    const std::size_t shown = std::min<std::size_t>(runs.size(), std::size(colours));
    std::string svg;
    char buf[800];
    std::snprintf(buf, sizeof buf,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                  "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" "
                  "y=\"22\" font-size=\"14\">%s</text>\n<text x=\"%.0f\" y=\"40\">%s</text>\n",
                  width, height, left, escape_xml(title).c_str(), left, escape_xml(subtitle).c_str());
    svg += buf;
    // The legend: one swatch per variant.
    double lx = left;
    for (std::size_t i = 0; i < shown; ++i) {
        std::snprintf(buf, sizeof buf,
                      "<rect x=\"%.0f\" y=\"50\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" "
                      "y=\"60\">%s</text>\n",
                      lx, colours[i], lx + 16, escape_xml(runs[i].label).c_str());
        svg += buf;
        lx += 24 + 6.0 * double(runs[i].label.size());
    }
    for (int p = 0; p < n_panels; ++p) {
        const double x0 = left + p * (panel_w + gap), base = top + plot_h;
        double hi = 0;
        for (const variant_run& v : runs) {
            if (std::isfinite(panels[p].value(v))) hi = std::max(hi, panels[p].value(v));
        }
        if (hi <= 0) hi = 1;
        hi *= 1.18;  // room for the value over the tallest bar
        const double slot = panel_w / double(std::max<std::size_t>(1, shown)), bar_w = slot * 0.62;
        for (std::size_t i = 0; i < shown; ++i) {
            const double value = panels[p].value(runs[i]);
            const double x = x0 + slot * double(i) + (slot - bar_w) / 2;
            char text[64];
            if (!std::isfinite(value)) {
                // Infinite (nothing delivered): an empty bar to the top, so it
                // is not read as the cheaper of the two.
                std::snprintf(buf, sizeof buf,
                              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                              "stroke=\"%s\" stroke-dasharray=\"5 3\"/><text x=\"%.1f\" y=\"%.1f\" "
                              "text-anchor=\"middle\">\u221e</text><text x=\"%.1f\" y=\"%.1f\" "
                              "text-anchor=\"middle\" font-size=\"10\">none</text><text x=\"%.1f\" y=\"%.1f\" "
                              "text-anchor=\"middle\" font-size=\"10\">delivered</text>\n",
                              x, top, bar_w, plot_h, colours[i], x + bar_w / 2, top - 5, x + bar_w / 2,
                              top + plot_h / 2, x + bar_w / 2, top + plot_h / 2 + 12);
                svg += buf;
                continue;
            }
            const double h = plot_h * value / hi;
            std::snprintf(text, sizeof text, panels[p].format, value);
            std::snprintf(buf, sizeof buf,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/><text x=\"%.1f\" "
                          "y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                          x, base - h, bar_w, h, colours[i], x + bar_w / 2, base - h - 5, text);
            svg += buf;
        }
        std::snprintf(buf, sizeof buf,
                      "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"black\"/>\n<text x=\"%.1f\" "
                      "y=\"%.0f\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>\n<text x=\"%.1f\" y=\"%.0f\" "
                      "text-anchor=\"middle\">%s</text>\n",
                      x0, base, x0 + panel_w, base, x0 + panel_w / 2, base + 20, panels[p].name, x0 + panel_w / 2,
                      base + 36, panels[p].unit);
        svg += buf;
    }
    return svg + "</svg>\n";
}

}  // namespace

int run_impatient_demo(const demo_options& o, const tf::tensor& corpus, const corpus_origin& origin,
                       const std::string& corpus_path) {
    const std::string cpu = cpu_model_name();
    const std::vector<std::string> requests = make_requests(corpus, 512, o.k, o.seed);
    server_mode mode = o.mode;
    mode.inline_compute = false;

    // Capacity, as the plain demo measures it: patient keep-alive connections
    // in a closed loop, so that the server is never idle (no client leaves:
    // the patience policy has nothing to learn and is left off).
    trial_setup patient;
    patient.connections = o.connections;
    patient.duration_seconds = o.capacity_seconds;
    patient.k = o.k;
    patient.healthz_interval_ms = 0;
    patient.seed = o.seed;
    std::printf("  capacity   %zu patient keep-alive connections, closed loop, %.0f s ...\n", o.connections,
                o.capacity_seconds);
    std::fflush(stdout);
    server_mode capacity_mode = mode;
    capacity_mode.patience = false;
    const trial_result capacity_run = run_trial(corpus, requests, capacity_mode, patient);
    const double capacity = requests_per_second(capacity_run.load);
    // Each connection has one search out at a time and gives up on it after
    // the timeout: together they cannot send more than this once they all
    // give up (the load generator's schedule then runs late).
    const double most = double(o.connections) * 1e3 / double(o.client_timeout_ms);
    const double offered = std::min(o.overload * capacity, most);
    std::printf("             %.0f req/s (p50 %.1f ms, p99 %.1f ms, mean batch %.1f)\n", capacity,
                capacity_run.load.latency.percentile_ms(0.5), capacity_run.load.latency.percentile_ms(0.99),
                capacity_run.mean_batch);
    std::printf(
        "  load       %zu impatient connections offering %.0f searches/s (%.2fx capacity%s) for %.0f s per "
        "variant;\n"
        "             each gives up after %d ms without telling the server, closes and reconnects; %s\n",
        o.connections, offered, capacity > 0 ? offered / capacity : 0.0,
        offered < o.overload * capacity ? ", capped by connections / timeout: give a larger --rows for more" : "",
        o.duration_seconds, o.client_timeout_ms, cpu.c_str());
    std::fflush(stdout);

    struct variant {
        const char* name;
        bool notice, patience;
        const char* label;
    };
    const variant variants[] = {
        {"keep", false, false, "keeps abandoned searches (--keep-abandoned)"},
        {"stop", true, false, "stops abandoned, FIFO (--no-patience)"},
        {"patient", true, true, "stops abandoned + patience (default)"},
    };
    std::vector<variant_run> runs;
    for (const variant& v : variants) {
        trial_setup setup;
        setup.connections = o.connections;
        setup.duration_seconds = o.duration_seconds;
        setup.k = o.k;
        setup.healthz_interval_ms = 0;
        setup.seed = o.seed;
        setup.notice_closed = v.notice;
        setup.client_timeout = std::chrono::milliseconds(o.client_timeout_ms);
        setup.offered_per_second = offered;
        server_mode variant_mode = mode;
        variant_mode.patience = v.patience;
        progress_bar bar(o.progress);
        setup.progress = [&bar](const load_progress& p) { bar(p); };
        std::printf("  running    %s ...\n", v.label);
        std::fflush(stdout);
        trial_result t = run_trial(corpus, requests, variant_mode, setup);
        bar.finish();
        runs.push_back({v.name, v.label, std::move(t)});
    }
    const variant_run& keep = runs[0];
    const variant_run& stop = runs[1];
    const variant_run& pat = runs[2];

    std::printf("\n%-42s %12s %12s %12s %9s\n", "", "keep", "stop (FIFO)", "patience", "pat/keep");
    const auto row = [](const char* what, double a, double b, double c, const char* format) {
        char x[3][32];
        const double v[3] = {a, b, c};
        for (int i = 0; i < 3; ++i) {
            if (std::isfinite(v[i])) {
                std::snprintf(x[i], sizeof x[i], format, v[i]);
            } else {
                std::snprintf(x[i], sizeof x[i], "none deliv.");
            }
        }
        if (a > 0 && std::isfinite(a) && std::isfinite(c)) {
            std::printf("%-42s %12s %12s %12s %8.2fx\n", what, x[0], x[1], x[2], c / a);
        } else {
            std::printf("%-42s %12s %12s %12s %9s\n", what, x[0], x[1], x[2], "-");
        }
    };
    const auto per_s = [](const variant_run& v, std::uint64_t n) { return double(n) / v.seconds(); };
    row("searches sent /s", keep.offered_per_s(), stop.offered_per_s(), pat.offered_per_s(), "%.0f");
    row("  sent / capacity", keep.offered_per_s() / capacity, stop.offered_per_s() / capacity,
        pat.offered_per_s() / capacity, "%.2f");
    row("answers delivered in time /s", keep.delivered_per_s(), stop.delivered_per_s(), pat.delivered_per_s(), "%.0f");
    row("given up by the client /s", per_s(keep, keep.trial.load.gave_up), per_s(stop, stop.trial.load.gave_up),
        per_s(pat, pat.trial.load.gave_up), "%.0f");
    row("503 received /s", per_s(keep, keep.trial.load.shed), per_s(stop, stop.trial.load.shed),
        per_s(pat, pat.trial.load.shed), "%.0f");
    row("  shed by the patience policy /s", per_s(keep, keep.trial.patience_shed),
        per_s(stop, stop.trial.patience_shed), per_s(pat, pat.trial.patience_shed), "%.0f");
    row("answers computed /s", keep.computed_per_s(), stop.computed_per_s(), pat.computed_per_s(), "%.0f");
    row("computed answers no client received (%)", 100.0 * keep.unreceived_share(), 100.0 * stop.unreceived_share(),
        100.0 * pat.unreceived_share(), "%.1f");
    row("server CPU per delivered answer (ms)", keep.cpu_ms_per_delivered(), stop.cpu_ms_per_delivered(),
        pat.cpu_ms_per_delivered(), "%.3f");
    row("server CPU (s)", keep.trial.server_cpu_seconds, stop.trial.server_cpu_seconds, pat.trial.server_cpu_seconds,
        "%.2f");
    row("queue head's age when served, p50 (ms)", keep.trial.queue_head_age.percentile_ms(0.5),
        stop.trial.queue_head_age.percentile_ms(0.5), pat.trial.queue_head_age.percentile_ms(0.5), "%.1f");
    row("queue head's age when served, p99 (ms)", keep.trial.queue_head_age.percentile_ms(0.99),
        stop.trial.queue_head_age.percentile_ms(0.99), pat.trial.queue_head_age.percentile_ms(0.99), "%.1f");
    row("delivered answers' latency, p50 (ms)", keep.trial.load.latency.percentile_ms(0.5),
        stop.trial.load.latency.percentile_ms(0.5), pat.trial.load.latency.percentile_ms(0.5), "%.1f");
    row("queries per batch that ran to its end", keep.computed_per_batch(), stop.computed_per_batch(),
        pat.computed_per_batch(), "%.1f");
    row("abandoned while waiting", double(keep.trial.abandoned_waiting), double(stop.trial.abandoned_waiting),
        double(pat.trial.abandoned_waiting), "%.0f");
    row("abandoned after being taken", double(keep.trial.abandoned_taken), double(stop.trial.abandoned_taken),
        double(pat.trial.abandoned_taken), "%.0f");
    row("batches stopped (every query gone)", double(keep.trial.stopped_batches), double(stop.trial.stopped_batches),
        double(pat.trial.stopped_batches), "%.0f");
    std::printf("learned patience (ms): %.1f (the clients' timeout: %d ms)\n", pat.trial.patience_seconds * 1e3,
                o.client_timeout_ms);

    const variant_run& stop_variant = pat;  // the default server, against the baseline
    const double delivered_ratio =
        keep.delivered_per_s() > 0 ? stop_variant.delivered_per_s() / keep.delivered_per_s() : 0.0;
    const double cpu_ratio =
        keep.cpu_ms_per_delivered() > 0 ? stop_variant.cpu_ms_per_delivered() / keep.cpu_ms_per_delivered() : 0.0;
    const bool delivered_target =
        keep.delivered_per_s() > 0 ? delivered_ratio >= 1.5 : stop_variant.delivered_per_s() > 0;
    const bool cpu_target = keep.cpu_ms_per_delivered() > 0 ? cpu_ratio <= 0.5 : stop_variant.delivered_per_s() > 0;
    std::printf("\ntargets (patience vs keep): delivered in time >= 1.5x: %s; CPU per delivered answer <= 0.5x: %s%s\n",
                delivered_target ? "PASS" : "MISS", cpu_target ? "PASS" : "MISS",
                keep.delivered_per_s() > 0 ? "" : " (keep delivered nothing: the ratios are infinite)");
    if (stop.delivered_per_s() > 0) {
        std::printf("patience vs stop (FIFO): delivered in time %.2fx, CPU per delivered answer %.2fx\n",
                    pat.delivered_per_s() / stop.delivered_per_s(),
                    pat.cpu_ms_per_delivered() / stop.cpu_ms_per_delivered());
    }

    std::uint64_t errors = 0;
    for (const variant_run& v : runs) {
        errors += v.trial.load.errors;
        for (const auto& e : v.trial.load.error_samples) std::printf("  %s: %s\n", v.name.c_str(), e.c_str());
    }
    if (errors) std::printf("errors during the load: %llu\n", static_cast<unsigned long long>(errors));

    json_writer w;
    w.begin_object().field("cpu", cpu);
    w.key("corpus").begin_object().field("rows", o.rows).field("dim", o.dim).field("seed", o.seed);
    w.field("source", origin.generated ? "generated" : "file").field("path", corpus_path).end_object();
    w.key("server").begin_object().field("permits", capacity_run.permits).field("io_threads", mode.io_threads);
    w.field("max_batch", capacity_run.mode.max_batch).field("max_waiters", mode.max_waiters);
    w.field("compute_nice", mode.compute_nice).end_object();
    w.key("capacity").begin_object().field("connections", o.connections).field("duration_s", o.capacity_seconds);
    w.field("requests_per_s", capacity).field("mean_batch", capacity_run.mean_batch);
    w.field("p50_ms", capacity_run.load.latency.percentile_ms(0.5));
    w.field("p99_ms", capacity_run.load.latency.percentile_ms(0.99)).end_object();
    w.key("load").begin_object().field("connections", o.connections).field("duration_s", o.duration_seconds);
    w.field("client_timeout_ms", o.client_timeout_ms).field("overload", o.overload);
    w.field("offered_per_s", offered).field("offered_over_capacity", capacity > 0 ? offered / capacity : 0.0);
    w.field("k", o.k).end_object();
    w.key("variants").begin_array();
    for (const variant_run& v : runs) write_variant(w, v);
    w.end_array();
    w.key("ratios").begin_object().field("compared", "patient / keep");
    w.field("delivered_in_time", delivered_ratio).field("cpu_per_delivered", cpu_ratio);
    w.field("delivered_target_met", delivered_target).field("cpu_target_met", cpu_target).end_object();
    w.end_object();
    const fs::path json_path = fs::path(o.data_dir) / "embedding_search_impatient.json";
    const fs::path svg_path = fs::path(o.data_dir) / "embedding_search_impatient.svg";
    std::ofstream(json_path) << w.str() << '\n';
    char subtitle[240];
    std::snprintf(subtitle, sizeof subtitle,
                  "%zu connections offering %.0f searches/s (%.2fx the measured %.0f/s), client timeout %d ms; %s",
                  o.connections, offered, capacity > 0 ? offered / capacity : 0.0, capacity, o.client_timeout_ms,
                  cpu.c_str());
    std::ofstream(svg_path) << impatient_svg(runs, "tenferro-search demo --impatient: clients that give up", subtitle);
    std::printf("\nreport: %s\n        %s\n", json_path.string().c_str(), svg_path.string().c_str());

    const bool ok = errors == 0 && pat.trial.load.ok > 0;
    if (!ok) std::printf("\ndemo FAILED: %s\n", errors ? "errors during the load" : "no answer was delivered in time");
    return ok ? 0 : 1;
}

}  // namespace embedding_search
