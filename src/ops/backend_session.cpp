// backend_session's non-virtual half: the allocating forms and the defaults of
// its virtual members, the same for every backend. An allocating form checks its
// operands under its own name (ops/op_shapes.hpp), allocates the result through
// the virtual `allocate` (a backend may pool it), then calls the virtual `_into`
// form, which checks again under its own name and does the work.

#include <string_view>
#include <utility>

#include "ops/op_shapes.hpp"
#include "ops/operand_checks.hpp"
#include "tenferro/backend_session.hpp"

namespace tenferro {
namespace {

// The reductions whose value over zero elements is undefined, by the word their
// error message uses; empty where it is defined.
constexpr std::string_view empty_undefined_sum{};
constexpr std::string_view empty_undefined_prod{};
constexpr std::string_view empty_undefined_max{"maximum"};
constexpr std::string_view empty_undefined_min{"minimum"};

}  // namespace

tensor backend_session::allocate(dtype type, std::span<const std::int64_t> shape) const {
    return tensor::empty(type, shape);
}

#define TENFERRO_BINARY_OP(name)                                                           \
    tensor backend_session::name(const const_tensor_view& a, const const_tensor_view& b) { \
        const detail::extents shape = detail::check_binary(#name, a, b);                   \
        tensor out = allocate(a.type(), shape.span());                                     \
        name##_into(a, b, out.view());                                                     \
        return out;                                                                        \
    }
TENFERRO_BINARY_OPS(TENFERRO_BINARY_OP)
#undef TENFERRO_BINARY_OP

#define TENFERRO_UNARY_OP(name)                                \
    tensor backend_session::name(const const_tensor_view& x) { \
        detail::ops::require_float(#name, "x", x.type());      \
        tensor out = allocate(x.type(), x.shape());            \
        name##_into(x, out.view());                            \
        return out;                                            \
    }
TENFERRO_UNARY_OPS(TENFERRO_UNARY_OP)
#undef TENFERRO_UNARY_OP

tensor backend_session::scale(const const_tensor_view& x, double alpha) {
    detail::ops::require_float("scale", "x", x.type());
    tensor out = allocate(x.type(), x.shape());
    scale_into(x, alpha, out.view());
    return out;
}

tensor backend_session::dot_general(const const_tensor_view& a, const const_tensor_view& b, const dot_config& cfg) {
    constexpr std::string_view op = "dot_general";
    detail::ops::require_float(op, "a", a.type());
    detail::ops::require_same_dtype(op, "a", a.type(), "b", b.type());
    const detail::extents shape = detail::dot_out_shape(a, b, detail::check_dot_axes(op, a, b, cfg));
    tensor out = allocate(a.type(), shape.span());
    dot_general_into(a, b, cfg, out.view(), 1.0, 0.0);
    return out;
}

tensor backend_session::matmul(const const_tensor_view& a, const const_tensor_view& b) {
    const detail::matmul_dims md = detail::check_matmul("matmul", a, b);
    tensor out = allocate(a.type(), md.out_shape.span());
    matmul_into(a, b, out.view());
    return out;
}

#define TENFERRO_REDUCE_OP(name)                                                                            \
    tensor backend_session::reduce_##name(const const_tensor_view& x, std::span<const std::int64_t> axes) { \
        const auto plan = detail::check_reduce("reduce_" #name, empty_undefined_##name, x, axes);           \
        tensor out = allocate(x.type(), plan.out_shape.span());                                             \
        reduce_##name##_into(x, axes, out.view());                                                          \
        return out;                                                                                         \
    }
TENFERRO_REDUCE_OP(sum)
TENFERRO_REDUCE_OP(prod)
TENFERRO_REDUCE_OP(max)
TENFERRO_REDUCE_OP(min)
#undef TENFERRO_REDUCE_OP

tensor backend_session::vdot(const const_tensor_view& a, const const_tensor_view& b) {
    detail::check_vdot("vdot", a, b);
    tensor out = allocate(a.type(), {});
    vdot_into(a, b, out.view());
    return out;
}

tensor backend_session::norm_squared(const const_tensor_view& x) {
    detail::ops::require_float("norm_squared", "x", x.type());
    tensor out = allocate(x.type(), {});
    norm_squared_into(x, out.view());
    return out;
}

tensor backend_session::softmax(const const_tensor_view& x, std::int64_t axis) {
    detail::ops::require_float("softmax", "x", x.type());
    detail::ops::normalize_axis("softmax", axis, "x", x.shape());
    tensor out = allocate(x.type(), x.shape());
    softmax_into(x, axis, out.view());
    return out;
}

std::pair<tensor, tensor> backend_session::top_k(const const_tensor_view& x, std::int64_t k, std::int64_t axis) {
    const detail::top_k_plan p = detail::plan_top_k("top_k", x, k, axis);
    tensor values = allocate(x.type(), p.out_shape.span());
    tensor indices = allocate(dtype::i64, p.out_shape.span());
    top_k_into(x, k, axis, values.view(), indices.view());
    return {std::move(values), std::move(indices)};
}

std::pair<tensor, tensor> backend_session::matmul_top_k(const const_tensor_view& a, const const_tensor_view& b,
                                                        std::int64_t k) {
    const detail::search_shape sh = detail::check_search("matmul_top_k", a, b, k);
    tensor values = allocate(a.type(), sh.out_shape.span());
    tensor indices = allocate(dtype::i64, sh.out_shape.span());
    matmul_top_k_into(a, b, k, values.view(), indices.view());
    return {std::move(values), std::move(indices)};
}

// The default for backends without a fused kernel: the composition it is defined as.
void backend_session::matmul_top_k_into(const const_tensor_view& a, const const_tensor_view& b, std::int64_t k,
                                        const tensor_view& values, const tensor_view& indices) {
    const detail::search_shape sh = detail::check_search("matmul_top_k_into", a, b, k);
    tensor product = allocate(a.type(), sh.md.out_shape.span());
    matmul_into(a, b, product.view());
    top_k_into(product.view(), k, -1, values, indices);
}

tensor backend_session::copy(const const_tensor_view& x) {
    tensor out = allocate(x.type(), x.shape());
    copy_into(x, out.view());
    return out;
}

tensor backend_session::transpose(const const_tensor_view& x, std::span<const std::int64_t> perm) {
    const detail::extents p = detail::normalize_perm("transpose", perm, x);
    const const_tensor_view v = x.transposed(p.span());
    tensor out = allocate(x.type(), v.shape());
    transpose_into(x, perm, out.view());
    return out;
}

tensor backend_session::cast(const const_tensor_view& x, dtype type) {
    detail::check_dtype("cast", type);
    tensor out = allocate(type, x.shape());
    cast_into(x, out.view());
    return out;
}

tensor backend_session::concatenate(std::span<const const_tensor_view> inputs, std::int64_t axis) {
    const detail::concat_plan p = detail::plan_concat("concatenate", inputs, axis);
    tensor out = allocate(inputs[0].type(), p.out_shape.span());
    concatenate_into(inputs, axis, out.view());
    return out;
}

}  // namespace tenferro
