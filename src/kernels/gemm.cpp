// GEMM kernel (see gemm.hpp; design notes in docs/gemm.md).
//
// Goto/BLIS structure: for each task's N range in nc columns, for each kc-deep slice of K, the
// B panel (kc x nc) is packed into nr-wide micro-panels; for each mc rows, the A block (mc x kc)
// is packed into mr-tall micro-panels; a register-blocked micro-kernel then computes each
// mr x nr tile of C from one A micro-panel (streamed from L2) and one B micro-panel (kept in L1).
// Packing reads the strided source directly, so no operand is ever copied whole or transposed.
//
// This file: the drivers (tasks, K slices, the small and streaming paths) and the dispatch.
// Planning is compiled once (gemm_plan.hpp/.cpp); tile shapes, micro-kernels and packing are
// per-target -inl.h files included below (the map: gemm_plan.hpp).

#include "kernels/gemm.hpp"
#include "kernels/stop_point.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

// The micro-kernel keeps arrays of vectors, which sizeless (SVE, RVV) vectors cannot form.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gemm.cpp"
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

// Per-target parts (each re-included for every target by foreach_target above).
#include "kernels/gemm_pack-inl.h"
#include "kernels/gemm_plan.hpp"
#include "kernels/gemm_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace gd = gemm_detail;

// ------------------------------------------------------------------------------------------------
// Driver
// ------------------------------------------------------------------------------------------------

template <class T>
struct problem {
    std::int64_t m, n, k;
    const T* a;
    std::int64_t ars, acs;
    const T* b;
    std::int64_t brs, bcs;
    T* c;
    std::int64_t crs, ccs;
    T alpha, beta;
    const T* pre_a = nullptr;  // prepacked A side (a swapped plan's packed B), all K slices
    const T* pre_b = nullptr;  // prepacked B side, all K slices
};

// Offset of K slice `pc` (kc_eff deep) of a prepacked operand whose extent rounds up to `padded`:
// slices are stored one after another, each `padded x kc_eff`.
inline std::int64_t prepacked_slice(std::int64_t pc, std::int64_t padded) { return pc * padded; }

// Rows at most this many, B row-contiguous: stream B row by row (see stream_rows).
constexpr std::int64_t stream_max_rows = 8;

// A task of at most stream_max_rows rows with a row-contiguous B (a GEMV-like product): each B
// element is used by those few rows only, so neither packing B nor walking it in nr-wide columns
// (one cache line per row of B, a page apart) can pay. Instead B is read row by row, contiguously,
// into accumulators kept in an L1-sized buffer: for each K slice, acc[i][j] = sum_p A[i,p] B[p,j]
// by FMA in increasing p from zero, then store_c, the very operations of the micro-kernel.
template <class T>
void stream_rows(const problem<T>& pr, const gemm_plan& plan, std::int64_t i_begin, std::int64_t i_end,
                 std::int64_t j_begin, std::int64_t j_end) {
    const hn::ScalableTag<T> d;
    using V = hn::Vec<decltype(d)>;
    constexpr std::int64_t L = static_cast<std::int64_t>(lanes<T>());
    constexpr std::int64_t buf_elems = 16384 / sizeof(T);
    HWY_ALIGN T acc[buf_elems];
    const std::int64_t rows = i_end - i_begin;
    const std::int64_t width = std::max<std::int64_t>(L, buf_elems / rows / L * L);
    const V va = hn::Set(d, pr.alpha);
    for (std::int64_t pc = 0; pc < pr.k; pc += plan.kc) {
        const std::int64_t kc_eff = std::min<std::int64_t>(plan.kc, pr.k - pc);
        const T beta = pc == 0 ? pr.beta : T(1);
        const V vb = hn::Set(d, beta);
        for (std::int64_t jb = j_begin; jb < j_end; jb += width) {
            stop_point();  // S20
            const std::int64_t w = std::min(width, j_end - jb);
            const std::int64_t full = w / L * L;
            const std::int64_t wpad = gd::round_up(w, L);
            for (std::int64_t x = 0; x < rows * wpad; ++x) acc[x] = T(0);
            // Four rows of B per pass over the accumulators: a quarter of the accumulator loads
            // and stores, and the FMAs of one element still run in increasing p.
            std::int64_t p = pc;
            for (; p + 4 <= pc + kc_eff; p += 4) {
                const T* b0 = pr.b + p * pr.brs + jb;
                const T* b1 = b0 + pr.brs;
                const T* b2 = b1 + pr.brs;
                const T* b3 = b2 + pr.brs;
                for (std::int64_t i = 0; i < rows; ++i) {
                    const T* arow = pr.a + (i_begin + i) * pr.ars + p * pr.acs;
                    const V a0 = hn::Set(d, arow[0]), a1 = hn::Set(d, arow[pr.acs]);
                    const V a2 = hn::Set(d, arow[2 * pr.acs]), a3 = hn::Set(d, arow[3 * pr.acs]);
                    T* ai = acc + i * wpad;
                    for (std::int64_t j = 0; j < full; j += L) {
                        V s = hn::MulAdd(a0, hn::LoadU(d, b0 + j), hn::Load(d, ai + j));
                        s = hn::MulAdd(a1, hn::LoadU(d, b1 + j), s);
                        s = hn::MulAdd(a2, hn::LoadU(d, b2 + j), s);
                        hn::Store(hn::MulAdd(a3, hn::LoadU(d, b3 + j), s), d, ai + j);
                    }
                    if (full < w) {
                        HWY_ALIGN T t0[L] = {}, t1[L] = {}, t2[L] = {}, t3[L] = {};
                        for (std::int64_t j = full; j < w; ++j) {
                            t0[j - full] = b0[j];
                            t1[j - full] = b1[j];
                            t2[j - full] = b2[j];
                            t3[j - full] = b3[j];
                        }
                        V s = hn::MulAdd(a0, hn::Load(d, t0), hn::Load(d, ai + full));
                        s = hn::MulAdd(a1, hn::Load(d, t1), s);
                        s = hn::MulAdd(a2, hn::Load(d, t2), s);
                        hn::Store(hn::MulAdd(a3, hn::Load(d, t3), s), d, ai + full);
                    }
                }
            }
            for (; p < pc + kc_eff; ++p) {
                const T* brow = pr.b + p * pr.brs + jb;
                for (std::int64_t i = 0; i < rows; ++i) {
                    const V av = hn::Set(d, pr.a[(i_begin + i) * pr.ars + p * pr.acs]);
                    T* ai = acc + i * wpad;
                    for (std::int64_t j = 0; j < full; j += L)
                        hn::Store(hn::MulAdd(av, hn::LoadU(d, brow + j), hn::Load(d, ai + j)), d, ai + j);
                    if (full < w) {
                        HWY_ALIGN T tail[L] = {};
                        for (std::int64_t j = full; j < w; ++j) tail[j - full] = brow[j];
                        hn::Store(hn::MulAdd(av, hn::Load(d, tail), hn::Load(d, ai + full)), d, ai + full);
                    }
                }
            }
            for (std::int64_t i = 0; i < rows; ++i) {
                T* crow = pr.c + (i_begin + i) * pr.crs + jb * pr.ccs;
                const T* ai = acc + i * wpad;
                for (std::int64_t j = 0; j < w; j += L)
                    store_c(d, hn::Load(d, ai + j), crow + j * pr.ccs, pr.ccs, std::min(L, w - j), va, vb,
                            beta != T(0));
            }
        }
    }
}

template <class T>
void run_task(const problem<T>& pr, const gemm_plan& plan, std::int64_t task, unsigned char* scratch) {
    constexpr std::int64_t MR = static_cast<std::int64_t>(mr_rows);
    constexpr std::int64_t NR = static_cast<std::int64_t>(nr_cols<T>());
    const std::int64_t tm = task / plan.tasks_n, tn = task % plan.tasks_n;
    const auto [i_begin, i_end] = gd::task_range(pr.m, MR, plan.tasks_m, tm);
    const auto [j_begin, j_end] = gd::task_range(pr.n, NR, plan.tasks_n, tn);
    if (i_begin >= i_end || j_begin >= j_end) return;
    if (pr.pre_a == nullptr && pr.pre_b == nullptr && pr.bcs == 1 && i_end - i_begin <= stream_max_rows) {
        stream_rows(pr, plan, i_begin, i_end, j_begin, j_end);
        return;
    }

    const std::int64_t kc_full = std::min<std::int64_t>(pr.k, plan.kc);
    const std::int64_t task_rows0 = gd::task_range(pr.m, MR, plan.tasks_m, 0).second;
    const std::int64_t task_cols0 = gd::task_range(pr.n, NR, plan.tasks_n, 0).second;
    const std::int64_t mc = std::min<std::int64_t>(plan.mc, gd::round_up(task_rows0, MR));
    const std::int64_t nc = std::min<std::int64_t>(plan.nc, gd::round_up(task_cols0, NR));
    const std::size_t a_bytes = plan.small ? 0 : gd::round_up_bytes(static_cast<std::size_t>(mc * kc_full) * sizeof(T));
    const std::size_t b_bytes = gd::round_up_bytes(static_cast<std::size_t>(nc * kc_full) * sizeof(T));
    unsigned char* mine = scratch + static_cast<std::size_t>(task) * (a_bytes + b_bytes);
    T* apack = reinterpret_cast<T*>(mine);
    T* bpack = reinterpret_cast<T*>(mine + a_bytes);

    const std::int64_t m_pad = gd::round_up(pr.m, MR), n_pad = gd::round_up(pr.n, NR);
    const bool a_direct = plan.small && pr.pre_a == nullptr;
    const auto& packed_tiles = tile_table<a_packed, T>;
    const auto& strided_tiles = tile_table<a_strided, T>;

    tile_args<T> t{};
    t.crs = pr.crs;
    t.ccs = pr.ccs;
    t.alpha = pr.alpha;
    for (std::int64_t jc = j_begin; jc < j_end; jc += nc) {
        const std::int64_t nc_eff = std::min(nc, j_end - jc);
        for (std::int64_t pc = 0; pc < pr.k; pc += plan.kc) {
            const std::int64_t kc_eff = std::min<std::int64_t>(plan.kc, pr.k - pc);
            t.kc = kc_eff;
            t.beta = pc == 0 ? pr.beta : T(1);
            const T* bp;
            if (pr.pre_b != nullptr) {
                bp = pr.pre_b + prepacked_slice(pc, n_pad) + jc * kc_eff;
            } else {
                pack_b_panel(pr.b + pc * pr.brs + jc * pr.bcs, pr.brs, pr.bcs, kc_eff, nc_eff, bpack);
                bp = bpack;
            }
            for (std::int64_t ic = i_begin; ic < i_end; ic += mc) {
                const std::int64_t mc_eff = std::min(mc, i_end - ic);
                const T* ap = nullptr;
                if (pr.pre_a != nullptr) {
                    ap = pr.pre_a + prepacked_slice(pc, m_pad) + ic * kc_eff;
                } else if (!a_direct) {
                    pack_a_block(pr.a + ic * pr.ars + pc * pr.acs, pr.ars, pr.acs, mc_eff, kc_eff, apack);
                    ap = apack;
                }
                for (std::int64_t jr = 0; jr < nc_eff; jr += NR) {
                    stop_point();  // S20: a micro-panel (NR x mc x kc) between checks
                    t.cols = std::min(NR, nc_eff - jr);
                    t.b = bp + jr * kc_eff;
                    for (std::int64_t ir = 0; ir < mc_eff; ir += MR) {
                        const std::int64_t h = std::min(MR, mc_eff - ir);
                        t.c = pr.c + (ic + ir) * pr.crs + (jc + jr) * pr.ccs;
                        if (a_direct) {
                            t.a = pr.a + (ic + ir) * pr.ars + pc * pr.acs;
                            t.ars = pr.ars;
                            t.acs = pr.acs;
                            strided_tiles[static_cast<std::size_t>(h - 1)](t);
                        } else {
                            t.a = ap + ir * kc_eff;
                            packed_tiles[static_cast<std::size_t>(h - 1)](t);
                        }
                    }
                }
            }
        }
    }
}

// C = beta * C (k == 0): no products, nothing packed.
template <class T>
void scale_c(const problem<T>& pr) {
    for (std::int64_t i = 0; i < pr.m; ++i) {
        T* row = pr.c + i * pr.crs;
        for (std::int64_t j = 0; j < pr.n; ++j) {
            T& c = row[j * pr.ccs];
            c = pr.beta == T(0) ? T(0) : pr.beta * c;
        }
    }
}

template <class T>
void gemm_t(const gemm_operands& op, const gemm_plan& plan, const void* prepacked, void* scratch, gemm_runner* run) {
    if (plan.target != HWY_TARGET)
        throw std::logic_error("tenferro::kernels::gemm: the plan was made for another Highway target");
    if (op.m <= 0 || op.n <= 0) return;
    problem<T> pr{};
    pr.alpha = static_cast<T>(op.alpha);
    pr.beta = static_cast<T>(op.beta);
    pr.k = op.k;
    if (!plan.swapped) {
        pr.m = op.m;
        pr.n = op.n;
        pr.a = static_cast<const T*>(op.a);
        pr.ars = op.a_row_stride;
        pr.acs = op.a_col_stride;
        pr.b = static_cast<const T*>(op.b);
        pr.brs = op.b_row_stride;
        pr.bcs = op.b_col_stride;
        pr.crs = op.c_row_stride;
        pr.ccs = op.c_col_stride;
    } else {
        pr.m = op.n;
        pr.n = op.m;
        pr.a = static_cast<const T*>(op.b);
        pr.ars = op.b_col_stride;
        pr.acs = op.b_row_stride;
        pr.b = static_cast<const T*>(op.a);
        pr.brs = op.a_col_stride;
        pr.bcs = op.a_row_stride;
        pr.crs = op.c_col_stride;
        pr.ccs = op.c_row_stride;
    }
    pr.c = static_cast<T*>(op.c);
    if (op.k <= 0) {
        scale_c(pr);
        return;
    }
    const T* packed =
        prepacked != nullptr ? static_cast<const T*>(gd::align_up(const_cast<void*>(prepacked))) : nullptr;
    if (packed != nullptr) (plan.swapped ? pr.pre_a : pr.pre_b) = packed;

    std::unique_ptr<unsigned char[]> owned;
    if (scratch == nullptr && plan.scratch_bytes > 0) {
        owned.reset(new unsigned char[plan.scratch_bytes]);
        scratch = owned.get();
    }
    auto* base = static_cast<unsigned char*>(gd::align_up(scratch));
    const std::int64_t tasks = static_cast<std::int64_t>(plan.tasks_m) * plan.tasks_n;
    auto body = [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t t = begin; t < end; ++t) run_task(pr, plan, t, base);
    };
    if (tasks > 1 && run != nullptr)
        (*run)(tasks, body);
    else
        body(0, tasks);
}

}  // namespace

gd::blocking BlockingF32() { return target_blocking<float>(); }
gd::blocking BlockingF64() { return target_blocking<double>(); }
std::int64_t CurrentTarget() { return HWY_TARGET; }

void GemmF32(const gemm_operands& op, const gemm_plan& plan, const void* prepacked, void* scratch, gemm_runner* run) {
    gemm_t<float>(op, plan, prepacked, scratch, run);
}
void GemmF64(const gemm_operands& op, const gemm_plan& plan, const void* prepacked, void* scratch, gemm_runner* run) {
    gemm_t<double>(op, plan, prepacked, scratch, run);
}

template <class T>
void pack_b_t(const gemm_plan& plan, const void* bv, std::int64_t brs, std::int64_t bcs, void* packed) {
    if (plan.target != HWY_TARGET)
        throw std::logic_error("tenferro::kernels::pack_b: the plan was made for another Highway target");
    const T* b = static_cast<const T*>(bv);
    T* dst = static_cast<T*>(gd::align_up(packed));
    const std::int64_t k = plan.k, n = plan.n;
    if (k <= 0 || n <= 0) return;
    if (!plan.swapped) {
        const std::int64_t n_pad = gd::round_up(n, static_cast<std::int64_t>(nr_cols<T>()));
        for (std::int64_t pc = 0; pc < k; pc += plan.kc) {
            const std::int64_t kc_eff = std::min<std::int64_t>(plan.kc, k - pc);
            pack_b_panel(b + pc * brs, brs, bcs, kc_eff, n, dst + prepacked_slice(pc, n_pad));
        }
    } else {
        // Swapped: B^T is the A side (rows j, columns p).
        const std::int64_t n_pad = gd::round_up(n, static_cast<std::int64_t>(mr_rows));
        for (std::int64_t pc = 0; pc < k; pc += plan.kc) {
            const std::int64_t kc_eff = std::min<std::int64_t>(plan.kc, k - pc);
            pack_a_block(b + pc * brs, bcs, brs, n, kc_eff, dst + prepacked_slice(pc, n_pad));
        }
    }
}

void PackBF32(const gemm_plan& plan, const void* b, std::int64_t brs, std::int64_t bcs, void* packed) {
    pack_b_t<float>(plan, b, brs, bcs, packed);
}
void PackBF64(const gemm_plan& plan, const void* b, std::int64_t brs, std::int64_t bcs, void* packed) {
    pack_b_t<double>(plan, b, brs, bcs, packed);
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tenferro::kernels {

HWY_EXPORT(BlockingF32);
HWY_EXPORT(BlockingF64);
HWY_EXPORT(CurrentTarget);
HWY_EXPORT(GemmF32);
HWY_EXPORT(GemmF64);
HWY_EXPORT(PackBF32);
HWY_EXPORT(PackBF64);

gemm_plan plan_gemm(gemm_type type, std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
    const gemm_detail::blocking b =
        type == gemm_type::f32 ? HWY_DYNAMIC_DISPATCH(BlockingF32)() : HWY_DYNAMIC_DISPATCH(BlockingF64)();
    return gemm_detail::make_plan(type, m, n, k, threads, HWY_DYNAMIC_DISPATCH(CurrentTarget)(), b);
}

std::int64_t gemm_target() noexcept { return HWY_DYNAMIC_DISPATCH(CurrentTarget)(); }

namespace {
void dispatch(gemm_type type, const gemm_operands& op, const gemm_plan& plan, const void* prepacked, void* scratch,
              gemm_runner* run) {
    if (type == gemm_type::f32)
        HWY_DYNAMIC_DISPATCH(GemmF32)(op, plan, prepacked, scratch, run);
    else
        HWY_DYNAMIC_DISPATCH(GemmF64)(op, plan, prepacked, scratch, run);
}
}  // namespace

void gemm(gemm_type type, const gemm_operands& op, const gemm_plan& plan, void* scratch, gemm_runner run) {
    dispatch(type, op, plan, nullptr, scratch, &run);
}
void gemm(gemm_type type, const gemm_operands& op, const gemm_plan& plan, void* scratch) {
    dispatch(type, op, plan, nullptr, scratch, nullptr);
}

void pack_b(const gemm_plan& plan, const void* b, std::int64_t b_row_stride, std::int64_t b_col_stride, void* packed) {
    if (plan.type == gemm_type::f32)
        HWY_DYNAMIC_DISPATCH(PackBF32)(plan, b, b_row_stride, b_col_stride, packed);
    else
        HWY_DYNAMIC_DISPATCH(PackBF64)(plan, b, b_row_stride, b_col_stride, packed);
}

void gemm_prepacked_b(gemm_type type, const gemm_operands& op, const gemm_plan& plan, const void* packed, void* scratch,
                      gemm_runner run) {
    dispatch(type, op, plan, packed, scratch, &run);
}
void gemm_prepacked_b(gemm_type type, const gemm_operands& op, const gemm_plan& plan, const void* packed,
                      void* scratch) {
    dispatch(type, op, plan, packed, scratch, nullptr);
}

}  // namespace tenferro::kernels
#endif  // HWY_ONCE
