// The reduction family of cpu_session: reduce_sum / prod / max / min over a
// list of axes, vdot and norm_squared. Validation and planning here, the
// arithmetic in kernels/reduce (which documents the summation order). Each
// op's `_into` form here is its one implementation; the allocating forms in
// src/ops/ wrap them.

#include <memory_resource>
#include <vector>

#include "cpu/ops/op_support.hpp"
#include "kernels/pairwise.hpp"
#include "kernels/reduce.hpp"
#include "ops/op_shapes.hpp"
#include "tenferro/detail/cpu/cpu_session.hpp"

namespace tenferro::detail {
namespace {

using kernels::reduce_op;
using namespace ops;

const char* op_word(reduce_op op) {
    switch (op) {
    case reduce_op::sum:
        return "sum";
    case reduce_op::prod:
        return "product";
    case reduce_op::max:
        return "maximum";
    case reduce_op::min:
        return "minimum";
    }
    return "?";
}

struct reduce_plan {
    extents out_shape;       // the kept extents, in order
    extents kept_strides;    // x's strides along them
    extents reduced_shape;   // the reduced extents
    extents reduced_strides; // x's strides along them
};

reduce_plan plan_reduce(std::string_view name, reduce_op op, const const_tensor_view& x,
                        std::span<const std::int64_t> axes) {
    const bool empty_undefined = op == reduce_op::max || op == reduce_op::min;
    const reduce_shape r = check_reduce(name, empty_undefined ? op_word(op) : "", x, axes);
    reduce_plan p;
    p.out_shape = r.out_shape;
    for (std::size_t d = 0; d < x.rank(); ++d) {
        if (r.mask & (std::uint32_t{1} << d)) {
            p.reduced_shape.push_back(x.shape()[d]);
            p.reduced_strides.push_back(x.strides()[d]);
        } else {
            p.kept_strides.push_back(x.strides()[d]);
        }
    }
    return p;
}

// Combines fixed-chunk partials in the order kernels/reduce.hpp documents.
template <class T>
T combine_chunks(reduce_op op, const T* partials, std::int64_t chunks, std::int64_t total) {
    struct combine {
        reduce_op op;
        T operator()(T a, T b) const noexcept { return kernels::reduce_combine(op, a, b); }
    };
    kernels::pairwise_stack<T, combine> stack(combine{op});
    for (std::int64_t c = 0; c < chunks; ++c) {
        const bool full = (c + 1) * kernels::reduce_chunk <= total;
        stack.push(partials[c], full ? kernels::reduce_chunk_level : kernels::no_merge_level);
    }
    return stack.finish(kernels::reduce_identity<T>(op));
}

// A single result over `total` positions: fixed chunks of reduce_chunk positions,
// reduced in parallel, combined in order. `reduce_range(begin, end)` reduces one chunk.
template <class T, class F>
T reduce_in_chunks(cpu_session& s, reduce_op op, std::int64_t total, F reduce_range) {
    const std::int64_t chunks = (total + kernels::reduce_chunk - 1) / kernels::reduce_chunk;
    if (chunks <= 1) return reduce_range(0, total);
    std::pmr::vector<T> partials(static_cast<std::size_t>(chunks), &s.buffers());
    for_range(s, chunks, kernels::reduce_chunk, [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t c = c0; c < c1; ++c)
            partials[static_cast<std::size_t>(c)] =
                reduce_range(c * kernels::reduce_chunk, std::min(total, (c + 1) * kernels::reduce_chunk));
    });
    return combine_chunks(op, partials.data(), chunks, total);
}

template <class T>
void run_reduce_t(cpu_session& s, reduce_op op, const const_tensor_view& x, const reduce_plan& p,
                  const tensor_view& out) {
    const std::int64_t outputs = element_count(p.out_shape);
    if (outputs == 0) return;
    T* o = static_cast<T*>(out.data());
    const auto outer = make_loop<2>(p.out_shape.span(), {out.strides(), p.kept_strides.span()});
    const std::int64_t total = element_count(p.reduced_shape);
    if (total == 0) {
        const T id = kernels::reduce_identity<T>(op);
        kernels::for_each_run(outer, 0, outputs, [&](const std::int64_t(&off)[2], std::int64_t n) {
            for (std::int64_t j = 0; j < n; ++j) o[off[0] + j * outer.inner_stride(0)] = id;
        });
        return;
    }
    std::int64_t base = 0;
    const auto inner = make_memory_order_loop(p.reduced_shape.span(), p.reduced_strides.span(), base);
    const T* xp = static_cast<const T*>(x.data()) + base;
    if (outputs == 1) {
        *o = reduce_in_chunks<T>(s, op, total, [&](std::int64_t begin, std::int64_t end) {
            return kernels::reduce(op, inner, xp, begin, end);
        });
        return;
    }
    if (outer.inner_stride(0) == 1 && outer.inner_stride(1) == 1 && inner.inner_stride(0) != 1) {
        // Reducing over outer axes of rows that are contiguous: vectorise across the row.
        for_range(s, outputs, total, [&](std::int64_t begin, std::int64_t end) {
            kernels::reduce_columns(op, outer, inner, o, xp, begin, end);
        });
        return;
    }
    for_range(s, outputs, total,
              [&](std::int64_t begin, std::int64_t end) { kernels::reduce_each(op, outer, inner, o, xp, begin, end); });
}

void run_reduce(cpu_session& s, reduce_op op, const const_tensor_view& x, const reduce_plan& p,
                const tensor_view& out) {
    if (x.type() == dtype::f32)
        run_reduce_t<float>(s, op, x, p, out);
    else
        run_reduce_t<double>(s, op, x, p, out);
}

// The contiguous fast path (op_support.hpp) of a reduction to one value: x
// row-major dense with n >= 1 elements, every axis reduced (`axes` empty, or
// the one axis of a rank-1 x), a rank-0 `out` of x's float dtype outside x.
// The result is the general path's, bit for bit: the kernels' dense entry
// point over each chunk (chunks start at multiples of reduce_leaf).
template <class T>
void reduce_dense(cpu_session& s, reduce_op op, const T* x, std::int64_t n, T* out) {
    *out = reduce_in_chunks<T>(s, op, n, [&](std::int64_t begin, std::int64_t end) {
        return kernels::reduce_dense(op, x + begin, end - begin);
    });
}

bool reduce_dense_call(std::int64_t& n, const const_tensor_view& x, std::span<const std::int64_t> axes,
                       const tensor_view& out) noexcept {
    const dtype t = x.type();
    if (!is_float(t) || out.type() != t || out.rank() != 0) return false;
    if (!axes.empty() && !(x.rank() == 1 && axes.size() == 1 && (axes[0] == 0 || axes[0] == -1))) return false;
    if (!dense_alike(n, x) || n == 0) return false;
    const std::int64_t item = t == dtype::f32 ? 4 : 8;
    return disjoint(out.data(), item, x.data(), n * item);
}

void reduce_into(cpu_session& s, std::string_view name, reduce_op op, const const_tensor_view& x,
                 std::span<const std::int64_t> axes, const tensor_view& out) {
    std::int64_t n = 0;
    if (reduce_dense_call(n, x, axes, out)) {
        if (x.type() == dtype::f32)
            reduce_dense(s, op, static_cast<const float*>(x.data()), n, static_cast<float*>(out.data()));
        else
            reduce_dense(s, op, static_cast<const double*>(x.data()), n, static_cast<double*>(out.data()));
        return;
    }
    const reduce_plan p = plan_reduce(name, op, x, axes);
    check_out(name, "out", out, x.type(), p.out_shape.span());
    check_no_overlap(name, "out", out, "x", x);
    run_reduce(s, op, x, p, out);
}

// ---- vdot / norm_squared ----------------------------------------------------

template <class T>
T dot_t(cpu_session& s, const nd_loop<2>& loop, const T* a, const T* b) {
    return reduce_in_chunks<T>(s, reduce_op::sum, loop.size(), [&](std::int64_t begin, std::int64_t end) {
        return kernels::dot(loop, a, b, begin, end);
    });
}

// dot_t over n >= 1 dense elements: the kernels' dense entry point per chunk.
template <class T>
T dot_dense(cpu_session& s, const T* a, const T* b, std::int64_t n) {
    return reduce_in_chunks<T>(s, reduce_op::sum, n, [&](std::int64_t begin, std::int64_t end) {
        return kernels::dot_dense(a + begin, b + begin, end - begin);
    });
}

void run_vdot(cpu_session& s, const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) {
    const auto loop = make_loop<2>(a.shape(), {a.strides(), b.strides()});
    if (a.type() == dtype::f32) {
        *static_cast<float*>(out.data()) =
            a.size() == 0 ? 0.0f
                          : dot_t(s, loop, static_cast<const float*>(a.data()), static_cast<const float*>(b.data()));
    } else {
        *static_cast<double*>(out.data()) =
            a.size() == 0 ? 0.0
                          : dot_t(s, loop, static_cast<const double*>(a.data()), static_cast<const double*>(b.data()));
    }
}

void run_norm_squared(cpu_session& s, const const_tensor_view& x, const tensor_view& out) {
    std::int64_t base = 0;
    const auto l1 = make_memory_order_loop(x.shape(), x.strides(), base);
    nd_loop<2> loop;
    loop.rank = l1.rank;
    for (int d = 0; d < l1.rank; ++d) {
        loop.shape[d] = l1.shape[d];
        loop.strides[0][d] = loop.strides[1][d] = l1.strides[0][d];
    }
    if (x.type() == dtype::f32) {
        const float* p = static_cast<const float*>(x.data()) + base;
        *static_cast<float*>(out.data()) = x.size() == 0 ? 0.0f : dot_t(s, loop, p, p);
    } else {
        const double* p = static_cast<const double*>(x.data()) + base;
        *static_cast<double*>(out.data()) = x.size() == 0 ? 0.0 : dot_t(s, loop, p, p);
    }
}

}  // namespace

#define TENFERRO_REDUCE_OP(name)                                                                           \
    void cpu_session::reduce_##name##_into(const const_tensor_view& x, std::span<const std::int64_t> axes, \
                                           const tensor_view& out) {                                       \
        const op_stop_scope stop(stop_token_ref());                                                        \
        reduce_into(*this, "reduce_" #name "_into", reduce_op::name, x, axes, out);                        \
    }
TENFERRO_REDUCE_OP(sum)
TENFERRO_REDUCE_OP(prod)
TENFERRO_REDUCE_OP(max)
TENFERRO_REDUCE_OP(min)
#undef TENFERRO_REDUCE_OP

void cpu_session::vdot_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) {
    const op_stop_scope stop(stop_token_ref());
    // The contiguous fast path (op_support.hpp): a and b dense, of one float
    // dtype and shape with n >= 1 elements, a rank-0 `out` of that dtype
    // outside both; the general path's chunks and order.
    std::int64_t n = 0;
    const dtype t = a.type();
    if (is_float(t) && b.type() == t && out.type() == t && out.rank() == 0 && dense_alike(n, a, b) && n != 0) {
        const std::int64_t item = t == dtype::f32 ? 4 : 8;
        if (disjoint(out.data(), item, a.data(), n * item) && disjoint(out.data(), item, b.data(), n * item)) {
            if (t == dtype::f32)
                *static_cast<float*>(out.data()) =
                    dot_dense(*this, static_cast<const float*>(a.data()), static_cast<const float*>(b.data()), n);
            else
                *static_cast<double*>(out.data()) =
                    dot_dense(*this, static_cast<const double*>(a.data()), static_cast<const double*>(b.data()), n);
            return;
        }
    }
    check_vdot("vdot_into", a, b);
    check_out("vdot_into", "out", out, a.type(), {});
    check_no_overlap("vdot_into", "out", out, "a", a);
    check_no_overlap("vdot_into", "out", out, "b", b);
    run_vdot(*this, a, b, out);
}

void cpu_session::norm_squared_into(const const_tensor_view& x, const tensor_view& out) {
    const op_stop_scope stop(stop_token_ref());
    require_float("norm_squared_into", "x", x.type());
    check_out("norm_squared_into", "out", out, x.type(), {});
    check_no_overlap("norm_squared_into", "out", out, "x", x);
    run_norm_squared(*this, x, out);
}

}  // namespace tenferro::detail
