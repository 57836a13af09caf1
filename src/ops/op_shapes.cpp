#include "ops/op_shapes.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "ops/operand_checks.hpp"

namespace tenferro::detail {
namespace {

using namespace ops;

std::string axes_str(const std::vector<std::int64_t>& v) { return to_string(std::span<const std::int64_t>(v)); }

}  // namespace

using namespace ops;

extents check_binary(std::string_view op, const const_tensor_view& a, const const_tensor_view& b) {
    require_float(op, "a", a.type());
    require_same_dtype(op, "a", a.type(), "b", b.type());
    return broadcast_shapes(op, "a", a.shape(), "b", b.shape());
}

dot_axes check_dot_axes(std::string_view op, const const_tensor_view& a, const const_tensor_view& b,
                        const dot_config& cfg) {
    auto pair_counts = [&](const char* what, const std::vector<std::int64_t>& l, const std::vector<std::int64_t>& r) {
        if (l.size() != r.size())
            fail(op, std::string("lhs_") + what + " " + axes_str(l) + " names " + std::to_string(l.size()) +
                         " axes of a (shape " + str(a.shape()) + ") but rhs_" + what + " " + axes_str(r) + " names " +
                         std::to_string(r.size()) + " axes of b (shape " + str(b.shape()) + ")");
    };
    pair_counts("contracting", cfg.lhs_contracting, cfg.rhs_contracting);
    pair_counts("batch", cfg.lhs_batch, cfg.rhs_batch);

    dot_axes d;
    auto normalise = [&](const std::vector<std::int64_t>& axes, const char* list, std::string_view operand,
                         const const_tensor_view& v, std::uint32_t& used, extents& outv) {
        for (std::int64_t ax : axes) {
            const auto rank = static_cast<std::int64_t>(v.rank());
            if (ax < -rank || ax >= rank)
                fail(op, std::string(list) + " axis " + std::to_string(ax) + " is out of range for operand " +
                             std::string(operand) + " of shape " + str(v.shape()) + " (rank " + std::to_string(rank) +
                             ")");
            const std::int64_t n = ax < 0 ? ax + rank : ax;
            const std::uint32_t bit = std::uint32_t{1} << n;
            if (used & bit)
                fail(op, "axis " + std::to_string(ax) + " of operand " + std::string(operand) + " (shape " +
                             str(v.shape()) + ") is named more than once in " + std::string(list) +
                             " (contracting and batch axes must be distinct)");
            used |= bit;
            outv.push_back(n);
        }
    };
    std::uint32_t used_a = 0, used_b = 0;
    normalise(cfg.lhs_batch, "lhs_batch", "a", a, used_a, d.lb);
    normalise(cfg.lhs_contracting, "lhs_contracting", "a", a, used_a, d.lc);
    normalise(cfg.rhs_batch, "rhs_batch", "b", b, used_b, d.rb);
    normalise(cfg.rhs_contracting, "rhs_contracting", "b", b, used_b, d.rc);

    auto same_extents = [&](const char* what, const extents& l, const extents& r) {
        for (std::size_t i = 0; i < l.size(); ++i)
            if (a.shape()[static_cast<std::size_t>(l[i])] != b.shape()[static_cast<std::size_t>(r[i])])
                fail(op, std::string(what) + " axis " + std::to_string(l[i]) + " of a (extent " +
                             std::to_string(a.shape()[static_cast<std::size_t>(l[i])]) + ", shape " + str(a.shape()) +
                             ") differs from " + what + " axis " + std::to_string(r[i]) + " of b (extent " +
                             std::to_string(b.shape()[static_cast<std::size_t>(r[i])]) + ", shape " + str(b.shape()) +
                             ")");
    };
    same_extents("contracting", d.lc, d.rc);
    same_extents("batch", d.lb, d.rb);

    for (std::size_t i = 0; i < a.rank(); ++i)
        if (!(used_a & (std::uint32_t{1} << i))) d.lf.push_back(static_cast<std::int64_t>(i));
    for (std::size_t i = 0; i < b.rank(); ++i)
        if (!(used_b & (std::uint32_t{1} << i))) d.rf.push_back(static_cast<std::int64_t>(i));
    const std::size_t out_rank = d.lb.size() + d.lf.size() + d.rf.size();
    if (out_rank > max_rank)
        fail(op, "the result of a (shape " + str(a.shape()) + ") and b (shape " + str(b.shape()) +
                     ") would have rank " + std::to_string(out_rank) + ", more than " + std::to_string(max_rank));
    return d;
}

extents dot_out_shape(const const_tensor_view& a, const const_tensor_view& b, const dot_axes& d) {
    extents s;
    for (std::int64_t ax : d.lb) s.push_back(a.shape()[static_cast<std::size_t>(ax)]);
    for (std::int64_t ax : d.lf) s.push_back(a.shape()[static_cast<std::size_t>(ax)]);
    for (std::int64_t ax : d.rf) s.push_back(b.shape()[static_cast<std::size_t>(ax)]);
    return s;
}

matmul_dims check_matmul(std::string_view op, const const_tensor_view& a, const const_tensor_view& b) {
    require_float(op, "a", a.type());
    require_same_dtype(op, "a", a.type(), "b", b.type());
    if (a.rank() == 0 || b.rank() == 0)
        fail(op, std::string("operand ") + (a.rank() == 0 ? "a" : "b") + " is a rank-0 scalar (a shape " +
                     str(a.shape()) + ", b shape " + str(b.shape()) + "); matmul needs rank >= 1 (use mul)");
    // Promote vectors: a [k] -> [1, k], b [k] -> [k, 1].
    matmul_dims md;
    const bool a_vec = md.a_vec = a.rank() == 1;
    const bool b_vec = md.b_vec = b.rank() == 1;
    extents &ash = md.ash, &ast = md.ast, &bsh = md.bsh, &bst = md.bst;
    if (a_vec) {
        ash = extents(std::span<const std::int64_t>(std::array<std::int64_t, 2>{1, a.shape()[0]}));
        ast = extents(std::span<const std::int64_t>(std::array<std::int64_t, 2>{0, a.strides()[0]}));
    } else {
        ash = extents(a.shape());
        ast = extents(a.strides());
    }
    if (b_vec) {
        bsh = extents(std::span<const std::int64_t>(std::array<std::int64_t, 2>{b.shape()[0], 1}));
        bst = extents(std::span<const std::int64_t>(std::array<std::int64_t, 2>{b.strides()[0], 0}));
    } else {
        bsh = extents(b.shape());
        bst = extents(b.strides());
    }
    const std::size_t ar = ash.size(), br = bsh.size();
    const std::int64_t m = ash[ar - 2], k = ash[ar - 1], kb = bsh[br - 2], n = bsh[br - 1];
    if (k != kb)
        fail(op, "operand a has shape " + str(a.shape()) + " and b has shape " + str(b.shape()) + ": a's last axis (" +
                     std::to_string(k) + ") differs from b's " + (b_vec ? "only axis (" : "second-to-last axis (") +
                     std::to_string(kb) + ")");
    const std::span<const std::int64_t> a_batch(ash.span().data(), ar - 2), b_batch(bsh.span().data(), br - 2);
    md.batch = broadcast_shapes(op, "a", a_batch, "b", b_batch);
    md.m = m;
    md.n = n;
    md.k = k;
    md.out_shape = md.batch;
    if (!a_vec) md.out_shape.push_back(m);
    if (!b_vec) md.out_shape.push_back(n);
    return md;
}

reduce_shape check_reduce(std::string_view op, std::string_view empty_undefined, const const_tensor_view& x,
                          std::span<const std::int64_t> axes) {
    require_float(op, "x", x.type());
    reduce_shape r;
    r.mask = axes_mask(op, axes, "x", x.shape());
    std::int64_t reduced = 1;
    for (std::size_t d = 0; d < x.rank(); ++d) {
        if (r.mask & (std::uint32_t{1} << d))
            reduced *= x.shape()[d];
        else
            r.out_shape.push_back(x.shape()[d]);
    }
    if (!empty_undefined.empty() && reduced == 0 && element_count(r.out_shape) != 0)
        fail(op, "operand x of shape " + str(x.shape()) + " has no elements along the reduced axes " +
                     (axes.empty() ? std::string("(all)") : str(axes)) + "; the " + std::string(empty_undefined) +
                     " of zero elements is undefined");
    return r;
}

void check_vdot(std::string_view name, const const_tensor_view& a, const const_tensor_view& b) {
    require_float(name, "a", a.type());
    require_same_dtype(name, "a", a.type(), "b", b.type());
    if (!std::ranges::equal(a.shape(), b.shape()))
        fail(name, "operand b has shape " + str(b.shape()) + ", which differs from a's shape " + str(a.shape()) +
                       " (vdot does not broadcast)");
}

top_k_plan plan_top_k(std::string_view name, const const_tensor_view& x, std::int64_t k, std::int64_t axis) {
    require_float(name, "x", x.type());
    top_k_plan p;
    p.axis = normalize_axis(name, axis, "x", x.shape());
    const std::int64_t n = x.shape()[static_cast<std::size_t>(p.axis)];
    if (k < 0) fail(name, "k = " + std::to_string(k) + " is negative");
    if (k > n)
        fail(name, "k = " + std::to_string(k) + " exceeds the extent " + std::to_string(n) + " of axis " +
                       std::to_string(axis) + " of operand x with shape " + str(x.shape()));
    p.out_shape = extents(x.shape());
    p.out_shape[static_cast<std::size_t>(p.axis)] = k;
    return p;
}

search_shape check_search(std::string_view op, const const_tensor_view& a, const const_tensor_view& b, std::int64_t k) {
    search_shape s;
    s.md = check_matmul(op, a, b);
    if (s.md.out_shape.size() == 0)
        fail(op, "operands a (shape " + str(a.shape()) + ") and b (shape " + str(b.shape()) +
                     ") are both vectors: their product is a scalar, which has no axis to take the top k along");
    s.row = s.md.out_shape[s.md.out_shape.size() - 1];
    if (k < 0) fail(op, "k = " + std::to_string(k) + " is negative");
    if (k > s.row)
        fail(op, "k = " + std::to_string(k) + " exceeds the extent " + std::to_string(s.row) +
                     " of the last axis of the product of a (shape " + str(a.shape()) + ") and b (shape " +
                     str(b.shape()) + ")");
    s.out_shape = s.md.out_shape;
    s.out_shape[s.out_shape.size() - 1] = k;
    return s;
}

extents normalize_perm(std::string_view op, std::span<const std::int64_t> perm, const const_tensor_view& x) {
    const auto rank = static_cast<std::int64_t>(x.rank());
    auto bad = [&] {
        fail(op, "perm " + str(perm) + " is not a permutation of the " + std::to_string(rank) +
                     " axes of operand x with shape " + str(x.shape()));
    };
    if (static_cast<std::int64_t>(perm.size()) != rank) bad();
    extents p(perm.size(), 0);
    std::uint32_t seen = 0;
    for (std::size_t i = 0; i < perm.size(); ++i) {
        const std::int64_t a = perm[i];
        if (a < -rank || a >= rank) bad();
        p[i] = a < 0 ? a + rank : a;
        const std::uint32_t bit = std::uint32_t{1} << p[i];
        if (seen & bit) bad();
        seen |= bit;
    }
    return p;
}

std::string input_name(std::size_t i) { return "inputs[" + std::to_string(i) + "]"; }

concat_plan plan_concat(std::string_view op, std::span<const const_tensor_view> inputs, std::int64_t axis) {
    if (inputs.empty()) fail(op, "needs at least one input, and inputs is empty");
    const const_tensor_view& first = inputs[0];
    concat_plan p;
    p.axis = normalize_axis(op, axis, "inputs[0]", first.shape());
    const auto ax = static_cast<std::size_t>(p.axis);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const const_tensor_view& in = inputs[i];
        if (in.type() != first.type()) require_same_dtype(op, "inputs[0]", first.type(), input_name(i), in.type());
        if (in.rank() != first.rank())
            fail(op, "operand " + input_name(i) + " has shape " + str(in.shape()) + " of rank " +
                         std::to_string(in.rank()) + ", but inputs[0] has shape " + str(first.shape()) + " of rank " +
                         std::to_string(first.rank()));
        for (std::size_t d = 0; d < first.rank(); ++d)
            if (d != ax && in.shape()[d] != first.shape()[d])
                fail(op, "operand " + input_name(i) + " has shape " + str(in.shape()) +
                             ", which does not match inputs[0]'s shape " + str(first.shape()) + " outside axis " +
                             std::to_string(p.axis));
        total += in.shape()[ax];
    }
    p.out_shape = extents(first.shape());
    p.out_shape[ax] = total;
    return p;
}

void check_dtype(std::string_view op, dtype t) {
    if (size_of(t) == 0) fail(op, "dtype " + std::to_string(static_cast<int>(t)) + " is not one of f32, f64, i32, i64");
}

}  // namespace tenferro::detail
