// Exact search with a bf16 first pass (search_bf16.hpp; the proof in
// docs/design/exact-search-first-pass.md).
//
// Per task (a range of corpus rows, in panels of 16): for each chunk of rows, for each block of up
// to 12 queries, the first-pass score tile (VDPBF16PS, or its emulation), then per query a vector
// pass computing each row's interval [L, U] from the stored norms: rows with U >= the query's
// running k-th lower bound enter its candidate buffer, rows with L above it enter its k-heap of
// lower bounds. Then per query: the final threshold over every task's heap, the candidates that
// reach it scored again with the f32 tile kernel's operation sequence, the top k of those.

#include "kernels/search_bf16.hpp"
#include "kernels/stop_point.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/search_bf16.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/gemm_plan.hpp"

#ifndef TENFERRO_KERNELS_SEARCH_BF16_ONCE
#define TENFERRO_KERNELS_SEARCH_BF16_ONCE
namespace tenferro::kernels::search_detail {

namespace gd = gemm_detail;

constexpr std::int64_t panel = 16;   // corpus rows per panel: one vector of 16 f32 lanes
// Queries per first-pass micro-tile: 12 x 2 vectors of accumulators, 2 corpus vectors and a
// broadcast query pair in 32 registers; 14 loads per 24 VDPBF16PS.
constexpr std::int64_t block_q = 12;
constexpr float range_limit = 0x1p60f;

// A query's candidate buffer (per task): a few k and a constant. Where twice that reaches n the
// first pass cannot discard enough to pay: the f32 path runs.
inline std::int64_t capacity_of(std::int64_t count) noexcept { return 4 * count + 256; }

// The layout of make_bf16_corpus's output: per panel of 16 rows, k2 = ceil(k / 2) vectors of 16
// dwords (row r's pair t: bf16 of element 2t in the low half, 2t + 1 in the high half), then
// the norms ||x|| and ||x - bf16(x)|| of every row (n_pad floats each; a flagged row: +inf and 0).
struct corpus_layout {
    std::int64_t n = 0, k = 0, k2 = 0, n_pad = 0;
    std::size_t data_bytes = 0, norm_offset = 0, dnorm_offset = 0, bytes = 0;
};

inline corpus_layout layout_of(std::int64_t k, std::int64_t n) noexcept {
    corpus_layout l;
    l.n = n;
    l.k = k;
    l.k2 = (k + 1) / 2;
    l.n_pad = gd::round_up(std::max<std::int64_t>(n, 1), panel);
    l.data_bytes = gd::round_up_bytes(static_cast<std::size_t>(l.n_pad * l.k2) * 4);
    l.norm_offset = l.data_bytes;
    l.dnorm_offset = l.norm_offset + gd::round_up_bytes(static_cast<std::size_t>(l.n_pad) * 4);
    l.bytes = l.dnorm_offset + gd::round_up_bytes(static_cast<std::size_t>(l.n_pad) * 4);
    return l;
}

// A double rounded up to f32 (the value as a float no smaller than it).
inline float round_up_f32(double v) noexcept {
    float f = static_cast<float>(v);
    if (static_cast<double>(f) < v) f = std::nextafter(f, std::numeric_limits<float>::infinity());
    return f;
}

// The per-query coefficients of the bound (design doc, "The bound" and "Evaluating it safely"):
// eps'(x) = a * ||x|| + b * ||dx|| + c * |s~| + d. `ok` false: the query takes the f32 path.
struct query_bound {
    float a = 0, b = 0, c = 0, d = 0;
    bool ok = false;
};

// The first-pass state of one (task, query): the k largest lower bounds seen (a min-heap, so the
// root is the running threshold) and the candidate rows with their upper bounds.
struct query_state {
    float* heap;
    std::int64_t heap_n;
    std::int64_t* cand;
    float* cand_u;
    std::int64_t cand_n;
    bool overflow;
};

inline void heap_sift_down(float* h, std::int64_t n, std::int64_t i) noexcept {
    for (;;) {
        const std::int64_t l = 2 * i + 1, r = l + 1;
        std::int64_t low = i;
        if (l < n && h[l] < h[low]) low = l;
        if (r < n && h[r] < h[low]) low = r;
        if (low == i) return;
        std::swap(h[i], h[low]);
        i = low;
    }
}
inline void heap_push(float* h, std::int64_t& n, float v) noexcept {
    std::int64_t i = n++;
    h[i] = v;
    while (i > 0) {
        const std::int64_t p = (i - 1) / 2;
        if (!(h[i] < h[p])) break;
        std::swap(h[i], h[p]);
        i = p;
    }
}

// Offers row `id` with interval [lo, up] to a query's state; `count` the k of the search, `cap`
// the candidate buffer's capacity. Returns the running threshold afterwards.
inline float offer(query_state& q, std::int64_t count, std::int64_t cap, std::int64_t id, float lo, float up) noexcept {
    const float t = q.heap_n < count ? -std::numeric_limits<float>::infinity() : q.heap[0];
    if (q.overflow || !(up >= t)) return t;
    if (q.cand_n == cap) {
        // Periodic selection: drop what the threshold now excludes; still more than half full
        // means this query keeps too many rows for the pass to pay (the f32 path answers it).
        std::int64_t w = 0;
        for (std::int64_t c = 0; c < q.cand_n; ++c)
            if (q.cand_u[c] >= t) {
                q.cand[w] = q.cand[c];
                q.cand_u[w] = q.cand_u[c];
                ++w;
            }
        q.cand_n = w;
        if (w > cap / 2) {
            q.overflow = true;
            return t;
        }
    }
    q.cand[q.cand_n] = id;
    q.cand_u[q.cand_n] = up;
    ++q.cand_n;
    if (q.heap_n < count) {
        heap_push(q.heap, q.heap_n, lo);
    } else if (lo > q.heap[0]) {
        q.heap[0] = lo;
        heap_sift_down(q.heap, q.heap_n, 0);
    }
    return q.heap_n < count ? -std::numeric_limits<float>::infinity() : q.heap[0];
}

// rowwise top_k's order (gemm_top_k.cpp): NaN above every number, then larger, then lower index.
inline bool ranks_above(float a, std::int64_t ia, float b, std::int64_t ib) noexcept {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na != nb) return na;
    if (!na && a != b) return a > b;
    return ia < ib;
}

// Everything the per-target body needs, set up by the target-independent driver.
struct call {
    const gemm_top_k_operands* op;
    const gemm_top_k_plan* plan;
    corpus_layout lay;
    const std::uint32_t* cdata;
    const float* cnorm;
    const float* cdnorm;
    const std::uint32_t* qpairs;  // m x k2
    const query_bound* bounds;    // m
    std::int64_t tasks, cap, chunk;
    std::vector<query_state>* states;  // tasks x m
    bool emulated;
    float one;  // 1.0f, opaque to the compiler (the f32 tile kernel's alpha and beta are data too)
};

}  // namespace tenferro::kernels::search_detail
#endif  // TENFERRO_KERNELS_SEARCH_BF16_ONCE

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace sd = search_detail;
namespace gd = gemm_detail;

// VDPBF16PS through Highway (1.2 and later: AVX3_ZEN4, AVX3_SPR), 16 f32 lanes.
#if defined(HWY_NATIVE_DOT_BF16) && HWY_NATIVE_DOT_BF16 && HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define TENFERRO_SEARCH_NATIVE_DOT 1
constexpr bool native_dot = true;
#else
#define TENFERRO_SEARCH_NATIVE_DOT 0
constexpr bool native_dot = false;
#endif

// First-pass scores of R queries x (16 * NV) corpus rows starting at panel `p0` into
// tile[r * ld + col]: VDPBF16PS, one lane per (query, row), pairs in increasing t.
template <int R, int NV>
void tile_native(const sd::call& c, const std::uint32_t* q, std::int64_t p0, float* tile, std::int64_t ld) {
#if TENFERRO_SEARCH_NATIVE_DOT
    const hn::FixedTag<float, 16> df;
    const hn::Repartition<std::uint32_t, decltype(df)> du;
    const hn::Repartition<hwy::bfloat16_t, decltype(df)> db;
    using V = hn::Vec<decltype(df)>;
    const std::int64_t k2 = c.lay.k2;
    V acc[R][NV];
    V unused = hn::Zero(df);
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(df);
    const std::uint32_t* base[NV];
    for (int v = 0; v < NV; ++v) base[v] = c.cdata + (p0 + v) * k2 * sd::panel;
    for (std::int64_t t = 0; t < k2; ++t) {
        decltype(hn::BitCast(db, hn::Zero(du))) bv[NV];
        for (int v = 0; v < NV; ++v) bv[v] = hn::BitCast(db, hn::Load(du, base[v] + t * sd::panel));
        for (int r = 0; r < R; ++r) {
            const auto av = hn::BitCast(db, hn::Set(du, q[r * k2 + t]));
            for (int v = 0; v < NV; ++v) acc[r][v] = hn::ReorderWidenMulAccumulate(df, bv[v], av, acc[r][v], unused);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < NV; ++v) hn::StoreU(acc[r][v], df, tile + r * ld + v * sd::panel);
#else
    (void)c, (void)q, (void)p0, (void)tile, (void)ld;
    throw std::logic_error("tenferro::kernels::gemm_top_k_bf16: no native bf16 dot product on this target");
#endif
}

// The same tile through emulate_vdpbf16ps, lane by lane (any target).
void tile_emulated(const sd::call& c, const std::uint32_t* q, int rows, std::int64_t p0, int npanels, float* tile,
                   std::int64_t ld) {
    const std::int64_t k2 = c.lay.k2;
    for (int r = 0; r < rows; ++r)
        for (int v = 0; v < npanels; ++v) {
            const std::uint32_t* base = c.cdata + (p0 + v) * k2 * sd::panel;
            for (std::int64_t lane = 0; lane < sd::panel; ++lane) {
                float acc = 0.0f;
                for (std::int64_t t = 0; t < k2; ++t)
                    acc = emulate_vdpbf16ps(acc, base[t * sd::panel + lane], q[r * k2 + t]);
                tile[r * ld + v * sd::panel + lane] = acc;
            }
        }
}

template <int R>
void tile_rows_native(const sd::call& c, const std::uint32_t* q, std::int64_t p0, int npanels, float* tile,
                      std::int64_t ld) {
    int v = 0;
    for (; v + 2 <= npanels; v += 2) tile_native<R, 2>(c, q, p0 + v, tile + v * sd::panel, ld);
    if (v < npanels) tile_native<R, 1>(c, q, p0 + v, tile + v * sd::panel, ld);
}

using tile_rows_fn = void (*)(const sd::call&, const std::uint32_t*, std::int64_t, int, float*, std::int64_t);
template <std::size_t... R>
constexpr std::array<tile_rows_fn, sizeof...(R)> make_tile_rows_table(std::index_sequence<R...>) {
    return {&tile_rows_native<static_cast<int>(R) + 1>...};
}

void tile_any(const sd::call& c, const std::uint32_t* q, int rows, std::int64_t p0, int npanels, float* tile,
              std::int64_t ld) {
    if (c.emulated) return tile_emulated(c, q, rows, p0, npanels, tile, ld);
    static constexpr auto table = make_tile_rows_table(std::make_index_sequence<sd::block_q>{});
    table[static_cast<std::size_t>(rows - 1)](c, q, p0, npanels, tile, ld);
}

// Offers one query's first-pass scores s[0, cnt) (rows j0 ..) to its state: a vector pass computes
// each row's interval and compares its upper end with the running threshold; the few rows that
// reach it are offered one by one.
void filter_row(const sd::call& c, const sd::query_bound& qb, sd::query_state& st, const float* s, std::int64_t j0,
                std::int64_t cnt, std::int64_t count, const std::uint64_t* mask) {
    const hn::ScalableTag<float> d;
    constexpr std::int64_t L = static_cast<std::int64_t>(HWY_LANES(float));
    static_assert(L <= 64);
    const auto va = hn::Set(d, qb.a), vb = hn::Set(d, qb.b), vc = hn::Set(d, qb.c), vd = hn::Set(d, qb.d);
    float t = st.heap_n < count ? -std::numeric_limits<float>::infinity() : st.heap[0];
    const float* norm = c.cnorm + j0;
    const float* dnorm = c.cdnorm + j0;
    HWY_ALIGN float lo[L];
    HWY_ALIGN float up[L];
    for (std::int64_t j = 0; j < cnt; j += L) {
        const auto sv = hn::LoadU(d, s + j);
        const auto eps = hn::MulAdd(
            vc, hn::Abs(sv), hn::MulAdd(vb, hn::LoadU(d, dnorm + j), hn::MulAdd(va, hn::LoadU(d, norm + j), vd)));
        const auto u = hn::Add(sv, eps);
        const auto pass = hn::Ge(u, hn::Set(d, t));
        if (hn::AllFalse(d, pass)) continue;
        hn::Store(u, d, up);
        hn::Store(hn::Sub(sv, eps), d, lo);
        // Only the lanes that passed, in row order (each tested again: the threshold rises as they
        // enter), and none past the chunk's rows.
        std::uint8_t bytes[8] = {};
        hn::StoreMaskBits(d, pass, bytes);
        std::uint64_t bits = 0;
        for (int b = 7; b >= 0; --b) bits = (bits << 8) | bytes[b];
        const std::int64_t lanes = std::min(L, cnt - j);
        if (lanes < 64) bits &= (std::uint64_t{1} << lanes) - 1;
        if (mask != nullptr) bits &= mask_bits(mask, j0 + j, lanes);  // rows the query may not return
        for (; bits != 0; bits &= bits - 1) {
            const auto l = static_cast<std::int64_t>(hwy::Num0BitsBelowLS1Bit_Nonzero64(bits));
            if (up[l] >= t) t = sd::offer(st, count, c.cap, j0 + j + l, lo[l], up[l]);
        }
        if (st.overflow) return;
    }
}

// One task: corpus rows [jb, je) (panel-aligned jb), every query.
void first_pass_task(const sd::call& c, std::int64_t task, std::int64_t jb, std::int64_t je, float* tile) {
    const std::int64_t m = c.op->m, count = c.op->count, k2 = c.lay.k2;
    sd::query_state* states = c.states->data() + task * m;
    for (std::int64_t jc = jb; jc < je; jc += c.chunk) {
        const std::int64_t ncols = std::min(c.chunk, je - jc);
        const int npanels = static_cast<int>(gd::ceil_div(ncols, sd::panel));
        for (std::int64_t ic = 0; ic < m; ic += sd::block_q) {
            stop_point();  // S20: one tile between checks
            const int rows = static_cast<int>(std::min(sd::block_q, m - ic));
            // Step aside at once: a query whose candidates overflowed (in this task: the query
            // then takes the f32 path, whatever the other tasks found) or whose bound does not
            // apply needs no more first-pass scores; a block of only such queries skips its tiles.
            bool needed = false;
            for (int r = 0; r < rows && !needed; ++r) needed = c.bounds[ic + r].ok && !states[ic + r].overflow;
            if (!needed) continue;
            tile_any(c, c.qpairs + ic * k2, rows, jc / sd::panel, npanels, tile, c.chunk);
            for (int r = 0; r < rows; ++r) {
                const std::int64_t i = ic + r;
                if (!c.bounds[i].ok || states[i].overflow) continue;
                filter_row(c, c.bounds[i], states[i], tile + r * c.chunk, jc, ncols, count,
                           c.op->allowed != nullptr ? c.op->allowed[i] : nullptr);
            }
        }
    }
}

// The f32 scores of rows ids[0, cnt) (cnt <= lanes) for query i, with the f32 tile kernel's
// operation sequence per element (gemm_tile-inl.h: an FMA chain from +0 per K slice of the plan's
// kc, stored as acc * alpha, later slices as acc * alpha + C * beta, alpha = beta = 1).
void rerank_group(const sd::call& c, std::int64_t i, const std::int64_t* ids, std::int64_t cnt, float* panelbuf,
                  float* out) {
    const hn::ScalableTag<float> d;
    constexpr std::int64_t L = static_cast<std::int64_t>(HWY_LANES(float));
    const gemm_top_k_operands& op = *c.op;
    const std::int64_t k = op.k, kc = c.plan->gemm.kc;
    const auto* a = static_cast<const float*>(op.a) + i * op.a_row_stride;
    const auto* b = static_cast<const float*>(op.b);
    // Transpose the rows into [p][lane] (lanes past cnt: zeros, never read back).
    for (std::int64_t l = 0; l < L; ++l) {
        if (l < cnt) {
            const float* col = b + ids[l] * op.b_col_stride;
            for (std::int64_t p = 0; p < k; ++p) panelbuf[p * L + l] = col[p * op.b_row_stride];
        } else {
            for (std::int64_t p = 0; p < k; ++p) panelbuf[p * L + l] = 0.0f;
        }
    }
    const auto va = hn::Set(d, c.one), vb = hn::Set(d, c.one);
    auto cv = hn::Zero(d);
    for (std::int64_t pc = 0; pc < k; pc += kc) {
        const std::int64_t kc_eff = std::min(kc, k - pc);
        auto acc = hn::Zero(d);
        for (std::int64_t p = pc; p < pc + kc_eff; ++p)
            acc = hn::MulAdd(hn::Set(d, a[p * op.a_col_stride]), hn::Load(d, panelbuf + p * L), acc);
        cv = pc == 0 ? hn::Mul(acc, va) : hn::MulAdd(acc, va, hn::Mul(cv, vb));
    }
    HWY_ALIGN float buf[L];
    hn::Store(cv, d, buf);
    for (std::int64_t l = 0; l < cnt; ++l) out[l] = buf[l];
}

// Query i after the first pass: the threshold over every task's heap, the candidates reaching it,
// their f32 scores, the top k. False: the query takes the f32 path.
bool finish_query(const sd::call& c, std::int64_t i, std::vector<float>& scratch_l, std::vector<std::int64_t>& ids,
                  std::vector<float>& scores, std::vector<float>& panelbuf, std::int64_t& reranked) {
    const gemm_top_k_operands& op = *c.op;
    const std::int64_t m = op.m, count = op.count;
    constexpr std::int64_t L = static_cast<std::int64_t>(HWY_LANES(float));
    scratch_l.clear();
    for (std::int64_t t = 0; t < c.tasks; ++t) {
        const sd::query_state& st = (*c.states)[static_cast<std::size_t>(t * m + i)];
        if (st.overflow) return false;
        scratch_l.insert(scratch_l.end(), st.heap, st.heap + st.heap_n);
    }
    float thr = -std::numeric_limits<float>::infinity();
    if (static_cast<std::int64_t>(scratch_l.size()) >= count) {
        std::nth_element(scratch_l.begin(), scratch_l.begin() + (count - 1), scratch_l.end(), std::greater<float>());
        thr = scratch_l[static_cast<std::size_t>(count - 1)];
    }
    ids.clear();
    for (std::int64_t t = 0; t < c.tasks; ++t) {
        const sd::query_state& st = (*c.states)[static_cast<std::size_t>(t * m + i)];
        for (std::int64_t e = 0; e < st.cand_n; ++e)
            if (st.cand_u[e] >= thr) ids.push_back(st.cand[e]);
    }
    if (static_cast<std::int64_t>(ids.size()) < count) return false;  // cannot happen (proof); be safe
    std::sort(ids.begin(), ids.end());
    scores.resize(ids.size());
    panelbuf.resize(static_cast<std::size_t>(std::max<std::int64_t>(op.k, 1) * L));
    for (std::size_t g = 0; g < ids.size(); g += L)
        rerank_group(c, i, ids.data() + g, std::min<std::int64_t>(L, static_cast<std::int64_t>(ids.size() - g)),
                     panelbuf.data(), scores.data() + g);
    reranked += static_cast<std::int64_t>(ids.size());
    std::vector<std::size_t> order(ids.size());
    for (std::size_t e = 0; e < order.size(); ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + count, order.end(), [&](std::size_t x, std::size_t y) {
        return sd::ranks_above(scores[x], ids[x], scores[y], ids[y]);
    });
    auto* vo = static_cast<float*>(op.values) + i * op.values_row_stride;
    std::int64_t* io = op.indices + i * op.indices_row_stride;
    for (std::int64_t e = 0; e < count; ++e) {
        vo[e * op.values_col_stride] = scores[order[static_cast<std::size_t>(e)]];
        io[e * op.indices_col_stride] = ids[order[static_cast<std::size_t>(e)]];
    }
    return true;
}

}  // namespace

// The per-target body: the first pass over every task, then each query finished or marked for
// the f32 path (fallback[i] = 1). Returns the candidates re-ranked.
std::int64_t SearchBf16(const sd::call& c, unsigned char* fallback, gemm_runner* run) {
    if (c.plan->gemm.target != HWY_TARGET)
        throw std::logic_error("tenferro::kernels::gemm_top_k_bf16: the plan was made for another Highway target");
    if (!c.emulated && !native_dot)
        throw std::logic_error("tenferro::kernels::gemm_top_k_bf16: no native bf16 dot product on this target");
    const std::int64_t n = c.op->n, m = c.op->m;
    auto body = [&](std::int64_t tb, std::int64_t te) {
        std::vector<float> tile(static_cast<std::size_t>(sd::block_q * c.chunk));
        for (std::int64_t task = tb; task < te; ++task) {
            const auto [jb, je] = gd::task_range(n, sd::panel, c.tasks, task);
            if (jb < je) first_pass_task(c, task, jb, je, tile.data());
        }
    };
    if (c.tasks > 1 && run != nullptr)
        (*run)(c.tasks, body);
    else
        body(0, c.tasks);
    std::vector<std::int64_t> per(static_cast<std::size_t>(m), 0);
    auto finish = [&](std::int64_t qb, std::int64_t qe) {
        std::vector<float> l, scores, panelbuf;
        std::vector<std::int64_t> ids;
        for (std::int64_t i = qb; i < qe; ++i) {
            stop_point();  // S20: one query's re-ranking between checks
            if (!c.bounds[i].ok || !finish_query(c, i, l, ids, scores, panelbuf, per[static_cast<std::size_t>(i)]))
                fallback[i] = 1;
        }
    };
    if (m > 1 && run != nullptr)
        (*run)(m, finish);
    else
        finish(0, m);
    std::int64_t total = 0;
    for (std::int64_t i = 0; i < m; ++i)
        if (fallback[i] == 0) total += per[static_cast<std::size_t>(i)];
    return total;
}

bool NativeFirstPass() { return native_dot; }

// VDPBF16PS on n lanes (out[i] = the instruction's lane of acc[i], a[i], b[i]), for the test that
// compares emulate_vdpbf16ps with it. False where the target has no such instruction.
bool NativeDotLanes(const float* acc, const std::uint32_t* a, const std::uint32_t* b, float* out, std::size_t n) {
#if TENFERRO_SEARCH_NATIVE_DOT
    const hn::FixedTag<float, 16> df;
    const hn::Repartition<std::uint32_t, decltype(df)> du;
    const hn::Repartition<hwy::bfloat16_t, decltype(df)> db;
    for (std::size_t i = 0; i + 16 <= n; i += 16) {
        auto unused = hn::Zero(df);
        const auto r =
            hn::ReorderWidenMulAccumulate(df, hn::BitCast(db, hn::LoadU(du, a + i)),
                                          hn::BitCast(db, hn::LoadU(du, b + i)), hn::LoadU(df, acc + i), unused);
        hn::StoreU(r, df, out + i);
    }
    return n % 16 == 0;
#else
    (void)acc, (void)a, (void)b, (void)out, (void)n;
    return false;
#endif
}

#undef TENFERRO_SEARCH_NATIVE_DOT
}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tenferro::kernels {

HWY_EXPORT(SearchBf16);
HWY_EXPORT(NativeFirstPass);
HWY_EXPORT(NativeDotLanes);

namespace sd = search_detail;
namespace gd = gemm_detail;

std::uint16_t to_bf16(float x) noexcept {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    const std::uint32_t exp = u & 0x7f800000u;
    if (exp == 0) return static_cast<std::uint16_t>((u >> 16) & 0x8000u);  // zero, denormal: a signed zero
    if (exp == 0x7f800000u) {
        if ((u & 0x007fffffu) != 0) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // NaN, quiet
        return static_cast<std::uint16_t>(u >> 16);                                           // infinity
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even (may carry into infinity)
    return static_cast<std::uint16_t>(u >> 16);
}

float from_bf16(std::uint16_t h) noexcept {
    const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

namespace {
float daz(float v) noexcept { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }
// An f32 FMA rounded to nearest even whose result, if tiny, is flushed to a zero of its sign. x86
// detects tininess after rounding: a result is tiny when rounding the exact value to 24 bits with
// an unbounded exponent gives less than 2^-126 in magnitude. fmaf's gradual underflow rounds to
// the denormal grid instead; the two differ only when fmaf gives exactly 2^-126 from an exact
// value in (2^-126 - 2^-150, 2^-126 - 2^-151), which the double FMA decides (its one rounding
// cannot cross 2^-126 - 2^-151: the exact value is a sum of a multiple of 2^-149 and a product of
// two 8-bit significands).
float fma_ftz(float x, float y, float z) noexcept {
    const float r = std::fma(x, y, z);
    const float ar = std::fabs(r);
    if (ar < 0x1p-126f && r != 0.0f) return std::copysign(0.0f, r);
    if (ar == 0x1p-126f) {
        const double exact = std::fma(static_cast<double>(x), static_cast<double>(y), static_cast<double>(z));
        if (std::fabs(exact) < 0x1p-126 - 0x1p-151) return std::copysign(0.0f, r);
    }
    return r;
}
}  // namespace

float emulate_vdpbf16ps(float acc, std::uint32_t a, std::uint32_t b) noexcept {
    const float a0 = daz(from_bf16(static_cast<std::uint16_t>(a & 0xffffu)));
    const float a1 = daz(from_bf16(static_cast<std::uint16_t>(a >> 16)));
    const float b0 = daz(from_bf16(static_cast<std::uint16_t>(b & 0xffffu)));
    const float b1 = daz(from_bf16(static_cast<std::uint16_t>(b >> 16)));
    float s = fma_ftz(a1, b1, daz(acc));
    s = fma_ftz(a0, b0, s);
    return s;
}

std::size_t bf16_corpus_bytes(std::int64_t k, std::int64_t n) noexcept { return sd::layout_of(k, n).bytes; }

bool first_pass_applies(std::int64_t n, std::int64_t k, std::int64_t count) noexcept {
    return k > 0 && count > 0 && 2 * sd::capacity_of(count) <= n;
}

void make_bf16_corpus(const float* b, std::int64_t b_rs, std::int64_t b_cs, std::int64_t k, std::int64_t n, void* out) {
    const sd::corpus_layout lay = sd::layout_of(k, n);
    auto* base = static_cast<unsigned char*>(out);
    auto* data = reinterpret_cast<std::uint32_t*>(base);
    auto* norm = reinterpret_cast<float*>(base + lay.norm_offset);
    auto* dnorm = reinterpret_cast<float*>(base + lay.dnorm_offset);
    std::memset(base, 0, lay.bytes);
    std::vector<std::uint16_t> row(static_cast<std::size_t>(2 * lay.k2));
    for (std::int64_t j = 0; j < n; ++j) {
        double sq = 0, dsq = 0;
        bool finite = true;
        std::fill(row.begin(), row.end(), std::uint16_t{0});
        for (std::int64_t p = 0; p < k; ++p) {
            const float x = b[p * b_rs + j * b_cs];
            if (!std::isfinite(x)) finite = false;
            const std::uint16_t h = to_bf16(x);
            row[static_cast<std::size_t>(p)] = h;
            const double xd = x, dx = xd - static_cast<double>(from_bf16(h));
            sq += xd * xd;
            dsq += dx * dx;
        }
        const double nrm = std::sqrt(sq) * (1 + 0x1p-20);
        const bool flagged = !finite || !(nrm <= static_cast<double>(sd::range_limit));
        norm[j] = flagged ? std::numeric_limits<float>::infinity() : sd::round_up_f32(nrm);
        dnorm[j] = flagged ? 0.0f : sd::round_up_f32(std::sqrt(dsq) * (1 + 0x1p-20));
        if (flagged) continue;  // its bf16 row stays zero: first-pass score +0, interval (-inf, inf)
        std::uint32_t* dst = data + (j / sd::panel) * lay.k2 * sd::panel + j % sd::panel;
        for (std::int64_t t = 0; t < lay.k2; ++t)
            dst[t * sd::panel] = static_cast<std::uint32_t>(row[static_cast<std::size_t>(2 * t)]) |
                                 static_cast<std::uint32_t>(row[static_cast<std::size_t>(2 * t + 1)]) << 16;
    }
}

bool native_first_pass_available() { return HWY_DYNAMIC_DISPATCH(NativeFirstPass)(); }

bool native_vdpbf16ps(const float* acc, const std::uint32_t* a, const std::uint32_t* b, float* out, std::size_t n) {
    return HWY_DYNAMIC_DISPATCH(NativeDotLanes)(acc, a, b, out, n);
}

namespace {

// gamma_n = n u / (1 - n u), u = 2^-24.
double gamma_of(double n) { return n * 0x1p-24 / (1 - n * 0x1p-24); }

void run_f32(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed_b, gemm_runner* run) {
    if (run != nullptr)
        gemm_top_k(gemm_type::f32, op, plan, packed_b, nullptr, *run);
    else
        gemm_top_k(gemm_type::f32, op, plan, packed_b, nullptr);
}

void search(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed_b, const void* corpus,
            first_pass how, search_counters* counters, gemm_runner* run) {
    if (plan.gemm.type != gemm_type::f32) throw std::invalid_argument("tenferro::kernels::gemm_top_k_bf16: f32 only");
    const std::int64_t m = op.m, n = op.n, k = op.k, count = op.count;
    if (m <= 0 || count <= 0) return;
    if (counters != nullptr) counters->queries += m;
    // Where no first pass can pay (no depth, k near n): the f32 path for the whole call.
    const std::int64_t cap = sd::capacity_of(count);
    if (!first_pass_applies(n, k, count)) {
        run_f32(op, plan, packed_b, run);
        if (counters != nullptr) counters->fallback += m;
        return;
    }
    sd::call c{};
    c.op = &op;
    c.plan = &plan;
    c.lay = sd::layout_of(k, n);
    const auto* cbase = static_cast<const unsigned char*>(corpus);
    c.cdata = reinterpret_cast<const std::uint32_t*>(cbase);
    c.cnorm = reinterpret_cast<const float*>(cbase + c.lay.norm_offset);
    c.cdnorm = reinterpret_cast<const float*>(cbase + c.lay.dnorm_offset);
    c.emulated = how == first_pass::emulated;
    volatile float one = 1.0f;
    c.one = one;

    // The queries' bf16 pairs and bound coefficients.
    const std::int64_t k2 = c.lay.k2;
    std::vector<std::uint32_t> qpairs(static_cast<std::size_t>(m * k2), 0);
    std::vector<sd::query_bound> bounds(static_cast<std::size_t>(m));
    const std::int64_t slices = gd::ceil_div(k, plan.gemm.kc);
    const double n_f = static_cast<double>(k + 3 * slices), n_b = static_cast<double>(2 * k2 + 1);
    const double g_f = gamma_of(n_f), g_b = gamma_of(n_b);
    const auto* a = static_cast<const float*>(op.a);
    for (std::int64_t i = 0; i < m; ++i) {
        double sq = 0, tsq = 0, dsq = 0;
        bool finite = true;
        for (std::int64_t p = 0; p < k; ++p) {
            const float x = a[i * op.a_row_stride + p * op.a_col_stride];
            if (!std::isfinite(x)) finite = false;
            const std::uint16_t h = to_bf16(x);
            const double xd = x, hd = from_bf16(h);
            sq += xd * xd;
            tsq += hd * hd;
            dsq += (xd - hd) * (xd - hd);
            qpairs[static_cast<std::size_t>(i * k2 + p / 2)] |= static_cast<std::uint32_t>(h) << (16 * (p % 2));
        }
        const double safe = 1 + 0x1p-20;
        const double qn = std::sqrt(sq) * safe, qt = std::sqrt(tsq) * safe, qd = std::sqrt(dsq) * safe;
        sd::query_bound& qb = bounds[static_cast<std::size_t>(i)];
        qb.ok = finite && qn <= static_cast<double>(sd::range_limit);
        if (!qb.ok) {
            std::fill_n(qpairs.begin() + i * k2, k2, 0u);
            continue;
        }
        // a >= 2^-100 keeps a flagged row's (+inf) norm from meeting a zero coefficient (NaN).
        qb.a = sd::round_up_f32(std::max((g_f * qn + qd + g_b * qt) * safe, 0x1p-100));
        qb.b = sd::round_up_f32((1 + g_b) * qt * safe);
        qb.c = 0x1p-22f;
        qb.d = sd::round_up_f32((2 * (n_f + n_b) + 8) * 0x1p-126);
    }
    c.qpairs = qpairs.data();
    c.bounds = bounds.data();

    // Tasks: the f32 plan's count, over panels of 16 rows; chunks of rows whose bf16 copy is
    // ~128 KiB (in L2 while every query block passes over it).
    c.tasks = std::max<std::int64_t>(1, plan.gemm.tasks_n);
    while (c.tasks > 1 && gd::task_range(n, sd::panel, c.tasks, c.tasks - 1).first >= n) --c.tasks;
    c.cap = cap;
    c.chunk = std::clamp<std::int64_t>((128 << 10) / (4 * k2) / (2 * sd::panel) * (2 * sd::panel), 2 * sd::panel, 2048);
    const std::size_t states_n = static_cast<std::size_t>(c.tasks * m);
    std::vector<sd::query_state> states(states_n);
    std::vector<float> heaps(states_n * static_cast<std::size_t>(count));
    std::vector<std::int64_t> cands(states_n * static_cast<std::size_t>(cap));
    std::vector<float> cand_u(states_n * static_cast<std::size_t>(cap));
    for (std::size_t s = 0; s < states_n; ++s)
        states[s] = sd::query_state{
            heaps.data() + s * static_cast<std::size_t>(count), 0, cands.data() + s * static_cast<std::size_t>(cap),
            cand_u.data() + s * static_cast<std::size_t>(cap),  0, false};
    c.states = &states;

    std::vector<unsigned char> fallback(static_cast<std::size_t>(m), 0);
    const std::int64_t reranked = HWY_DYNAMIC_DISPATCH(SearchBf16)(c, fallback.data(), run);

    // The f32 path for the queries that fell back, together in one call (a query's bits do not
    // depend on its batch).
    std::vector<std::int64_t> back;
    for (std::int64_t i = 0; i < m; ++i)
        if (fallback[static_cast<std::size_t>(i)] != 0) back.push_back(i);
    if (counters != nullptr) {
        counters->fallback += static_cast<std::int64_t>(back.size());
        counters->first_pass += m - static_cast<std::int64_t>(back.size());
        counters->reranked += reranked;
    }
    if (back.empty()) return;
    const auto mb = static_cast<std::int64_t>(back.size());
    std::vector<float> qa(static_cast<std::size_t>(mb * k)), vals(static_cast<std::size_t>(mb * count));
    std::vector<std::int64_t> idx(static_cast<std::size_t>(mb * count));
    std::vector<const std::uint64_t*> back_allowed;
    if (op.allowed != nullptr)
        for (const std::int64_t i : back) back_allowed.push_back(op.allowed[i]);
    for (std::int64_t r = 0; r < mb; ++r)
        for (std::int64_t p = 0; p < k; ++p)
            qa[static_cast<std::size_t>(r * k + p)] =
                a[back[static_cast<std::size_t>(r)] * op.a_row_stride + p * op.a_col_stride];
    gemm_top_k_operands fop = op;
    fop.m = mb;
    fop.a = qa.data();
    fop.a_row_stride = k;
    fop.a_col_stride = 1;
    fop.values = vals.data();
    fop.values_row_stride = count;
    fop.values_col_stride = 1;
    fop.indices = idx.data();
    fop.indices_row_stride = count;
    fop.indices_col_stride = 1;
    fop.allowed = op.allowed != nullptr ? back_allowed.data() : nullptr;
    const gemm_top_k_plan fplan = plan_gemm_top_k(gemm_type::f32, mb, n, k, count, plan.gemm.tasks_n);
    run_f32(fop, fplan, packed_b, run);
    auto* vo = static_cast<float*>(op.values);
    for (std::int64_t r = 0; r < mb; ++r) {
        const std::int64_t i = back[static_cast<std::size_t>(r)];
        for (std::int64_t e = 0; e < count; ++e) {
            vo[i * op.values_row_stride + e * op.values_col_stride] = vals[static_cast<std::size_t>(r * count + e)];
            op.indices[i * op.indices_row_stride + e * op.indices_col_stride] =
                idx[static_cast<std::size_t>(r * count + e)];
        }
    }
}

}  // namespace

void gemm_top_k_bf16(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed_b,
                     const void* corpus, first_pass how, search_counters* counters, gemm_runner run) {
    search(op, plan, packed_b, corpus, how, counters, &run);
}
void gemm_top_k_bf16(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed_b,
                     const void* corpus, first_pass how, search_counters* counters) {
    search(op, plan, packed_b, corpus, how, counters, nullptr);
}

}  // namespace tenferro::kernels
#endif  // HWY_ONCE
