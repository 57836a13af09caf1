// GEMM: packing of A blocks and B panels, per Highway target.
//
// Per-target code of the GEMM kernel: included by gemm.cpp once per Highway
// target (foreach_target), hence the toggling include guard of Highway's own
// -inl.h files instead of #pragma once. See gemm_plan.hpp for the map.

#if defined(TENFERRO_KERNELS_GEMM_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TENFERRO_KERNELS_GEMM_PACK_INL_H_
#undef TENFERRO_KERNELS_GEMM_PACK_INL_H_
#else
#define TENFERRO_KERNELS_GEMM_PACK_INL_H_
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "kernels/gemm_plan.hpp"
#include "kernels/gemm_tile-inl.h"  // the tile shape (nr_cols, mr_rows) the panels are packed for

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace gd = gemm_detail;

// ------------------------------------------------------------------------------------------------
// Packing
// ------------------------------------------------------------------------------------------------

// Once per target (this file is re-included per target), so the switch is redefined each time.
#undef TENFERRO_GEMM_PACK_A_TRANSPOSE
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define TENFERRO_GEMM_PACK_A_TRANSPOSE 1
// Transposes the 16 x 16 f32 block held in r[0..15] (r[i] = row i) in place (r[j] = column j):
// 32-bit interleave of row pairs, 64-bit interleave of those, then two rounds of 128-bit lane
// shuffles. 64 shuffles for 256 values.
HWY_INLINE void transpose_16x16(__m512 (&r)[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // u[4 g + m], lane l: rows 4 g .. 4 g + 3 of column 4 l + m.
    __m512 u[16];
    for (int g = 0; g < 16; g += 4) {
        const __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]);
        const __m512d t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (int m = 0; m < 4; ++m) {
        // Lanes (0, 2) and (1, 3) of rows 0-7 and of rows 8-15, then the four columns 4 l + m.
        const __m512 v0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88), w0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xDD);
        const __m512 v1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xDD);
        r[m] = _mm512_shuffle_f32x4(v0, v1, 0x88);
        r[8 + m] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
        r[4 + m] = _mm512_shuffle_f32x4(w0, w1, 0x88);
        r[12 + m] = _mm512_shuffle_f32x4(w0, w1, 0xDD);
    }
}

// One full micro-panel of a row-major A (mr rows of kc contiguous values, ars apart), f32: the panel
// is that block transposed, so sixteen values of p at a time go through a register transpose and
// leave as sixteen mr-value stores. The element-wise loop below is a scalar gather and was ~10% of
// an n = 256 GEMM (AVX-512, Zen 5); this is a few times faster.
HWY_INLINE void pack_a_panel_rows(const float* src, std::int64_t ars, std::int64_t kc, float* dst) {
    constexpr int mr = static_cast<int>(mr_rows);
    static_assert(mr <= 16, "a micro-panel column must fit one vector");
    constexpr __mmask16 rows_mask = static_cast<__mmask16>((1u << mr) - 1);
    for (std::int64_t p = 0; p < kc; p += 16) {
        const int w = static_cast<int>(std::min<std::int64_t>(16, kc - p));
        const __mmask16 cols_mask = static_cast<__mmask16>((1u << w) - 1);
        __m512 r[16];
        for (int i = 0; i < mr; ++i) r[i] = _mm512_maskz_loadu_ps(cols_mask, src + i * ars + p);
        for (int i = mr; i < 16; ++i) r[i] = _mm512_setzero_ps();
        transpose_16x16(r);
        float* o = dst + p * mr;
        for (int j = 0; j < w; ++j) _mm512_mask_storeu_ps(o + j * mr, rows_mask, r[j]);
    }
}

// Transposes the 8 x 8 f64 block held in r[0..7] in place: 64-bit interleave of row pairs, then two
// rounds of 128-bit lane shuffles. 24 shuffles for 64 values.
HWY_INLINE void transpose_8x8(__m512d (&r)[8]) {
    __m512d t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_pd(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_pd(r[i], r[i + 1]);
    }
    // u[4 g + m]: rows 4 g .. 4 g + 3 (in row pairs) of columns m' and m' + 4, m' = (0, 2, 1, 3)[m].
    __m512d u[8];
    for (int g = 0; g < 8; g += 4) {
        u[g] = _mm512_shuffle_f64x2(t[g], t[g + 2], 0x88);
        u[g + 1] = _mm512_shuffle_f64x2(t[g], t[g + 2], 0xDD);
        u[g + 2] = _mm512_shuffle_f64x2(t[g + 1], t[g + 3], 0x88);
        u[g + 3] = _mm512_shuffle_f64x2(t[g + 1], t[g + 3], 0xDD);
    }
    constexpr int first_col[4] = {0, 2, 1, 3};
    for (int m = 0; m < 4; ++m) {
        r[first_col[m]] = _mm512_shuffle_f64x2(u[m], u[4 + m], 0x88);
        r[first_col[m] + 4] = _mm512_shuffle_f64x2(u[m], u[4 + m], 0xDD);
    }
}

// The f64 panel: eight values of p at a time, rows 0-7 and rows 8..mr-1 (zero-padded to eight)
// through one 8 x 8 transpose each.
HWY_INLINE void pack_a_panel_rows(const double* src, std::int64_t ars, std::int64_t kc, double* dst) {
    constexpr int mr = static_cast<int>(mr_rows);
    static_assert(mr > 8 && mr <= 16, "a micro-panel column must fit two vectors");
    constexpr __mmask8 upper_mask = static_cast<__mmask8>((1u << (mr - 8)) - 1);
    for (std::int64_t p = 0; p < kc; p += 8) {
        const int w = static_cast<int>(std::min<std::int64_t>(8, kc - p));
        const __mmask8 cols_mask = static_cast<__mmask8>((1u << w) - 1);
        __m512d lo[8], hi[8];
        for (int i = 0; i < 8; ++i) lo[i] = _mm512_maskz_loadu_pd(cols_mask, src + i * ars + p);
        for (int i = 8; i < mr; ++i) hi[i - 8] = _mm512_maskz_loadu_pd(cols_mask, src + i * ars + p);
        for (int i = mr; i < 16; ++i) hi[i - 8] = _mm512_setzero_pd();
        transpose_8x8(lo);
        transpose_8x8(hi);
        double* o = dst + p * mr;
        for (int j = 0; j < w; ++j) {
            _mm512_storeu_pd(o + j * mr, lo[j]);
            _mm512_mask_storeu_pd(o + j * mr + 8, upper_mask, hi[j]);
        }
    }
}

// Sixteen full columns of a B that is contiguous along p (a transposed row-major matrix: B[p, j] =
// src[j * bcs + p]) into a micro-panel (nr values per p, these sixteen at `dst`): sixteen values of
// p at a time through the register transpose, as a row-major A panel is packed.
HWY_INLINE void pack_b_cols16(const float* src, std::int64_t bcs, std::int64_t kc, std::int64_t nr, float* dst) {
    for (std::int64_t p = 0; p < kc; p += 16) {
        const int w = static_cast<int>(std::min<std::int64_t>(16, kc - p));
        const __mmask16 cols_mask = static_cast<__mmask16>((1u << w) - 1);
        __m512 r[16];
        for (int c = 0; c < 16; ++c) r[c] = _mm512_maskz_loadu_ps(cols_mask, src + c * bcs + p);
        transpose_16x16(r);
        for (int j = 0; j < w; ++j) _mm512_storeu_ps(dst + (p + j) * nr, r[j]);
    }
}
HWY_INLINE void pack_b_cols16(const double* src, std::int64_t bcs, std::int64_t kc, std::int64_t nr, double* dst) {
    for (std::int64_t h = 0; h < 16; h += 8) {
        for (std::int64_t p = 0; p < kc; p += 8) {
            const int w = static_cast<int>(std::min<std::int64_t>(8, kc - p));
            const __mmask8 cols_mask = static_cast<__mmask8>((1u << w) - 1);
            __m512d r[8];
            for (int c = 0; c < 8; ++c) r[c] = _mm512_maskz_loadu_pd(cols_mask, src + (h + c) * bcs + p);
            transpose_8x8(r);
            for (int j = 0; j < w; ++j) _mm512_storeu_pd(dst + (p + j) * nr + h, r[j]);
        }
    }
}
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
#define TENFERRO_GEMM_PACK_A_TRANSPOSE 1
// Transposes the 8 x 8 f32 block held in r[0..7] in place: 32-bit interleave of row pairs, 64-bit
// selection of those (within each 128-bit half), then the halves. 24 shuffles for 64 values.
HWY_INLINE void transpose_8x8(__m256 (&r)[8]) {
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    // s[4 g + m]: rows 4 g .. 4 g + 3 of column m (low half) and m + 4 (high half).
    __m256 s[8];
    for (int g = 0; g < 8; g += 4) {
        s[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
        s[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
        s[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        s[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    for (int m = 0; m < 4; ++m) {
        r[m] = _mm256_permute2f128_ps(s[m], s[4 + m], 0x20);
        r[m + 4] = _mm256_permute2f128_ps(s[m], s[4 + m], 0x31);
    }
}

// The AVX2 f32 panel (mr = 6): eight values of p at a time through an 8 x 8 transpose (rows 6 and 7
// zero), each column leaving as one 8-lane store at its place: the two lanes past the column land
// on the next column's place and are overwritten by its store, or on the next panel's, packed
// later. The panel's last column is stored as 4 + 2 lanes, so nothing is written past the panel;
// a kc tail of fewer than eight values is gathered.
HWY_INLINE void pack_a_panel_rows(const float* src, std::int64_t ars, std::int64_t kc, float* dst) {
    constexpr int mr = static_cast<int>(mr_rows);
    static_assert(mr == 6, "the 16-register targets' f32 tile is 6 rows tall");
    std::int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
        __m256 r[8];
        for (int i = 0; i < mr; ++i) r[i] = _mm256_loadu_ps(src + i * ars + p);
        for (int i = mr; i < 8; ++i) r[i] = _mm256_setzero_ps();
        transpose_8x8(r);
        float* o = dst + p * mr;
        const int full = p + 8 == kc ? 7 : 8;
        for (int j = 0; j < full; ++j) _mm256_storeu_ps(o + j * mr, r[j]);
        if (full == 7) {
            _mm_storeu_ps(o + 7 * mr, _mm256_castps256_ps128(r[7]));
            _mm_storel_pi(reinterpret_cast<__m64*>(o + 7 * mr + 4), _mm256_extractf128_ps(r[7], 1));
        }
    }
    for (; p < kc; ++p)
        for (int i = 0; i < mr; ++i) dst[p * mr + i] = src[i * ars + p];
}

// Eight full columns of a B that is contiguous along p (B[p, j] = src[j * bcs + p]) into a
// micro-panel (nr values per p, these eight at `dst`): eight values of p at a time through the
// 8 x 8 transpose; a kc tail of fewer than eight is gathered.
HWY_INLINE void pack_b_cols8(const float* src, std::int64_t bcs, std::int64_t kc, std::int64_t nr, float* dst) {
    std::int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
        __m256 r[8];
        for (int c = 0; c < 8; ++c) r[c] = _mm256_loadu_ps(src + c * bcs + p);
        transpose_8x8(r);
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (p + j) * nr, r[j]);
    }
    for (; p < kc; ++p)
        for (int c = 0; c < 8; ++c) dst[p * nr + c] = src[c * bcs + p];
}
#else
#define TENFERRO_GEMM_PACK_A_TRANSPOSE 0
#endif

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
            // Columns are contiguous in p (B column-major, e.g. a transposed row-major matrix: a
            // search corpus as matmul(queries, corpus^T) reads it). Full panels go through the
            // register transposes where the target has them.
#if TENFERRO_GEMM_PACK_A_TRANSPOSE && HWY_TARGET <= HWY_AVX3
            if (w == nr && nr % 16 == 0) {
                for (std::int64_t c = 0; c < nr; c += 16) pack_b_cols16(src + c * bcs, bcs, kc, nr, dst + c);
                continue;
            }
#elif TENFERRO_GEMM_PACK_A_TRANSPOSE
            if constexpr (std::is_same_v<T, float>) {
                if (w == nr && nr % 8 == 0) {
                    for (std::int64_t c = 0; c < nr; c += 8) pack_b_cols8(src + c * bcs, bcs, kc, nr, dst + c);
                    continue;
                }
            }
#endif
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
#if TENFERRO_GEMM_PACK_A_TRANSPOSE
        // Whichever element types this target has a transposing panel packer for (see above).
        if constexpr (requires(const T* s, T* o) { pack_a_panel_rows(s, ars, kc, o); }) {
            if (acs == 1 && h == mr) {
                pack_a_panel_rows(src, ars, kc, dst);
                continue;
            }
        }
#endif
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

}  // namespace
}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TENFERRO_KERNELS_GEMM_PACK_INL_H_
