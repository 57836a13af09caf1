#pragma once
// Structural kernels: strided copies (copy, copy_into, transpose, concatenate)
// and dtype conversions (cast). Each call dispatches once to the best Highway
// target. Copies move raw 4- or 8-byte elements, so they serve every dtype.

#include <cstddef>
#include <cstdint>

#include "kernels/nd_loop.hpp"

namespace tenferro::kernels {

/// The element types, as the kernels see them.
enum class elem : std::uint8_t { f32, f64, i32, i64 };

/// out[p] = x[p] for positions [begin, end) of `loop` (operands 0 = out, 1 = x);
/// elements of `itemsize` (4 or 8) bytes. Unit-stride runs are block copies,
/// stride-0 sources are fills, stride -1 sources are vector reversals.
void copy(const nd_loop<2>& loop, std::size_t itemsize, void* out, const void* x, std::int64_t begin, std::int64_t end);

/// Tile rows of copy_tiled.
inline constexpr std::int64_t copy_tile = 32;

/// The number of work units of copy_tiled for `loop`: (positions of all but the
/// last two axes) x ceil(extent of the second-to-last axis / copy_tile).
std::int64_t copy_tiled_units(const nd_loop<2>& loop) noexcept;

/// As copy, for a loop of rank >= 2 whose source walks its last axis with a
/// large stride (a transposition): the last two axes are copied in
/// copy_tile x copy_tile tiles so that both sides stay in cache. Handles work
/// units [begin, end) (see copy_tiled_units).
void copy_tiled(const nd_loop<2>& loop, std::size_t itemsize, void* out, const void* x, std::int64_t begin,
                std::int64_t end);

/// out[p] = x[p] converted from `from` to `to`, for positions [begin, end) of
/// `loop` (operands 0 = out, 1 = x). Float to integer truncates toward zero
/// (numpy's astype); NaN becomes 0 and out-of-range values saturate to the
/// integer's limits. Integer narrowing wraps modulo 2^32 (numpy). Everything
/// else rounds to nearest (IEEE).
void cast(const nd_loop<2>& loop, elem to, void* out, elem from, const void* x, std::int64_t begin, std::int64_t end);

}  // namespace tenferro::kernels
