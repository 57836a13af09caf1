// Row-wise kernels: softmax and top-k (see rowwise.hpp).

#include "kernels/rowwise.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/transcendental.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rowwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/map-inl.h"
#include "kernels/reduce-inl.h"

// Scalar helpers, outside the per-target namespace: defined once, not per target.
#ifndef TENFERRO_KERNELS_ROWWISE_SCALAR_
#define TENFERRO_KERNELS_ROWWISE_SCALAR_
namespace tenferro::kernels {
namespace {

inline void exp_array(const float* x, float* out, std::int64_t n) { exp_f32(x, out, n); }
inline void exp_array(const double* x, double* out, std::int64_t n) { exp_f64(x, out, n); }

// top-k order: NaN above every number, equal values by lower index.
template <class T>
inline bool ranks_above(T a, std::int64_t ia, T b, std::int64_t ib) noexcept {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na != nb) return na;
    if (!na && a != b) return a > b;
    return ia < ib;
}

}  // namespace
}  // namespace tenferro::kernels
#endif  // TENFERRO_KERNELS_ROWWISE_SCALAR_

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace {

template <class T>
struct minus_f {
    T m;
    template <class D, class V>
    HWY_INLINE V operator()(D d, V x) const {
        return hn::Sub(x, hn::Set(d, m));
    }
};

template <class T>
struct divide_f {
    T s;
    template <class D, class V>
    HWY_INLINE V operator()(D d, V x) const {
        return hn::Div(x, hn::Set(d, s));
    }
};

template <class T>
HWY_INLINE void softmax_t(const nd_loop<2>& rows, std::int64_t n, std::int64_t so, std::int64_t sx, T* out, const T* x,
                          std::int64_t begin, std::int64_t end, T* scratch) {
    const hn::ScalableTag<T> d;
    run_cursor<2> cursor(rows, begin, end);
    std::int64_t off[2];
    std::int64_t count;
    while (cursor.next(off, count)) {
        for (std::int64_t r = 0; r < count; ++r) {
            const T* src = x + off[1] + r * rows.inner_stride(1);
            T* o = out + off[0] + r * rows.inner_stride(0);
            if (sx != 1) {
                gather_run(scratch, src, sx, n);
                src = scratch;
            }
            // dst may be src itself (the scratch row): every step is elementwise.
            T* dst = so == 1 ? o : scratch;
            const T m = max_contiguous(d, src, n);
            map1_unit(d, minus_f<T>{m}, dst, src, n);
            exp_array(dst, dst, n);
            const T s = sum_contiguous(d, dst, n);
            map1_unit(d, divide_f<T>{s}, dst, dst, n);
            if (so != 1) scatter_run(o, so, dst, n);
        }
    }
}

// The k best of p[0..n) into vals / ids, best first, for k < cap < n: candidates
// are collected (as indices) into ids[0..cap); whenever that fills up, it is cut
// back to its best k with nth_element, and the k-th best becomes a threshold.
// Only elements ranking above the threshold can still make the top k (a later
// element equal to it ranks below it: higher index), so whole vectors without
// such a lane (v > threshold, or NaN) are skipped with one Highway compare.
// Amortised O(1) per element whatever the input order (an ascending row
// triggers a compaction every cap - k elements).
template <class T>
HWY_INLINE void top_buffered(const T* p, std::int64_t n, std::int64_t k, std::int64_t cap, T* vals, std::int64_t* ids) {
    const hn::ScalableTag<T> d;
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    const auto above = [p](std::int64_t a, std::int64_t b) { return ranks_above(p[a], a, p[b], b); };
    std::int64_t count = 0;
    for (; count < cap; ++count) ids[count] = count;
    T threshold;
    auto compact = [&] {
        std::nth_element(ids, ids + (k - 1), ids + count, above);
        count = k;
        threshold = p[ids[k - 1]];
    };
    compact();
    auto offer = [&](std::int64_t i) {
        const T v = p[i];
        if (std::isnan(threshold) || !(v > threshold || std::isnan(v))) return;
        ids[count++] = i;
        if (count == cap) compact();
    };
    std::int64_t i = cap;
    for (; i + N <= n; i += N) {
        if (std::isnan(threshold)) break;  // k NaNs of lower index: nothing later ranks above them
        const auto v = hn::LoadU(d, p + i);
        if (hn::AllFalse(d, hn::Or(hn::Gt(v, hn::Set(d, threshold)), hn::IsNaN(v)))) continue;
        for (std::int64_t j = 0; j < N; ++j) offer(i + j);
    }
    for (; i < n; ++i) offer(i);
    std::partial_sort(ids, ids + k, ids + count, above);
    for (std::int64_t j = 0; j < k; ++j) vals[j] = p[ids[j]];
}

// The k best of p[0..n) into vals / ids, best first, through a lower bound:
// the maxima of 4N interleaved groups (lane j of accumulator a sees elements
// 4N*m + a*N + j) are 4N distinct elements, so the k-th largest of them, t0, is
// at most the row's k-th largest value, and every element of the top k is
// >= t0. One vector pass finds t0, a second collects the candidates >= t0 (for
// most inputs about k of them, ascending rows included), and an insertion of the
// candidates into a sorted list of k finishes. Returns false (nothing done)
// when the row holds a NaN or k or n do not suit the target's vector width.
template <class T>
HWY_INLINE bool top_by_threshold(const T* p, std::int64_t n, std::int64_t k, T* vals, std::int64_t* ids) {
    const hn::ScalableTag<T> d;
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    if (k > 4 * N || n < 8 * N) return false;
    const auto lowest = hn::Set(d, -std::numeric_limits<T>::infinity());
    auto a0 = lowest, a1 = lowest, a2 = lowest, a3 = lowest;
    auto nan = hn::Zero(d);
    std::int64_t i = 0;
    for (; i + 4 * N <= n; i += 4 * N) {
        const auto v0 = hn::LoadU(d, p + i), v1 = hn::LoadU(d, p + i + N);
        const auto v2 = hn::LoadU(d, p + i + 2 * N), v3 = hn::LoadU(d, p + i + 3 * N);
        a0 = hn::Max(a0, v0);
        a1 = hn::Max(a1, v1);
        a2 = hn::Max(a2, v2);
        a3 = hn::Max(a3, v3);
        nan = hn::Or(nan, hn::VecFromMask(
                              d, hn::Or(hn::Or(hn::IsNaN(v0), hn::IsNaN(v1)), hn::Or(hn::IsNaN(v2), hn::IsNaN(v3)))));
    }
    for (std::int64_t j = i; j < n; ++j)
        if (std::isnan(p[j])) return false;
    if (!hn::AllFalse(d, hn::MaskFromVec(nan))) return false;
    HWY_ALIGN T maxima[4 * max_lanes<T>];
    hn::Store(a0, d, maxima);
    hn::Store(a1, d, maxima + N);
    hn::Store(a2, d, maxima + 2 * N);
    hn::Store(a3, d, maxima + 3 * N);
    // t0, the k-th largest of the 4N maxima: the value v with #(> v) < k <= #(>= v), found by counting
    // with vector compares (std::nth_element's data-dependent branches cost more on a 256-element row).
    T t0 = maxima[0];
    for (std::int64_t m = 0; m < 4 * N; ++m) {
        const auto vm = hn::Set(d, maxima[m]);
        const auto greater =
            static_cast<std::int64_t>(hn::CountTrue(d, hn::Gt(a0, vm)) + hn::CountTrue(d, hn::Gt(a1, vm)) +
                                      hn::CountTrue(d, hn::Gt(a2, vm)) + hn::CountTrue(d, hn::Gt(a3, vm)));
        if (greater >= k) continue;
        const auto at_least =
            static_cast<std::int64_t>(hn::CountTrue(d, hn::Ge(a0, vm)) + hn::CountTrue(d, hn::Ge(a1, vm)) +
                                      hn::CountTrue(d, hn::Ge(a2, vm)) + hn::CountTrue(d, hn::Ge(a3, vm)));
        if (at_least >= k) {
            t0 = maxima[m];
            break;
        }
    }
    const auto vt = hn::Set(d, t0);
    std::int64_t count = 0;
    // Most vectors of a short row hold a candidate: walk the set bits of the compare mask rather than
    // comparing every lane again in scalar code. Candidates stay in index order.
    static_assert(max_lanes<T> <= 64);
    for (i = 0; i + N <= n; i += N) {
        const auto ge = hn::Ge(hn::LoadU(d, p + i), vt);
        if (hn::AllFalse(d, ge)) continue;
        std::uint8_t bytes[8] = {};
        hn::StoreMaskBits(d, ge, bytes);
        std::uint64_t bits = 0;
        for (int b = 7; b >= 0; --b) bits = (bits << 8) | bytes[b];
        for (; bits != 0; bits &= bits - 1)
            ids[count++] = i + static_cast<std::int64_t>(hwy::Num0BitsBelowLS1Bit_Nonzero64(bits));
    }
    for (; i < n; ++i)
        if (p[i] >= t0) ids[count++] = i;
    // No NaN here (checked above), and the candidates (at least k of them) are in index order: an
    // insertion into a sorted list of k, strictly greater values moving up, ranks equal values by
    // lower index. A few dozen candidates per row make this cheaper than a heap-based partial sort.
    std::int64_t held = 0;
    for (std::int64_t c = 0; c < count; ++c) {
        const std::int64_t id = ids[c];
        const T v = p[id];
        if (held == k && !(v > vals[k - 1])) continue;
        std::int64_t pos = held < k ? held++ : k - 1;
        for (; pos > 0 && vals[pos - 1] < v; --pos) {
            vals[pos] = vals[pos - 1];
            ids[pos] = ids[pos - 1];
        }
        vals[pos] = v;
        ids[pos] = id;
    }
    return true;
}

template <class T>
HWY_INLINE void top_k_t(const nd_loop<3>& rows, std::int64_t n, std::int64_t k, std::int64_t sx, std::int64_t sv,
                        std::int64_t si, const T* x, T* values, std::int64_t* indices, std::int64_t begin,
                        std::int64_t end, void* scratch) {
    // Scratch: [n elements of T: the gathered row][k of T][max(n, k) indices].
    T* row = static_cast<T*>(scratch);
    T* vals = row + n;
    const auto ids_at = (reinterpret_cast<std::uintptr_t>(vals + k) + 7) & ~std::uintptr_t{7};
    auto* ids = reinterpret_cast<std::int64_t*>(ids_at);
    const std::int64_t cap = std::max<std::int64_t>(4 * k, 64);
    const bool buffered = cap < n;
    run_cursor<3> cursor(rows, begin, end);
    std::int64_t off[3];
    std::int64_t count;
    while (cursor.next(off, count)) {
        for (std::int64_t r = 0; r < count; ++r) {
            const T* src = x + off[0] + r * rows.inner_stride(0);
            T* vo = values + off[1] + r * rows.inner_stride(1);
            std::int64_t* io = indices + off[2] + r * rows.inner_stride(2);
            if (sx != 1) {
                gather_run(row, src, sx, n);
                src = row;
            }
            if (top_by_threshold(src, n, k, vals, ids)) {
                // done
            } else if (buffered) {
                top_buffered(src, n, k, cap, vals, ids);
            } else {
                for (std::int64_t i = 0; i < n; ++i) ids[i] = i;
                std::partial_sort(ids, ids + k, ids + n,
                                  [src](std::int64_t a, std::int64_t b) { return ranks_above(src[a], a, src[b], b); });
                for (std::int64_t j = 0; j < k; ++j) vals[j] = src[ids[j]];
            }
            for (std::int64_t j = 0; j < k; ++j) {
                vo[j * sv] = vals[j];
                io[j * si] = ids[j];
            }
        }
    }
}

}  // namespace

void SoftmaxF32(const nd_loop<2>& rows, std::int64_t n, std::int64_t so, std::int64_t sx, float* out, const float* x,
                std::int64_t begin, std::int64_t end, float* scratch) {
    softmax_t(rows, n, so, sx, out, x, begin, end, scratch);
}
void SoftmaxF64(const nd_loop<2>& rows, std::int64_t n, std::int64_t so, std::int64_t sx, double* out, const double* x,
                std::int64_t begin, std::int64_t end, double* scratch) {
    softmax_t(rows, n, so, sx, out, x, begin, end, scratch);
}
void TopKF32(const nd_loop<3>& rows, std::int64_t n, std::int64_t k, std::int64_t sx, std::int64_t sv, std::int64_t si,
             const float* x, float* values, std::int64_t* indices, std::int64_t begin, std::int64_t end,
             void* scratch) {
    top_k_t(rows, n, k, sx, sv, si, x, values, indices, begin, end, scratch);
}
void TopKF64(const nd_loop<3>& rows, std::int64_t n, std::int64_t k, std::int64_t sx, std::int64_t sv, std::int64_t si,
             const double* x, double* values, std::int64_t* indices, std::int64_t begin, std::int64_t end,
             void* scratch) {
    top_k_t(rows, n, k, sx, sv, si, x, values, indices, begin, end, scratch);
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tenferro::kernels {

HWY_EXPORT(SoftmaxF32);
HWY_EXPORT(SoftmaxF64);
HWY_EXPORT(TopKF32);
HWY_EXPORT(TopKF64);

void softmax(const nd_loop<2>& rows, std::int64_t n, std::int64_t so, std::int64_t sx, float* out, const float* x,
             std::int64_t begin, std::int64_t end, float* scratch) {
    HWY_DYNAMIC_DISPATCH(SoftmaxF32)(rows, n, so, sx, out, x, begin, end, scratch);
}
void softmax(const nd_loop<2>& rows, std::int64_t n, std::int64_t so, std::int64_t sx, double* out, const double* x,
             std::int64_t begin, std::int64_t end, double* scratch) {
    HWY_DYNAMIC_DISPATCH(SoftmaxF64)(rows, n, so, sx, out, x, begin, end, scratch);
}

std::size_t top_k_scratch_bytes(std::int64_t n, std::int64_t k, std::size_t itemsize) noexcept {
    const auto un = static_cast<std::size_t>(n), uk = static_cast<std::size_t>(k);
    return (un + uk + 1) * itemsize + std::max(un, uk) * sizeof(std::int64_t) + 64;
}

void top_k(const nd_loop<3>& rows, std::int64_t n, std::int64_t k, std::int64_t sx, std::int64_t sv, std::int64_t si,
           const float* x, float* values, std::int64_t* indices, std::int64_t begin, std::int64_t end, void* scratch) {
    HWY_DYNAMIC_DISPATCH(TopKF32)(rows, n, k, sx, sv, si, x, values, indices, begin, end, scratch);
}
void top_k(const nd_loop<3>& rows, std::int64_t n, std::int64_t k, std::int64_t sx, std::int64_t sv, std::int64_t si,
           const double* x, double* values, std::int64_t* indices, std::int64_t begin, std::int64_t end,
           void* scratch) {
    HWY_DYNAMIC_DISPATCH(TopKF64)(rows, n, k, sx, sv, si, x, values, indices, begin, end, scratch);
}

}  // namespace tenferro::kernels
#endif  // HWY_ONCE
