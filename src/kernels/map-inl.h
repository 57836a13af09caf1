// Per-target helpers that apply a vector functor along one run of a strided
// loop (see nd_loop.hpp): unit-stride and broadcast (stride-0) operands are
// read in place, anything else is gathered into a block buffer first. Tails
// shorter than a vector are padded into a lane buffer and go through the same
// functor, so every element is computed by identical code whatever its
// position or the chunking of the loop.
// Include after hwy/highway.h inside a foreach_target translation unit.

#if defined(TENFERRO_KERNELS_MAP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TENFERRO_KERNELS_MAP_INL_H_
#undef TENFERRO_KERNELS_MAP_INL_H_
#else
#define TENFERRO_KERNELS_MAP_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Elements per gather block; a multiple of every target's lane count.
inline constexpr std::int64_t map_block = 512;

template <class T>
inline constexpr std::size_t max_lanes = HWY_MAX_BYTES / sizeof(T) > 0 ? HWY_MAX_BYTES / sizeof(T) : 1;

template <class T>
HWY_INLINE void gather_run(T* dst, const T* src, std::int64_t stride, std::int64_t m) {
    if (stride == 1) {
        std::copy_n(src, m, dst);
    } else if (stride == 0) {
        std::fill_n(dst, m, *src);
    } else {
        for (std::int64_t i = 0; i < m; ++i) dst[i] = src[i * stride];
    }
}

template <class T>
HWY_INLINE void scatter_run(T* dst, std::int64_t stride, const T* src, std::int64_t m) {
    if (stride == 1) {
        std::copy_n(src, m, dst);
    } else {
        for (std::int64_t i = 0; i < m; ++i) dst[i * stride] = src[i];
    }
}

// out[i] = op(d, x[i]) for i < n, all unit-stride.
template <class D, class Op, class T = hn::TFromD<D>>
HWY_INLINE void map1_unit(D d, const Op& op, T* out, const T* x, std::int64_t n) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    std::int64_t i = 0;
    for (; i + 4 * N <= n; i += 4 * N) {
        const auto v0 = op(d, hn::LoadU(d, x + i));
        const auto v1 = op(d, hn::LoadU(d, x + i + N));
        const auto v2 = op(d, hn::LoadU(d, x + i + 2 * N));
        const auto v3 = op(d, hn::LoadU(d, x + i + 3 * N));
        hn::StoreU(v0, d, out + i);
        hn::StoreU(v1, d, out + i + N);
        hn::StoreU(v2, d, out + i + 2 * N);
        hn::StoreU(v3, d, out + i + 3 * N);
    }
    for (; i + N <= n; i += N) hn::StoreU(op(d, hn::LoadU(d, x + i)), d, out + i);
    if (i < n) {
        const std::int64_t r = n - i;
        HWY_ALIGN T tx[max_lanes<T>];
        HWY_ALIGN T to[max_lanes<T>];
        for (std::int64_t j = 0; j < N; ++j) tx[j] = x[i + (j < r ? j : 0)];
        hn::Store(op(d, hn::Load(d, tx)), d, to);
        std::copy_n(to, r, out + i);
    }
}

// out[i] = op(d, x[i * sx]) along one run.
template <class D, class Op, class T = hn::TFromD<D>>
HWY_INLINE void map1_run(D d, const Op& op, T* out, std::int64_t so, const T* x, std::int64_t sx, std::int64_t n) {
    if (so == 1 && sx == 1) return map1_unit(d, op, out, x, n);
    HWY_ALIGN T bx[map_block];
    HWY_ALIGN T bo[map_block];
    for (std::int64_t i = 0; i < n; i += map_block) {
        const std::int64_t m = std::min(map_block, n - i);
        const T* px = x + i * sx;
        if (sx != 1) {
            gather_run(bx, px, sx, m);
            px = bx;
        }
        T* po = so == 1 ? out + i : bo;
        map1_unit(d, op, po, px, m);
        if (so != 1) scatter_run(out + i * so, so, bo, m);
    }
}

// out[i] = op(d, a[i], b[i]); SA / SB: 1 = unit stride, 0 = broadcast scalar.
template <int SA, int SB, class D, class Op, class T = hn::TFromD<D>>
HWY_INLINE void map2_unit(D d, const Op& op, T* out, const T* a, const T* b, std::int64_t n) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    const auto va = hn::Set(d, a[0]);
    const auto vb = hn::Set(d, b[0]);
    std::int64_t i = 0;
    for (; i + 4 * N <= n; i += 4 * N) {
        const auto a0 = SA ? hn::LoadU(d, a + i) : va;
        const auto a1 = SA ? hn::LoadU(d, a + i + N) : va;
        const auto a2 = SA ? hn::LoadU(d, a + i + 2 * N) : va;
        const auto a3 = SA ? hn::LoadU(d, a + i + 3 * N) : va;
        const auto b0 = SB ? hn::LoadU(d, b + i) : vb;
        const auto b1 = SB ? hn::LoadU(d, b + i + N) : vb;
        const auto b2 = SB ? hn::LoadU(d, b + i + 2 * N) : vb;
        const auto b3 = SB ? hn::LoadU(d, b + i + 3 * N) : vb;
        hn::StoreU(op(d, a0, b0), d, out + i);
        hn::StoreU(op(d, a1, b1), d, out + i + N);
        hn::StoreU(op(d, a2, b2), d, out + i + 2 * N);
        hn::StoreU(op(d, a3, b3), d, out + i + 3 * N);
    }
    for (; i + N <= n; i += N) {
        const auto a0 = SA ? hn::LoadU(d, a + i) : va;
        const auto b0 = SB ? hn::LoadU(d, b + i) : vb;
        hn::StoreU(op(d, a0, b0), d, out + i);
    }
    if (i < n) {
        const std::int64_t r = n - i;
        HWY_ALIGN T ta[max_lanes<T>];
        HWY_ALIGN T tb[max_lanes<T>];
        HWY_ALIGN T to[max_lanes<T>];
        for (std::int64_t j = 0; j < N; ++j) {
            const std::int64_t k = j < r ? j : 0;
            ta[j] = SA ? a[i + k] : a[0];
            tb[j] = SB ? b[i + k] : b[0];
        }
        hn::Store(op(d, hn::Load(d, ta), hn::Load(d, tb)), d, to);
        std::copy_n(to, r, out + i);
    }
}

// out[i * so] = op(d, a[i * sa], b[i * sb]) along one run.
template <class D, class Op, class T = hn::TFromD<D>>
HWY_INLINE void map2_run(D d, const Op& op, T* out, std::int64_t so, const T* a, std::int64_t sa, const T* b,
                         std::int64_t sb, std::int64_t n) {
    if (so == 1) {
        if (sa == 1 && sb == 1) return map2_unit<1, 1>(d, op, out, a, b, n);
        if (sa == 1 && sb == 0) return map2_unit<1, 0>(d, op, out, a, b, n);
        if (sa == 0 && sb == 1) return map2_unit<0, 1>(d, op, out, a, b, n);
    }
    HWY_ALIGN T ba[map_block];
    HWY_ALIGN T bb[map_block];
    HWY_ALIGN T bo[map_block];
    for (std::int64_t i = 0; i < n; i += map_block) {
        const std::int64_t m = std::min(map_block, n - i);
        const T* pa = a + i * sa;
        const T* pb = b + i * sb;
        if (sa != 1 && sa != 0) {
            gather_run(ba, pa, sa, m);
            pa = ba;
        }
        if (sb != 1 && sb != 0) {
            gather_run(bb, pb, sb, m);
            pb = bb;
        }
        T* po = so == 1 ? out + i : bo;
        if (sa == 0 && sb == 0) {
            map2_unit<0, 0>(d, op, po, pa, pb, m);
        } else if (sa == 0) {
            map2_unit<0, 1>(d, op, po, pa, pb, m);
        } else if (sb == 0) {
            map2_unit<1, 0>(d, op, po, pa, pb, m);
        } else {
            map2_unit<1, 1>(d, op, po, pa, pb, m);
        }
        if (so != 1) scatter_run(out + i * so, so, bo, m);
    }
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TENFERRO_KERNELS_MAP_INL_H_
