// Fused GEMM + top-k (gemm_top_k.hpp; design in docs/gemm.md, "Fused top-k").
//
// Per task (a range of C's columns): for each chunk of tile_cols columns, B's panels for that
// chunk (prepacked, or packed here for all K slices), then for each block of tile_rows rows the
// score tile is computed K slice by K slice with gemm's micro-kernels and, once complete, each of
// its rows is offered to that row's top-k state. A vector compare against the row's current k-th
// best skips almost every score; the few that pass enter a heap of `count`.

#include "kernels/gemm_top_k.hpp"
#include "kernels/stop_point.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gemm_top_k.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/gemm_pack-inl.h"
#include "kernels/gemm_plan.hpp"
#include "kernels/gemm_tile-inl.h"

#ifndef TENFERRO_KERNELS_GEMM_TOP_K_ONCE
#define TENFERRO_KERNELS_GEMM_TOP_K_ONCE
namespace tenferro::kernels::top_k_detail {

// rowwise top_k's order: NaN above every number, then larger values, then the lower index.
template <class T>
inline bool ranks_above(T a, std::int64_t ia, T b, std::int64_t ib) noexcept {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na != nb) return na;
    if (!na && a != b) return a > b;
    return ia < ib;
}

// One row's best `count` so far in a task that offers columns in increasing order: a binary heap
// whose root is the worst held (value, column), so that a candidate is tested against one value
// and enters in O(log count) whatever `count` is (a sorted list would make k ~ n quadratic).
// `finish` sorts it best first for the merge.
template <class T>
struct row_best {
    T* vals;
    std::int64_t* ids;
    std::int64_t* held;

    bool below(std::int64_t a, std::int64_t b) const noexcept { return ranks_above(vals[b], ids[b], vals[a], ids[a]); }
    void swap_at(std::int64_t a, std::int64_t b) const noexcept {
        std::swap(vals[a], vals[b]);
        std::swap(ids[a], ids[b]);
    }
    // Adds (v, id) while fewer than `count` are held.
    void push(T v, std::int64_t id) const noexcept {
        std::int64_t i = (*held)++;
        vals[i] = v;
        ids[i] = id;
        while (i > 0) {
            const std::int64_t parent = (i - 1) / 2;
            if (!below(i, parent)) break;
            swap_at(i, parent);
            i = parent;
        }
    }
    // Replaces the worst held by (v, id), which ranks above it.
    void replace_worst(T v, std::int64_t id) const noexcept {
        const std::int64_t n = *held;
        vals[0] = v;
        ids[0] = id;
        std::int64_t i = 0;
        for (;;) {
            const std::int64_t l = 2 * i + 1, r = l + 1;
            std::int64_t low = i;
            if (l < n && below(l, low)) low = l;
            if (r < n && below(r, low)) low = r;
            if (low == i) break;
            swap_at(i, low);
            i = low;
        }
    }
    // Sorts the held entries best first.
    void finish() const {
        const std::int64_t n = *held;
        for (std::int64_t end = n - 1; end > 0; --end) {  // heap sort: the worst goes last
            swap_at(0, end);
            std::int64_t i = 0;
            for (;;) {
                const std::int64_t l = 2 * i + 1, r = l + 1;
                std::int64_t low = i;
                if (l < end && below(l, low)) low = l;
                if (r < end && below(r, low)) low = r;
                if (low == i) break;
                swap_at(i, low);
                i = low;
            }
        }
    }
};

// The scratch of one call: packed A, then per task its score tile, its B chunk (when B is not
// prepacked) and its top-k state.
struct scratch_layout {
    std::size_t a_bytes = 0, tile_bytes = 0, bchunk_bytes = 0, vals_bytes = 0, ids_bytes = 0, held_bytes = 0;
    std::size_t per_task() const noexcept { return tile_bytes + bchunk_bytes + vals_bytes + ids_bytes + held_bytes; }
};

inline scratch_layout layout_of(const gemm_top_k_plan& p) noexcept {
    namespace gd = gemm_detail;
    const std::size_t elem = p.gemm.type == gemm_type::f32 ? 4 : 8;
    const auto m = static_cast<std::size_t>(p.gemm.m), k = static_cast<std::size_t>(p.gemm.k);
    const auto m_pad = static_cast<std::size_t>(gd::round_up(p.gemm.m, p.gemm.mr));
    const auto count = static_cast<std::size_t>(p.count);
    scratch_layout l;
    l.a_bytes = p.gemm.small ? 0 : gd::round_up_bytes(m_pad * k * elem);
    l.tile_bytes =
        gd::round_up_bytes(static_cast<std::size_t>(p.tile_rows) * static_cast<std::size_t>(p.tile_cols) * elem);
    l.bchunk_bytes = gd::round_up_bytes(static_cast<std::size_t>(p.tile_cols) * k * elem);
    l.vals_bytes = gd::round_up_bytes(m * count * elem);
    l.ids_bytes = gd::round_up_bytes(m * count * sizeof(std::int64_t));
    l.held_bytes = gd::round_up_bytes(m * sizeof(std::int64_t));
    return l;
}

}  // namespace tenferro::kernels::top_k_detail
#endif  // TENFERRO_KERNELS_GEMM_TOP_K_ONCE

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace gd = gemm_detail;
namespace td = top_k_detail;

// Offers scores[0, cnt) (columns j0 + 0 .. cnt - 1, above every column the row has seen) to `best`;
// with a `mask` (gemm_top_k_operands::allowed), only the columns it allows.
template <class T>
void offer_row(const T* scores, std::int64_t cnt, std::int64_t j0, std::int64_t count, const td::row_best<T>& best,
               const std::uint64_t* mask) {
    const hn::ScalableTag<T> d;
    constexpr std::int64_t L = static_cast<std::int64_t>(lanes<T>());
    const auto allowed_at = [&](std::int64_t j) {
        return mask == nullptr || ((mask[(j0 + j) >> 6] >> ((j0 + j) & 63)) & 1U) != 0;
    };
    std::int64_t j = 0;
    for (; *best.held < count && j < cnt; ++j)
        if (allowed_at(j)) best.push(scores[j], j0 + j);
    if (j == cnt) return;
    // Full: a later column enters only by ranking strictly above the worst held value (a tie
    // goes to the held, lower index). Nothing ranks above a NaN there.
    T worst = best.vals[0];
    if (std::isnan(worst)) return;
    auto vw = hn::Set(d, worst);
    auto admit = [&](std::int64_t at) {
        const T v = scores[at];
        if (!(std::isnan(v) || v > worst)) return true;
        best.replace_worst(v, j0 + at);
        worst = best.vals[0];
        vw = hn::Set(d, worst);
        return !std::isnan(worst);
    };
    static_assert(L <= 64);
    for (; j + L <= cnt; j += L) {
        const auto v = hn::LoadU(d, scores + j);
        const auto pass = hn::Or(hn::Gt(v, vw), hn::IsNaN(v));
        if (hn::AllFalse(d, pass)) continue;
        // Visit only the lanes that passed (in column order); each is tested again against the
        // worst, which rises as they enter.
        std::uint8_t bytes[8] = {};
        hn::StoreMaskBits(d, pass, bytes);
        std::uint64_t bits = 0;
        for (int b = 7; b >= 0; --b) bits = (bits << 8) | bytes[b];
        if (mask != nullptr) bits &= mask_bits(mask, j0 + j, L);
        for (; bits != 0; bits &= bits - 1)
            if (!admit(j + static_cast<std::int64_t>(hwy::Num0BitsBelowLS1Bit_Nonzero64(bits)))) return;
    }
    for (; j < cnt; ++j)
        if (allowed_at(j) && !admit(j)) return;
}

template <class T>
void run_task(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const T* apacked, const T* prepacked,
              unsigned char* mine, const td::scratch_layout& lay, std::int64_t j_begin, std::int64_t j_end) {
    constexpr std::int64_t MR = static_cast<std::int64_t>(mr_rows);
    constexpr std::int64_t NR = static_cast<std::int64_t>(nr_cols<T>());
    const std::int64_t m = op.m, n = op.n, k = op.k, count = op.count;
    const std::int64_t kc = plan.gemm.kc, tile_rows = plan.tile_rows, tile_cols = plan.tile_cols;
    const std::int64_t m_pad = gd::round_up(m, MR), n_pad = gd::round_up(n, NR);
    T* tile = reinterpret_cast<T*>(mine);
    T* bchunk = reinterpret_cast<T*>(mine + lay.tile_bytes);
    unsigned char* state = mine + lay.tile_bytes + lay.bchunk_bytes;
    T* vals = reinterpret_cast<T*>(state);
    auto* ids = reinterpret_cast<std::int64_t*>(state + lay.vals_bytes);
    auto* held = reinterpret_cast<std::int64_t*>(state + lay.vals_bytes + lay.ids_bytes);
    for (std::int64_t i = 0; i < m; ++i) held[i] = 0;
    const auto& packed_tiles = tile_table<a_packed, T>;
    const auto& strided_tiles = tile_table<a_strided, T>;
    const bool a_direct = plan.gemm.small;  // A read in place (see plan_gemm_top_k)
    const T* asrc = static_cast<const T*>(op.a);
    const T* bsrc = static_cast<const T*>(op.b);

    tile_args<T> t{};
    t.ars = op.a_row_stride;
    t.acs = op.a_col_stride;
    t.crs = tile_cols;
    t.ccs = 1;
    t.alpha = T(1);
    for (std::int64_t jc = j_begin; jc < j_end; jc += tile_cols) {
        const std::int64_t ncols = std::min(tile_cols, j_end - jc);
        // B's panels for columns [jc, jc + ncols), K slice pc at base + pc * stride.
        const T* base;
        std::int64_t stride, origin;
        if (prepacked != nullptr) {
            base = prepacked;
            stride = n_pad;
            origin = 0;
        } else {
            for (std::int64_t pc = 0; pc < k; pc += kc) {
                const std::int64_t kc_eff = std::min(kc, k - pc);
                pack_b_panel(bsrc + pc * op.b_row_stride + jc * op.b_col_stride, op.b_row_stride, op.b_col_stride,
                             kc_eff, ncols, bchunk + pc * tile_cols);
            }
            base = bchunk;
            stride = tile_cols;
            origin = jc;
        }
        for (std::int64_t ic = 0; ic < m; ic += tile_rows) {
            const std::int64_t rows = std::min(tile_rows, m - ic);
            for (std::int64_t pc = 0; pc < k; pc += kc) {
                const std::int64_t kc_eff = std::min(kc, k - pc);
                t.kc = kc_eff;
                t.beta = pc == 0 ? T(0) : T(1);  // gemm's beta' with beta = 0
                const T* ap = apacked + pc * m_pad + ic * kc_eff;
                const T* bp = base + pc * stride + (jc - origin) * kc_eff;
                for (std::int64_t jr = 0; jr < ncols; jr += NR) {
                    stop_point();  // S20: a micro-panel between checks
                    t.cols = std::min(NR, ncols - jr);
                    t.b = bp + jr * kc_eff;
                    for (std::int64_t ir = 0; ir < rows; ir += MR) {
                        const std::int64_t h = std::min(MR, rows - ir);
                        t.c = tile + ir * tile_cols + jr;
                        if (a_direct) {
                            t.a = asrc + (ic + ir) * op.a_row_stride + pc * op.a_col_stride;
                            strided_tiles[static_cast<std::size_t>(h - 1)](t);
                        } else {
                            t.a = ap + ir * kc_eff;
                            packed_tiles[static_cast<std::size_t>(h - 1)](t);
                        }
                    }
                }
            }
            for (std::int64_t r = 0; r < rows; ++r) {
                const std::int64_t i = ic + r;
                offer_row(tile + r * tile_cols, ncols, jc, count,
                          td::row_best<T>{vals + i * count, ids + i * count, held + i},
                          op.allowed != nullptr ? op.allowed[i] : nullptr);
            }
        }
    }
    for (std::int64_t i = 0; i < m; ++i) td::row_best<T>{vals + i * count, ids + i * count, held + i}.finish();
}

template <class T>
void gemm_top_k_t(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* prepacked, void* scratch,
                  gemm_runner* run) {
    if (plan.gemm.target != HWY_TARGET)
        throw std::logic_error("tenferro::kernels::gemm_top_k: the plan was made for another Highway target");
    const std::int64_t m = op.m, n = op.n, k = op.k, count = op.count;
    if (m <= 0 || count <= 0) return;
    T* values = static_cast<T*>(op.values);
    if (k <= 0) {
        // Every score is +0 (gemm's C = 0): the first `count` (allowed) columns, in order.
        for (std::int64_t i = 0; i < m; ++i) {
            const std::uint64_t* mask = op.allowed != nullptr ? op.allowed[i] : nullptr;
            std::int64_t out = 0;
            for (std::int64_t j = 0; j < n && out < count; ++j) {
                if (mask != nullptr && ((mask[j >> 6] >> (j & 63)) & 1U) == 0) continue;
                values[i * op.values_row_stride + out * op.values_col_stride] = T(0);
                op.indices[i * op.indices_row_stride + out * op.indices_col_stride] = j;
                ++out;
            }
            for (; out < count; ++out) {
                values[i * op.values_row_stride + out * op.values_col_stride] = std::numeric_limits<T>::quiet_NaN();
                op.indices[i * op.indices_row_stride + out * op.indices_col_stride] = -1;
            }
        }
        return;
    }
    constexpr std::int64_t MR = static_cast<std::int64_t>(mr_rows);
    constexpr std::int64_t NR = static_cast<std::int64_t>(nr_cols<T>());
    const td::scratch_layout lay = td::layout_of(plan);
    std::unique_ptr<unsigned char[]> owned;
    if (scratch == nullptr) {
        owned.reset(new unsigned char[plan.scratch_bytes]);
        scratch = owned.get();
    }
    auto* base = static_cast<unsigned char*>(gd::align_up(scratch));
    T* apacked = reinterpret_cast<T*>(base);
    const std::int64_t m_pad = gd::round_up(m, MR);
    for (std::int64_t pc = 0; pc < k && !plan.gemm.small; pc += plan.gemm.kc) {
        const std::int64_t kc_eff = std::min<std::int64_t>(plan.gemm.kc, k - pc);
        pack_a_block(static_cast<const T*>(op.a) + pc * op.a_col_stride, op.a_row_stride, op.a_col_stride, m, kc_eff,
                     apacked + pc * m_pad);
    }
    const T* packed =
        prepacked != nullptr ? static_cast<const T*>(gd::align_up(const_cast<void*>(prepacked))) : nullptr;
    unsigned char* tasks_base = base + lay.a_bytes;
    const std::int64_t tasks = plan.gemm.tasks_n;
    auto body = [&](std::int64_t tb, std::int64_t te) {
        for (std::int64_t task = tb; task < te; ++task) {
            const auto [jb, je] = gd::task_range(n, NR, tasks, task);
            unsigned char* mine = tasks_base + static_cast<std::size_t>(task) * lay.per_task();
            auto* held = reinterpret_cast<std::int64_t*>(mine + lay.per_task() - lay.held_bytes);
            if (jb >= je) {
                for (std::int64_t i = 0; i < m; ++i) held[i] = 0;
                continue;
            }
            run_task<T>(op, plan, apacked, packed, mine, lay, jb, je);
        }
    };
    if (tasks > 1 && run != nullptr)
        (*run)(tasks, body);
    else
        body(0, tasks);

    // Merge: each task's list is sorted best first; take the best head `count` times.
    for (std::int64_t i = 0; i < m; ++i) {
        std::int64_t at[64] = {};
        T* vo = values + i * op.values_row_stride;
        std::int64_t* io = op.indices + i * op.indices_row_stride;
        for (std::int64_t out = 0; out < count; ++out) {
            std::int64_t pick = -1;
            T pv{};
            std::int64_t pi = 0;
            for (std::int64_t task = 0; task < tasks; ++task) {
                unsigned char* mine = tasks_base + static_cast<std::size_t>(task) * lay.per_task();
                unsigned char* state = mine + lay.tile_bytes + lay.bchunk_bytes;
                const auto* held = reinterpret_cast<const std::int64_t*>(state + lay.vals_bytes + lay.ids_bytes);
                if (at[task] >= held[i]) continue;
                const T v = reinterpret_cast<const T*>(state)[i * count + at[task]];
                const std::int64_t id =
                    reinterpret_cast<const std::int64_t*>(state + lay.vals_bytes)[i * count + at[task]];
                if (pick < 0 || td::ranks_above(v, id, pv, pi)) {
                    pick = task;
                    pv = v;
                    pi = id;
                }
            }
            if (pick < 0) {  // fewer allowed columns than `count` (gemm_top_k_operands::allowed)
                vo[out * op.values_col_stride] = std::numeric_limits<T>::quiet_NaN();
                io[out * op.indices_col_stride] = -1;
                continue;
            }
            ++at[pick];
            vo[out * op.values_col_stride] = pv;
            io[out * op.indices_col_stride] = pi;
        }
    }
}

}  // namespace

void GemmTopKF32(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* prepacked, void* scratch,
                 gemm_runner* run) {
    gemm_top_k_t<float>(op, plan, prepacked, scratch, run);
}
void GemmTopKF64(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* prepacked, void* scratch,
                 gemm_runner* run) {
    gemm_top_k_t<double>(op, plan, prepacked, scratch, run);
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tenferro::kernels {

HWY_EXPORT(GemmTopKF32);
HWY_EXPORT(GemmTopKF64);

// Tasks are at most this many (the merge keeps one cursor per task on the stack).
constexpr int max_top_k_tasks = 64;

gemm_top_k_plan plan_gemm_top_k(gemm_type type, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count,
                                int threads) {
    namespace gd = gemm_detail;
    gemm_top_k_plan p;
    p.gemm = plan_gemm(type, m, n, k, 1);
    p.gemm.swapped = false;  // the fused driver always runs A x B with B's columns along the vectors
    // A few rows are read in place, as gemm's small path does: a 1-row tile over a packed A panel
    // (mr values per p, one used) ran ~25% slower than over the row itself (f32, AVX-512, d = 128).
    p.gemm.small = m <= 2 * static_cast<std::int64_t>(p.gemm.mr);
    p.gemm.tasks_m = 1;
    p.gemm.tasks_n = 1;
    p.count = count;
    const std::size_t elem = type == gemm_type::f32 ? 4 : 8;
    const std::int64_t mr = p.gemm.mr, nr = p.gemm.nr;
    const std::int64_t kc_full = std::max<std::int64_t>(1, std::min<std::int64_t>(k, p.gemm.kc));
    // One K slice of a B chunk (tile_cols x kc) within ~256 KiB, the score tile within ~128 KiB
    // and the A block (tile_rows x kc) within gemm's mc: together in L2 on every target.
    std::int64_t cols = static_cast<std::int64_t>((256 << 10) / (static_cast<std::size_t>(kc_full) * elem)) / nr * nr;
    cols = std::clamp<std::int64_t>(cols, nr, 32 * nr);
    cols = std::min(cols, gd::round_up(std::max<std::int64_t>(n, 1), nr));
    std::int64_t rows = static_cast<std::int64_t>((128 << 10) / (static_cast<std::size_t>(cols) * elem)) / mr * mr;
    rows = std::clamp<std::int64_t>(rows, mr, std::max<std::int64_t>(mr, p.gemm.mc));
    // All of A in one block when the tile stays within ~192 KiB and the A block within mc: a
    // remainder block would read every B chunk once more for a few rows.
    const std::int64_t m_pad = gd::round_up(std::max<std::int64_t>(m, 1), mr);
    if (m_pad <= p.gemm.mc && static_cast<std::size_t>(m_pad * cols) * elem <= (192u << 10)) rows = m_pad;
    rows = std::min(rows, m_pad);
    p.tile_rows = static_cast<std::int32_t>(rows);
    p.tile_cols = static_cast<std::int32_t>(cols);
    std::int64_t tasks = std::clamp(threads, 1, max_top_k_tasks);
    if (m * n * std::max<std::int64_t>(k, 1) < gd::parallel_min_fmas) tasks = 1;
    tasks = std::min(tasks, gd::ceil_div(std::max<std::int64_t>(n, 1), nr));
    while (tasks > 1 && gd::task_range(n, nr, tasks, tasks - 1).first >= n) --tasks;
    p.gemm.tasks_n = static_cast<std::int32_t>(tasks);
    const top_k_detail::scratch_layout lay = top_k_detail::layout_of(p);
    p.scratch_bytes = lay.a_bytes + static_cast<std::size_t>(tasks) * lay.per_task() + gd::align_bytes;
    return p;
}

namespace {
void dispatch_top_k(gemm_type type, const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed,
                    void* scratch, gemm_runner* run) {
    if (type == gemm_type::f32)
        HWY_DYNAMIC_DISPATCH(GemmTopKF32)(op, plan, packed, scratch, run);
    else
        HWY_DYNAMIC_DISPATCH(GemmTopKF64)(op, plan, packed, scratch, run);
}
}  // namespace

void gemm_top_k(gemm_type type, const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed_b,
                void* scratch, gemm_runner run) {
    dispatch_top_k(type, op, plan, packed_b, scratch, &run);
}
void gemm_top_k(gemm_type type, const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed_b,
                void* scratch) {
    dispatch_top_k(type, op, plan, packed_b, scratch, nullptr);
}

}  // namespace tenferro::kernels
#endif  // HWY_ONCE
