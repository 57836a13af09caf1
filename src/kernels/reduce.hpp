#pragma once
// Reduction kernels: sum / prod / max / min over strided loops, and the dot
// product. Each call dispatches once to the best Highway target.
//
// Summation order (also used for prod, and for dot's products):
//  * positions are cut into *leaves* of `reduce_leaf` consecutive positions,
//    aligned at multiples of `reduce_leaf` from position 0;
//  * a leaf is reduced with eight vector accumulators for sums and dots (8 x
//    lanes interleaved partial sums; four for prod / max / min), then those
//    are added pairwise and across lanes;
//  * leaves are combined pairwise (binary counter, kernels/pairwise.hpp).
// Callers that split a long reduction into chunks of `reduce_chunk` positions
// combine the chunk partials with a pairwise_stack too (full chunks at level
// `reduce_chunk_level`, a short trailing chunk at no_merge_level) and obtain
// bit for bit the unchunked result.
//
// `reduce_columns` is the variant for reductions over outer axes (a kept,
// unit-stride inner axis): it vectorises across the kept columns, adds
// `reduce_row_leaf` reduced rows sequentially per leaf, and combines those
// leaves pairwise per column.
//
// max / min return NaN when any element is NaN (numpy).

#include <cstdint>

#include "kernels/nd_loop.hpp"

namespace tenferro::kernels {

enum class reduce_op : std::uint8_t { sum, prod, max, min };

inline constexpr std::int64_t reduce_leaf = 1024;
inline constexpr int reduce_chunk_level = 6;
inline constexpr std::int64_t reduce_chunk = reduce_leaf << reduce_chunk_level;
inline constexpr std::int64_t reduce_row_leaf = 32;

/// The scalar combination of two partials (NaN-propagating for max / min).
template <class T>
inline T reduce_combine(reduce_op op, T a, T b) noexcept {
    switch (op) {
    case reduce_op::sum:
        return a + b;
    case reduce_op::prod:
        return a * b;
    case reduce_op::max:
        if (a != a) return a;
        if (b != b) return b;
        return a >= b ? a : b;
    case reduce_op::min:
        if (a != a) return a;
        if (b != b) return b;
        return a <= b ? a : b;
    }
    return a;
}

/// The identity of `op` (sum 0, prod 1); max / min have none (never asked).
template <class T>
inline T reduce_identity(reduce_op op) noexcept {
    return op == reduce_op::prod ? T(1) : T(0);
}

/// Reduces positions [begin, end) of `loop` (operand 0 = x); `begin` must be a
/// multiple of `reduce_leaf` and `begin < end`.
float reduce(reduce_op op, const nd_loop<1>& loop, const float* x, std::int64_t begin, std::int64_t end);
double reduce(reduce_op op, const nd_loop<1>& loop, const double* x, std::int64_t begin, std::int64_t end);

/// The same over n contiguous elements x[0..n): bitwise `reduce` over a
/// dense one-axis loop of n positions from 0 (no loop to walk). n <= 0 reads
/// nothing and returns the identity (sum 0, prod 1; max / min have none). A
/// chunk of a longer array passes its own start and length (chunks start at
/// multiples of `reduce_leaf`). The op layer's contiguous fast path calls
/// these.
float reduce_dense(reduce_op op, const float* x, std::int64_t n);
double reduce_dense(reduce_op op, const double* x, std::int64_t n);

/// For every position o in [begin, end) of `outer` (operands 0 = out, 1 = x):
/// out[o] = reduce(op, inner, x + offset of o, 0, inner.size()).
void reduce_each(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, float* out, const float* x,
                 std::int64_t begin, std::int64_t end);
void reduce_each(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, double* out, const double* x,
                 std::int64_t begin, std::int64_t end);

/// As reduce_each, for an `outer` loop whose innermost strides are 1 for both
/// out and x: vectorised across the columns of each run (see the file comment).
void reduce_columns(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, float* out, const float* x,
                    std::int64_t begin, std::int64_t end);
void reduce_columns(reduce_op op, const nd_loop<2>& outer, const nd_loop<1>& inner, double* out, const double* x,
                    std::int64_t begin, std::int64_t end);

/// The sum of a[p] * b[p] over positions [begin, end) of `loop` (operands 0 = a,
/// 1 = b), in the summation order above; `begin` a multiple of `reduce_leaf`.
float dot(const nd_loop<2>& loop, const float* a, const float* b, std::int64_t begin, std::int64_t end);
double dot(const nd_loop<2>& loop, const double* a, const double* b, std::int64_t begin, std::int64_t end);

/// `dot` over n contiguous elements of a and b, as reduce_dense is to
/// reduce (0 for n <= 0).
float dot_dense(const float* a, const float* b, std::int64_t n);
double dot_dense(const double* a, const double* b, std::int64_t n);

}  // namespace tenferro::kernels
