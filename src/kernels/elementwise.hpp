#pragma once
// Elementwise kernels (binary, unary, scale / axpby) over strided loops.
//
// Each call dispatches once to the best Highway target and walks positions
// [begin, end) of `loop` run by run (see nd_loop.hpp). Runs whose operands are
// unit-stride (or stride 0, a broadcast scalar) are vectorised in place;
// other runs are gathered into a block buffer, computed, and scattered. Every
// element, including the tail of a run, goes through the same vector code
// (tails are padded), so a result depends only on the element's inputs and
// the target: splitting the positions into any chunks is bitwise identical.
//
// Outputs of binary, unary (not the transcendental ones) and axpby ops whose
// operands together span more than stream_threshold_bytes() are written with
// non-temporal stores (unit-stride runs of at least 4 KiB; the values are the
// same either way): such an output would have left the cache before the op
// ends, and regular stores would first read every output line.

#include <cstddef>
#include <cstdint>

#include "kernels/nd_loop.hpp"

namespace tenferro::kernels {

enum class binary_op : std::uint8_t { add, sub, mul, div, maximum, minimum };
enum class unary_op : std::uint8_t { neg, abs, exp, log, tanh, sqrt, rsqrt, sigmoid, relu };

/// out = a op b. Operands of `loop`: 0 = out, 1 = a, 2 = b. `maximum` /
/// `minimum` return a NaN operand when either is NaN, and `a` when they compare equal.
void binary(binary_op op, const nd_loop<3>& loop, float* out, const float* a, const float* b, std::int64_t begin,
            std::int64_t end);
void binary(binary_op op, const nd_loop<3>& loop, double* out, const double* a, const double* b, std::int64_t begin,
            std::int64_t end);

/// out = op(x). Operands of `loop`: 0 = out, 1 = x.
void unary(unary_op op, const nd_loop<2>& loop, float* out, const float* x, std::int64_t begin, std::int64_t end);
void unary(unary_op op, const nd_loop<2>& loop, double* out, const double* x, std::int64_t begin, std::int64_t end);

/// out = alpha * x + beta * y (one fused multiply-add where the target has it).
/// Operands of `loop`: 0 = out, 1 = x, 2 = y. When `beta == 0`, y is not read
/// (it may be null) and out = alpha * x. `out` may be `y` itself with the same
/// strides (in place); no other overlap is allowed.
void axpby(const nd_loop<3>& loop, float alpha, const float* x, float beta, const float* y, float* out,
           std::int64_t begin, std::int64_t end);
void axpby(const nd_loop<3>& loop, double alpha, const double* x, double beta, const double* y, double* out,
           std::int64_t begin, std::int64_t end);

/// The same ops over dense arrays: `n` elements from each pointer, every
/// operand unit-stride, as one run (no loop to walk). Bitwise what the loop
/// forms compute for a one-axis dense loop over the same elements. `total` is
/// the element count of the whole op this call is a chunk of (`n` when it is
/// the whole op): the streaming choice is made on it, as the loop forms make it
/// on their loop. `n` may be 0 (nothing is read or written). The op layer's
/// contiguous fast path calls these: for a small op the loop planning and
/// walking was most of the call (docs/kernels.md).
void binary_dense(binary_op op, float* out, const float* a, const float* b, std::int64_t n, std::int64_t total);
void binary_dense(binary_op op, double* out, const double* a, const double* b, std::int64_t n, std::int64_t total);
void unary_dense(unary_op op, float* out, const float* x, std::int64_t n, std::int64_t total);
void unary_dense(unary_op op, double* out, const double* x, std::int64_t n, std::int64_t total);
/// `y` unread (may be null) when `beta == 0`; `out` may be `y` itself.
void axpby_dense(float alpha, const float* x, float beta, const float* y, float* out, std::int64_t n,
                 std::int64_t total);
void axpby_dense(double alpha, const double* x, double beta, const double* y, double* out, std::int64_t n,
                 std::int64_t total);

/// The streaming threshold in bytes: the size of the last-level cache, read once
/// (sysconf, else /sys/devices/system/cpu/cpu0/cache, else 32 MiB), unless set.
std::size_t stream_threshold_bytes() noexcept;
/// Tests and benchmarks: replaces the threshold (0 restores the cache size;
/// SIZE_MAX turns streaming off). Process-wide; set it while no op runs.
void set_stream_threshold_bytes(std::size_t bytes) noexcept;

}  // namespace tenferro::kernels
