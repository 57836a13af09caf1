#pragma once
// The layout algebra of tensors and views (layout.cpp), done once for all of them:
// validation of shapes, strides and dtypes, row-major strides, contiguity, the
// addressed offset range, index offsets, and the derivations behind slice,
// transposed, reshaped and broadcast_to. Every function that validates takes `op`,
// the operation that error messages name ("tensor_view::slice", ...), and throws
// `tensor_error`. Private to the library: tensor.cpp and view.cpp use it.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "tenferro/tensor.hpp"

namespace tenferro::detail::layout_algebra {

/// Throws `tensor_error` with the message `"op: what"`.
[[noreturn]] void fail(const char* op, const std::string& what);

/// The dtype's name, or `"invalid dtype N"` for a value outside the enumeration.
std::string dtype_name(dtype t);

/// The element count: the product of the extents (1 for rank 0).
std::int64_t count_of(const extents& shape) noexcept;

/// A validated row-major layout of `shape` (dtype, extents and size checked).
layout row_major_layout(const char* op, dtype t, std::span<const std::int64_t> shape);

/// Validates the raw parts of a view; row-major when `strides` is null.
layout raw_layout(const char* op, const void* data, dtype t, std::span<const std::int64_t> shape,
                  const std::span<const std::int64_t>* strides);

/// numpy's C_CONTIGUOUS: dense row-major, extent-1 axes ignored, empty counts as contiguous.
bool is_c_contiguous(const layout& l) noexcept;

/// The lowest and highest element offsets a non-empty layout addresses.
std::pair<std::int64_t, std::int64_t> offset_range(const layout& l) noexcept;

/// The element offset of `index` (negative entries count from the end); checks its rank and bounds.
std::int64_t index_offset(const char* op, const layout& l, std::span<const std::int64_t> index);

/// Throws unless `requested` is `actual`, naming both.
void check_element_type(const char* op, dtype requested, dtype actual);

// The view derivations: each rewrites `l` in place.

/// Python's slice semantics along `axis`. Returns the element offset of the new
/// view's first element.
std::int64_t slice_layout(const char* op, layout& l, std::int64_t axis, std::int64_t begin, std::int64_t end,
                          std::int64_t step);
/// Axis `i` of the result is axis `perm[i]` of `l`.
void transpose_layout(const char* op, layout& l, std::span<const std::int64_t> perm);
/// The axes reversed (numpy's `.T`).
void reverse_layout(layout& l) noexcept;
/// numpy's no-copy reshape; one extent of `requested` may be -1.
void reshape_layout(const char* op, layout& l, std::span<const std::int64_t> requested);
/// numpy's broadcasting to `target`.
void broadcast_layout(const char* op, layout& l, std::span<const std::int64_t> target);

/// `p` moved by `elements` elements of dtype `t` (a `void*` or `const void*`).
template <class Pointer>
Pointer advance(Pointer p, std::int64_t elements, dtype t) noexcept {
    using byte_type = std::conditional_t<std::is_const_v<std::remove_pointer_t<Pointer>>, const std::byte, std::byte>;
    if (elements == 0) return p;
    return static_cast<byte_type*>(p) + elements * static_cast<std::int64_t>(size_of(t));
}

inline std::span<const std::int64_t> as_span(std::initializer_list<std::int64_t> list) noexcept {
    return {list.begin(), list.size()};
}

}  // namespace tenferro::detail::layout_algebra
