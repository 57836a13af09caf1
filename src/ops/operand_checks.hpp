#pragma once
// The checks every op's operands pass, with messages that name the op, the
// operand and the offending shapes / dtypes / axes. They belong to the op
// interface, not to a backend: backend_session's allocating forms run them under
// their own names before any allocation, and each backend's `_into` forms run
// them again under the `_into` name.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tenferro/tensor.hpp"

namespace tenferro::detail::ops {

/// Throws `tensor_error` with `op + ": " + what`.
[[noreturn]] void fail(std::string_view op, const std::string& what);

/// `op: operand NAME has dtype i32, but OP needs f32 or f64`.
void require_float(std::string_view op, std::string_view operand, dtype t);

/// `op: operand B has dtype f64, which differs from A's dtype f32`.
void require_same_dtype(std::string_view op, std::string_view a_name, dtype a, std::string_view b_name, dtype b);

/// The numpy broadcast of two shapes; throws
/// `op: operand B has shape [2, 4], which does not broadcast with A's shape [2, 3]`.
extents broadcast_shapes(std::string_view op, std::string_view a_name, std::span<const std::int64_t> a,
                         std::string_view b_name, std::span<const std::int64_t> b);

/// `axis` in [-rank, rank) made non-negative; throws
/// `op: axis 2 is out of range for operand x of shape [2, 3] (rank 2)`.
std::int64_t normalize_axis(std::string_view op, std::int64_t axis, std::string_view operand,
                            std::span<const std::int64_t> shape);

/// A bit per axis of `shape` named in `axes` (negative axes count from the end;
/// empty = all axes). Throws for out-of-range axes and for repeated axes
/// (`op: axis -1 is repeated in axes [1, -1] of operand x with shape [2, 3]`).
std::uint32_t axes_mask(std::string_view op, std::span<const std::int64_t> axes, std::string_view operand,
                        std::span<const std::int64_t> shape);

/// Checks an `_into` output against the result it must hold: dtype and shape
/// equal, and no stride-0 axis of extent > 1 (an output must not alias its
/// own elements).
void check_out(std::string_view op, std::string_view out_name, const tensor_view& out, dtype type,
               std::span<const std::int64_t> shape);

/// Throws `op: out overlaps operand a (...)` when `overlaps(out, input)`.
void check_no_overlap(std::string_view op, std::string_view out_name, const tensor_view& out,
                      std::string_view input_name, const const_tensor_view& input);

/// `f32` or `f64`.
inline bool is_float(dtype t) noexcept { return t == dtype::f32 || t == dtype::f64; }

/// The element count of a shape (1 for rank 0).
std::int64_t element_count(std::span<const std::int64_t> shape) noexcept;

/// `"[2, 3]"`.
inline std::string str(std::span<const std::int64_t> v) { return to_string(v); }

}  // namespace tenferro::detail::ops
