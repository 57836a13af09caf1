// The elementwise family of cpu_session: binary ops with numpy broadcasting,
// unary ops, scale and axpby. Validation here, arithmetic in kernels/elementwise.
// Each op's `_into` form here is its one implementation (axpby, in place, has
// its own); the allocating forms in src/ops/ wrap them.

#include "kernels/elementwise.hpp"
#include "cpu/ops/op_support.hpp"
#include "ops/op_shapes.hpp"
#include "tenferro/detail/cpu/cpu_session.hpp"

namespace tenferro::detail {
namespace {

using kernels::binary_op;
using kernels::unary_op;
using namespace ops;

// Work per element relative to an add, for the parallel threshold.
constexpr std::int64_t cost_of(unary_op op) {
    switch (op) {
    case unary_op::exp:
    case unary_op::log:
    case unary_op::tanh:
    case unary_op::sigmoid:
        return 8;
    case unary_op::sqrt:
    case unary_op::rsqrt:
        return 2;
    default:
        return 1;
    }
}

template <class T>
T* typed(const tensor_view& v) {
    return static_cast<T*>(v.data());
}
template <class T>
const T* typed(const const_tensor_view& v) {
    return static_cast<const T*>(v.data());
}

// The kernels over `loop` of n positions: inline below the parallel threshold,
// else in fixed chunks over the session's workers (for_range).
template <class T>
void exec_binary(cpu_session& s, binary_op op, const nd_loop<3>& loop, std::int64_t n, T* out, const T* a, const T* b) {
    if (n < parallel_threshold) return kernels::binary(op, loop, out, a, b, 0, n);
    for_range(s, n, 1, [&](std::int64_t begin, std::int64_t end) { kernels::binary(op, loop, out, a, b, begin, end); });
}

template <class T>
void exec_unary(cpu_session& s, unary_op op, const nd_loop<2>& loop, std::int64_t n, T* out, const T* x) {
    if (n * cost_of(op) < parallel_threshold) return kernels::unary(op, loop, out, x, 0, n);
    for_range(s, n, cost_of(op),
              [&](std::int64_t begin, std::int64_t end) { kernels::unary(op, loop, out, x, begin, end); });
}

// out = alpha * x + beta * y; y unread (and may be null) when beta == 0.
template <class T>
void exec_axpby(cpu_session& s, const nd_loop<3>& loop, std::int64_t n, double alpha, const T* x, double beta,
                const T* y, T* out) {
    const auto a = static_cast<T>(alpha);
    const auto b = static_cast<T>(beta);
    if (b == T(0)) y = nullptr;
    if (n < parallel_threshold) return kernels::axpby(loop, a, x, b, y, out, 0, n);
    for_range(s, n, 1,
              [&](std::int64_t begin, std::int64_t end) { kernels::axpby(loop, a, x, b, y, out, begin, end); });
}

// The same over dense arrays of n elements (the contiguous fast path): the
// kernels' dense entry points, chunked by offset.
template <class T>
void exec_binary_dense(cpu_session& s, binary_op op, std::int64_t n, T* out, const T* a, const T* b) {
    if (n < parallel_threshold) return kernels::binary_dense(op, out, a, b, n, n);
    for_range(s, n, 1, [&](std::int64_t begin, std::int64_t end) {
        kernels::binary_dense(op, out + begin, a + begin, b + begin, end - begin, n);
    });
}

template <class T>
void exec_unary_dense(cpu_session& s, unary_op op, std::int64_t n, T* out, const T* x) {
    if (n * cost_of(op) < parallel_threshold) return kernels::unary_dense(op, out, x, n, n);
    for_range(s, n, cost_of(op), [&](std::int64_t begin, std::int64_t end) {
        kernels::unary_dense(op, out + begin, x + begin, end - begin, n);
    });
}

template <class T>
void exec_axpby_dense(cpu_session& s, std::int64_t n, double alpha, const T* x, double beta, const T* y, T* out) {
    const auto a = static_cast<T>(alpha);
    const auto b = static_cast<T>(beta);
    if (b == T(0)) y = nullptr;
    if (n < parallel_threshold) return kernels::axpby_dense(a, x, b, y, out, n, n);
    for_range(s, n, 1, [&](std::int64_t begin, std::int64_t end) {
        kernels::axpby_dense(a, x + begin, b, y != nullptr ? y + begin : nullptr, out + begin, end - begin, n);
    });
}

// The contiguous fast path's test (op_support.hpp): `out` and `inputs` of
// `out`'s float dtype and shape, row-major dense, no input overlapping `out`.
// Sets n to the element count.
bool dense_float_call(std::int64_t& n, const tensor_view& out, const auto&... inputs) noexcept {
    const dtype t = out.type();
    if (!is_float(t) || ((inputs.type() != t) || ...) || !dense_alike(n, out, inputs...)) return false;
    const std::int64_t bytes = n * (t == dtype::f32 ? 4 : 8);
    return n == 0 || (disjoint(out.data(), bytes, inputs.data(), bytes) && ...);
}

// ---- binary -------------------------------------------------------------------

void run_binary(cpu_session& s, binary_op op, const const_tensor_view& a, const const_tensor_view& b,
                const tensor_view& out) {
    if (out.size() == 0) return;
    const extents sa = broadcast_strides(a, out.shape());
    const extents sb = broadcast_strides(b, out.shape());
    const auto loop = make_loop<3>(out.shape(), {out.strides(), sa.span(), sb.span()});
    if (out.type() == dtype::f32)
        exec_binary(s, op, loop, loop.size(), typed<float>(out), typed<float>(a), typed<float>(b));
    else
        exec_binary(s, op, loop, loop.size(), typed<double>(out), typed<double>(a), typed<double>(b));
}

void binary_into(cpu_session& s, std::string_view name, binary_op op, const const_tensor_view& a,
                 const const_tensor_view& b, const tensor_view& out) {
    std::int64_t n = 0;
    if (dense_float_call(n, out, a, b)) {
        if (n == 0) return;
        if (out.type() == dtype::f32)
            exec_binary_dense(s, op, n, typed<float>(out), typed<float>(a), typed<float>(b));
        else
            exec_binary_dense(s, op, n, typed<double>(out), typed<double>(a), typed<double>(b));
        return;
    }
    const extents shape = check_binary(name, a, b);
    check_out(name, "out", out, a.type(), shape);
    check_no_overlap(name, "out", out, "a", a);
    check_no_overlap(name, "out", out, "b", b);
    run_binary(s, op, a, b, out);
}

// ---- unary --------------------------------------------------------------------

void run_unary(cpu_session& s, unary_op op, const const_tensor_view& x, const tensor_view& out) {
    if (out.size() == 0) return;
    const auto loop = make_loop<2>(out.shape(), {out.strides(), x.strides()});
    if (out.type() == dtype::f32)
        exec_unary(s, op, loop, loop.size(), typed<float>(out), typed<float>(x));
    else
        exec_unary(s, op, loop, loop.size(), typed<double>(out), typed<double>(x));
}

void unary_into(cpu_session& s, std::string_view name, unary_op op, const const_tensor_view& x,
                const tensor_view& out) {
    std::int64_t n = 0;
    if (dense_float_call(n, out, x)) {
        if (n == 0) return;
        if (out.type() == dtype::f32)
            exec_unary_dense(s, op, n, typed<float>(out), typed<float>(x));
        else
            exec_unary_dense(s, op, n, typed<double>(out), typed<double>(x));
        return;
    }
    require_float(name, "x", x.type());
    check_out(name, "out", out, x.type(), x.shape());
    check_no_overlap(name, "out", out, "x", x);
    run_unary(s, op, x, out);
}

// ---- scale / axpby ------------------------------------------------------------

// out = alpha * x + beta * y over out's shape; y unread (and may be empty) when beta == 0.
void run_axpby(cpu_session& s, double alpha, const const_tensor_view& x, double beta, const const_tensor_view* y,
               const tensor_view& out) {
    if (out.size() == 0) return;
    const extents sx = broadcast_strides(x, out.shape());
    const extents sy = y != nullptr ? broadcast_strides(*y, out.shape()) : extents(out.rank(), 0);
    const auto loop = make_loop<3>(out.shape(), {out.strides(), sx.span(), sy.span()});
    if (out.type() == dtype::f32)
        exec_axpby(s, loop, loop.size(), alpha, typed<float>(x), beta, y != nullptr ? typed<float>(*y) : nullptr,
                   typed<float>(out));
    else
        exec_axpby(s, loop, loop.size(), alpha, typed<double>(x), beta, y != nullptr ? typed<double>(*y) : nullptr,
                   typed<double>(out));
}

// A view is "the same view" as another when it addresses exactly the same elements in the same order.
bool same_view(const const_tensor_view& a, const const_tensor_view& b) {
    if (a.data() != b.data() || a.type() != b.type() || a.rank() != b.rank()) return false;
    for (std::size_t i = 0; i < a.rank(); ++i)
        if (a.shape()[i] != b.shape()[i] || (a.shape()[i] > 1 && a.strides()[i] != b.strides()[i])) return false;
    return true;
}

}  // namespace

#define TENFERRO_BINARY_OP(name)                                                                                    \
    void cpu_session::name##_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) { \
        const op_stop_scope stop(stop_token_ref());                                                                 \
        binary_into(*this, #name "_into", binary_op::name, a, b, out);                                              \
    }
TENFERRO_BINARY_OPS(TENFERRO_BINARY_OP)
#undef TENFERRO_BINARY_OP

#define TENFERRO_UNARY_OP(name)                                                         \
    void cpu_session::name##_into(const const_tensor_view& x, const tensor_view& out) { \
        const op_stop_scope stop(stop_token_ref());                                     \
        unary_into(*this, #name "_into", unary_op::name, x, out);                       \
    }
TENFERRO_UNARY_OPS(TENFERRO_UNARY_OP)
#undef TENFERRO_UNARY_OP

void cpu_session::scale_into(const const_tensor_view& x, double alpha, const tensor_view& out) {
    const op_stop_scope stop(stop_token_ref());
    std::int64_t n = 0;
    if (dense_float_call(n, out, x)) {
        if (n == 0) return;
        if (out.type() == dtype::f32)
            exec_axpby_dense(*this, n, alpha, typed<float>(x), 0.0, static_cast<const float*>(nullptr),
                             typed<float>(out));
        else
            exec_axpby_dense(*this, n, alpha, typed<double>(x), 0.0, static_cast<const double*>(nullptr),
                             typed<double>(out));
        return;
    }
    require_float("scale_into", "x", x.type());
    check_out("scale_into", "out", out, x.type(), x.shape());
    check_no_overlap("scale_into", "out", out, "x", x);
    run_axpby(*this, alpha, x, 0.0, nullptr, out);
}

void cpu_session::axpby(double alpha, const const_tensor_view& x, double beta, const tensor_view& y) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "axpby";
    require_float(op, "x", x.type());
    require_same_dtype(op, "x", x.type(), "y", y.type());
    const extents shape = broadcast_shapes(op, "x", x.shape(), "y", y.shape());
    if (!std::ranges::equal(shape.span(), y.shape()))
        fail(op, "operand x has shape " + str(x.shape()) + ", which does not broadcast to y's shape " + str(y.shape()) +
                     " (y is updated in place and keeps its shape)");
    check_out(op, "y", y, y.type(), y.shape());
    if (!same_view(x, y)) check_no_overlap(op, "y", y, "x", x);
    const const_tensor_view yc = y;
    run_axpby(*this, alpha, x, beta, &yc, y);
}

void cpu_session::axpby_into(double alpha, const const_tensor_view& x, double beta, const const_tensor_view& y,
                             const tensor_view& out) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "axpby_into";
    std::int64_t n = 0;
    if (dense_float_call(n, out, x, y)) {
        if (n == 0) return;
        if (out.type() == dtype::f32)
            exec_axpby_dense(*this, n, alpha, typed<float>(x), beta, typed<float>(y), typed<float>(out));
        else
            exec_axpby_dense(*this, n, alpha, typed<double>(x), beta, typed<double>(y), typed<double>(out));
        return;
    }
    require_float(op, "x", x.type());
    require_same_dtype(op, "x", x.type(), "y", y.type());
    const extents shape = broadcast_shapes(op, "x", x.shape(), "y", y.shape());
    check_out(op, "out", out, x.type(), shape);
    check_no_overlap(op, "out", out, "x", x);
    check_no_overlap(op, "out", out, "y", y);
    run_axpby(*this, alpha, x, beta, &y, out);
}

}  // namespace tenferro::detail
