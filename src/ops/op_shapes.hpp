#pragma once
// Each op's operand rules and result shape: what backend_session's allocating
// forms check, under their own names, to size the result before they call the
// `_into` form, and what a backend's `_into` forms check again under theirs.
// They depend on nothing but the views, so every backend shares them.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tenferro/backend_session.hpp"
#include "tenferro/tensor.hpp"

// The elementwise op lists, expanded for backend_session's allocating forms and
// for a backend's `_into` forms.
#define TENFERRO_BINARY_OPS(X) X(add) X(sub) X(mul) X(div) X(maximum) X(minimum)
#define TENFERRO_UNARY_OPS(X) X(neg) X(abs) X(exp) X(log) X(tanh) X(sqrt) X(rsqrt) X(sigmoid) X(relu)

namespace tenferro::detail {

// ---- elementwise --------------------------------------------------------------

/// Binary ops: a and b float, of one dtype, broadcasting; returns the result's shape.
extents check_binary(std::string_view op, const const_tensor_view& a, const const_tensor_view& b);

// ---- contraction --------------------------------------------------------------

/// dot_general's axes, normalised and checked (counts paired, in range, distinct,
/// extents equal, result rank at most max_rank).
struct dot_axes {
    extents lb, rb, lc, rc, lf, rf;  // normalised: batch, contracting, free (each operand's order)
};

dot_axes check_dot_axes(std::string_view op, const const_tensor_view& a, const const_tensor_view& b,
                        const dot_config& cfg);

/// dot_general's result shape: batch axes, then a's free axes, then b's.
extents dot_out_shape(const const_tensor_view& a, const const_tensor_view& b, const dot_axes& d);

/// matmul's operands as stacks of matrices (a rank-1 operand promoted: a [k] -> [1, k],
/// b [k] -> [k, 1]) and the result's shape.
struct matmul_dims {
    bool a_vec = false, b_vec = false;
    extents ash, ast, bsh, bst;  // the promoted shapes and strides
    std::int64_t m = 0, n = 0, k = 0;
    extents batch;      // the broadcast batch extents
    extents out_shape;  // batch, then m unless a_vec, then n unless b_vec
};

/// Checks a and b as matmul's operands; throws tensor_error (naming `op`) for everything
/// matmul rejects.
matmul_dims check_matmul(std::string_view op, const const_tensor_view& a, const const_tensor_view& b);

// ---- reductions ---------------------------------------------------------------

/// A reduction's axes and result: x float, axes in range and distinct (empty =
/// all). `empty_undefined` names the reduction ("maximum") when reducing zero
/// elements into a non-empty result is undefined, and is empty when it is
/// defined (sum, product).
struct reduce_shape {
    std::uint32_t mask = 0;  // a bit per reduced axis of x
    extents out_shape;       // the kept extents, in order
};
reduce_shape check_reduce(std::string_view op, std::string_view empty_undefined, const const_tensor_view& x,
                          std::span<const std::int64_t> axes);

/// vdot: a and b float, of one dtype and one shape (no broadcasting).
void check_vdot(std::string_view name, const const_tensor_view& a, const const_tensor_view& b);

// ---- row-wise -----------------------------------------------------------------

/// top_k: x float, axis in range, 0 <= k <= the axis' extent.
struct top_k_plan {
    std::int64_t axis;
    extents out_shape;
};

top_k_plan plan_top_k(std::string_view name, const const_tensor_view& x, std::int64_t k, std::int64_t axis);

// What matmul_top_k checks before anything is allocated: matmul's operand rules, then top_k's
// along the product's last axis.

struct search_shape {
    matmul_dims md;
    std::int64_t row = 0;  // the extent of the product's last axis (n, or m when b is a vector)
    extents out_shape;     // the product's shape with the last axis of extent k
};

search_shape check_search(std::string_view op, const const_tensor_view& a, const const_tensor_view& b, std::int64_t k);

// ---- structural ---------------------------------------------------------------

/// transpose's perm, checked to be a permutation of x's axes and made non-negative.
extents normalize_perm(std::string_view op, std::span<const std::int64_t> perm, const const_tensor_view& x);

/// concatenate: one dtype and rank, equal extents outside `axis`.
struct concat_plan {
    std::int64_t axis = 0;
    extents out_shape;
};

concat_plan plan_concat(std::string_view op, std::span<const const_tensor_view> inputs, std::int64_t axis);

/// `"inputs[i]"`, the name concatenate's messages give its i-th input.
std::string input_name(std::size_t i);

/// cast's target: one of the dtypes tenferro has.
void check_dtype(std::string_view op, dtype t);

}  // namespace tenferro::detail
