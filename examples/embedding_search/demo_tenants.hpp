#pragma once
// `tenferro-search demo --tenants`: two tenants on one server, a bulk one with
// many connections and an interactive one with few, run once with every
// request in one FIFO queue and once with a tenant group each (equal
// weights), for the same time; the two tenants' latency and throughput side
// by side, on stdout and in a JSON and an SVG report.

#include <string>

#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "demo.hpp"

namespace embedding_search {

/// Runs both variants on `corpus` and reports; returns the exit status (0:
/// both tenants served in both variants, no errors).
int run_tenants_demo(const demo_options& o, const tenferro::tensor& corpus, const corpus_origin& origin,
                     const std::string& corpus_path);

/// This machine's CPU model, from /proc/cpuinfo ("unknown CPU" without it).
std::string cpu_model_name();

}  // namespace embedding_search
