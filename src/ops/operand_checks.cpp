// The checks every op's operands pass, shared by backend_session's allocating
// forms (src/ops/backend_session.cpp) and each backend's `_into` forms.

#include "ops/operand_checks.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

namespace tenferro::detail::ops {

void fail(std::string_view op, const std::string& what) {
    std::string msg(op);
    msg += ": ";
    msg += what;
    throw tensor_error(msg);
}

void require_float(std::string_view op, std::string_view operand, dtype t) {
    if (t == dtype::f32 || t == dtype::f64) return;
    fail(op, "operand " + std::string(operand) + " has dtype " + std::string(to_string(t)) + ", but " +
                 std::string(op) + " needs f32 or f64");
}

void require_same_dtype(std::string_view op, std::string_view a_name, dtype a, std::string_view b_name, dtype b) {
    if (a == b) return;
    fail(op, "operand " + std::string(b_name) + " has dtype " + std::string(to_string(b)) + ", which differs from " +
                 std::string(a_name) + "'s dtype " + std::string(to_string(a)));
}

extents broadcast_shapes(std::string_view op, std::string_view a_name, std::span<const std::int64_t> a,
                         std::string_view b_name, std::span<const std::int64_t> b) {
    const std::size_t rank = std::max(a.size(), b.size());
    extents out(rank, 0);
    for (std::size_t i = 0; i < rank; ++i) {
        const std::int64_t ea = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const std::int64_t eb = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (ea == eb || eb == 1) {
            out[i] = ea;
        } else if (ea == 1) {
            out[i] = eb;
        } else {
            fail(op, "operand " + std::string(b_name) + " has shape " + str(b) + ", which does not broadcast with " +
                         std::string(a_name) + "'s shape " + str(a));
        }
    }
    return out;
}

std::int64_t normalize_axis(std::string_view op, std::int64_t axis, std::string_view operand,
                            std::span<const std::int64_t> shape) {
    const auto rank = static_cast<std::int64_t>(shape.size());
    if (axis < -rank || axis >= rank)
        fail(op, "axis " + std::to_string(axis) + " is out of range for operand " + std::string(operand) +
                     " of shape " + str(shape) + " (rank " + std::to_string(rank) + ")");
    return axis < 0 ? axis + rank : axis;
}

std::uint32_t axes_mask(std::string_view op, std::span<const std::int64_t> axes, std::string_view operand,
                        std::span<const std::int64_t> shape) {
    if (axes.empty()) return shape.empty() ? 0u : (std::uint32_t{1} << shape.size()) - 1;
    std::uint32_t mask = 0;
    for (const std::int64_t a : axes) {
        const std::int64_t n = normalize_axis(op, a, operand, shape);
        const std::uint32_t bit = std::uint32_t{1} << n;
        if (mask & bit)
            fail(op, "axis " + std::to_string(a) + " is repeated in axes " + str(axes) + " of operand " +
                         std::string(operand) + " with shape " + str(shape));
        mask |= bit;
    }
    return mask;
}

void check_out(std::string_view op, std::string_view out_name, const tensor_view& out, dtype type,
               std::span<const std::int64_t> shape) {
    // The name becomes a std::string only on the failure paths: this runs on every `_into` call.
    if (out.type() != type)
        fail(op, std::string(out_name) + " has dtype " + std::string(to_string(out.type())) +
                     ", but the result has dtype " + std::string(to_string(type)));
    if (!std::ranges::equal(out.shape(), shape))
        fail(op, std::string(out_name) + " has shape " + str(out.shape()) + ", but the result has shape " + str(shape));
    for (std::size_t i = 0; i < out.rank(); ++i)
        if (out.strides()[i] == 0 && out.shape()[i] > 1)
            fail(op, std::string(out_name) + " has stride 0 on axis " + std::to_string(i) + " of shape " +
                         str(out.shape()) + " (a broadcast view); an output must not alias its own elements");
}

namespace {

// [first byte, one past the last byte] of a non-empty view, as `overlaps` computes it; read straight
// from the view, since every `_into` call checks each input and converting a tensor_view to a
// const_tensor_view (and passing both by value) copies their whole layouts.
template <class View>
std::pair<std::uintptr_t, std::uintptr_t> byte_range(const View& v) noexcept {
    std::int64_t lo = 0;
    std::int64_t hi = 0;
    for (std::size_t i = 0; i < v.rank(); ++i) {
        const std::int64_t reach = (v.shape()[i] - 1) * v.strides()[i];
        (reach < 0 ? lo : hi) += reach;
    }
    const auto item = static_cast<std::int64_t>(v.itemsize());
    const auto base = reinterpret_cast<std::uintptr_t>(v.data());
    return {base + static_cast<std::uintptr_t>(lo * item), base + static_cast<std::uintptr_t>(hi * item + item)};
}

template <class View>
bool is_empty(const View& v) noexcept {
    return std::ranges::any_of(v.shape(), [](std::int64_t e) { return e == 0; });
}

}  // namespace

void check_no_overlap(std::string_view op, std::string_view out_name, const tensor_view& out,
                      std::string_view input_name, const const_tensor_view& input) {
    // Same test as tenferro::overlaps (tensor/view.cpp), without copying the views.
    if (is_empty(out) || is_empty(input)) return;
    const auto [out_first, out_last] = byte_range(out);
    const auto [in_first, in_last] = byte_range(input);
    if (out_first < in_last && in_first < out_last)
        fail(op, std::string(out_name) + " (shape " + str(out.shape()) + ") overlaps operand " +
                     std::string(input_name) + " (shape " + str(input.shape()) +
                     "); an output must not share memory with an input");
}

std::int64_t element_count(std::span<const std::int64_t> shape) noexcept {
    std::int64_t n = 1;
    for (const std::int64_t e : shape) n *= e;
    return n;
}

}  // namespace tenferro::detail::ops
