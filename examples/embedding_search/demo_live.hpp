#pragma once
// The demo's live phase (issue 60): a fresh in-process server over a live corpus holding the
// demo's corpus as ids 0..n-1 (compacted), driven twice for `live_seconds / 2` each, after a
// short warm-up that is not reported:
//
//   1. searchers alone: keep-alive connections sending unfiltered searches, closed loop;
//   2. the same searchers while writers change the corpus: each writer, on its own schedule,
//      sends a `PUT /v1/vectors` of new rows with labels, then a search filtered by one of
//      those labels (which must find the row just written, at a `seq` at least the write's),
//      and every few writes a `DELETE /v1/vectors` of some earlier rows (its own and corpus
//      rows).
//
// Then a check: the demo keeps a model of every write answered 200 and compares the server's
// answers to a sample of queries (unfiltered, filtered by labels, by an id allow-list) with a
// float64 brute force over the final rows. Only that check (and read-your-writes) can fail the
// demo: the timings are reported, never judged.

#include <cstdint>
#include <string>
#include <vector>

#include <tenferro/tenferro.hpp>

#include "demo.hpp"
#include "json_writer.hpp"
#include "latency_histogram.hpp"

namespace embedding_search {

/// One closed-loop run of the searchers (and, in the second, the writers).
struct live_run {
    double seconds = 0.0;  ///< from the first request to the last answer
    std::uint64_t searches = 0, shed = 0, errors = 0;  ///< the unfiltered searchers' 200s, 503s, other
    histogram_snapshot search_latency;
    // The second run only:
    std::uint64_t filtered = 0;  ///< filtered searches answered 200
    histogram_snapshot filtered_latency;
    std::uint64_t puts = 0, deletes = 0;  ///< writes answered 200
    std::uint64_t rows_upserted = 0, ids_deleted = 0;  ///< as the server counted them
    std::uint64_t write_errors = 0;  ///< writes not answered 200 (their outcome is then read back)
    histogram_snapshot write_latency;  ///< PUT and DELETE together
    double searches_per_second() const { return seconds > 0 ? double(searches) / seconds : 0.0; }
    double writes_per_second() const { return seconds > 0 ? double(puts + deletes) / seconds : 0.0; }
    double rows_per_second() const { return seconds > 0 ? double(rows_upserted) / seconds : 0.0; }
};

struct live_result {
    // The set-up.
    std::int64_t corpus_rows = 0, dim = 0, k = 0;
    double load_seconds = 0.0;  ///< the corpus into the live corpus, compacted
    std::size_t searchers = 0, writers = 0, rows_per_put = 0, ids_per_delete = 0, deletes_every = 0;
    double put_interval_ms = 0.0;
    double seconds_per_run = 0.0;

    live_run alone, with_writes;

    // The corpus at the end.
    std::uint64_t final_seq = 0;
    std::int64_t final_rows = 0, model_rows = 0, segments = 0;
    std::uint64_t compactions = 0;

    // The check.
    std::size_t queries = 0, matched = 0, filtered_by_label = 0, filtered_by_id = 0;
    std::uint64_t read_your_writes = 0, read_your_writes_ok = 0;  ///< the writers' filtered searches
    std::size_t resolved_by_get = 0;  ///< ids whose write had no answer, read back with GET
    std::vector<std::string> mismatches;  ///< the first few, described
    std::vector<std::string> error_samples;  ///< the first few load errors
    bool ok = false;

    double throughput_ratio() const {
        const double a = alone.searches_per_second();
        return a > 0 ? with_writes.searches_per_second() / a : 0.0;
    }
    double p99_ratio() const {
        const double a = alone.search_latency.percentile_ms(0.99);
        return a > 0 ? with_writes.search_latency.percentile_ms(0.99) / a : 0.0;
    }
};

/// Runs the live phase on `corpus` (the demo's unit rows) with the demo's server mode, k,
/// seed and `live_seconds`, printing what it does as it goes.
live_result run_live_phase(const demo_options& o, const tenferro::tensor& corpus);

/// The live phase's results on stdout.
void print_live_results(const live_result& r);

/// The `"live"` object of the demo's JSON report (its value only: the caller writes the key).
void write_live_results(json_writer& w, const live_result& r);

}  // namespace embedding_search
