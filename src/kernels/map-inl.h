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

#include <hwy/cache_control.h>

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

// A full vector to out + i: a regular store, or (Stream) a non-temporal one, which
// needs out + i aligned to the vector size.
template <bool Stream, class D, class V, class T>
HWY_INLINE void store_vec(V v, D d, T* p) {
    if constexpr (Stream) {
        hn::Stream(v, d, p);
    } else {
        hn::StoreU(v, d, p);
    }
}

// Runs at least this long (bytes of output) take the streaming path when the
// caller asks for it; shorter ones gain nothing from it and would pay for the
// partial lines at both ends.
inline constexpr std::int64_t stream_min_run_bytes = 4096;

// Elements before out is aligned to a full vector, or -1 when it never will be
// (out not even aligned to its element size).
template <class D, class T>
HWY_INLINE std::int64_t stream_head(D d, const T* out) {
    const auto addr = reinterpret_cast<std::uintptr_t>(out);
    if (addr % sizeof(T) != 0) return -1;
    const std::uintptr_t bytes = hn::Lanes(d) * sizeof(T);
    return static_cast<std::int64_t>(((bytes - addr % bytes) % bytes) / sizeof(T));
}

// out[i + j] = op(d, x[i + j]) for j < r < one vector, through padded lane
// buffers (the padding repeats x[i], a valid input).
template <class D, class Op, class T = hn::TFromD<D>>
HWY_INLINE void map1_partial(D d, const Op& op, T* out, const T* x, std::int64_t i, std::int64_t r) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    HWY_ALIGN T tx[max_lanes<T>];
    HWY_ALIGN T to[max_lanes<T>];
    for (std::int64_t j = 0; j < N; ++j) tx[j] = x[i + (j < r ? j : 0)];
    hn::Store(op(d, hn::Load(d, tx)), d, to);
    std::copy_n(to, r, out + i);
}

// out[i] = op(d, x[i]) for i < n, all unit-stride. Stream: non-temporal stores
// for the vector-aligned body (the head before it goes through the padded path);
// the caller fences (hwy::FlushStream) once it is done.
// Not inlined, nor is map2_unit: these are the vector loops, compiled once
// per op, dtype, target, operand pattern (map2_unit's SA / SB) and stream
// choice, and every caller with that pattern (a loop's unit-stride run, its
// gathered blocks, the dense entry points) calls that one copy. Inlined, each
// call site was a copy of the loop, which made elementwise.cpp the slowest
// file to compile by far; a call per run costs a nanosecond or two.
template <bool Stream = false, class D, class Op, class T = hn::TFromD<D>>
HWY_NOINLINE void map1_unit(D d, const Op& op, T* out, const T* x, std::int64_t n) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    std::int64_t i = 0;
    if constexpr (Stream) {
        const std::int64_t h = stream_head(d, out);
        if (h < 0 || h >= n) return map1_unit<false>(d, op, out, x, n);
        if (h > 0) map1_partial(d, op, out, x, 0, h);
        i = h;
    }
    for (; i + 4 * N <= n; i += 4 * N) {
        const auto v0 = op(d, hn::LoadU(d, x + i));
        const auto v1 = op(d, hn::LoadU(d, x + i + N));
        const auto v2 = op(d, hn::LoadU(d, x + i + 2 * N));
        const auto v3 = op(d, hn::LoadU(d, x + i + 3 * N));
        store_vec<Stream>(v0, d, out + i);
        store_vec<Stream>(v1, d, out + i + N);
        store_vec<Stream>(v2, d, out + i + 2 * N);
        store_vec<Stream>(v3, d, out + i + 3 * N);
    }
    for (; i + N <= n; i += N) store_vec<Stream>(op(d, hn::LoadU(d, x + i)), d, out + i);
    if (i < n) map1_partial(d, op, out, x, i, n - i);
}

// out[i] = op(d, x[i * sx]) along one run.
// stream: non-temporal stores where the output is unit-stride and the run long
// enough (see map1_unit).
template <class D, class Op, class T = hn::TFromD<D>>
HWY_INLINE void map1_run(D d, const Op& op, T* out, std::int64_t so, const T* x, std::int64_t sx, std::int64_t n,
                         bool stream = false) {
    stream = stream && so == 1 && n * static_cast<std::int64_t>(sizeof(T)) >= stream_min_run_bytes;
    if (so == 1 && sx == 1) return stream ? map1_unit<true>(d, op, out, x, n) : map1_unit(d, op, out, x, n);
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
        if (stream) {
            map1_unit<true>(d, op, po, px, m);
        } else {
            map1_unit(d, op, po, px, m);
        }
        if (so != 1) scatter_run(out + i * so, so, bo, m);
    }
}

// out[i + j] = op(d, a[i + j], b[i + j]) for j < r < one vector, through padded
// lane buffers. SA / SB: 1 = unit stride, 0 = broadcast scalar.
template <int SA, int SB, class D, class Op, class T = hn::TFromD<D>>
HWY_INLINE void map2_partial(D d, const Op& op, T* out, const T* a, const T* b, std::int64_t i, std::int64_t r) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
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

// out[i] = op(d, a[i], b[i]); SA / SB: 1 = unit stride, 0 = broadcast scalar.
// Stream: as in map1_unit.
template <int SA, int SB, bool Stream = false, class D, class Op, class T = hn::TFromD<D>>
HWY_NOINLINE void map2_unit(D d, const Op& op, T* out, const T* a, const T* b, std::int64_t n) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    const auto va = hn::Set(d, a[0]);
    const auto vb = hn::Set(d, b[0]);
    std::int64_t i = 0;
    if constexpr (Stream) {
        const std::int64_t h = stream_head(d, out);
        if (h < 0 || h >= n) return map2_unit<SA, SB, false>(d, op, out, a, b, n);
        if (h > 0) map2_partial<SA, SB>(d, op, out, a, b, 0, h);
        i = h;
    }
    for (; i + 4 * N <= n; i += 4 * N) {
        const auto a0 = SA ? hn::LoadU(d, a + i) : va;
        const auto a1 = SA ? hn::LoadU(d, a + i + N) : va;
        const auto a2 = SA ? hn::LoadU(d, a + i + 2 * N) : va;
        const auto a3 = SA ? hn::LoadU(d, a + i + 3 * N) : va;
        const auto b0 = SB ? hn::LoadU(d, b + i) : vb;
        const auto b1 = SB ? hn::LoadU(d, b + i + N) : vb;
        const auto b2 = SB ? hn::LoadU(d, b + i + 2 * N) : vb;
        const auto b3 = SB ? hn::LoadU(d, b + i + 3 * N) : vb;
        store_vec<Stream>(op(d, a0, b0), d, out + i);
        store_vec<Stream>(op(d, a1, b1), d, out + i + N);
        store_vec<Stream>(op(d, a2, b2), d, out + i + 2 * N);
        store_vec<Stream>(op(d, a3, b3), d, out + i + 3 * N);
    }
    for (; i + N <= n; i += N) {
        const auto a0 = SA ? hn::LoadU(d, a + i) : va;
        const auto b0 = SB ? hn::LoadU(d, b + i) : vb;
        store_vec<Stream>(op(d, a0, b0), d, out + i);
    }
    if (i < n) map2_partial<SA, SB>(d, op, out, a, b, i, n - i);
}

// map2_unit with the stream choice made at run time.
template <int SA, int SB, class D, class Op, class T = hn::TFromD<D>>
HWY_INLINE void map2_unit_s(D d, const Op& op, T* out, const T* a, const T* b, std::int64_t n, bool stream) {
    if (stream) {
        map2_unit<SA, SB, true>(d, op, out, a, b, n);
    } else {
        map2_unit<SA, SB, false>(d, op, out, a, b, n);
    }
}

// out[i * so] = op(d, a[i * sa], b[i * sb]) along one run. stream: non-temporal
// stores where the output is unit-stride and the run long enough (map1_run).
template <class D, class Op, class T = hn::TFromD<D>>
HWY_INLINE void map2_run(D d, const Op& op, T* out, std::int64_t so, const T* a, std::int64_t sa, const T* b,
                         std::int64_t sb, std::int64_t n, bool stream = false) {
    stream = stream && so == 1 && n * static_cast<std::int64_t>(sizeof(T)) >= stream_min_run_bytes;
    if (so == 1) {
        if (sa == 1 && sb == 1) return map2_unit_s<1, 1>(d, op, out, a, b, n, stream);
        if (sa == 1 && sb == 0) return map2_unit_s<1, 0>(d, op, out, a, b, n, stream);
        if (sa == 0 && sb == 1) return map2_unit_s<0, 1>(d, op, out, a, b, n, stream);
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
            map2_unit_s<0, 0>(d, op, po, pa, pb, m, stream);
        } else if (sa == 0) {
            map2_unit_s<0, 1>(d, op, po, pa, pb, m, stream);
        } else if (sb == 0) {
            map2_unit_s<1, 0>(d, op, po, pa, pb, m, stream);
        } else {
            map2_unit_s<1, 1>(d, op, po, pa, pb, m, stream);
        }
        if (so != 1) scatter_run(out + i * so, so, bo, m);
    }
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TENFERRO_KERNELS_MAP_INL_H_
