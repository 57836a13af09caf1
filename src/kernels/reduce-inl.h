// Per-target building blocks of the reductions, shared by the reduction and
// row-wise kernel families: leaf reducers (vector accumulators: eight for sums and dots, four otherwise), the
// lane-wise combination, and the pairwise reduction of a strided loop (see
// reduce.hpp for the order). Include after hwy/highway.h inside a
// foreach_target translation unit.

#if defined(TENFERRO_KERNELS_REDUCE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TENFERRO_KERNELS_REDUCE_INL_H_
#undef TENFERRO_KERNELS_REDUCE_INL_H_
#else
#define TENFERRO_KERNELS_REDUCE_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include <hwy/highway.h>

#include "kernels/map-inl.h"
#include "kernels/nd_loop.hpp"
#include "kernels/pairwise.hpp"
#include "kernels/reduce.hpp"

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class T>
struct scalar_combine {
    reduce_op op;
    T operator()(T a, T b) const noexcept { return reduce_combine(op, a, b); }
};

// Vector combination with the same results as reduce_combine, lane by lane.
template <class D, class V>
HWY_INLINE V combine_v(D, reduce_op op, V a, V b) {
    switch (op) {
    case reduce_op::sum:
        return hn::Add(a, b);
    case reduce_op::prod:
        return hn::Mul(a, b);
    case reduce_op::max:
        return hn::IfThenElse(hn::Or(hn::Ge(a, b), hn::IsNaN(a)), a, b);
    case reduce_op::min:
        break;
    }
    return hn::IfThenElse(hn::Or(hn::Le(a, b), hn::IsNaN(a)), a, b);
}

// Sum of p[0..m) with eight vector accumulators: two vector adds per cycle at three or four cycles of
// latency need six to eight independent chains, or an L1-resident sum is latency-bound.
template <class D, class T = hn::TFromD<D>>
HWY_INLINE T leaf_sum(D d, const T* p, std::int64_t m) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    auto a4 = hn::Zero(d), a5 = hn::Zero(d), a6 = hn::Zero(d), a7 = hn::Zero(d);
    std::int64_t i = 0;
    for (; i + 8 * N <= m; i += 8 * N) {
        a0 = hn::Add(a0, hn::LoadU(d, p + i));
        a1 = hn::Add(a1, hn::LoadU(d, p + i + N));
        a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * N));
        a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * N));
        a4 = hn::Add(a4, hn::LoadU(d, p + i + 4 * N));
        a5 = hn::Add(a5, hn::LoadU(d, p + i + 5 * N));
        a6 = hn::Add(a6, hn::LoadU(d, p + i + 6 * N));
        a7 = hn::Add(a7, hn::LoadU(d, p + i + 7 * N));
    }
    for (; i + N <= m; i += N) a0 = hn::Add(a0, hn::LoadU(d, p + i));
    if (i < m) {
        HWY_ALIGN T t[max_lanes<T>] = {};
        std::copy(p + i, p + m, t);
        a1 = hn::Add(a1, hn::Load(d, t));
    }
    const auto lo = hn::Add(hn::Add(a0, a1), hn::Add(a2, a3));
    const auto hi = hn::Add(hn::Add(a4, a5), hn::Add(a6, a7));
    return hn::GetLane(hn::SumOfLanes(d, hn::Add(lo, hi)));
}

// Sum of a[i] * b[i] with eight vector accumulators, in the order of leaf_sum (one fused multiply-add
// per element where the target has FMA).
template <class D, class T = hn::TFromD<D>>
HWY_INLINE T leaf_dot(D d, const T* a, const T* b, std::int64_t m) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    auto a4 = hn::Zero(d), a5 = hn::Zero(d), a6 = hn::Zero(d), a7 = hn::Zero(d);
    std::int64_t i = 0;
    for (; i + 8 * N <= m; i += 8 * N) {
        a0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), a0);
        a1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), a1);
        a2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * N), hn::LoadU(d, b + i + 2 * N), a2);
        a3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * N), hn::LoadU(d, b + i + 3 * N), a3);
        a4 = hn::MulAdd(hn::LoadU(d, a + i + 4 * N), hn::LoadU(d, b + i + 4 * N), a4);
        a5 = hn::MulAdd(hn::LoadU(d, a + i + 5 * N), hn::LoadU(d, b + i + 5 * N), a5);
        a6 = hn::MulAdd(hn::LoadU(d, a + i + 6 * N), hn::LoadU(d, b + i + 6 * N), a6);
        a7 = hn::MulAdd(hn::LoadU(d, a + i + 7 * N), hn::LoadU(d, b + i + 7 * N), a7);
    }
    for (; i + N <= m; i += N) a0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), a0);
    if (i < m) {
        HWY_ALIGN T ta[max_lanes<T>] = {};
        HWY_ALIGN T tb[max_lanes<T>] = {};
        std::copy(a + i, a + m, ta);
        std::copy(b + i, b + m, tb);
        a1 = hn::MulAdd(hn::Load(d, ta), hn::Load(d, tb), a1);
    }
    const auto lo = hn::Add(hn::Add(a0, a1), hn::Add(a2, a3));
    const auto hi = hn::Add(hn::Add(a4, a5), hn::Add(a6, a7));
    return hn::GetLane(hn::SumOfLanes(d, hn::Add(lo, hi)));
}

// Product, max or min of p[0..m) (m >= 1) with four vector accumulators.
template <class D, class T = hn::TFromD<D>>
HWY_INLINE T leaf_other(D d, reduce_op op, const T* p, std::int64_t m) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    // Max / min start from the first element (any element is neutral for them);
    // prod from 1. NaNs are tracked on the side so that plain Max / Min suffice.
    const auto init = hn::Set(d, op == reduce_op::prod ? T(1) : p[0]);
    auto a0 = init, a1 = init, a2 = init, a3 = init;
    auto nan = hn::Zero(d);
    auto step = [&](auto acc, auto v) HWY_ATTR {
        if (op == reduce_op::prod) return hn::Mul(acc, v);
        nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(v)));
        return op == reduce_op::max ? hn::Max(acc, v) : hn::Min(acc, v);
    };
    std::int64_t i = 0;
    for (; i + 4 * N <= m; i += 4 * N) {
        a0 = step(a0, hn::LoadU(d, p + i));
        a1 = step(a1, hn::LoadU(d, p + i + N));
        a2 = step(a2, hn::LoadU(d, p + i + 2 * N));
        a3 = step(a3, hn::LoadU(d, p + i + 3 * N));
    }
    for (; i + N <= m; i += N) a0 = step(a0, hn::LoadU(d, p + i));
    if (i < m) {
        HWY_ALIGN T t[max_lanes<T>];
        for (std::int64_t j = 0; j < N; ++j) t[j] = op == reduce_op::prod ? T(1) : p[0];
        std::copy(p + i, p + m, t);
        a1 = step(a1, hn::Load(d, t));
    }
    if (op == reduce_op::prod) {
        const auto v = hn::Mul(hn::Mul(a0, a1), hn::Mul(a2, a3));
        HWY_ALIGN T lanes[max_lanes<T>];
        hn::Store(v, d, lanes);
        T r = lanes[0];
        for (std::int64_t j = 1; j < N; ++j) r *= lanes[j];
        return r;
    }
    if (!hn::AllFalse(d, hn::MaskFromVec(nan))) return hn::GetLane(hn::NaN(d));
    if (op == reduce_op::max) return hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(a0, a1), hn::Max(a2, a3))));
    return hn::GetLane(hn::MinOfLanes(d, hn::Min(hn::Min(a0, a1), hn::Min(a2, a3))));
}

// The elements of positions [p, p + m) of `loop`: in place when they form one
// unit-stride run, else gathered into `buf`.
template <class T>
HWY_INLINE const T* leaf_data(const nd_loop<1>& loop, const T* x, std::int64_t p, std::int64_t m, T* buf) {
    run_cursor<1> cursor(loop, p, p + m);
    std::int64_t off[1];
    std::int64_t n;
    cursor.next(off, n);
    const std::int64_t s = loop.inner_stride(0);
    if (n == m && s == 1) return x + off[0];
    std::int64_t k = 0;
    do {
        gather_run(buf + k, x + off[0], s, n);
        k += n;
    } while (cursor.next(off, n));
    return buf;
}

// Positions [0, n) of a contiguous reduction, cut into leaves and combined in
// the order of reduce.hpp: `leaf(i, m)` reduces positions [i, i + m). A single
// leaf is its own result (a one-entry stack returns it unchanged), which is
// most calls on small arrays; n <= 0 reads nothing and gives `identity`, as an
// empty loop range does. Callers mark `leaf` always_inline: an out-of-line leaf
// call added ~15 instructions to a 16-element sum.
template <class T, class Leaf>
HWY_INLINE T over_leaves(reduce_op op, T identity, std::int64_t n, const Leaf& leaf) {
    if (n <= 0) return identity;
    if (n <= reduce_leaf) return leaf(std::int64_t{0}, n);
    pairwise_stack<T, scalar_combine<T>> stack(scalar_combine<T>{op});
    for (std::int64_t i = 0; i < n; i += reduce_leaf) stack.push(leaf(i, std::min(reduce_leaf, n - i)), 0);
    return stack.finish(identity);
}

// Reduces the contiguous elements p[0..n) (over_leaves; max / min have no
// identity: callers reject n == 0 for those first).
template <class D, class T = hn::TFromD<D>>
HWY_INLINE T reduce_contiguous(D d, reduce_op op, const T* p, std::int64_t n) {
    return over_leaves(op, reduce_identity<T>(op), n, [&](std::int64_t i, std::int64_t m) HWY_ATTR __attribute__((always_inline)) {
        return op == reduce_op::sum ? leaf_sum(d, p + i, m) : leaf_other(d, op, p + i, m);
    });
}

template <class T>
HWY_INLINE T reduce_t(reduce_op op, const nd_loop<1>& loop, const T* x, std::int64_t begin, std::int64_t end) {
    const hn::ScalableTag<T> d;
    // A dense 1-D loop (the common case): position p is element p, and `begin`
    // is a multiple of reduce_leaf, so the leaves fall where they would from 0.
    if (loop.rank == 1 && loop.inner_stride(0) == 1) return reduce_contiguous(d, op, x + begin, end - begin);
    pairwise_stack<T, scalar_combine<T>> stack(scalar_combine<T>{op});
    HWY_ALIGN T buf[reduce_leaf];
    for (std::int64_t p = begin; p < end; p += reduce_leaf) {
        const std::int64_t m = std::min(reduce_leaf, end - p);
        const T* src = leaf_data(loop, x, p, m, buf);
        stack.push(op == reduce_op::sum ? leaf_sum(d, src, m) : leaf_other(d, op, src, m), 0);
    }
    return stack.finish(reduce_identity<T>(op));
}

// The pairwise sum of p[0..n) (contiguous), in the order of reduce_t; 0 when n == 0.
template <class D, class T = hn::TFromD<D>>
HWY_INLINE T sum_contiguous(D d, const T* p, std::int64_t n) {
    return reduce_contiguous(d, reduce_op::sum, p, n);
}

// The NaN-propagating maximum of p[0..n), n >= 1 (contiguous).
template <class D, class T = hn::TFromD<D>>
HWY_INLINE T max_contiguous(D d, const T* p, std::int64_t n) {
    T m = leaf_other(d, reduce_op::max, p, std::min(reduce_leaf, n));
    for (std::int64_t i = reduce_leaf; i < n; i += reduce_leaf)
        m = reduce_combine(reduce_op::max, m, leaf_other(d, reduce_op::max, p + i, std::min(reduce_leaf, n - i)));
    return m;
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TENFERRO_KERNELS_REDUCE_INL_H_
