// Exact search: tenferro's matmul_top_k against FAISS IndexFlatIP (Debian's libfaiss-dev), side by
// side in one process (docs/bench-protocol.md, "Exact search"; docs/benchmarks.md).
//
// Corpus rows and queries are random unit vectors (f32). tenferro runs what the demo server runs:
// a session holding `threads` permits whose body calls s.matmul_top_k(queries, corpus.transposed(),
// k), with the corpus marked constant in the backend's runtime cache (its packed copy is made
// before timing). FAISS runs IndexFlatIP::search with OpenMP and OpenBLAS limited to `threads`
// threads, at its own best for each batch: below 20 queries FAISS scans per query and from 20 on
// it calls sgemm on tiles (faiss::distance_compute_blas_threshold); for batches up to 64 both are
// timed, and with several threads each split of them between OpenMP and OpenBLAS; the fastest
// is FAISS's figure. The unfused tenferro path (matmul, then top_k) runs
// where its score matrix stays under --unfused-mb.
//
// Each round times every system once (calls repeated for at least --min-ms) in turn; a system's
// figure is its best round, so a burst of load from another process costs one round. GFLOP/s are
// 2 * d * rows per query; "peak" is a register-only FMA loop (fma_peak.cpp) on the same number of
// threads, measured at the start and again beside every configuration, the best kept.
//
// Exactness, checked on every measured configuration: fused and unfused results have the same
// bits (values and indices), and every row's top-k index set equals FAISS's.
//
// Where the dispatched target has VDPBF16PS (AVX3_ZEN4), matmul_top_k runs its bf16 first pass
// (docs/design/exact-search-first-pass.md); the f32 path it replaces ("f32/s": the same fused
// kernel without the first pass, as on the AVX3 target that CPUs without it dispatch to, forced
// for those calls) is timed beside it and must give the same bits. The bf16 peak is a
// register-only VDPBF16PS loop; "rr/q" the rows re-ranked in f32 per query, "fp" the share of
// queries the first pass answered (cpu_runtime_cache::search_stats).
//
// Flags: --rows 200000,1000000 --dims 128,768 --batches 1,4,16,64,256,1024 --ks 10,100
//        --threads 1,2 --rounds 3 --min-ms 300 --unfused-mb 512 --json FILE (one object per line)
//        --cpu-clock   1-thread figures (and the 1-thread peak) from process CPU time instead of
//                      wall time: on a loaded machine, time spent waiting for a core is not counted

#include <cblas.h>
#include <omp.h>
#include <time.h>
#include <faiss/IndexFlat.h>
#include <faiss/utils/distances.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <asio/use_future.hpp>

#include "fma_peak.hpp"
#include "hwy_target_select.hpp"
#include "tenferro/tenferro.hpp"

namespace {

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

struct options {
    std::vector<std::int64_t> rows{200000, 1000000}, dims{128, 768}, batches{1, 4, 16, 64, 256, 1024}, ks{10, 100};
    std::vector<std::int64_t> threads{1, 2};
    int rounds = 3;
    double min_ms = 300;
    double unfused_mb = 512;
    std::string json;
    bool cpu_clock = false;
    // "random": unit rows in random directions; "near-duplicate": one unit vector plus noise of
    // relative size 1e-4 per row, normalised (a corpus where the first pass's bound cannot
    // separate: every query falls back to f32, issue 62).
    std::string data = "random";
};

std::vector<std::int64_t> numbers(const std::string& s) {
    std::vector<std::int64_t> out;
    std::size_t start = 0;
    while (start < s.size()) {
        const std::size_t comma = s.find(',', start);
        const std::size_t end = comma == std::string::npos ? s.size() : comma;
        out.push_back(std::stoll(s.substr(start, end - start)));
        start = end + 1;
    }
    return out;
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--cpu-clock") {
            o.cpu_clock = true;
            --i;
            continue;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "search: %s needs a value\n", flag.c_str());
            std::exit(2);
        }
        const std::string value = argv[i + 1];
        if (flag == "--rows")
            o.rows = numbers(value);
        else if (flag == "--dims")
            o.dims = numbers(value);
        else if (flag == "--batches")
            o.batches = numbers(value);
        else if (flag == "--ks")
            o.ks = numbers(value);
        else if (flag == "--threads")
            o.threads = numbers(value);
        else if (flag == "--rounds")
            o.rounds = std::stoi(value);
        else if (flag == "--min-ms")
            o.min_ms = std::stod(value);
        else if (flag == "--unfused-mb")
            o.unfused_mb = std::stod(value);
        else if (flag == "--json")
            o.json = value;
        else if (flag == "--data" && (value == "random" || value == "near-duplicate"))
            o.data = value;
        else {
            std::fprintf(stderr, "search: unknown flag %s (see bench/search.cpp)\n", flag.c_str());
            std::exit(2);
        }
    }
    return o;
}

// Rows near one unit vector: it plus Gaussian noise of `noise` per element, normalised.
tf::tensor near_duplicate_rows(std::int64_t n, std::int64_t d, unsigned seed, double noise) {
    tf::tensor t = tf::tensor::zeros(tf::dtype::f32, {n, d});
    auto* p = static_cast<float*>(t.data());
    std::mt19937 rng(seed);
    std::normal_distribution<double> g;
    std::vector<double> base(static_cast<std::size_t>(d));
    std::mt19937 base_rng(7);
    double bn = 0;
    for (double& x : base) {
        x = g(base_rng);
        bn += x * x;
    }
    for (double& x : base) x /= std::sqrt(bn);
    for (std::int64_t i = 0; i < n; ++i) {
        float* row = p + i * d;
        double norm = 0;
        std::vector<double> v(static_cast<std::size_t>(d));
        for (std::int64_t j = 0; j < d; ++j) {
            v[static_cast<std::size_t>(j)] = base[static_cast<std::size_t>(j)] + noise * g(rng) / std::sqrt(double(d));
            norm += v[static_cast<std::size_t>(j)] * v[static_cast<std::size_t>(j)];
        }
        for (std::int64_t j = 0; j < d; ++j)
            row[j] = static_cast<float>(v[static_cast<std::size_t>(j)] / std::sqrt(norm));
    }
    return t;
}

tf::tensor unit_rows(std::int64_t n, std::int64_t d, unsigned seed) {
    tf::tensor t = tf::tensor::zeros(tf::dtype::f32, {n, d});
    auto* p = static_cast<float*>(t.data());
    std::mt19937 rng(seed);
    std::normal_distribution<float> g;
    for (std::int64_t i = 0; i < n; ++i) {
        float* row = p + i * d;
        double norm = 0;
        for (std::int64_t j = 0; j < d; ++j) {
            row[j] = g(rng);
            norm += double(row[j]) * row[j];
        }
        const auto inv = static_cast<float>(1 / std::sqrt(norm));
        for (std::int64_t j = 0; j < d; ++j) row[j] *= inv;
    }
    return t;
}

double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Calls f() until min_ms have passed (at least once); seconds per call, of wall time or (cpu)
// of this process's CPU time.
template <class F>
double per_call(double min_ms, bool cpu, F&& f) {
    const auto start = clock_type::now();
    const double cpu_start = process_cpu_seconds();
    int calls = 0;
    double elapsed = 0;
    do {
        f();
        ++calls;
        elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
    } while (elapsed * 1e3 < min_ms);
    return (cpu ? process_cpu_seconds() - cpu_start : elapsed) / calls;
}

struct search_out {
    tf::tensor values, indices;
};

}  // namespace

int main(int argc, char** argv) {
    const options o = parse(argc, argv);
    const int max_threads = static_cast<int>(*std::max_element(o.threads.begin(), o.threads.end()));
    std::FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "w");
    std::printf("search: tenferro matmul_top_k vs FAISS IndexFlatIP; Highway target %s; peak loop %s; %s\n",
                tf::bench::dispatched_highway_target(), tf::bench::fma_peak_isa(),
                o.cpu_clock ? "1-thread figures in process CPU time" : "wall time");
    std::vector<double> peak(static_cast<std::size_t>(max_threads) + 1, 0);
    std::vector<double> bf16_peak(static_cast<std::size_t>(max_threads) + 1, 0);
    const bool first_pass = tf::bench::dispatched_has_first_pass();
    for (std::int64_t t : o.threads) {
        peak[static_cast<std::size_t>(t)] = tf::bench::fma_peak_gflops(static_cast<int>(t), 1.5, o.cpu_clock && t == 1);
        std::printf("f32 FMA peak, %lld thread%s: %.1f GFLOP/s\n", static_cast<long long>(t), t == 1 ? "" : "s",
                    peak[static_cast<std::size_t>(t)]);
        if (first_pass) {
            bf16_peak[static_cast<std::size_t>(t)] =
                tf::bench::dpbf16_peak_gflops(static_cast<int>(t), 1.5, o.cpu_clock && t == 1);
            std::printf("bf16 VDPBF16PS peak, %lld thread%s: %.1f GFLOP/s\n", static_cast<long long>(t),
                        t == 1 ? "" : "s", bf16_peak[static_cast<std::size_t>(t)]);
        }
    }
    tf::cpu_backend_options bo;
    bo.permits = static_cast<std::size_t>(max_threads);
    // Room for the largest packed corpus, as the demo server sizes its cache.
    const std::size_t corpus_bytes = static_cast<std::size_t>(*std::max_element(o.rows.begin(), o.rows.end()) *
                                                              *std::max_element(o.dims.begin(), o.dims.end()) * 4);
    bo.runtime_cache_bytes = corpus_bytes + corpus_bytes / 4 + (std::size_t{16} << 20);
    // With the first pass: its bf16 copy (half) and the f32 path's packed copy for the forced target.
    if (first_pass) bo.runtime_cache_bytes += corpus_bytes + corpus_bytes / 2;
    tf::cpu_backend cpu(bo);
    std::printf("%8s %4s %5s %4s %3s | %10s %7s %6s %6s | %10s %12s | %10s | %6s %6s | %10s %6s %5s %4s | %s\n", "rows",
                "d", "batch", "k", "thr", "tenferro/s", "GFLOP/s", "%peak", "%bf16", "FAISS q/s", "mode", "unfused/s",
                "ratio", "vs unf", "f32/s", "vs f32", "rr/q", "fp", "exact");
    for (std::int64_t n : o.rows) {
        for (std::int64_t d : o.dims) {
            const bool near = o.data == "near-duplicate";
            const tf::tensor corpus = near ? near_duplicate_rows(n, d, 1, 1e-4) : unit_rows(n, d, 1);
            const std::int64_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
            const tf::tensor queries = near ? near_duplicate_rows(max_batch, d, 2, 1e-4) : unit_rows(max_batch, d, 2);
            faiss::IndexFlatIP index(static_cast<int>(d));
            index.add(n, static_cast<const float*>(corpus.data()));
            cpu.default_cache().mark_constant(corpus);
            for (std::int64_t k : o.ks) {
                for (std::int64_t batch : o.batches) {
                    for (std::int64_t threads : o.threads) {
                        const tf::const_tensor_view q = queries.slice(0, 0, batch);
                        tf::session_options so;
                        so.permits = static_cast<std::size_t>(threads);
                        search_out ours, plain, f32out;
                        // The fused search into `out`, on whatever target dispatch picks now.
                        auto run_fused = [&](search_out& out) {
                            auto r = cpu.with_backend_session(
                                            so,
                                            [&](tf::backend_session& s) {
                                                auto [v, i] = s.matmul_top_k(q, corpus.transposed(), k);
                                                return search_out{std::move(v), std::move(i)};
                                            },
                                            asio::use_future)
                                         .get();
                            out = std::move(*r);
                        };
                        auto run_ours = [&] { run_fused(ours); };
                        auto run_unfused = [&] {
                            auto r = cpu.with_backend_session(
                                            so,
                                            [&](tf::backend_session& s) {
                                                auto [v, i] = s.top_k(s.matmul(q, corpus.transposed()), k, -1);
                                                return search_out{std::move(v), std::move(i)};
                                            },
                                            asio::use_future)
                                         .get();
                            plain = std::move(*r);
                        };
                        auto run_f32 = [&] {
                            tf::bench::force_highway_target("AVX3");
                            run_fused(f32out);
                            tf::bench::reset_highway_target();
                        };
                        std::vector<float> fd(static_cast<std::size_t>(batch * k));
                        std::vector<faiss::Index::idx_t> fi(static_cast<std::size_t>(batch * k));
                        auto run_faiss = [&](int threshold) {
                            faiss::distance_compute_blas_threshold = threshold;
                            index.search(batch, static_cast<const float*>(q.data()), k, fd.data(), fi.data());
                        };
                        const bool with_unfused =
                            static_cast<double>(batch) * static_cast<double>(n) * 4 <= o.unfused_mb * 1048576;
                        // FAISS's configurations: its two paths (the per-query scan only up to batch
                        // 64: past that it reads the corpus once per query) and, with several
                        // threads, its OpenMP and OpenBLAS thread counts (both at `threads`
                        // oversubscribe the cores: OpenBLAS's threads inside OpenMP's).
                        struct faiss_config {
                            int threshold, omp, blas;
                            std::string name;
                        };
                        const int t = static_cast<int>(threads);
                        std::vector<faiss_config> faiss_configs;
                        if (batch <= 64) faiss_configs.push_back({1 << 30, t, 1, "scan"});
                        if (t == 1) {
                            faiss_configs.push_back({0, 1, 1, "blas"});
                        } else {
                            faiss_configs.push_back({0, 1, t, "blas(omp 1)"});
                            faiss_configs.push_back({0, t, 1, "blas(blas 1)"});
                            faiss_configs.push_back({0, t, t, "blas"});
                        }
                        run_ours();  // warm-up: the packed corpus, the buffer pool
                        if (first_pass) run_f32();
                        const bool cpu_time = o.cpu_clock && threads == 1;
                        double t_ours = 1e30, t_unf = 1e30, t_faiss = 1e30, t_f32 = 1e30;
                        std::string best_mode;
                        tf::search_stats st0 = cpu.default_cache().search_stats(), st_sum{};
                        for (int round = 0; round < o.rounds; ++round) {
                            t_ours = std::min(t_ours, per_call(o.min_ms, cpu_time, run_ours));
                            const tf::search_stats st1 = cpu.default_cache().search_stats();
                            st_sum.queries += st1.queries - st0.queries;
                            st_sum.first_pass += st1.first_pass - st0.first_pass;
                            st_sum.reranked += st1.reranked - st0.reranked;
                            if (first_pass) t_f32 = std::min(t_f32, per_call(o.min_ms, cpu_time, run_f32));
                            st0 = cpu.default_cache().search_stats();
                            for (const faiss_config& c : faiss_configs) {
                                omp_set_num_threads(c.omp);
                                openblas_set_num_threads(c.blas);
                                const double tf_ = per_call(o.min_ms, cpu_time, [&] { run_faiss(c.threshold); });
                                if (tf_ < t_faiss) {
                                    t_faiss = tf_;
                                    best_mode = c.name;
                                }
                            }
                            if (with_unfused) t_unf = std::min(t_unf, per_call(o.min_ms, cpu_time, run_unfused));
                        }
                        // Exactness: FAISS's last run used the BLAS mode (or the scan); both are
                        // exact search, so compare index sets row by row.
                        // A row whose sets differ still agrees when every differing index's exact
                        // score (in double) is within rounding of our k-th: FAISS's sgemm sums in
                        // another order, so a near-tie at the boundary may fall either way.
                        std::int64_t agree = 0, near_ties = 0;
                        const auto* ids = static_cast<const std::int64_t*>(ours.indices.data());
                        const auto* qs = static_cast<const float*>(q.data());
                        const auto* cs = static_cast<const float*>(corpus.data());
                        auto exact_score = [&](std::int64_t r, std::int64_t j) {
                            double acc = 0;
                            for (std::int64_t p = 0; p < d; ++p) acc += double(qs[r * d + p]) * cs[j * d + p];
                            return acc;
                        };
                        const double tolerance = 4.0 * double(d) * 1.2e-7;  // unit rows: |q| |c| = 1
                        for (std::int64_t r = 0; r < batch; ++r) {
                            std::set<std::int64_t> a(ids + r * k, ids + (r + 1) * k);
                            std::set<std::int64_t> b(fi.begin() + r * k, fi.begin() + (r + 1) * k);
                            if (a == b) {
                                ++agree;
                                continue;
                            }
                            const double kth = exact_score(r, ids[r * k + k - 1]);
                            bool tie = true;
                            for (std::int64_t j : a)
                                if (!b.count(j)) tie = tie && std::abs(exact_score(r, j) - kth) <= tolerance;
                            for (std::int64_t j : b)
                                if (!a.count(j)) tie = tie && std::abs(exact_score(r, j) - kth) <= tolerance;
                            near_ties += tie;
                        }
                        const bool exact = agree + near_ties == batch;
                        bool same_bits = true;
                        if (with_unfused) {
                            same_bits = std::equal(static_cast<const std::byte*>(ours.values.data()),
                                                   static_cast<const std::byte*>(ours.values.data()) + batch * k * 4,
                                                   static_cast<const std::byte*>(plain.values.data())) &&
                                        std::equal(ids, ids + batch * k,
                                                   static_cast<const std::int64_t*>(plain.indices.data()));
                        }
                        bool same_as_f32 = true;
                        if (first_pass)
                            same_as_f32 = std::equal(static_cast<const std::byte*>(ours.values.data()),
                                                     static_cast<const std::byte*>(ours.values.data()) + batch * k * 4,
                                                     static_cast<const std::byte*>(f32out.values.data())) &&
                                          std::equal(ids, ids + batch * k,
                                                     static_cast<const std::int64_t*>(f32out.indices.data()));
                        const double f32q = first_pass ? double(batch) / t_f32 : 0;
                        const double fp_share =
                            st_sum.queries != 0 ? double(st_sum.first_pass) / double(st_sum.queries) : 0;
                        const double rr_per_query =
                            st_sum.first_pass != 0 ? double(st_sum.reranked) / double(st_sum.first_pass) : 0;
                        const double qps = double(batch) / t_ours, fq = double(batch) / t_faiss;
                        const double gflops = qps * 2.0 * double(d) * double(n) / 1e9;
                        // The peak is measured again beside every configuration and the best kept:
                        // a burst of other load during one measurement does not set the scale.
                        double& pk = peak[static_cast<std::size_t>(threads)];
                        pk = std::max(pk, tf::bench::fma_peak_gflops(static_cast<int>(threads), 0.3, cpu_time));
                        const double pct = 100 * gflops / pk;
                        double& bpk = bf16_peak[static_cast<std::size_t>(threads)];
                        if (first_pass)
                            bpk =
                                std::max(bpk, tf::bench::dpbf16_peak_gflops(static_cast<int>(threads), 0.3, cpu_time));
                        const double bf16_pct = bpk > 0 ? 100 * gflops / bpk : 0;
                        const double uq = with_unfused ? double(batch) / t_unf : 0;
                        std::printf(
                            "%8lld %4lld %5lld %4lld %3lld | %10.1f %7.1f %5.1f%% %5.1f%% | %10.1f %12s | %10.1f | "
                            "%5.2fx %5.2fx | %10.1f %5.2fx %5.1f %3.0f%% | %s%s%s\n",
                            static_cast<long long>(n), static_cast<long long>(d), static_cast<long long>(batch),
                            static_cast<long long>(k), static_cast<long long>(threads), qps, gflops, pct, bf16_pct, fq,
                            best_mode.c_str(), uq, qps / fq, with_unfused ? qps / uq : 0.0, f32q,
                            first_pass ? qps / f32q : 0.0, rr_per_query, 100 * fp_share,
                            exact ? (near_ties != 0 ? "100% (near-ties)" : "100%") : "MISMATCH",
                            same_bits ? "" : " FUSED!=UNFUSED", same_as_f32 ? "" : " FIRST-PASS!=F32");
                        std::fflush(stdout);
                        if (json != nullptr) {
                            std::fprintf(
                                json,
                                "{\"rows\": %lld, \"d\": %lld, \"batch\": %lld, \"k\": %lld, \"threads\": %lld, "
                                "\"tenferro_qps\": %.3f, \"gflops\": %.3f, \"peak_gflops\": %.3f, "
                                "\"faiss_qps\": %.3f, \"faiss_mode\": \"%s\", \"unfused_qps\": %.3f, "
                                "\"agreement\": %.4f, \"near_ties\": %lld, \"bit_identical_to_unfused\": %s, "
                                "\"target\": \"%s\", \"clock\": "
                                "\"%s\", \"first_pass\": %s, \"f32_qps\": %.3f, \"bf16_peak_gflops\": %.3f, "
                                "\"first_pass_share\": %.4f, \"reranked_per_query\": %.2f, "
                                "\"bit_identical_to_f32\": %s}\n",
                                static_cast<long long>(n), static_cast<long long>(d), static_cast<long long>(batch),
                                static_cast<long long>(k), static_cast<long long>(threads), qps, gflops,
                                peak[static_cast<std::size_t>(threads)], fq, best_mode.c_str(), uq,
                                double(agree) / double(batch), static_cast<long long>(near_ties),
                                same_bits ? "true" : "false", tf::bench::dispatched_highway_target(),
                                cpu_time ? "cpu" : "wall", first_pass ? "true" : "false", f32q, bpk, fp_share,
                                rr_per_query, same_as_f32 ? "true" : "false");
                            std::fflush(json);
                        }
                    }
                }
            }
            cpu.default_cache().unmark_constant(corpus);
        }
    }
    if (json != nullptr) std::fclose(json);
    return 0;
}
