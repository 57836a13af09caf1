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
#include "kernels/reduce-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace {

// The dot product of the contiguous elements a[0..n), b[0..n) (over_leaves:
// the order of reduce.hpp; 0 when n <= 0, nothing read).
template <class T>
HWY_INLINE T dot_contiguous(const T* a, const T* b, std::int64_t n) {
    const hn::ScalableTag<T> d;
    return over_leaves(
        reduce_op::sum, T(0), n, [&](std::int64_t i, std::int64_t m) HWY_ATTR __attribute__((always_inline)) {
            return leaf_dot(d, a + i, b + i, m);
        });
}

template <class T>
HWY_INLINE T dot_t(const nd_loop<2>& loop, const T* a, const T* b, std::int64_t begin, std::int64_t end) {
    // Both operands dense along a 1-D loop (the common case): position p is
    // element p of each, and `begin` is a multiple of reduce_leaf.
    if (loop.rank == 1 && loop.inner_stride(0) == 1 && loop.inner_stride(1) == 1)
        return dot_contiguous(a + begin, b + begin, end - begin);
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
float ReduceDenseF32(reduce_op op, const float* x, std::int64_t n) {
    return reduce_contiguous(hn::ScalableTag<float>(), op, x, n);
}
double ReduceDenseF64(reduce_op op, const double* x, std::int64_t n) {
    return reduce_contiguous(hn::ScalableTag<double>(), op, x, n);
}
float DotDenseF32(const float* a, const float* b, std::int64_t n) { return dot_contiguous(a, b, n); }
double DotDenseF64(const double* a, const double* b, std::int64_t n) { return dot_contiguous(a, b, n); }
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
HWY_EXPORT(ReduceDenseF32);
HWY_EXPORT(ReduceDenseF64);
HWY_EXPORT(DotDenseF32);
HWY_EXPORT(DotDenseF64);

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
float reduce_dense(reduce_op op, const float* x, std::int64_t n) {
    return HWY_DYNAMIC_DISPATCH(ReduceDenseF32)(op, x, n);
}
double reduce_dense(reduce_op op, const double* x, std::int64_t n) {
    return HWY_DYNAMIC_DISPATCH(ReduceDenseF64)(op, x, n);
}
float dot_dense(const float* a, const float* b, std::int64_t n) { return HWY_DYNAMIC_DISPATCH(DotDenseF32)(a, b, n); }
double dot_dense(const double* a, const double* b, std::int64_t n) {
    return HWY_DYNAMIC_DISPATCH(DotDenseF64)(a, b, n);
}
float dot(const nd_loop<2>& loop, const float* a, const float* b, std::int64_t begin, std::int64_t end) {
    return HWY_DYNAMIC_DISPATCH(DotF32)(loop, a, b, begin, end);
}
double dot(const nd_loop<2>& loop, const double* a, const double* b, std::int64_t begin, std::int64_t end) {
    return HWY_DYNAMIC_DISPATCH(DotF64)(loop, a, b, begin, end);
}

}  // namespace tenferro::kernels
#endif  // HWY_ONCE
