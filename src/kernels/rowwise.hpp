#pragma once
// Row-wise kernels: softmax and top-k along one axis. A "row" is the run of
// `n` elements along that axis; the rows themselves are the positions of an
// nd_loop over the other axes. Each call dispatches once to the best Highway
// target and handles rows [begin, end).

#include <cstddef>
#include <cstdint>

#include "kernels/nd_loop.hpp"

namespace tenferro::kernels {

/// Elements of scratch (of the row's type) that softmax needs per call.
inline std::int64_t softmax_scratch(std::int64_t n) noexcept { return n; }

/// For each row position p in [begin, end) of `rows` (operands 0 = out, 1 = x):
/// out_row = exp(x_row - max(x_row)) / sum(exp(x_row - max(x_row))), where the
/// row is `n >= 1` elements with strides `sx` (x) and `so` (out). exp is
/// kernels/transcendental's; the sum follows reduce.hpp's order; the last step
/// is a true division. A row holding NaN or +inf, or only -inf, gives NaN.
void softmax(const nd_loop<2>& rows, std::int64_t n, std::int64_t so, std::int64_t sx, float* out, const float* x,
             std::int64_t begin, std::int64_t end, float* scratch);
void softmax(const nd_loop<2>& rows, std::int64_t n, std::int64_t so, std::int64_t sx, double* out, const double* x,
             std::int64_t begin, std::int64_t end, double* scratch);

/// Bytes of scratch that top_k needs per call.
std::size_t top_k_scratch_bytes(std::int64_t n, std::int64_t k, std::size_t itemsize) noexcept;

/// For each row position p in [begin, end) of `rows` (operands 0 = x,
/// 1 = values, 2 = indices): the `k` (1 <= k <= n) largest of the row's `n`
/// elements (stride `sx`), largest first, into `values` (stride `sv`) and their
/// positions in the row into `indices` (stride `si`). Order: NaN is larger than
/// every number (numpy's sort order), +0 and -0 are equal, and equal values are
/// ranked by lower index first. `scratch` holds top_k_scratch_bytes(n, k, sizeof(T))
/// bytes, 64-byte aligned.
void top_k(const nd_loop<3>& rows, std::int64_t n, std::int64_t k, std::int64_t sx, std::int64_t sv, std::int64_t si,
           const float* x, float* values, std::int64_t* indices, std::int64_t begin, std::int64_t end, void* scratch);
void top_k(const nd_loop<3>& rows, std::int64_t n, std::int64_t k, std::int64_t sx, std::int64_t sv, std::int64_t si,
           const double* x, double* values, std::int64_t* indices, std::int64_t begin, std::int64_t end, void* scratch);

}  // namespace tenferro::kernels
