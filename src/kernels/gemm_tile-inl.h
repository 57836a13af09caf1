// GEMM: tile shapes, cache blocks and micro-kernels, per Highway target.
//
// Per-target code of the GEMM kernel: included by gemm.cpp once per Highway
// target (foreach_target), hence the toggling include guard of Highway's own
// -inl.h files instead of #pragma once. See gemm_plan.hpp for the map.

#if defined(TENFERRO_KERNELS_GEMM_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TENFERRO_KERNELS_GEMM_TILE_INL_H_
#undef TENFERRO_KERNELS_GEMM_TILE_INL_H_
#else
#define TENFERRO_KERNELS_GEMM_TILE_INL_H_
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "kernels/gemm_plan.hpp"

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
//  * kc: each K slice reads and writes the whole C block once more, so kc sets how many bytes of C
//    move per FMA: 8 bytes per C element (read, write) over kc FMAs. 16-register targets keep
//    the B micro-panel kc x nr in L1 (16 KiB: AVX2 kc = 256; measured on Zen 3). The 32-register
//    targets run twice the FMA lanes per cycle (AVX-512), so they take twice the depth, kc = 512,
//    for the same C traffic per cycle; their B micro-panel (64 KiB) then streams from L2 in
//    order, 128 bytes per 14-row step, which the prefetchers follow. Measured on a Xeon
//    (AVX-512, 48 KiB L1d): kc = 192 with the panel in L1 ran n = 2048 at 0.67-0.77x OpenBLAS,
//    kc = 512 at 0.90-0.97x; n = 256..1024 no slower.
//  * mc: the packed A block mc x kc stays in L2: ~192 KiB on 16-register targets (AVX2 f32: 192
//    rows, f64: 96), ~256 KiB with 32 registers (f32: 126 rows, f64: 56), a multiple of mr.
//    Measured on Zen 3 (512 KiB L2): 126..378 rows are within noise of each other, less than
//    ~100 KiB loses a few per cent (the B panel is re-read from L3 per A block).
//  * nc: the packed B panel kc x nc, ~2 MiB, in L3.
template <class T>
gd::blocking target_blocking() {
    constexpr std::int32_t mr = static_cast<std::int32_t>(mr_rows);
    constexpr std::int32_t nr = static_cast<std::int32_t>(nr_cols<T>());
    constexpr std::int32_t b_panel_bytes = regs32 ? 65536 : 16384;
    constexpr std::int32_t a_block_bytes = regs32 ? 262144 : 196608;
    constexpr std::int32_t kc_raw = static_cast<std::int32_t>(b_panel_bytes / (nr * sizeof(T)));
    constexpr std::int32_t kc = kc_raw < 64 ? 64 : (kc_raw > 512 ? 512 : kc_raw);
    constexpr std::int32_t mc_raw = static_cast<std::int32_t>(a_block_bytes / (kc * sizeof(T)));
    constexpr std::int32_t mc = (mc_raw / mr < 1 ? 1 : mc_raw / mr) * mr;
    constexpr std::int32_t nc_raw = static_cast<std::int32_t>((2 << 20) / (kc * sizeof(T)));
    constexpr std::int32_t nc = (nc_raw / nr < 1 ? 1 : nc_raw / nr) * nr;
    return {mr, nr, kc, mc, nc};
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

}  // namespace
}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TENFERRO_KERNELS_GEMM_TILE_INL_H_
