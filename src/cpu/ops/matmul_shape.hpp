#pragma once
// matmul's operand rules, shared by matmul (contraction.cpp) and matmul_top_k (search.cpp).

#include <cstdint>
#include <string_view>

#include "tenferro/tensor.hpp"

namespace tenferro::detail {

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

}  // namespace tenferro::detail
