// The row-wise family of cpu_session: softmax and top_k along one axis. Each
// op's `_into` form here is its one implementation; the allocating forms in
// src/ops/ wrap them.

#include <memory_resource>

#include "cpu/ops/op_support.hpp"
#include "kernels/rowwise.hpp"
#include "ops/op_shapes.hpp"
#include "tenferro/detail/cpu/cpu_session.hpp"

namespace tenferro::detail {
namespace {

using namespace ops;

// The axes other than `axis`: their extents and, per view, their strides.
struct row_axes {
    extents shape;
    extents strides[3];
};

row_axes other_axes(std::int64_t axis, std::span<const std::int64_t> shape,
                    std::initializer_list<std::span<const std::int64_t>> strides) {
    row_axes r;
    for (std::size_t d = 0; d < shape.size(); ++d) {
        if (static_cast<std::int64_t>(d) == axis) continue;
        r.shape.push_back(shape[d]);
        std::size_t k = 0;
        for (const auto& s : strides) r.strides[k++].push_back(s[d]);
    }
    return r;
}

// ---- softmax ------------------------------------------------------------------

template <class T>
void run_softmax_t(cpu_session& s, const const_tensor_view& x, std::int64_t axis, const tensor_view& out) {
    if (x.size() == 0) return;
    const auto ax = static_cast<std::size_t>(axis);
    const std::int64_t n = x.shape()[ax];
    const std::int64_t so = out.strides()[ax], sx = x.strides()[ax];
    const row_axes r = other_axes(axis, x.shape(), {out.strides(), x.strides()});
    const auto rows = make_loop<2>(r.shape.span(), {r.strides[0].span(), r.strides[1].span()});
    const bool needs_scratch = so != 1 || sx != 1;
    T* o = static_cast<T*>(out.data());
    const T* xp = static_cast<const T*>(x.data());
    for_range(s, rows.size(), 8 * n, [&](std::int64_t begin, std::int64_t end) {
        pooled_scratch scratch(s.buffers(),
                               needs_scratch ? static_cast<std::size_t>(kernels::softmax_scratch(n)) * sizeof(T) : 0);
        kernels::softmax(rows, n, so, sx, o, xp, begin, end, static_cast<T*>(scratch.get()));
    });
}

void run_softmax(cpu_session& s, const const_tensor_view& x, std::int64_t axis, const tensor_view& out) {
    if (x.type() == dtype::f32)
        run_softmax_t<float>(s, x, axis, out);
    else
        run_softmax_t<double>(s, x, axis, out);
}

// ---- top_k --------------------------------------------------------------------

template <class T>
void run_top_k_t(cpu_session& s, const const_tensor_view& x, std::int64_t k, std::int64_t axis,
                 const tensor_view& values, const tensor_view& indices) {
    if (values.size() == 0) return;  // k == 0 or an empty row axis
    const auto ax = static_cast<std::size_t>(axis);
    const std::int64_t n = x.shape()[ax];
    const row_axes r = other_axes(axis, x.shape(), {x.strides(), values.strides(), indices.strides()});
    const auto rows = make_loop<3>(r.shape.span(), {r.strides[0].span(), r.strides[1].span(), r.strides[2].span()});
    const T* xp = static_cast<const T*>(x.data());
    T* vp = static_cast<T*>(values.data());
    auto* ip = static_cast<std::int64_t*>(indices.data());
    const std::int64_t sx = x.strides()[ax], sv = values.strides()[ax], si = indices.strides()[ax];
    for_range(s, rows.size(), 2 * n, [&](std::int64_t begin, std::int64_t end) {
        pooled_scratch scratch(s.buffers(), kernels::top_k_scratch_bytes(n, k, sizeof(T)));
        kernels::top_k(rows, n, k, sx, sv, si, xp, vp, ip, begin, end, scratch.get());
    });
}

void run_top_k(cpu_session& s, const const_tensor_view& x, std::int64_t k, std::int64_t axis, const tensor_view& values,
               const tensor_view& indices) {
    if (x.type() == dtype::f32)
        run_top_k_t<float>(s, x, k, axis, values, indices);
    else
        run_top_k_t<double>(s, x, k, axis, values, indices);
}

}  // namespace

void cpu_session::softmax_into(const const_tensor_view& x, std::int64_t axis, const tensor_view& out) {
    const op_stop_scope stop(stop_token_ref());
    require_float("softmax_into", "x", x.type());
    const std::int64_t ax = normalize_axis("softmax_into", axis, "x", x.shape());
    check_out("softmax_into", "out", out, x.type(), x.shape());
    check_no_overlap("softmax_into", "out", out, "x", x);
    run_softmax(*this, x, ax, out);
}

void cpu_session::top_k_into(const const_tensor_view& x, std::int64_t k, std::int64_t axis, const tensor_view& values,
                             const tensor_view& indices) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "top_k_into";
    const top_k_plan p = plan_top_k(op, x, k, axis);
    check_out(op, "values", values, x.type(), p.out_shape.span());
    check_out(op, "indices", indices, dtype::i64, p.out_shape.span());
    check_no_overlap(op, "values", values, "x", x);
    check_no_overlap(op, "indices", indices, "x", x);
    if (overlaps(values, indices))
        fail(op, "values (shape " + str(values.shape()) + ") overlaps indices (shape " + str(indices.shape()) + ")");
    run_top_k(*this, x, k, p.axis, values, indices);
}

}  // namespace tenferro::detail
