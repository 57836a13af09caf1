// GEMM kernel (see gemm.hpp; design notes in docs/gemm.md).
//
// Goto/BLIS structure: for each task's N range in nc columns, for each kc-deep slice of K, the
// B panel (kc x nc) is packed into nr-wide micro-panels; for each mc rows, the A block (mc x kc)
// is packed into mr-tall micro-panels; a register-blocked micro-kernel then computes each
// mr x nr tile of C from one A micro-panel (streamed from L2) and one B micro-panel (kept in L1).
// Packing reads the strided source directly, so no operand is ever copied whole or transposed.

#include "kernels/gemm.hpp"

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

// Target-independent helpers: compiled once.
#ifndef TENFERRO_KERNELS_GEMM_SHARED
#define TENFERRO_KERNELS_GEMM_SHARED
namespace tenferro::kernels::gemm_detail {

constexpr std::size_t align_bytes = 64;

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return (a + b - 1) / b; }
inline std::int64_t round_up(std::int64_t a, std::int64_t b) noexcept { return ceil_div(a, b) * b; }
inline std::size_t round_up_bytes(std::size_t a) noexcept { return (a + align_bytes - 1) / align_bytes * align_bytes; }

inline void* align_up(void* p) noexcept {
    const auto v = reinterpret_cast<std::uintptr_t>(p);
    return reinterpret_cast<void*>((v + align_bytes - 1) & ~static_cast<std::uintptr_t>(align_bytes - 1));
}

/// The register tile and cache blocks of one (target, type).
struct blocking {
    std::int32_t mr, nr, kc, mc, nc;
};

/// Below this many multiply-adds a GEMM runs as one task: waking a worker costs more.
constexpr std::int64_t parallel_min_fmas = std::int64_t{1} << 18;
/// The small path (A read in place) is taken when k <= kc and m*n*k is at most this, or when A
/// has at most a few micro-panel rows (a GEMV-like shape, where packing A cannot pay).
constexpr std::int64_t small_max_fmas = std::int64_t{96} * 96 * 96;

/// Rows of task t of a tasks-long split of `tiles` tiles of `tile` elements over `extent`.
inline std::pair<std::int64_t, std::int64_t> task_range(std::int64_t extent, std::int64_t tile, std::int64_t tasks,
                                                        std::int64_t t) noexcept {
    const std::int64_t tiles = ceil_div(extent, tile);
    const std::int64_t per = ceil_div(tiles, tasks);
    const std::int64_t begin = std::min(extent, t * per * tile);
    const std::int64_t end = std::min(extent, (t + 1) * per * tile);
    return {begin, end};
}

/// Dot path (docs/gemm.md): a product with at most dot_max_short columns against many rows of a
/// row-contiguous A, or one row against many columns of a column-contiguous B, is computed as
/// dot products along k.
constexpr std::int64_t dot_max_short = 4;
constexpr std::int64_t dot_min_long = 16;
enum class dot_kind : std::uint8_t { none, rows_of_a, cols_of_b };

inline dot_kind dot_kind_of(const gemm_operands& op) noexcept {
    if (op.k <= 0) return dot_kind::none;
    if (op.n <= dot_max_short && op.m >= dot_min_long && op.a_col_stride == 1) return dot_kind::rows_of_a;
    if (op.m == 1 && op.n >= dot_min_long && op.b_row_stride == 1) return dot_kind::cols_of_b;
    return dot_kind::none;
}
inline bool dot_possible(std::int64_t m, std::int64_t n) noexcept {
    return (n <= dot_max_short && m >= dot_min_long) || (m == 1 && n >= dot_min_long);
}
/// Scratch of the dot path: the short vectors (contiguous, padded to 16 lanes) and one padded
/// row per task.
inline std::size_t dot_scratch_bytes(const gemm_plan& p) noexcept {
    if (!dot_possible(p.m, p.n) || p.k <= 0) return 0;
    const std::size_t elem = p.type == gemm_type::f32 ? 4 : 8;
    const std::int64_t tasks = static_cast<std::int64_t>(p.tasks_m) * p.tasks_n;
    return round_up_bytes(static_cast<std::size_t>((dot_max_short + tasks) * round_up(p.k, 16)) * elem);
}

inline gemm_plan make_plan(gemm_type type, std::int64_t m, std::int64_t n, std::int64_t k, int threads,
                           std::int64_t target, const blocking& b) {
    gemm_plan p;
    p.type = type;
    p.m = m;
    p.n = n;
    p.k = k;
    p.target = target;
    p.mr = b.mr;
    p.nr = b.nr;
    p.kc = b.kc;
    p.mc = b.mc;
    p.nc = b.nc;
    if (m <= 0 || n <= 0) return p;
    // A column narrower than a vector tile wastes lanes; computing C^T = B^T A^T puts the wider
    // extent along the vectors. The per-element arithmetic does not change.
    p.swapped = n < b.nr && m > n;
    const std::int64_t mm = p.swapped ? n : m;
    const std::int64_t nn = p.swapped ? m : n;
    if (k <= 0) return p;
    // A read in place: small problems, or at most four micro-panels of B (each A element would be
    // packed to be used at most four times; measured on Zen 3, reading A in place wins up to ~6).
    p.small = (k <= b.kc && (mm * nn * k <= small_max_fmas || mm <= 2 * b.mr)) || nn <= 4 * b.nr;

    // Split C into independent rectangles, never K, minimising the time of the largest task in
    // rough cycles: its micro-kernel work (rows x cols x k / nr: two FMAs of nr / 2 lanes per
    // cycle) plus its packing (A: a scalar gather, once per nc columns; B: mostly a vector copy).
    // Splitting M repacks B in every task, splitting N repacks A: the model prefers M.
    const std::int64_t mtiles = ceil_div(mm, b.mr), ntiles = ceil_div(nn, b.nr);
    std::int64_t max_tasks = threads < 1 ? 1 : threads;
    if (mm * nn * k < parallel_min_fmas) max_tasks = 1;
    std::int64_t best_tm = 1, best_tn = 1;
    double best_cost = std::numeric_limits<double>::max();
    for (std::int64_t tm = 1; tm <= max_tasks && tm <= mtiles; ++tm) {
        for (std::int64_t tn = 1; tm * tn <= max_tasks && tn <= ntiles; ++tn) {
            const double rows = static_cast<double>(ceil_div(mtiles, tm) * b.mr);
            const std::int64_t cols_i = ceil_div(ntiles, tn) * b.nr;
            const double cols = static_cast<double>(cols_i), kd = static_cast<double>(k);
            const double compute = rows * cols * kd / b.nr;
            const double pack_a = p.small ? 0.0 : rows * kd * static_cast<double>(ceil_div(cols_i, b.nc));
            const double pack_b = 0.5 * cols * kd;
            const double cost = compute + pack_a + pack_b;
            if (cost < best_cost * (1 - 1e-9)) {
                best_cost = cost;
                best_tm = tm;
                best_tn = tn;
            }
        }
    }
    // A split that leaves a task empty (tile rounding) is dropped by the range computation; count
    // only non-empty tasks so that every task index has work.
    while (best_tm > 1 && task_range(mm, b.mr, best_tm, best_tm - 1).first >= mm) --best_tm;
    while (best_tn > 1 && task_range(nn, b.nr, best_tn, best_tn - 1).first >= nn) --best_tn;
    p.tasks_m = static_cast<std::int32_t>(best_tm);
    p.tasks_n = static_cast<std::int32_t>(best_tn);

    // Per-task buffers: the A block (not on the small path) and the B panel.
    const std::size_t elem = type == gemm_type::f32 ? 4 : 8;
    const std::int64_t kc = std::min<std::int64_t>(k, b.kc);
    const std::int64_t task_rows = task_range(mm, b.mr, best_tm, 0).second;
    const std::int64_t task_cols = task_range(nn, b.nr, best_tn, 0).second;
    const std::int64_t mc = std::min<std::int64_t>(b.mc, round_up(task_rows, b.mr));
    const std::int64_t nc = std::min<std::int64_t>(b.nc, round_up(task_cols, b.nr));
    const std::size_t a_bytes = p.small ? 0 : round_up_bytes(static_cast<std::size_t>(mc * kc) * elem);
    const std::size_t b_bytes = round_up_bytes(static_cast<std::size_t>(nc * kc) * elem);
    p.scratch_bytes = static_cast<std::size_t>(best_tm * best_tn) * (a_bytes + b_bytes) + align_bytes;
    p.scratch_bytes += dot_scratch_bytes(p);
    return p;
}

}  // namespace tenferro::kernels::gemm_detail
#endif  // TENFERRO_KERNELS_GEMM_SHARED

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace gd = gemm_detail;

// ------------------------------------------------------------------------------------------------
// Tile shape and blocking per target
// ------------------------------------------------------------------------------------------------

// AVX-512 and AArch64 have 32 vector registers, the x86 targets below AVX-512 16.
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || HWY_ARCH_ARM_A64
constexpr bool regs32 = true;
#else
constexpr bool regs32 = false;
#endif

// Vectors per tile row (nr = nv * lanes) and rows per tile (mr): mr * nv accumulators plus nv B
// vectors and one broadcast A value must fit the register file. 16 registers: 6 x 2 (12
// accumulators; with 2 FMA pipes of latency 4-5 that keeps 10-12 FMAs in flight). 32 registers:
// 14 x 2 (28 accumulators).
constexpr std::size_t nv = 2;
constexpr std::size_t mr_rows = regs32 ? 14 : 6;

template <class T>
constexpr std::size_t lanes() {
    return HWY_LANES(T);
}
template <class T>
constexpr std::size_t nr_cols() {
    return nv * lanes<T>();
}

// Cache blocks (docs/gemm.md). Fixed numbers, not CPUID's (which reports the whole socket's L3 in
// these VMs), sized for the smallest caches of the x86 cores this runs on: L1d 32-48 KiB, L2
// 512 KiB (Zen 2/3) to 2 MiB (Sapphire Rapids).
//  * kc: the B micro-panel kc x nr stays in L1 while A micro-panels stream past it: 16 KiB on
//    16-register targets (AVX2: kc = 256), 24 KiB with 32 registers (AVX-512, nr = 32 floats:
//    kc = 192).
//  * mc: the packed A block mc x kc stays in L2: ~192 KiB (AVX2 f32: 192 rows, f64: 96), a
//    multiple of mr. Measured on Zen 3 (512 KiB L2): 126..378 rows are within noise of each other,
//    less than ~100 KiB loses a few per cent (the B panel is re-read from L3 per A block).
//  * nc: the packed B panel kc x nc, ~2 MiB, in L3.
template <class T>
gd::blocking target_blocking() {
    constexpr std::int32_t mr = static_cast<std::int32_t>(mr_rows);
    constexpr std::int32_t nr = static_cast<std::int32_t>(nr_cols<T>());
    constexpr std::int32_t l1_budget = regs32 ? 24576 : 16384;
    constexpr std::int32_t kc_raw = static_cast<std::int32_t>(l1_budget / (nr * sizeof(T)));
    constexpr std::int32_t kc = kc_raw < 64 ? 64 : (kc_raw > 512 ? 512 : kc_raw);
    constexpr std::int32_t mc_raw = static_cast<std::int32_t>(196608 / (kc * sizeof(T)));
    constexpr std::int32_t mc = (mc_raw / mr < 1 ? 1 : mc_raw / mr) * mr;
    constexpr std::int32_t nc_raw = static_cast<std::int32_t>((2 << 20) / (kc * sizeof(T)));
    constexpr std::int32_t nc = (nc_raw / nr < 1 ? 1 : nc_raw / nr) * nr;
    return {mr, nr, kc, mc, nc};
}

// ------------------------------------------------------------------------------------------------
// Packing
// ------------------------------------------------------------------------------------------------

// B micro-panels: columns [j, j + nr) of a kc-deep slice, stored p-major (nr values per p),
// zero-padded past `cols`. `b` points at (p0, j0) of the slice.
template <class T>
void pack_b_panel(const T* b, std::int64_t brs, std::int64_t bcs, std::int64_t kc, std::int64_t cols, T* dst) {
    constexpr std::int64_t nr = static_cast<std::int64_t>(nr_cols<T>());
    if (bcs == 1) {
        // Row-contiguous B: copy 8 rows at a time across all full micro-panels, so that the reads
        // run along B's rows (one sequential stream per row) instead of down a column (one cache
        // line per row, a page apart when B is wide).
        const hn::ScalableTag<T> d;
        constexpr std::int64_t L = static_cast<std::int64_t>(lanes<T>());
        const std::int64_t full = cols / nr * nr;
        for (std::int64_t p0 = 0; p0 < kc; p0 += 8) {
            const std::int64_t p1 = std::min(kc, p0 + 8);
            for (std::int64_t j = 0; j < full; j += nr) {
                T* o = dst + j * kc;
                for (std::int64_t p = p0; p < p1; ++p) {
                    const T* s = b + p * brs + j;
                    for (std::int64_t v = 0; v < static_cast<std::int64_t>(nv); ++v)
                        hn::Store(hn::LoadU(d, s + v * L), d, o + p * nr + v * L);
                }
            }
        }
        if (full == cols) return;
        b += full;
        dst += full * kc;
        cols -= full;
    }
    for (std::int64_t j = 0; j < cols; j += nr, dst += nr * kc) {
        const std::int64_t w = std::min(nr, cols - j);
        const T* src = b + j * bcs;
        if (bcs == 1 && w == nr) {
            const hn::ScalableTag<T> d;
            for (std::int64_t p = 0; p < kc; ++p) {
                const T* s = src + p * brs;
                T* o = dst + p * nr;
                for (std::size_t v = 0; v < nv; ++v) hn::Store(hn::LoadU(d, s + v * lanes<T>()), d, o + v * lanes<T>());
            }
        } else if (brs == 1 && bcs != 0) {
            // Columns are contiguous in p (B column-major, e.g. a transposed row-major matrix).
            for (std::int64_t jj = 0; jj < w; ++jj) {
                const T* s = src + jj * bcs;
                for (std::int64_t p = 0; p < kc; ++p) dst[p * nr + jj] = s[p];
            }
            for (std::int64_t p = 0; p < kc; ++p)
                for (std::int64_t jj = w; jj < nr; ++jj) dst[p * nr + jj] = T(0);
        } else {
            for (std::int64_t p = 0; p < kc; ++p) {
                const T* s = src + p * brs;
                T* o = dst + p * nr;
                std::int64_t jj = 0;
                for (; jj < w; ++jj) o[jj] = s[jj * bcs];
                for (; jj < nr; ++jj) o[jj] = T(0);
            }
        }
    }
}

// A micro-panels: rows [i, i + mr) of a kc-deep slice, stored p-major (mr values per p),
// zero-padded past `rows`. `a` points at (i0, p0).
template <class T>
void pack_a_block(const T* a, std::int64_t ars, std::int64_t acs, std::int64_t rows, std::int64_t kc, T* dst) {
    constexpr std::int64_t mr = static_cast<std::int64_t>(mr_rows);
    for (std::int64_t i = 0; i < rows; i += mr, dst += mr * kc) {
        const std::int64_t h = std::min(mr, rows - i);
        const T* src = a + i * ars;
        if (ars == 1 && h == mr) {
            for (std::int64_t p = 0; p < kc; ++p) {
                const T* s = src + p * acs;
                T* o = dst + p * mr;
                for (std::int64_t r = 0; r < mr; ++r) o[r] = s[r];
            }
        } else if (acs == 1) {
            // Rows contiguous in p (A row-major): read h rows side by side.
            const T* rowp[mr];
            for (std::int64_t r = 0; r < h; ++r) rowp[r] = src + r * ars;
            for (std::int64_t p = 0; p < kc; ++p) {
                T* o = dst + p * mr;
                std::int64_t r = 0;
                for (; r < h; ++r) o[r] = rowp[r][p];
                for (; r < mr; ++r) o[r] = T(0);
            }
        } else {
            for (std::int64_t p = 0; p < kc; ++p) {
                const T* s = src + p * acs;
                T* o = dst + p * mr;
                std::int64_t r = 0;
                for (; r < h; ++r) o[r] = s[r * ars];
                for (; r < mr; ++r) o[r] = T(0);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Micro-kernel
// ------------------------------------------------------------------------------------------------

// Where the micro-kernel reads A: a packed micro-panel (mr values per p) or the source itself
// (rows at a + r * ars, columns acs apart; the small path).
struct a_packed {};
struct a_strided {};

template <class T>
struct tile_args {
    const T* a;  // packed micro-panel, or A at (i, p0)
    std::int64_t ars, acs;
    const T* b;  // packed B micro-panel
    std::int64_t kc;
    T* c;  // C at (i, j)
    std::int64_t crs, ccs;
    std::int64_t cols;  // valid columns (<= nr)
    T alpha, beta;
};

// C[0, cnt) (elements ccs apart) = alpha * acc + beta * C, or alpha * acc without reading C.
// Every path stores through here, so an element's last roundings do not depend on the path.
template <class D, class V = hn::Vec<D>, class T = hn::TFromD<D>>
HWY_INLINE void store_c(D d, V acc, T* cp, std::int64_t ccs, std::int64_t cnt, V va, V vb, bool read_c) {
    constexpr std::int64_t L = static_cast<std::int64_t>(lanes<T>());
    if (ccs == 1 && cnt == L) {
        const V out = read_c ? hn::MulAdd(acc, va, hn::Mul(hn::LoadU(d, cp), vb)) : hn::Mul(acc, va);
        hn::StoreU(out, d, cp);
        return;
    }
    // Partial vector or strided C: through a lane buffer, with the same vector arithmetic
    // (Highway's MaskedLoad reads the whole vector on SSE4, so it is not used).
    HWY_ALIGN T buf[L];
    if (read_c) {
        for (std::int64_t l = 0; l < cnt; ++l) buf[l] = cp[l * ccs];
        for (std::int64_t l = cnt; l < L; ++l) buf[l] = T(0);
    }
    const V out = read_c ? hn::MulAdd(acc, va, hn::Mul(hn::Load(d, buf), vb)) : hn::Mul(acc, va);
    hn::Store(out, d, buf);
    for (std::int64_t l = 0; l < cnt; ++l) cp[l * ccs] = buf[l];
}

// Computes rows [0, R) of one tile: acc[r][v] = sum_p A[r, p] * B[p, v-th vector], then
// C = alpha * acc + beta * C (C not read when beta == 0). Every element follows the same
// operation sequence whatever R, `cols`, the C strides or the A source are.
template <std::size_t R, class ASource, class T>
HWY_NOINLINE void tile_kernel(const tile_args<T>& t) {
    const hn::ScalableTag<T> d;
    using V = hn::Vec<decltype(d)>;
    constexpr std::size_t L = lanes<T>();
    constexpr std::size_t NR = nr_cols<T>();
    V acc[R][nv];
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t v = 0; v < nv; ++v) acc[r][v] = hn::Zero(d);

    // C is read (beta != 0, or every K slice after the first) after kc steps: start fetching it
    // now, or the store stalls on a miss per row.
    for (std::size_t r = 0; r < R; ++r) {
        const T* crow = t.c + static_cast<std::int64_t>(r) * t.crs;
        hwy::Prefetch(crow);
        hwy::Prefetch(crow + (t.cols - 1) * t.ccs);
    }

    const T* HWY_RESTRICT bp = t.b;
    const std::int64_t kc = t.kc;
    if constexpr (std::is_same_v<ASource, a_packed>) {
        const T* HWY_RESTRICT ap = t.a;
#pragma GCC unroll 4
        for (std::int64_t p = 0; p < kc; ++p) {
            V bv[nv];
            for (std::size_t v = 0; v < nv; ++v) bv[v] = hn::Load(d, bp + v * L);
            for (std::size_t r = 0; r < R; ++r) {
                const V av = hn::Set(d, ap[r]);
                for (std::size_t v = 0; v < nv; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
            }
            ap += mr_rows;
            bp += NR;
        }
    } else {
        const T* rowp[R];
        for (std::size_t r = 0; r < R; ++r) rowp[r] = t.a + static_cast<std::int64_t>(r) * t.ars;
        const std::int64_t acs = t.acs;
        std::int64_t off = 0;
        for (std::int64_t p = 0; p < kc; ++p, off += acs) {
            V bv[nv];
            for (std::size_t v = 0; v < nv; ++v) bv[v] = hn::Load(d, bp + v * L);
            for (std::size_t r = 0; r < R; ++r) {
                const V av = hn::Set(d, rowp[r][off]);
                for (std::size_t v = 0; v < nv; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
            }
            bp += NR;
        }
    }

    const V va = hn::Set(d, t.alpha);
    const V vb = hn::Set(d, t.beta);
    const bool read_c = t.beta != T(0);
    for (std::size_t r = 0; r < R; ++r) {
        T* crow = t.c + static_cast<std::int64_t>(r) * t.crs;
        for (std::size_t v = 0; v < nv; ++v) {
            const std::int64_t j0 = static_cast<std::int64_t>(v * L);
            if (j0 >= t.cols) break;
            store_c(d, acc[r][v], crow + j0 * t.ccs, t.ccs,
                    std::min<std::int64_t>(static_cast<std::int64_t>(L), t.cols - j0), va, vb, read_c);
        }
    }
}

template <class T>
using tile_fn = void (*)(const tile_args<T>&);

template <class ASource, class T, std::size_t... R>
constexpr std::array<tile_fn<T>, sizeof...(R)> make_tile_table(std::index_sequence<R...>) {
    return {&tile_kernel<R + 1, ASource, T>...};
}

// tile_table<...>[h - 1] computes an h-row tile.
template <class ASource, class T>
inline constexpr std::array<tile_fn<T>, mr_rows> tile_table =
    make_tile_table<ASource, T>(std::make_index_sequence<mr_rows>{});

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

// Dot products of R long rows (contiguous along k) with NS short vectors (contiguous, zero-padded
// to a multiple of the lane count, kpad apart): out[r * NS + j] = alpha * dot + beta * out (out
// not read when beta == 0). R * NS independent accumulator chains; each (r, j) is computed the
// same way whatever R is, so a row's result does not depend on its block.
template <std::size_t NS, std::size_t R, class T>
HWY_NOINLINE void dot_block(const T* const* rows, const T* xs, std::int64_t kpad, std::int64_t k, T* const* outs,
                            T alpha, T beta) {
    const hn::ScalableTag<T> d;
    using V = hn::Vec<decltype(d)>;
    constexpr std::int64_t L = static_cast<std::int64_t>(lanes<T>());
    V acc[R][NS];
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t j = 0; j < NS; ++j) acc[r][j] = hn::Zero(d);
    const std::int64_t full = k / L * L;
    // Two orders of the same chains (so the same bits). Short rows go one after another: R
    // short rows adjacent in memory (a row-major corpus [N, 128] times a query) interleaved k
    // steps at a time make the reads hop around inside each page, which hides the stream from
    // the hardware prefetcher: 200000 x 128 f32 ran at 8-9 GB/s interleaved and at 13 GB/s, a
    // plain read's speed, in row order. Rows of 2 KiB and more (each its own sequential
    // stream) are interleaved: R streams keep more loads in flight, and one row's single
    // accumulator chain would be latency-bound (1024 x 1 x 1024 from L3 ran at half speed).
    if (k * static_cast<std::int64_t>(sizeof(T)) < 2048) {
        for (std::size_t r = 0; r < R; ++r) {
            for (std::int64_t p = 0; p < full; p += L) {
                const V av = hn::LoadU(d, rows[r] + p);
                for (std::size_t j = 0; j < NS; ++j)
                    acc[r][j] = hn::MulAdd(av, hn::Load(d, xs + static_cast<std::int64_t>(j) * kpad + p), acc[r][j]);
            }
        }
    } else {
        for (std::int64_t p = 0; p < full; p += L) {
            V xv[NS];
            for (std::size_t j = 0; j < NS; ++j) xv[j] = hn::Load(d, xs + static_cast<std::int64_t>(j) * kpad + p);
            for (std::size_t r = 0; r < R; ++r) {
                const V av = hn::LoadU(d, rows[r] + p);
                for (std::size_t j = 0; j < NS; ++j) acc[r][j] = hn::MulAdd(av, xv[j], acc[r][j]);
            }
        }
    }
    if (full < k) {
        V xv[NS];
        for (std::size_t j = 0; j < NS; ++j) xv[j] = hn::Load(d, xs + static_cast<std::int64_t>(j) * kpad + full);
        for (std::size_t r = 0; r < R; ++r) {
            HWY_ALIGN T tail[L] = {};
            for (std::int64_t p = full; p < k; ++p) tail[p - full] = rows[r][p];
            const V av = hn::Load(d, tail);
            for (std::size_t j = 0; j < NS; ++j) acc[r][j] = hn::MulAdd(av, xv[j], acc[r][j]);
        }
    }
    for (std::size_t r = 0; r < R; ++r) {
        for (std::size_t j = 0; j < NS; ++j) {
            const T sum = hn::GetLane(hn::SumOfLanes(d, acc[r][j]));
            T* o = outs[r * NS + j];
            const T scaled = alpha * sum;
            *o = beta == T(0) ? scaled : scaled + beta * *o;
        }
    }
}

// Long rows [begin, end): row i at long(i), output (i, j) at out(i, j).
template <std::size_t NS, class T, class LongRow, class Out>
void dot_rows(std::int64_t begin, std::int64_t end, const LongRow& long_row, const Out& out, const T* xs,
              std::int64_t kpad, std::int64_t k, T alpha, T beta) {
    constexpr std::size_t R = 8 / NS;
    const T* rows[R];
    T* outs[R * NS];
    std::int64_t i = begin;
    for (; i + static_cast<std::int64_t>(R) <= end; i += static_cast<std::int64_t>(R)) {
        for (std::size_t r = 0; r < R; ++r) {
            rows[r] = long_row(i + static_cast<std::int64_t>(r));
            for (std::size_t j = 0; j < NS; ++j)
                outs[r * NS + j] = out(i + static_cast<std::int64_t>(r), static_cast<std::int64_t>(j));
        }
        dot_block<NS, R>(rows, xs, kpad, k, outs, alpha, beta);
    }
    for (; i < end; ++i) {
        rows[0] = long_row(i);
        for (std::size_t j = 0; j < NS; ++j) outs[j] = out(i, static_cast<std::int64_t>(j));
        dot_block<NS, 1>(rows, xs, kpad, k, outs, alpha, beta);
    }
}

// Column j (k values) of an operand packed by pack_b: K slices of kc, each `padded x kc_eff`,
// micro-panels `unit` wide storing `unit` values per p.
template <class T>
void gather_packed_column(const T* packed, std::int64_t unit, std::int64_t padded, std::int64_t kc, std::int64_t k,
                          std::int64_t j, T* out) {
    for (std::int64_t pc = 0; pc < k; pc += kc) {
        const std::int64_t kc_eff = std::min(kc, k - pc);
        const T* panel = packed + prepacked_slice(pc, padded) + (j / unit) * unit * kc_eff + j % unit;
        for (std::int64_t p = 0; p < kc_eff; ++p) out[pc + p] = panel[p * unit];
    }
}

// The dot path (gd::dot_kind_of): the short operand is gathered once into contiguous vectors,
// the long rows are split over the tasks. With a prepacked B the values come from the packed
// panels (a single micro-panel when B is the short side), so the bits match the plain path.
template <class T>
void dot_gemm(const gemm_operands& op, gd::dot_kind kind, const gemm_plan& plan, const T* packed, unsigned char* base,
              gemm_runner* run) {
    constexpr std::int64_t L = static_cast<std::int64_t>(lanes<T>());
    const std::int64_t k = op.k, kpad = gd::round_up(k, L), kstride = gd::round_up(k, 16);
    T* xs = reinterpret_cast<T*>(base);
    const T alpha = static_cast<T>(op.alpha), beta = static_cast<T>(op.beta);
    const T* a = static_cast<const T*>(op.a);
    const T* b = static_cast<const T*>(op.b);
    T* c = static_cast<T*>(op.c);
    const std::int64_t ns = kind == gd::dot_kind::rows_of_a ? op.n : 1;
    const std::int64_t nlong = kind == gd::dot_kind::rows_of_a ? op.m : op.n;
    for (std::int64_t j = 0; j < ns; ++j) {
        T* x = xs + j * kpad;
        if (kind == gd::dot_kind::cols_of_b) {
            for (std::int64_t p = 0; p < k; ++p) x[p] = a[p * op.a_col_stride];
        } else if (packed != nullptr) {
            // Column j of B from its micro-panels (nr wide, or mr when the plan is swapped).
            const std::int64_t unit = plan.swapped ? plan.mr : plan.nr;
            gather_packed_column(packed, unit, gd::round_up(op.n, unit), plan.kc, k, j, x);
        } else {
            for (std::int64_t p = 0; p < k; ++p) x[p] = b[p * op.b_row_stride + j * op.b_col_stride];
        }
        for (std::int64_t p = k; p < kpad; ++p) x[p] = T(0);
    }
    const std::int64_t tasks = static_cast<std::int64_t>(plan.tasks_m) * plan.tasks_n;
    auto body = [&](std::int64_t tb, std::int64_t te) {
        for (std::int64_t t = tb; t < te; ++t) {
            const auto [begin, end] = gd::task_range(nlong, 8, tasks, t);
            if (begin >= end) continue;
            if (kind == gd::dot_kind::rows_of_a) {
                auto long_row = [&](std::int64_t i) { return a + i * op.a_row_stride; };
                auto out = [&](std::int64_t i, std::int64_t j) {
                    return c + i * op.c_row_stride + j * op.c_col_stride;
                };
                switch (ns) {
                case 1:
                    dot_rows<1>(begin, end, long_row, out, xs, kpad, k, alpha, beta);
                    break;
                case 2:
                    dot_rows<2>(begin, end, long_row, out, xs, kpad, k, alpha, beta);
                    break;
                case 3:
                    dot_rows<3>(begin, end, long_row, out, xs, kpad, k, alpha, beta);
                    break;
                default:
                    dot_rows<4>(begin, end, long_row, out, xs, kpad, k, alpha, beta);
                    break;
                }
            } else if (packed == nullptr) {
                auto long_row = [&](std::int64_t j) { return b + j * op.b_col_stride; };
                auto out = [&](std::int64_t j, std::int64_t) { return c + j * op.c_col_stride; };
                dot_rows<1>(begin, end, long_row, out, xs, kpad, k, alpha, beta);
            } else {
                // Column j of a prepacked B: gathered from its micro-panel, one column at a time.
                T* col = xs + (gd::dot_max_short + t) * kstride;
                const std::int64_t n_pad = gd::round_up(op.n, plan.nr);
                for (std::int64_t j = begin; j < end; ++j) {
                    gather_packed_column(packed, plan.nr, n_pad, plan.kc, k, j, col);
                    const T* rows[1] = {col};
                    T* outs[1] = {c + j * op.c_col_stride};
                    dot_block<1, 1>(rows, xs, kpad, k, outs, alpha, beta);
                }
            }
        }
    };
    if (tasks > 1 && run != nullptr)
        (*run)(tasks, body);
    else
        body(0, tasks);
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
    if (const gd::dot_kind kind = gd::dot_kind_of(op); kind != gd::dot_kind::none) {
        dot_gemm<T>(op, kind, plan, packed, base, run);
        return;
    }
    base += gd::dot_scratch_bytes(plan);
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

std::size_t packed_b_bytes(const gemm_plan& plan) noexcept {
    if (plan.k <= 0 || plan.n <= 0) return 0;
    const std::int64_t unit = plan.swapped ? plan.mr : plan.nr;
    const std::size_t elem = plan.type == gemm_type::f32 ? 4 : 8;
    return static_cast<std::size_t>(gemm_detail::round_up(plan.n, unit) * plan.k) * elem + gemm_detail::align_bytes;
}

packed_b_key packed_b_key_of(const gemm_plan& plan) noexcept {
    packed_b_key key;
    key.n = plan.n;
    key.k = plan.k;
    key.target = plan.target;
    key.kc = plan.kc;
    key.nr = plan.nr;
    key.mr = plan.mr;
    key.swapped = plan.swapped;
    key.type = plan.type;
    return key;
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
