// The batching benchmark's Markdown tables and SVG plot (batching_report.hpp).

#include "batching_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace batching_bench {

namespace {

std::string format(const char* fmt, auto... args) {
    std::string out(std::size_t(std::snprintf(nullptr, 0, fmt, args...)), '\0');
    std::snprintf(out.data(), out.size() + 1, fmt, args...);
    return out;
}

/// "12.3" or "≥ 12.3" when censored samples make it a lower bound.
std::string quantile_text(const samples& s, double q) {
    bool lower = false;
    const double v = s.quantile(q, &lower);
    return format(v < 10 ? "%s%.2f" : "%s%.1f", lower ? "≥ " : "", v);
}

std::string join(const std::vector<double>& v, const char* fmt) {
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + format(fmt, v[i]);
    return out;
}

const char* verdict(bool met) { return met ? "met" : "**missed**"; }

double ms_of(std::chrono::microseconds d) { return double(d.count()) / 1000.0; }

}  // namespace

std::string markdown(const report& r) {
    const std::size_t n = r.policies.size();
    const std::size_t unbatched = n - 1;
    std::string md;
    md += format(
        "Machine: %s; Highway target %s. Load average %s at the start, %s at the end; a 10 ms sleep woke up "
        "late by %.2f ms (p99) before the runs, %.2f ms after. Whole run %.0f s.\n\n",
        r.cpu.c_str(), r.highway.c_str(), r.load_start.c_str(), r.load_end.c_str(), r.floor_before_ms, r.floor_after_ms,
        r.total_seconds);
    md += format(
        "Workload: corpus %lld x %lld f32, k = %lld, %zu permits, 1 I/O thread, server in-process on "
        "127.0.0.1; policies `batcher` (max_batch %zu, max_delay 0), `timer-1ms` / `timer-5ms` (max_batch "
        "%zu, max_delay 1 / 5 ms), `unbatched` (max_batch 1).\n\n",
        static_cast<long long>(r.rows), static_cast<long long>(r.dim), static_cast<long long>(r.k), r.permits,
        r.max_batch, r.max_batch);

    // 1.
    const double b50 = r.single[0].latency.quantile(0.5);
    const double u50 = r.single[unbatched].latency.quantile(0.5);
    md += format(
        "**1. One client, closed loop** (%d rounds x %.1f s per policy, samples pooled; exact "
        "percentiles)\n\n",
        r.single_rounds, r.single_seconds);
    md += "| policy | requests | p50 ms | p99 ms | p50 per round | p50 / unbatched p50 | p50 − batcher p50 (ms) |\n";
    md += "|---|---|---|---|---|---|---|\n";
    for (std::size_t i = 0; i < n; ++i) {
        const samples& s = r.single[i].latency;
        const double p50 = s.quantile(0.5);
        md +=
            format("| `%s` | %zu | %.2f | %.2f | %s | %.3f | %+.2f |\n", r.policies[i].name.c_str(), s.count(), p50,
                   s.quantile(0.99), join(r.single[i].round_p50, "%.2f").c_str(), u50 > 0 ? p50 / u50 : 0.0, p50 - b50);
    }

    // 2.
    md += format(
        "\n**2. %zu connections, closed loop** (%d rounds x %.1f s per policy; req/s the median of the "
        "rounds; mean batch = the batcher's completed / batches over the load windows; latencies pooled)\n\n",
        r.connections, r.closed_rounds, r.closed_seconds);
    md +=
        "| policy | req/s | req/s per round | batcher / policy | mean batch | permits busy | session p50 ms | CPU "
        "ms / request | search p50 / p99 ms | /healthz p99 ms (per round) | 503 | errors |\n";
    md += "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (std::size_t i = 0; i < n; ++i) {
        const closed_result& c = r.closed[i];
        double busy = 0;
        for (const double u : c.round_utilisation) busy += u / double(c.round_utilisation.size());
        md += format(
            "| `%s` | %.0f | %s | %.2fx | %.2f | %.0f %% | %.1f | %.2f | %.1f / %.1f | %.2f (%s) | %llu | %llu "
            "|\n",
            r.policies[i].name.c_str(), c.rps, join(c.round_rps, "%.0f").c_str(),
            c.rps > 0 ? r.closed[0].rps / c.rps : 0.0, c.mean_batch(), 100 * busy, c.batch_compute.percentile_ms(0.5),
            c.cpu_ms_per_request(), c.latency.percentile_ms(0.5), c.latency.percentile_ms(0.99),
            c.healthz.percentile_ms(0.99), join(c.round_healthz_p99, "%.2f").c_str(),
            static_cast<unsigned long long>(c.shed), static_cast<unsigned long long>(c.errors));
    }
    md +=
        "\nPermits busy: the time the server's permits were held / (permits x the window). Session p50: one "
        "batch's matmul + top_k, wall time (on a shared machine it includes the time the nice-19 compute worker "
        "waited for a core). CPU ms / request: the whole process's CPU time (server, compute workers, load "
        "generator) / requests answered.\n";

    // 3.
    md += format(
        "\n**3. Open-loop sweep** (Poisson arrivals, the same arrival times for every policy at a load, a "
        "pool of %zu connections, %.1f s of arrivals per point, %d round(s)). Saturation = the `batcher` "
        "policy's closed-loop throughput in step 2 of this run = **%.0f req/s**. Cells: p50 / p99 ms "
        "(answered req/s); `≥`: a lower bound, arrivals that no connection could take before the window "
        "closed are counted at their wait until then.\n\n",
        r.open_connections, r.sweep_seconds, r.sweep_rounds, r.saturation_rps);
    md += "| offered load | req/s |";
    for (const policy& p : r.policies) md += " `" + p.name + "` |";
    md += "\n|---|---|";
    for (std::size_t i = 0; i < n; ++i) md += "---|";
    md += "\n";
    for (std::size_t li = 0; li < r.loads.size(); ++li) {
        md += format("| %.0f %% | %.0f |", 100 * r.loads[li], r.sweep[0][li].offered_rps);
        for (std::size_t i = 0; i < n; ++i) {
            const sweep_point& pt = r.sweep[i][li];
            // (Appended piece by piece: GCC 12 warns -Wrestrict, wrongly, on `" " + std::string`.)
            md += ' ';
            md += quantile_text(pt.latency, 0.5);
            md += " / ";
            md += quantile_text(pt.latency, 0.99);
            md += format(" (%.0f) |", pt.answered_rps());
        }
        md += "\n";
    }
    md += "\nMean batch (the batcher's completed / batches) and process CPU ms per answered request at each point:\n\n";
    md += "| offered load |";
    for (const policy& p : r.policies) md += " `" + p.name + "` |";
    md += "\n|---|";
    for (std::size_t i = 0; i < n; ++i) md += "---|";
    md += "\n";
    for (std::size_t li = 0; li < r.loads.size(); ++li) {
        md += format("| %.0f %% |", 100 * r.loads[li]);
        for (std::size_t i = 0; i < n; ++i) {
            const sweep_point& pt = r.sweep[i][li];
            md += format(" %.2f, %.2f ms |", pt.mean_batch(), pt.ok ? 1000 * pt.cpu_seconds / double(pt.ok) : 0.0);
        }
        md += "\n";
    }

    // Targets.
    const closed_result& cb = r.closed[0];
    double best_timer = 0.0;
    std::string best_timer_name;
    for (std::size_t i = 1; i + 1 < n; ++i) {
        if (r.closed[i].rps > best_timer) {
            best_timer = r.closed[i].rps;
            best_timer_name = r.policies[i].name;
        }
    }
    md += "\n**Targets (docs/bench-protocol.md, batching)**\n\n| target | measured | |\n|---|---|---|\n";
    md += format("| `batcher` p50 ≤ 1.05x `unbatched` p50 (one client) | %.2f / %.2f ms = %.3fx | %s |\n", b50, u50,
                 u50 > 0 ? b50 / u50 : 0.0, verdict(u50 > 0 && b50 <= 1.05 * u50));
    for (std::size_t i = 1; i + 1 < n; ++i) {
        const double t50 = r.single[i].latency.quantile(0.5);
        const double delay = ms_of(r.policies[i].max_delay);
        md += format("| `batcher` p50 below `%s` p50 by ≥ %.0f ms (one client) | %.2f − %.2f = %.2f ms | %s |\n",
                     r.policies[i].name.c_str(), delay, t50, b50, t50 - b50, verdict(t50 - b50 >= delay));
    }
    md += format("| `batcher` req/s ≥ 1.0x best timer (`%s`) | %.0f / %.0f = %.2fx | %s |\n", best_timer_name.c_str(),
                 cb.rps, best_timer, best_timer > 0 ? cb.rps / best_timer : 0.0, verdict(cb.rps >= best_timer));
    md += format("| `batcher` req/s ≥ 6x `unbatched` | %.0f / %.0f = %.2fx | %s |\n", cb.rps, r.closed[unbatched].rps,
                 r.closed[unbatched].rps > 0 ? cb.rps / r.closed[unbatched].rps : 0.0,
                 verdict(cb.rps >= 6 * r.closed[unbatched].rps));
    md += format("| `batcher` mean batch ≥ 0.9 x max_batch = %.1f | %.2f (%.3f x max_batch) | %s |\n",
                 0.9 * double(r.max_batch), cb.mean_batch(), cb.mean_batch() / double(r.max_batch),
                 verdict(cb.mean_batch() >= 0.9 * double(r.max_batch)));
    md += format("| `/healthz` p99 < 5 ms (`batcher`, %zu connections) | %.2f ms (rounds: %s) | %s |\n", r.connections,
                 cb.healthz.percentile_ms(0.99), join(cb.round_healthz_p99, "%.2f").c_str(),
                 verdict(cb.healthz.percentile_ms(0.99) < 5.0));
    return md;
}

std::string sweep_svg(const report& r) {
    constexpr double width = 760, height = 440, left = 70, right = 170, top = 48, bottom = 56;
    const double plot_w = width - left - right, plot_h = height - top - bottom;
    static const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
    std::string svg;
    svg += format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
        "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
        "fill=\"white\"/>\n",
        width, height);
    svg += format(
        "<text x=\"%.0f\" y=\"20\" font-size=\"14\">tenferro-search, open loop: latency vs offered load</text>\n",
        left);
    svg += format(
        "<text x=\"%.0f\" y=\"36\" font-size=\"11\" fill=\"#555\">100 %% = the batcher's closed-loop throughput, "
        "%.0f req/s; %lld x %lld corpus, k = %lld, %zu permits</text>\n",
        left, r.saturation_rps, static_cast<long long>(r.rows), static_cast<long long>(r.dim),
        static_cast<long long>(r.k), r.permits);
    svg += format("<text x=\"8\" y=\"%.0f\" font-size=\"10\" fill=\"#555\">%s, Highway %s</text>\n", height - 4,
                  r.cpu.c_str(), r.highway.c_str());

    double lo = 1e18, hi = 0;
    for (const auto& row : r.sweep) {
        for (const sweep_point& pt : row) {
            if (!pt.latency.count()) continue;
            lo = std::min(lo, pt.latency.quantile(0.5));
            hi = std::max(hi, pt.latency.quantile(0.99));
        }
    }
    if (hi <= 0) return svg + "</svg>\n";
    const double lo_d = std::floor(std::log10(std::max(lo, 1e-3)));
    const double hi_d = std::max(lo_d + 1, std::ceil(std::log10(std::max(hi, 1e-3))));
    const double max_load = 100 * *std::max_element(r.loads.begin(), r.loads.end());
    const double x_hi = std::ceil((max_load + 10) / 10) * 10;
    const auto x_of = [&](double pct) { return left + pct / x_hi * plot_w; };
    const auto y_of = [&](double ms) {
        return top + plot_h - (std::log10(std::max(ms, 1e-3)) - lo_d) / (hi_d - lo_d) * plot_h;
    };

    // Axes and grid.
    svg += format("<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", left,
                  top, plot_w, plot_h);
    for (double d = lo_d; d <= hi_d + 1e-9; d += 1) {
        const double ms = std::pow(10.0, d);
        svg += format(
            "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
            "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%g ms</text>\n",
            left, y_of(ms), left + plot_w, y_of(ms), left - 6, y_of(ms) + 4, ms);
    }
    for (double pct = 0; pct <= x_hi + 1e-9; pct += 20) {
        svg += format(
            "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#ddd\"/>"
            "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.0f %%</text>\n",
            x_of(pct), top, x_of(pct), top + plot_h, x_of(pct), top + plot_h + 16, pct);
    }
    svg += format("<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#999\" stroke-dasharray=\"2 3\"/>\n",
                  x_of(100), top, x_of(100), top + plot_h);
    svg += format(
        "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">offered load, %% of saturation "
        "(Poisson arrivals)</text>\n",
        left + plot_w / 2, height - 18);
    svg += format(
        "<text transform=\"translate(16 %.0f) rotate(-90)\" text-anchor=\"middle\">latency "
        "(log scale)</text>\n",
        top + plot_h / 2);

    // One line per policy and quantile: p50 solid, p99 dashed; hollow marks are lower bounds.
    for (std::size_t i = 0; i < r.policies.size(); ++i) {
        const char* c = colours[i % 6];
        for (const double q : {0.5, 0.99}) {
            std::string points;
            std::string marks;
            for (std::size_t li = 0; li < r.loads.size(); ++li) {
                const sweep_point& pt = r.sweep[i][li];
                if (!pt.latency.count()) continue;
                bool lower = false;
                const double v = pt.latency.quantile(q, &lower);
                const double x = x_of(100 * r.loads[li]), y = y_of(v);
                points += format("%.1f,%.1f ", x, y);
                marks += format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" stroke=\"%s\" fill=\"%s\"/>\n", x, y, c,
                                lower ? "white" : c);
            }
            svg += format("<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                          points.c_str(), c, q > 0.5 ? " stroke-dasharray=\"6 4\"" : "");
            svg += marks;
        }
        const double ly = top + 14 + 20 * double(i);
        svg += format(
            "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"2\"/>"
            "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
            left + plot_w + 12, ly, left + plot_w + 40, ly, c, left + plot_w + 46, ly + 4, r.policies[i].name.c_str());
    }
    const double ny = top + 14 + 20 * double(r.policies.size()) + 10;
    svg += format(
        "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\" stroke-width=\"2\"/>"
        "<text x=\"%.0f\" y=\"%.0f\">p50</text>\n",
        left + plot_w + 12, ny, left + plot_w + 40, ny, left + plot_w + 46, ny + 4);
    svg += format(
        "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\" stroke-width=\"2\" "
        "stroke-dasharray=\"6 4\"/><text x=\"%.0f\" y=\"%.0f\">p99</text>\n",
        left + plot_w + 12, ny + 20, left + plot_w + 40, ny + 20, left + plot_w + 46, ny + 24);
    svg += format(
        "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"3.5\" stroke=\"black\" fill=\"white\"/>"
        "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">lower bound</text>\n",
        left + plot_w + 26, ny + 40, left + plot_w + 46, ny + 44);
    return svg + "</svg>\n";
}

}  // namespace batching_bench
