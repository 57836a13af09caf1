// Reduction kernels (see reduce.hpp for the summation order).

#include "kernels/reduce.hpp"

#include <algorithm>
#include <memory>

#include "kernels/pairwise.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/reduce.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/map-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace {

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

// Sum of p[0..m) with four vector accumulators.
template <class D, class T = hn::TFromD<D>>
HWY_INLINE T leaf_sum(D d, const T* p, std::int64_t m) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    std::int64_t i = 0;
    for (; i + 4 * N <= m; i += 4 * N) {
        a0 = hn::Add(a0, hn::LoadU(d, p + i));
        a1 = hn::Add(a1, hn::LoadU(d, p + i + N));
        a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * N));
        a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * N));
    }
    for (; i + N <= m; i += N) a0 = hn::Add(a0, hn::LoadU(d, p + i));
    if (i < m) {
        HWY_ALIGN T t[max_lanes<T>] = {};
        std::copy(p + i, p + m, t);
        a1 = hn::Add(a1, hn::Load(d, t));
    }
    return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// Sum of a[i] * b[i] with four vector accumulators.
template <class D, class T = hn::TFromD<D>>
HWY_INLINE T leaf_dot(D d, const T* a, const T* b, std::int64_t m) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    std::int64_t i = 0;
    for (; i + 4 * N <= m; i += 4 * N) {
        a0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), a0);
        a1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), a1);
        a2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * N), hn::LoadU(d, b + i + 2 * N), a2);
        a3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * N), hn::LoadU(d, b + i + 3 * N), a3);
    }
    for (; i + N <= m; i += N) a0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), a0);
    if (i < m) {
        HWY_ALIGN T ta[max_lanes<T>] = {};
        HWY_ALIGN T tb[max_lanes<T>] = {};
        std::copy(a + i, a + m, ta);
        std::copy(b + i, b + m, tb);
        a1 = hn::MulAdd(hn::Load(d, ta), hn::Load(d, tb), a1);
    }
    return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
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

template <class T>
HWY_INLINE T reduce_t(reduce_op op, const nd_loop<1>& loop, const T* x, std::int64_t begin, std::int64_t end) {
    const hn::ScalableTag<T> d;
    pairwise_stack<T, scalar_combine<T>> stack(scalar_combine<T>{op});
    HWY_ALIGN T buf[reduce_leaf];
    for (std::int64_t p = begin; p < end; p += reduce_leaf) {
        const std::int64_t m = std::min(reduce_leaf, end - p);
        const T* src = leaf_data(loop, x, p, m, buf);
        stack.push(op == reduce_op::sum ? leaf_sum(d, src, m) : leaf_other(d, op, src, m), 0);
    }
    return stack.finish(reduce_identity<T>(op));
}

template <class T>
HWY_INLINE T dot_t(const nd_loop<2>& loop, const T* a, const T* b, std::int64_t begin, std::int64_t end) {
    const hn::ScalableTag<T> d;
    pairwise_stack<T, scalar_combine<T>> stack(scalar_combine<T>{reduce_op::sum});
    HWY_ALIGN T ba[reduce_leaf];
    HWY_ALIGN T bb[reduce_leaf];
    for (std::int64_t p = begin; p < end; p += reduce_leaf) {
        const std::int64_t m = std::min(reduce_leaf, end - p);
        run_cursor<2> cursor(loop, p, p + m);
        std::int64_t off[2];
        std::int64_t n;
        cursor.next(off, n);
        const std::int64_t sa = loop.inner_stride(0), sb = loop.inner_stride(1);
        const T* pa = a + off[0];
        const T* pb = b + off[1];
        if (n != m || sa != 1 || sb != 1) {
            std::int64_t k = 0;
            do {
                gather_run(ba + k, a + off[0], sa, n);
                gather_run(bb + k, b + off[1], sb, n);
                k += n;
            } while (cursor.next(off, n));
            pa = ba;
            pb = bb;
        }
        stack.push(leaf_dot(d, pa, pb, m), 0);
    }
    return stack.finish(T(0));
}

template <class T>
HWY_INLINE void each_t(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, T* out, const T* x,
                       std::int64_t begin, std::int64_t end) {
    const std::int64_t r = inner.size();
    run_cursor<2> cursor(outer, begin, end);
    std::int64_t off[2];
    std::int64_t n;
    while (cursor.next(off, n)) {
        const std::int64_t so = outer.inner_stride(0), sx = outer.inner_stride(1);
        for (std::int64_t j = 0; j < n; ++j) out[off[0] + j * so] = reduce_t(op, inner, x + off[1] + j * sx, 0, r);
    }
}

// Columns per block of reduce_columns: their partials stay in L1.
constexpr std::int64_t column_block = 256;

// acc[0..k) = combine(acc, row) lane-wise; the ragged end in scalar code (same results).
template <class D, class T = hn::TFromD<D>>
HWY_INLINE void combine_row(D d, reduce_op op, T* acc, const T* row, std::int64_t k) {
    const auto N = static_cast<std::int64_t>(hn::Lanes(d));
    std::int64_t j = 0;
    for (; j + N <= k; j += N) hn::StoreU(combine_v(d, op, hn::LoadU(d, acc + j), hn::LoadU(d, row + j)), d, acc + j);
    for (; j < k; ++j) acc[j] = reduce_combine(op, acc[j], row[j]);
}

// out[0..k) for the k columns starting at x (unit stride), over every reduced row.
template <class T>
HWY_INLINE void column_block_t(reduce_op op, const nd_loop<1>& inner, T* out, const T* x, std::int64_t k, T* scratch) {
    const hn::ScalableTag<T> d;
    const std::int64_t rows = inner.size();
    T* acc = scratch;  // the leaf being built; stack entries follow
    T* slots = scratch + column_block;
    int level[66];
    int size = 0;
    for (std::int64_t r0 = 0; r0 < rows; r0 += reduce_row_leaf) {
        const std::int64_t rl = std::min(reduce_row_leaf, rows - r0);
        run_cursor<1> cursor(inner, r0, r0 + rl);
        std::int64_t off[1];
        std::int64_t n;
        bool first = true;
        while (cursor.next(off, n)) {
            for (std::int64_t i = 0; i < n; ++i) {
                const T* row = x + off[0] + i * inner.inner_stride(0);
                if (first) {
                    std::copy_n(row, k, acc);
                    first = false;
                } else {
                    combine_row(d, op, acc, row, k);
                }
            }
        }
        // Binary counter over leaves: merge with equal-level entries, earlier entry on the left.
        int lev = 0;
        while (size > 0 && level[size - 1] == lev) {
            T* top = slots + (size - 1) * column_block;
            combine_row(d, op, top, acc, k);
            std::copy_n(top, k, acc);
            --size;
            ++lev;
        }
        std::copy_n(acc, k, slots + size * column_block);
        level[size++] = lev;
    }
    T* result = slots + (size - 1) * column_block;
    for (int i = size - 2; i >= 0; --i) {
        T* left = slots + i * column_block;
        combine_row(d, op, left, result, k);
        result = left;
    }
    std::copy_n(result, k, out);
}

template <class T>
HWY_INLINE void columns_t(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, T* out, const T* x,
                          std::int64_t begin, std::int64_t end) {
    // 66 stack slots (one per level of a 64-bit leaf count, plus slack) and the leaf.
    const auto scratch = std::make_unique<T[]>(67 * column_block);
    run_cursor<2> cursor(outer, begin, end);
    std::int64_t off[2];
    std::int64_t n;
    while (cursor.next(off, n))
        for (std::int64_t c = 0; c < n; c += column_block)
            column_block_t(op, inner, out + off[0] + c, x + off[1] + c, std::min(column_block, n - c), scratch.get());
}

}  // namespace

float ReduceF32(reduce_op op, const nd_loop<1>& loop, const float* x, std::int64_t begin, std::int64_t end) {
    return reduce_t(op, loop, x, begin, end);
}
double ReduceF64(reduce_op op, const nd_loop<1>& loop, const double* x, std::int64_t begin, std::int64_t end) {
    return reduce_t(op, loop, x, begin, end);
}
void EachF32(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, float* out, const float* x,
             std::int64_t begin, std::int64_t end) {
    each_t(op, outer, inner, out, x, begin, end);
}
void EachF64(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, double* out, const double* x,
             std::int64_t begin, std::int64_t end) {
    each_t(op, outer, inner, out, x, begin, end);
}
void ColumnsF32(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, float* out, const float* x,
                std::int64_t begin, std::int64_t end) {
    columns_t(op, outer, inner, out, x, begin, end);
}
void ColumnsF64(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, double* out, const double* x,
                std::int64_t begin, std::int64_t end) {
    columns_t(op, outer, inner, out, x, begin, end);
}
float DotF32(const nd_loop<2>& loop, const float* a, const float* b, std::int64_t begin, std::int64_t end) {
    return dot_t(loop, a, b, begin, end);
}
double DotF64(const nd_loop<2>& loop, const double* a, const double* b, std::int64_t begin, std::int64_t end) {
    return dot_t(loop, a, b, begin, end);
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tenferro::kernels {

HWY_EXPORT(ReduceF32);
HWY_EXPORT(ReduceF64);
HWY_EXPORT(EachF32);
HWY_EXPORT(EachF64);
HWY_EXPORT(ColumnsF32);
HWY_EXPORT(ColumnsF64);
HWY_EXPORT(DotF32);
HWY_EXPORT(DotF64);

float reduce(reduce_op op, const nd_loop<1>& loop, const float* x, std::int64_t begin, std::int64_t end) {
    return HWY_DYNAMIC_DISPATCH(ReduceF32)(op, loop, x, begin, end);
}
double reduce(reduce_op op, const nd_loop<1>& loop, const double* x, std::int64_t begin, std::int64_t end) {
    return HWY_DYNAMIC_DISPATCH(ReduceF64)(op, loop, x, begin, end);
}
void reduce_each(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, float* out, const float* x,
                 std::int64_t begin, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(EachF32)(op, outer, inner, out, x, begin, end);
}
void reduce_each(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, double* out, const double* x,
                 std::int64_t begin, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(EachF64)(op, outer, inner, out, x, begin, end);
}
void reduce_columns(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, float* out, const float* x,
                    std::int64_t begin, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(ColumnsF32)(op, outer, inner, out, x, begin, end);
}
void reduce_columns(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, double* out, const double* x,
                    std::int64_t begin, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(ColumnsF64)(op, outer, inner, out, x, begin, end);
}
float dot(const nd_loop<2>& loop, const float* a, const float* b, std::int64_t begin, std::int64_t end) {
    return HWY_DYNAMIC_DISPATCH(DotF32)(loop, a, b, begin, end);
}
double dot(const nd_loop<2>& loop, const double* a, const double* b, std::int64_t begin, std::int64_t end) {
    return HWY_DYNAMIC_DISPATCH(DotF64)(loop, a, b, begin, end);
}

}  // namespace tenferro::kernels
#endif  // HWY_ONCE
