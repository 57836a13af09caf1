// The live corpus (include/tenferro/live_corpus.hpp, issue 60's targets) side by side in one
// process with today's constant-corpus matmul_top_k and with FAISS IndexFlatIP under an
// IDSelectorBitmap (Debian's libfaiss-dev), one thread, k = 10.
//
// 1. Unfiltered search, batch 1..1024: a live corpus (a) after compact() (one segment, the
//    fused kernel with its bf16 first pass) and (b) with 10 % of the rows upserted after the
//    compaction into small segments (--segment-rows) and 5 % of all rows erased; against
//    s.matmul_top_k(queries, corpus.transposed(), k) with the corpus marked constant in the
//    backend's runtime cache (its packed and bf16 copies made before timing, as
//    bench/search.cpp does). (a) holds the same rows with ids 0..n-1, so its results must have
//    the same bits as matmul_top_k's; (b) is checked against matmul_top_k with a larger k, the
//    erased rows dropped.
// 2. Filtered search at 50 / 10 / 1 / 0.1 % of the rows passing, the passing rows random or
//    clustered (a contiguous id range), through a label filter (the rows carry a label per set)
//    and through an id allow-list; every query of a batch with the same filter ("same") or the
//    queries cycling through 4 different filters of that selectivity ("diff"). FAISS runs
//    IndexFlatIP::search with SearchParameters{sel = IDSelectorBitmap} once per distinct filter
//    (the queries of a filter gathered before timing), OpenMP and OpenBLAS at one thread. The
//    filtered time is also set against (passing fraction) x the unfiltered live search at the
//    same batch (timed in the same rounds): "fix/q" is (t - 1.2 f t_unf) / batch, the fixed cost
//    per query the target would have to allow. Outside the timing, our results for a few
//    queries of each configuration are checked against FAISS's (ids equal, scores within 1e-5;
//    a differing id is accepted when its score ties the k-th within 1e-5).
// 3. Snapshot: corpus.snapshot() then its release, ns per pair on one thread and on two threads
//    at once; the allocations in that loop counted by this program's global operator new.
// 4. Memory: corpus_stats::bytes per row after compaction with the breakdown of
//    detail::corpus::segment::bytes(), and VmHWM across the compaction of the first corpus
//    (reset with /proc/self/clear_refs first; a 1 ms VmRSS sampler beside it).
//
// Data: random unit rows (normal, then L2-normalised), and where found Fashion-MNIST (Debian's
// dataset-fashion-mnist: 60,000 x 784 training images as rows, the test images as queries, as
// float, L2-normalised).
//
// Timing: each round times every system of a configuration once in turn (calls repeated for at
// least --min-ms); a figure is the median over --rounds rounds (fewer for a slow filtered
// configuration: --filter-budget-s). Every call enters a session of
// one permit through cpu_backend::with_backend_session, for every system alike.
//
// Flags: --rows 200000 --dims 768,128 --batches 1,16,64,256,1024 --filter-batches 16,64,256
//        --filter-dims 768 (Fashion-MNIST's are always run) --filter-budget-s 6 (a filtered
//        configuration takes no further round once it has run this long: FAISS's per-query scan at
//        50 % of 200k x 768 takes tens of ms a query) --fractions 0.5,0.1,0.01,0.001 --segment-rows 2048 --rounds 3
//        --min-ms 300 --fashion 1|0 --json FILE (one object per line) --quick (about a minute)

#include <cblas.h>
#include <omp.h>
#include <faiss/IndexFlat.h>
#include <faiss/impl/IDSelector.h>
#include <faiss/utils/distances.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <asio/use_future.hpp>

#include "hwy_target_select.hpp"
#include "tenferro/tenferro.hpp"

// ---- Allocation counting (this program only): every operator new counts. ----
namespace {
std::atomic<std::uint64_t> g_news{0};
void* counted_alloc(std::size_t n) {
    g_news.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
void* counted_aligned(std::size_t n, std::align_val_t a) {
    g_news.fetch_add(1, std::memory_order_relaxed);
    const std::size_t al = std::max(static_cast<std::size_t>(a), sizeof(void*));
    void* p = nullptr;
    if (posix_memalign(&p, al, n == 0 ? al : n) != 0) throw std::bad_alloc();
    return p;
}
}  // namespace
void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    try {
        return counted_alloc(n);
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    try {
        return counted_alloc(n);
    } catch (...) {
        return nullptr;
    }
}
void* operator new(std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try {
        return counted_aligned(n, a);
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try {
        return counted_aligned(n, a);
    } catch (...) {
        return nullptr;
    }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;
constexpr std::int64_t k = 10;
constexpr int variants = 4;  // distinct filters per selectivity ("diff" batches cycle through them)

struct options {
    std::int64_t rows = 200000;
    std::vector<std::int64_t> dims{768, 128}, batches{1, 16, 64, 256, 1024}, filter_batches{16, 64, 256};
    std::vector<std::int64_t> filter_dims{768};
    double filter_budget_s = 6;  // a filtered configuration stops after the round that passes it
    std::vector<double> fractions{0.5, 0.1, 0.01, 0.001};
    std::int64_t segment_rows = 2048;
    int rounds = 3;
    double min_ms = 300;
    double filter_min_ms = 200;
    bool fashion = true;
    std::string json;
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

std::vector<double> reals(const std::string& s) {
    std::vector<double> out;
    std::size_t start = 0;
    while (start < s.size()) {
        const std::size_t comma = s.find(',', start);
        const std::size_t end = comma == std::string::npos ? s.size() : comma;
        out.push_back(std::stod(s.substr(start, end - start)));
        start = end + 1;
    }
    return out;
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--quick") {
            o.rows = 20000;
            o.batches = {1, 16, 256};
            o.filter_batches = {16, 64};
            o.filter_dims = {768};
            o.rounds = 3;
            o.min_ms = 60;
            o.filter_min_ms = 40;
        }
    for (int i = 1; i < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--quick") {
            --i;
            continue;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "live_corpus: %s needs a value\n", flag.c_str());
            std::exit(2);
        }
        const std::string value = argv[i + 1];
        if (flag == "--rows")
            o.rows = std::stoll(value);
        else if (flag == "--dims")
            o.dims = numbers(value);
        else if (flag == "--batches")
            o.batches = numbers(value);
        else if (flag == "--filter-batches")
            o.filter_batches = numbers(value);
        else if (flag == "--filter-dims")
            o.filter_dims = numbers(value);
        else if (flag == "--fractions")
            o.fractions = reals(value);
        else if (flag == "--segment-rows")
            o.segment_rows = std::stoll(value);
        else if (flag == "--rounds")
            o.rounds = std::stoi(value);
        else if (flag == "--min-ms")
            o.min_ms = o.filter_min_ms = std::stod(value);
        else if (flag == "--filter-budget-s")
            o.filter_budget_s = std::stod(value);
        else if (flag == "--fashion")
            o.fashion = value != "0";
        else if (flag == "--json")
            o.json = value;
        else {
            std::fprintf(stderr, "live_corpus: unknown flag %s (see bench/live_corpus.cpp)\n", flag.c_str());
            std::exit(2);
        }
    }
    return o;
}

void normalise(float* row, std::int64_t d) {
    double norm = 0;
    for (std::int64_t j = 0; j < d; ++j) norm += double(row[j]) * row[j];
    if (norm == 0) {
        row[0] = 1;
        return;
    }
    const auto inv = static_cast<float>(1 / std::sqrt(norm));
    for (std::int64_t j = 0; j < d; ++j) row[j] *= inv;
}

tf::tensor unit_rows(std::int64_t n, std::int64_t d, unsigned seed) {
    tf::tensor t = tf::tensor::zeros(tf::dtype::f32, {n, d});
    auto* p = static_cast<float*>(t.data());
    std::mt19937 rng(seed);
    std::normal_distribution<float> g;
    for (std::int64_t i = 0; i < n; ++i) {
        float* row = p + i * d;
        for (std::int64_t j = 0; j < d; ++j) row[j] = g(rng);
        normalise(row, d);
    }
    return t;
}

// An idx3 file (gzip) of uint8 images as an n x (rows*cols) f32 tensor, rows L2-normalised.
bool read_idx_images(const std::string& path, std::int64_t max_rows, tf::tensor& out) {
    const std::string cmd = "gzip -dc '" + path + "' 2>/dev/null";
    std::FILE* f = popen(cmd.c_str(), "r");
    if (f == nullptr) return false;
    unsigned char head[16];
    if (std::fread(head, 1, 16, f) != 16 || head[2] != 8 || head[3] != 3) {
        pclose(f);
        return false;
    }
    auto be = [&](int at) {
        return (std::int64_t{head[at]} << 24) | (std::int64_t{head[at + 1]} << 16) | (std::int64_t{head[at + 2]} << 8) |
               std::int64_t{head[at + 3]};
    };
    const std::int64_t n = std::min(be(4), max_rows), d = be(8) * be(12);
    std::vector<unsigned char> bytes(static_cast<std::size_t>(n * d));
    const bool ok = std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size();
    pclose(f);
    if (!ok) return false;
    out = tf::tensor::zeros(tf::dtype::f32, {n, d});
    auto* p = static_cast<float*>(out.data());
    for (std::size_t i = 0; i < bytes.size(); ++i) p[i] = float(bytes[i]);
    for (std::int64_t i = 0; i < n; ++i) normalise(p + i * d, d);
    return true;
}

// Calls f() until min_ms have passed (at least once); seconds per call.
template <class F>
double per_call(double min_ms, F&& f) {
    const auto start = clock_type::now();
    int calls = 0;
    double elapsed = 0;
    do {
        f();
        ++calls;
        elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
    } while (elapsed * 1e3 < min_ms);
    return elapsed / calls;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string list(const std::vector<double>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
        char b[32];
        std::snprintf(b, sizeof b, "%s%.6g", i == 0 ? "" : ", ", v[i]);
        s += b;
    }
    return s + "]";
}

std::int64_t proc_status_kb(const char* key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    const std::size_t len = std::strlen(key);
    while (std::getline(in, line))
        if (line.compare(0, len, key) == 0 && line.size() > len && line[len] == ':')
            return std::stoll(line.substr(len + 1));
    return -1;
}

bool reset_hwm() {
    std::ofstream out("/proc/self/clear_refs");
    out << "5";
    out.flush();
    return static_cast<bool>(out);
}

struct env {
    std::string cpu, target;
    std::FILE* json = nullptr;
};

// One dataset: the corpus rows (ids 0..n-1) and the queries.
struct dataset {
    std::string name;
    tf::tensor corpus, queries;
    std::int64_t n = 0, d = 0;
};

// The row sets of part 2: for selectivity fi, kind (0 random, 1 clustered) and variant v, the
// rows passing, as sorted ids, a FAISS bitmap, and a label carried by those rows.
struct row_set {
    std::vector<tf::row_id> ids;
    std::vector<std::uint8_t> bitmap;
    tf::row_label label = 0;
};

struct filter_sets {
    std::vector<double> fractions;
    // sets[(fi * 2 + kind) * variants + v]
    std::vector<row_set> sets;
    std::vector<std::vector<tf::row_label>> row_labels;  // per row
    const row_set& at(std::size_t fi, int kind, int v) const {
        return sets[(fi * 2 + static_cast<std::size_t>(kind)) * variants + static_cast<std::size_t>(v)];
    }
};

filter_sets make_sets(std::int64_t n, const std::vector<double>& fractions) {
    filter_sets fs;
    fs.fractions = fractions;
    fs.row_labels.resize(static_cast<std::size_t>(n));
    for (std::size_t fi = 0; fi < fractions.size(); ++fi) {
        const std::int64_t c = std::max<std::int64_t>(1, std::llround(fractions[fi] * double(n)));
        std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
        std::iota(perm.begin(), perm.end(), 0);
        std::mt19937_64 rng(1000 + fi);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int kind = 0; kind < 2; ++kind)
            for (int v = 0; v < variants; ++v) {
                row_set s;
                s.label = static_cast<tf::row_label>(1 + (fi * 2 + static_cast<std::size_t>(kind)) * variants +
                                                     static_cast<std::size_t>(v));
                const std::int64_t offset = v * (n - c) / (variants - 1);
                for (std::int64_t j = 0; j < c; ++j)
                    s.ids.push_back(
                        static_cast<tf::row_id>(kind == 1 ? offset + j : perm[static_cast<std::size_t>(offset + j)]));
                std::sort(s.ids.begin(), s.ids.end());
                s.bitmap.assign(static_cast<std::size_t>((n + 7) / 8), 0);
                for (const tf::row_id id : s.ids) {
                    s.bitmap[id >> 3] |= static_cast<std::uint8_t>(1U << (id & 7));
                    fs.row_labels[id].push_back(s.label);
                }
                fs.sets.push_back(std::move(s));
            }
    }
    return fs;
}

// Upserts rows [first, last) of `corpus` (ids = row numbers) in writes of `per_write` rows.
void upsert_rows(tf::live_corpus& lc, const tf::tensor& corpus, std::int64_t first, std::int64_t last,
                 const filter_sets* fs, std::int64_t per_write) {
    const std::int64_t d = corpus.shape()[1];
    const auto* p = static_cast<const float*>(corpus.data());
    tf::corpus_write w;
    for (std::int64_t r = first; r < last; r += per_write) {
        w.clear();
        for (std::int64_t i = r; i < std::min(last, r + per_write); ++i) {
            std::span<const tf::row_label> labels;
            if (fs != nullptr) labels = fs->row_labels[static_cast<std::size_t>(i)];
            w.upsert(static_cast<tf::row_id>(i), std::span<const float>(p + i * d, static_cast<std::size_t>(d)),
                     labels);
        }
        const tf::write_result res = lc.apply(w);
        if (!res) {
            std::fprintf(stderr, "live_corpus: write failed: %s\n", res.error.message().c_str());
            std::exit(1);
        }
    }
}

struct top {
    std::vector<float> vals;
    std::vector<std::int64_t> ids;
};

// ---- Part 1: unfiltered search. ----
void part_unfiltered(const env& e, tf::cpu_backend& cpu, const options& o, const dataset& ds,
                     tf::live_corpus& compacted, std::int64_t& bytes_rows_note) {
    (void)bytes_rows_note;
    const std::int64_t n = ds.n, d = ds.d;
    // (b): 90 % compacted, the last 10 % of ids upserted after it (small segments), 5 % of all
    // ids erased.
    tf::live_corpus mixed({.dim = d, .segment_rows = o.segment_rows});
    const std::int64_t old_rows = n - n / 10;
    upsert_rows(mixed, ds.corpus, 0, old_rows, nullptr, 4096);
    mixed.compact();
    upsert_rows(mixed, ds.corpus, old_rows, n, nullptr, 256);
    std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(7);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<char> erased(static_cast<std::size_t>(n), 0);
    {
        tf::corpus_write w;
        for (std::int64_t i = 0; i < n / 20; ++i) {
            w.erase(static_cast<tf::row_id>(perm[static_cast<std::size_t>(i)]));
            erased[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])] = 1;
            if (w.size() == 256) {
                mixed.apply(w);
                w.clear();
            }
        }
        if (!w.empty()) mixed.apply(w);
    }
    const tf::corpus_stats ms = mixed.stats();
    std::printf("\n[1] unfiltered, k = %lld, 1 thread; %s; CPU %s; Highway target %s\n", static_cast<long long>(k),
                ds.name.c_str(), e.cpu.c_str(), e.target.c_str());
    std::printf("    (b): %lld live of %lld stored rows, %lld segments, %lld rows outside the compacted one\n",
                static_cast<long long>(ms.rows), static_cast<long long>(ms.stored_rows),
                static_cast<long long>(ms.segments), static_cast<long long>(ms.uncompacted_rows));
    std::printf("%-14s %7s %4s %5s | %10s | %10s %6s %5s | %10s %6s %5s | %s\n", "data", "rows", "d", "batch",
                "const q/s", "live(a)q/s", "ratio", ">=.95", "live(b)q/s", "ratio", ">=.85", "exact");

    tf::session_options so;
    so.permits = 1;
    cpu.default_cache().mark_constant(ds.corpus);
    for (const std::int64_t batch : o.batches) {
        if (batch > ds.queries.shape()[0]) continue;
        const tf::const_tensor_view q = ds.queries.slice(0, 0, batch);
        top cst, la, lb;
        auto run_const = [&](std::int64_t kk, top& out) {
            auto r = cpu.with_backend_session(
                            so,
                            [&](tf::backend_session& s) {
                                auto [v, i] = s.matmul_top_k(q, ds.corpus.transposed(), kk);
                                top t;
                                const auto* vp = static_cast<const float*>(v.data());
                                const auto* ip = static_cast<const std::int64_t*>(i.data());
                                t.vals.assign(vp, vp + batch * kk);
                                t.ids.assign(ip, ip + batch * kk);
                                return t;
                            },
                            asio::use_future)
                         .get();
            out = std::move(*r);
        };
        auto run_live = [&](tf::live_corpus& lc, top& out) {
            auto r = cpu.with_backend_session(
                            so,
                            [&](tf::backend_session& s) {
                                const tf::corpus_snapshot snap = lc.snapshot();
                                tf::corpus_hits h = tf::search(s, snap, q, k);
                                top t;
                                for (const tf::corpus_hit& hit : h.hits) {
                                    t.vals.push_back(hit.score);
                                    t.ids.push_back(static_cast<std::int64_t>(hit.id));
                                }
                                return t;
                            },
                            asio::use_future)
                         .get();
            out = std::move(*r);
        };
        run_const(k, cst);  // warm-up: the packed corpus and its bf16 copy, the buffer pool
        run_live(compacted, la);
        run_live(mixed, lb);
        std::vector<double> tc, ta, tb;
        for (int round = 0; round < o.rounds; ++round) {
            tc.push_back(per_call(o.min_ms, [&] { run_const(k, cst); }));
            ta.push_back(per_call(o.min_ms, [&] { run_live(compacted, la); }));
            tb.push_back(per_call(o.min_ms, [&] { run_live(mixed, lb); }));
        }
        // Exactness: (a) has the same bits as matmul_top_k; (b) equals matmul_top_k with a larger
        // k, erased rows dropped.
        const bool a_same = la.vals.size() == cst.vals.size() &&
                            std::memcmp(la.vals.data(), cst.vals.data(), cst.vals.size() * 4) == 0 && la.ids == cst.ids;
        top wide;
        const std::int64_t kw = std::min<std::int64_t>(n, 64);
        run_const(kw, wide);
        bool b_same = static_cast<std::int64_t>(lb.ids.size()) == batch * k;
        for (std::int64_t r = 0; r < batch && b_same; ++r) {
            std::int64_t j = 0;
            for (std::int64_t w = 0; w < kw && j < k; ++w) {
                const std::int64_t id = wide.ids[static_cast<std::size_t>(r * kw + w)];
                if (erased[static_cast<std::size_t>(id)] != 0) continue;
                const std::size_t at = static_cast<std::size_t>(r * k + j);
                if (lb.ids[at] != id || lb.vals[at] != wide.vals[static_cast<std::size_t>(r * kw + w)]) b_same = false;
                ++j;
            }
        }
        const double qc = double(batch) / median(tc), qa = double(batch) / median(ta), qb = double(batch) / median(tb);
        std::printf("%-14s %7lld %4lld %5lld | %10.1f | %10.1f %5.3fx %5s | %10.1f %5.3fx %5s | %s%s\n",
                    ds.name.c_str(), static_cast<long long>(n), static_cast<long long>(d),
                    static_cast<long long>(batch), qc, qa, qa / qc, qa / qc >= 0.95 ? "ok" : "MISS", qb, qb / qc,
                    qb / qc >= 0.85 ? "ok" : "MISS", a_same ? "a=bits" : "a:MISMATCH",
                    b_same ? " b=exact" : " b:MISMATCH");
        std::fflush(stdout);
        if (e.json != nullptr) {
            std::fprintf(e.json,
                         "{\"part\": \"unfiltered\", \"data\": \"%s\", \"rows\": %lld, \"d\": %lld, \"batch\": %lld, "
                         "\"k\": %lld, \"threads\": 1, \"cpu\": \"%s\", \"target\": \"%s\", \"const_s\": %s, "
                         "\"live_compacted_s\": %s, \"live_mixed_s\": %s, \"const_qps\": %.3f, "
                         "\"live_compacted_qps\": %.3f, \"live_mixed_qps\": %.3f, \"ratio_compacted\": %.4f, "
                         "\"ratio_mixed\": %.4f, \"mixed_live_rows\": %lld, \"mixed_stored_rows\": %lld, "
                         "\"mixed_segments\": %lld, \"compacted_bit_identical\": %s, \"mixed_exact\": %s}\n",
                         ds.name.c_str(), static_cast<long long>(n), static_cast<long long>(d),
                         static_cast<long long>(batch), static_cast<long long>(k), e.cpu.c_str(), e.target.c_str(),
                         list(tc).c_str(), list(ta).c_str(), list(tb).c_str(), qc, qa, qb, qa / qc, qb / qc,
                         static_cast<long long>(ms.rows), static_cast<long long>(ms.stored_rows),
                         static_cast<long long>(ms.segments), a_same ? "true" : "false", b_same ? "true" : "false");
            std::fflush(e.json);
        }
    }
    cpu.default_cache().unmark_constant(ds.corpus);
}

// ---- Part 2: filtered search. ----
void part_filtered(const env& e, tf::cpu_backend& cpu, const options& o, const dataset& ds, tf::live_corpus& lc,
                   const filter_sets& fs) {
    const std::int64_t n = ds.n, d = ds.d;
    faiss::IndexFlatIP index(static_cast<int>(d));
    index.add(n, static_cast<const float*>(ds.corpus.data()));
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    std::printf(
        "\n[2] filtered, k = %lld, 1 thread; %s; CPU %s; Highway target %s; FAISS IndexFlatIP + "
        "IDSelectorBitmap, one search per distinct filter\n",
        static_cast<long long>(k), ds.name.c_str(), e.cpu.c_str(), e.target.c_str());
    std::printf("%-14s %4s %6s %4s %6s %4s %5s | %10s %10s %6s %3s | %9s %9s %6s %9s | %s\n", "data", "d", "pass",
                "kind", "via", "q", "batch", "ours q/s", "FAISS q/s", "ratio", ">=3", "t ms", "f*unf ms", "t/f*u",
                "fix/q us", "check");
    tf::session_options so;
    so.permits = 1;
    const char* kinds[2] = {"rand", "clust"};
    for (const std::int64_t batch : o.filter_batches) {
        if (batch > ds.queries.shape()[0]) continue;
        const tf::const_tensor_view q = ds.queries.slice(0, 0, batch);
        const auto* qp = static_cast<const float*>(q.data());
        auto run_live = [&](std::span<const tf::row_filter> filters, tf::corpus_hits& out) {
            auto r = cpu.with_backend_session(
                            so,
                            [&](tf::backend_session& s) {
                                const tf::corpus_snapshot snap = lc.snapshot();
                                return tf::search(s, snap, q, k, filters);
                            },
                            asio::use_future)
                         .get();
            out = std::move(*r);
        };
        // The unfiltered time at this batch, in the same rounds as the filtered ones.
        tf::corpus_hits unf_out;
        run_live({}, unf_out);
        std::vector<double> t_unf;
        for (std::size_t fi = 0; fi < fs.fractions.size(); ++fi) {
            const double f = fs.fractions[fi];
            for (int kind = 0; kind < 2; ++kind)
                for (int diff = 0; diff < 2; ++diff) {
                    // FAISS: the queries of each distinct filter gathered, one search per filter.
                    const int nv = diff != 0 ? variants : 1;
                    std::vector<std::vector<float>> fq(static_cast<std::size_t>(nv));
                    std::vector<std::vector<std::int64_t>> fq_rows(static_cast<std::size_t>(nv));
                    for (std::int64_t i = 0; i < batch; ++i) {
                        const int v = diff != 0 ? static_cast<int>(i % variants) : 0;
                        fq[static_cast<std::size_t>(v)].insert(fq[static_cast<std::size_t>(v)].end(), qp + i * d,
                                                               qp + (i + 1) * d);
                        fq_rows[static_cast<std::size_t>(v)].push_back(i);
                    }
                    std::vector<faiss::IDSelectorBitmap> sels;
                    sels.reserve(static_cast<std::size_t>(nv));
                    for (int v = 0; v < nv; ++v) {
                        const row_set& s = fs.at(fi, kind, v);
                        sels.emplace_back(s.bitmap.size(), s.bitmap.data());
                    }
                    std::vector<faiss::SearchParameters> params(static_cast<std::size_t>(nv));
                    for (int v = 0; v < nv; ++v)
                        params[static_cast<std::size_t>(v)].sel = &sels[static_cast<std::size_t>(v)];
                    std::vector<float> fd(static_cast<std::size_t>(batch * k));
                    std::vector<faiss::Index::idx_t> fi_ids(static_cast<std::size_t>(batch * k));
                    auto run_faiss = [&] {
                        std::int64_t at = 0;
                        for (int v = 0; v < nv; ++v) {
                            const auto m = static_cast<std::int64_t>(fq_rows[static_cast<std::size_t>(v)].size());
                            if (m == 0) continue;
                            index.search(m, fq[static_cast<std::size_t>(v)].data(), k, fd.data() + at * k,
                                         fi_ids.data() + at * k, &params[static_cast<std::size_t>(v)]);
                            at += m;
                        }
                    };
                    // Ours: by label and by id allow-list.
                    std::vector<tf::row_filter> by_label(static_cast<std::size_t>(batch)),
                        by_ids(static_cast<std::size_t>(batch));
                    for (std::int64_t i = 0; i < batch; ++i) {
                        const int v = diff != 0 ? static_cast<int>(i % variants) : 0;
                        const row_set& s = fs.at(fi, kind, v);
                        by_label[static_cast<std::size_t>(i)].labels = std::vector<tf::row_label>{s.label};
                        by_ids[static_cast<std::size_t>(i)].ids = s.ids;
                    }
                    tf::corpus_hits out_l, out_i;
                    run_faiss();
                    run_live(by_label, out_l);
                    run_live(by_ids, out_i);
                    std::vector<double> tf_, tl, ti, tu;
                    const auto config_start = clock_type::now();
                    for (int round = 0; round < o.rounds; ++round) {
                        if (round > 0 &&
                            std::chrono::duration<double>(clock_type::now() - config_start).count() > o.filter_budget_s)
                            break;
                        tf_.push_back(per_call(o.filter_min_ms, run_faiss));
                        tl.push_back(per_call(o.filter_min_ms, [&] { run_live(by_label, out_l); }));
                        ti.push_back(per_call(o.filter_min_ms, [&] { run_live(by_ids, out_i); }));
                        tu.push_back(per_call(o.filter_min_ms, [&] { run_live({}, unf_out); }));
                    }
                    t_unf.insert(t_unf.end(), tu.begin(), tu.end());
                    // Check a few queries against FAISS (outside the timing).
                    auto check = [&](const tf::corpus_hits& h) {
                        int bad = 0;
                        const std::int64_t checked = std::min<std::int64_t>(batch, 8);
                        for (int v = 0; v < nv; ++v) {
                            const auto& rows_v = fq_rows[static_cast<std::size_t>(v)];
                            std::int64_t at = 0;
                            for (int u = 0; u < v; ++u)
                                at += static_cast<std::int64_t>(fq_rows[static_cast<std::size_t>(u)].size());
                            for (std::size_t j = 0; j < rows_v.size(); ++j) {
                                const std::int64_t r = rows_v[j];
                                if (r >= checked) continue;
                                const std::span<const tf::corpus_hit> ours = h[static_cast<std::size_t>(r)];
                                const std::size_t base =
                                    static_cast<std::size_t>((at + static_cast<std::int64_t>(j)) * k);
                                if (static_cast<std::int64_t>(ours.size()) != k) {
                                    ++bad;
                                    continue;
                                }
                                const float kth = fd[base + k - 1];
                                std::set<std::int64_t> theirs(fi_ids.begin() + static_cast<std::ptrdiff_t>(base),
                                                              fi_ids.begin() + static_cast<std::ptrdiff_t>(base + k));
                                bool ok = true;
                                for (std::int64_t p = 0; p < k; ++p) {
                                    const tf::corpus_hit& hit = ours[static_cast<std::size_t>(p)];
                                    if (std::abs(hit.score - fd[base + static_cast<std::size_t>(p)]) > 1e-5f)
                                        ok = false;
                                    if (theirs.count(static_cast<std::int64_t>(hit.id)) == 0 &&
                                        std::abs(hit.score - kth) > 1e-5f)
                                        ok = false;
                                }
                                bad += ok ? 0 : 1;
                            }
                        }
                        return bad;
                    };
                    const int bad_l = check(out_l), bad_i = check(out_i);
                    const double tfa = median(tf_), tu_m = median(tu);
                    const double fq_s = double(batch) / tfa;
                    for (int via = 0; via < 2; ++via) {
                        const double t = median(via == 0 ? tl : ti);
                        const double qps = double(batch) / t;
                        const double scaled = f * tu_m;
                        const double fixed_us = (t - 1.2 * scaled) / double(batch) * 1e6;
                        const int bad = via == 0 ? bad_l : bad_i;
                        std::printf(
                            "%-14s %4lld %5.1f%% %4s %6s %4s %5lld | %10.1f %10.1f %5.2fx %3s | %9.3f %9.3f "
                            "%6.2f %9.1f | %s\n",
                            ds.name.c_str(), static_cast<long long>(d), 100 * f, kinds[kind],
                            via == 0 ? "label" : "ids", diff != 0 ? "diff" : "same", static_cast<long long>(batch), qps,
                            fq_s, qps / fq_s, qps / fq_s >= 3 ? "ok" : "NO", t * 1e3, scaled * 1e3, t / scaled,
                            fixed_us, bad == 0 ? "=FAISS" : "MISMATCH");
                        std::fflush(stdout);
                        if (e.json != nullptr) {
                            std::fprintf(
                                e.json,
                                "{\"part\": \"filtered\", \"data\": \"%s\", \"rows\": %lld, \"d\": %lld, "
                                "\"batch\": %lld, \"k\": %lld, \"threads\": 1, \"cpu\": \"%s\", \"target\": \"%s\", "
                                "\"fraction\": %.6g, \"kind\": \"%s\", \"via\": \"%s\", \"filters\": \"%s\", "
                                "\"ours_s\": %s, \"faiss_s\": %s, \"unfiltered_s\": %s, \"ours_qps\": %.3f, "
                                "\"faiss_qps\": %.3f, \"ratio_faiss\": %.4f, \"fraction_x_unfiltered_s\": %.6g, "
                                "\"fixed_us_per_query_at_1_2\": %.3f, \"mismatches\": %d}\n",
                                ds.name.c_str(), static_cast<long long>(n), static_cast<long long>(d),
                                static_cast<long long>(batch), static_cast<long long>(k), e.cpu.c_str(),
                                e.target.c_str(), f, kinds[kind], via == 0 ? "label" : "ids",
                                diff != 0 ? "diff" : "same", list(via == 0 ? tl : ti).c_str(), list(tf_).c_str(),
                                list(tu).c_str(), qps, fq_s, qps / fq_s, scaled, fixed_us, bad);
                            std::fflush(e.json);
                        }
                    }
                }
        }
        std::printf("%-14s %4lld unfiltered live (a), batch %lld: %.3f ms (median of %zu)\n", ds.name.c_str(),
                    static_cast<long long>(d), static_cast<long long>(batch), median(t_unf) * 1e3, t_unf.size());
    }
}

// ---- Part 3: snapshots. ----
void part_snapshot(const env& e, tf::live_corpus& lc) {
    constexpr std::int64_t iters = 20'000'000;
    auto loop = [&lc](std::int64_t count) {
        std::uint64_t sink = 0;
        for (std::int64_t i = 0; i < count; ++i) {
            tf::corpus_snapshot s = lc.snapshot();
            sink += s.seq();
            asm volatile("" : : "r"(sink) : "memory");
        }
        return sink;
    };
    loop(100000);
    // What starting and joining two std::threads allocates by itself, subtracted below.
    const std::uint64_t b0 = g_news.load();
    {
        std::thread a([] {}), b([] {});
        a.join();
        b.join();
    }
    const std::uint64_t thread_allocs = g_news.load() - b0;
    std::vector<double> one, two;
    one.reserve(3);
    two.reserve(3);
    std::uint64_t allocs1 = 0;
    std::int64_t allocs2 = 0;
    for (int round = 0; round < 3; ++round) {
        std::uint64_t a0 = g_news.load();
        auto t0 = clock_type::now();
        loop(iters);
        const double ns1 = std::chrono::duration<double>(clock_type::now() - t0).count() / double(iters) * 1e9;
        allocs1 += g_news.load() - a0;
        one.push_back(ns1);
        std::atomic<int> ready{0};
        std::vector<double> per(2);
        a0 = g_news.load();
        std::thread th[2];
        for (int t = 0; t < 2; ++t)
            th[t] = std::thread([&, t] {
                ready.fetch_add(1);
                while (ready.load() < 2) {
                }
                const auto s0 = clock_type::now();
                loop(iters / 2);
                per[static_cast<std::size_t>(t)] =
                    std::chrono::duration<double>(clock_type::now() - s0).count() / double(iters / 2) * 1e9;
            });
        for (auto& t : th) t.join();
        allocs2 += static_cast<std::int64_t>(g_news.load() - a0) - static_cast<std::int64_t>(thread_allocs);
        two.push_back(std::max(per[0], per[1]));
    }
    std::printf("\n[3] snapshot take + release, CPU %s, Highway target %s\n", e.cpu.c_str(), e.target.c_str());
    std::printf(
        "    1 thread : %.1f ns per pair (median of 3; target <= 100) %s; operator new calls in %lld pairs: %llu\n",
        median(one), median(one) <= 100 ? "ok" : "MISS", static_cast<long long>(3 * iters),
        static_cast<unsigned long long>(allocs1));
    std::printf(
        "    2 threads: %.1f ns per pair per thread (median of 3, slower thread) %s; operator new calls "
        "beyond the threads' own: %lld\n",
        median(two), median(two) <= 100 ? "ok" : "MISS", static_cast<long long>(allocs2));
    if (e.json != nullptr)
        std::fprintf(e.json,
                     "{\"part\": \"snapshot\", \"cpu\": \"%s\", \"target\": \"%s\", \"ns_per_pair_1_thread\": %s, "
                     "\"ns_per_pair_2_threads\": %s, \"allocations_1_thread\": %llu, \"allocations_2_threads\": %lld, "
                     "\"pairs_per_round\": %lld}\n",
                     e.cpu.c_str(), e.target.c_str(), list(one).c_str(), list(two).c_str(),
                     static_cast<unsigned long long>(allocs1), static_cast<long long>(allocs2),
                     static_cast<long long>(iters));
}

std::string cpu_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model = "?", family = "?";
    while (std::getline(in, line)) {
        if (model == "?" && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
        if (family == "?" && line.rfind("cpu family", 0) == 0) family = line.substr(line.find(':') + 2);
    }
    return model + " (family " + family + ")";
}

}  // namespace

int main(int argc, char** argv) {
    const options o = parse(argc, argv);
    env e;
    e.cpu = cpu_name();
    e.target = tf::bench::dispatched_highway_target();
    e.json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "w");
    std::printf(
        "live_corpus: live corpus vs constant-corpus matmul_top_k and FAISS IndexFlatIP; CPU %s; Highway "
        "target %s; bf16 first pass %s; 1 thread; k = %lld; median of %d rounds\n",
        e.cpu.c_str(), e.target.c_str(), tf::bench::dispatched_has_first_pass() ? "yes" : "no",
        static_cast<long long>(k), o.rounds);

    tf::cpu_backend_options bo;
    bo.permits = 1;
    const std::int64_t max_d = std::max<std::int64_t>(*std::max_element(o.dims.begin(), o.dims.end()), 784);
    const auto corpus_bytes = static_cast<std::size_t>(std::max<std::int64_t>(o.rows, 60000) * max_d * 4);
    bo.runtime_cache_bytes =
        corpus_bytes + corpus_bytes / 4 + (std::size_t{16} << 20) + corpus_bytes + corpus_bytes / 2;
    tf::cpu_backend cpu(bo);

    std::vector<dataset> sets;
    for (const std::int64_t d : o.dims) {
        dataset ds;
        ds.name = "random";
        ds.n = o.rows;
        ds.d = d;
        sets.push_back(std::move(ds));
    }
    const std::string fm = "/usr/share/datasets/fashion-mnist/";
    if (o.fashion) {
        dataset ds;
        ds.name = "fashion-mnist";
        if (read_idx_images(fm + "train-images-idx3-ubyte.gz", o.rows < 200000 ? o.rows : 60000, ds.corpus) &&
            read_idx_images(fm + "t10k-images-idx3-ubyte.gz", 1024, ds.queries)) {
            ds.n = ds.corpus.shape()[0];
            ds.d = ds.corpus.shape()[1];
            sets.push_back(std::move(ds));
        } else {
            std::printf("(Fashion-MNIST not found under %s: apt-get install dataset-fashion-mnist)\n", fm.c_str());
        }
    }

    bool memory_done = false;
    for (dataset& ds : sets) {
        const std::int64_t max_batch = std::max(*std::max_element(o.batches.begin(), o.batches.end()),
                                                *std::max_element(o.filter_batches.begin(), o.filter_batches.end()));
        if (ds.name == "random") {
            ds.corpus = unit_rows(ds.n, ds.d, 1);
            ds.queries = unit_rows(max_batch, ds.d, 2);
        }
        const bool filtered =
            std::find(o.filter_dims.begin(), o.filter_dims.end(), ds.d) != o.filter_dims.end() || ds.name != "random";
        const filter_sets fs = make_sets(ds.n, o.fractions);
        tf::live_corpus lc({.dim = ds.d, .segment_rows = o.segment_rows});
        const std::int64_t rss0 = proc_status_kb("VmRSS");
        upsert_rows(lc, ds.corpus, 0, ds.n, &fs, 4096);
        // ---- Part 4 (the first corpus): memory across its compaction. ----
        const std::int64_t rss_before = proc_status_kb("VmRSS");
        const bool hwm_reset = reset_hwm();
        const std::int64_t hwm_before = proc_status_kb("VmHWM");
        std::atomic<bool> sampling{true};
        std::atomic<std::int64_t> sampled_peak{rss_before};
        std::thread sampler([&] {
            while (sampling.load()) {
                const std::int64_t r = proc_status_kb("VmRSS");
                if (r > sampled_peak.load()) sampled_peak.store(r);
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        });
        const auto c0 = clock_type::now();
        lc.compact();
        const double compact_s = std::chrono::duration<double>(clock_type::now() - c0).count();
        sampling.store(false);
        sampler.join();
        const std::int64_t hwm_after = proc_status_kb("VmHWM"), rss_after = proc_status_kb("VmRSS");
        if (!memory_done) {
            memory_done = true;
            const tf::corpus_stats st = lc.stats();
            std::int64_t label_total = 0;
            for (const auto& l : fs.row_labels) label_total += static_cast<std::int64_t>(l.size());
            const double rows = double(st.rows), d = double(ds.d);
            std::printf("\n[4] memory, %s %lld x %lld (labels: %.2f per row), CPU %s, Highway target %s\n",
                        ds.name.c_str(), static_cast<long long>(ds.n), static_cast<long long>(ds.d),
                        double(label_total) / rows, e.cpu.c_str(), e.target.c_str());
            std::printf("    corpus_stats::bytes / rows after compaction: %.1f B per row (%llu B, %lld segment)\n",
                        double(st.bytes) / rows, static_cast<unsigned long long>(st.bytes),
                        static_cast<long long>(st.segments));
            std::printf(
                "    breakdown (segment::bytes): f32 %.0f + bf16 copy %.0f + bf16 flags 8 + id 8 + label_end 4 + "
                "erased_at 8 + labels %.2f (4 B x %.2f per row) = %.1f B per row\n",
                4 * d, 2 * d, 4.0 * double(label_total) / rows, double(label_total) / rows,
                6 * d + 28 + 4.0 * double(label_total) / rows);
            std::printf(
                "    not in stats: the writer's id index (unordered_map<row_id, location>); RSS grew %.1f B "
                "per row from empty to compacted\n",
                double(rss_after - rss0) * 1024 / rows);
            std::printf(
                "    compaction took %.2f s: RSS %.1f MB before, %.1f MB after; peak during it %.1f MB (VmHWM%s), "
                "%.1f MB (1 ms VmRSS samples): +%.1f MB over before = %.2f x the f32 rows\n",
                compact_s, double(rss_before) / 1024, double(rss_after) / 1024, double(hwm_after) / 1024,
                hwm_reset ? " reset first" : " NOT reset", double(sampled_peak.load()) / 1024,
                double(std::max(hwm_after, sampled_peak.load()) - rss_before) / 1024,
                double(std::max(hwm_after, sampled_peak.load()) - rss_before) * 1024 / (rows * 4 * d));
            if (e.json != nullptr)
                std::fprintf(e.json,
                             "{\"part\": \"memory\", \"data\": \"%s\", \"rows\": %lld, \"d\": %lld, \"cpu\": \"%s\", "
                             "\"target\": \"%s\", \"stats_bytes\": %llu, \"bytes_per_row\": %.2f, "
                             "\"labels_per_row\": %.3f, \"rss_empty_kb\": %lld, \"rss_before_compaction_kb\": %lld, "
                             "\"hwm_reset\": %s, \"hwm_before_kb\": %lld, \"hwm_after_kb\": %lld, "
                             "\"sampled_peak_kb\": %lld, \"rss_after_kb\": %lld, \"compaction_s\": %.3f}\n",
                             ds.name.c_str(), static_cast<long long>(ds.n), static_cast<long long>(ds.d), e.cpu.c_str(),
                             e.target.c_str(), static_cast<unsigned long long>(st.bytes), double(st.bytes) / rows,
                             double(label_total) / rows, static_cast<long long>(rss0),
                             static_cast<long long>(rss_before), hwm_reset ? "true" : "false",
                             static_cast<long long>(hwm_before), static_cast<long long>(hwm_after),
                             static_cast<long long>(sampled_peak.load()), static_cast<long long>(rss_after), compact_s);
            part_snapshot(e, lc);
        }
        std::int64_t unused = 0;
        part_unfiltered(e, cpu, o, ds, lc, unused);
        if (filtered) part_filtered(e, cpu, o, ds, lc, fs);
        ds.corpus = tf::tensor();
        ds.queries = tf::tensor();
    }
    if (e.json != nullptr) std::fclose(e.json);
    return 0;
}
