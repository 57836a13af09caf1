#pragma once
// What the demo and the benchmark report about a trial: the results the demo
// prints, the JSON fields of a trial (the demo's report file, the benchmark's
// JSON lines), and the demo's report files (JSON and an SVG latency chart).

#include <filesystem>
#include <string>

#include "corpus.hpp"
#include "demo.hpp"
#include "demo_trial.hpp"
#include "json_writer.hpp"
#include "load_generator.hpp"

namespace embedding_search {

double requests_per_second(const load_result& r);

/// The demo's latency chart: an SVG histogram of `h` on a logarithmic axis
/// with the p50, p99 and p99.9 marks labelled, titled `title`.
std::string latency_svg(const histogram_snapshot& h, const std::string& title);

/// The `"server"` object: the mode the trial ran.
void write_mode(json_writer& w, const trial_result& t);
/// The `"results"` object: what the trial measured.
void write_results(json_writer& w, const trial_result& t);

/// The demo's results on stdout: throughput, latencies, admission, errors,
/// /healthz, and the sample query beside its brute-force reference.
void print_demo_results(const demo_options& o, const trial_result& t);

struct demo_report_files {
    std::filesystem::path json, svg;
};

struct live_result;

/// Writes `embedding_search_report.json` and `embedding_search_latency.svg`
/// into `o.data_dir`; `corpus_path` is the corpus file the demo used; `live`,
/// when given, the live phase's results (the report's `"live"` object).
demo_report_files write_demo_report(const demo_options& o, const corpus_origin& origin, const std::string& corpus_path,
                                    const trial_result& t, const live_result* live = nullptr);

}  // namespace embedding_search
