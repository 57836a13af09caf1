// The structural family of cpu_session: copy, copy_into, transpose, cast,
// concatenate. Every dtype; copies move raw elements (kernels/structural).
// Each op's `_into` form here is its one implementation; the allocating forms
// in src/ops/ wrap them.

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cpu/ops/op_support.hpp"
#include "kernels/structural.hpp"
#include "ops/op_shapes.hpp"
#include "tenferro/detail/cpu/cpu_session.hpp"

namespace tenferro::detail {
namespace {

using namespace ops;

kernels::elem elem_of(dtype t) {
    switch (t) {
    case dtype::f32:
        return kernels::elem::f32;
    case dtype::f64:
        return kernels::elem::f64;
    case dtype::i32:
        return kernels::elem::i32;
    case dtype::i64:
        break;
    }
    return kernels::elem::i64;
}

// dst = the elements of a source with `src_strides` over dst's shape.
void run_copy(cpu_session& s, const void* src, std::span<const std::int64_t> src_strides, const tensor_view& dst) {
    if (dst.size() == 0) return;
    const auto loop = make_loop<2>(dst.shape(), {dst.strides(), src_strides});
    const std::size_t itemsize = dst.itemsize();
    void* out = dst.data();
    const int r = loop.rank;
    if (r >= 2) {
        // A transposition: the source's innermost stride is large and the next one small.
        const std::int64_t sc = std::llabs(loop.strides[1][r - 1]), sr = std::llabs(loop.strides[1][r - 2]);
        if (sc > 1 && sr < sc && loop.shape[r - 1] >= 8 && loop.shape[r - 2] >= 8) {
            const std::int64_t units = kernels::copy_tiled_units(loop);
            for_range(s, units, kernels::copy_tile * loop.shape[r - 1], [&](std::int64_t begin, std::int64_t end) {
                kernels::copy_tiled(loop, itemsize, out, src, begin, end);
            });
            return;
        }
    }
    for_range(s, loop.size(), 1,
              [&](std::int64_t begin, std::int64_t end) { kernels::copy(loop, itemsize, out, src, begin, end); });
}

void run_concat(cpu_session& s, std::span<const const_tensor_view> inputs, std::int64_t axis, const tensor_view& out) {
    std::int64_t offset = 0;
    for (const const_tensor_view& in : inputs) {
        const std::int64_t n = in.shape()[static_cast<std::size_t>(axis)];
        if (n > 0) run_copy(s, in.data(), in.strides(), out.slice(axis, offset, offset + n));
        offset += n;
    }
}

void run_cast(cpu_session& s, const const_tensor_view& x, const tensor_view& out) {
    if (out.size() == 0) return;
    if (x.type() == out.type()) return run_copy(s, x.data(), x.strides(), out);
    const auto loop = make_loop<2>(out.shape(), {out.strides(), x.strides()});
    const kernels::elem to = elem_of(out.type()), from = elem_of(x.type());
    for_range(s, loop.size(), 1, [&](std::int64_t begin, std::int64_t end) {
        kernels::cast(loop, to, out.data(), from, x.data(), begin, end);
    });
}

}  // namespace

void cpu_session::copy_into(const const_tensor_view& src, const tensor_view& dst) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "copy_into";
    // The contiguous fast path (op_support.hpp): src and dst of one dtype and
    // shape, both dense, disjoint: a memcpy of the bytes.
    std::int64_t n = 0;
    if (src.type() == dst.type() && dense_alike(n, dst, src)) {
        const auto bytes = n * static_cast<std::int64_t>(dst.itemsize());
        if (n == 0) return;
        if (disjoint(dst.data(), bytes, src.data(), bytes)) {
            // One contiguous block of bytes: memcpy, as the kernel does for a
            // unit-stride run, without the loop to build and walk.
            auto* out = static_cast<std::byte*>(dst.data());
            const auto* in = static_cast<const std::byte*>(src.data());
            const auto item = static_cast<std::int64_t>(dst.itemsize());
            if (n < parallel_threshold) {
                std::memcpy(out, in, static_cast<std::size_t>(bytes));
                return;
            }
            for_range(*this, n, 1, [&](std::int64_t begin, std::int64_t end) {
                std::memcpy(out + begin * item, in + begin * item, static_cast<std::size_t>((end - begin) * item));
            });
            return;
        }
    }
    const extents shape = broadcast_shapes(op, "dst", dst.shape(), "src", src.shape());
    if (!std::ranges::equal(shape.span(), dst.shape()))
        fail(op, "operand src has shape " + str(src.shape()) + ", which does not broadcast to dst's shape " +
                     str(dst.shape()));
    check_out(op, "dst", dst, src.type(), dst.shape());
    check_no_overlap(op, "dst", dst, "src", src);
    const extents strides = broadcast_strides(src, dst.shape());
    run_copy(*this, src.data(), strides.span(), dst);
}

void cpu_session::transpose_into(const const_tensor_view& x, std::span<const std::int64_t> perm,
                                 const tensor_view& out) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "transpose_into";
    const extents p = normalize_perm(op, perm, x);
    const const_tensor_view v = x.transposed(p.span());
    check_out(op, "out", out, x.type(), v.shape());
    check_no_overlap(op, "out", out, "x", x);
    run_copy(*this, v.data(), v.strides(), out);
}

void cpu_session::cast_into(const const_tensor_view& x, const tensor_view& out) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "cast_into";
    check_out(op, "out", out, out.type(), x.shape());
    check_no_overlap(op, "out", out, "x", x);
    run_cast(*this, x, out);
}

void cpu_session::concatenate_into(std::span<const const_tensor_view> inputs, std::int64_t axis,
                                   const tensor_view& out) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "concatenate_into";
    const concat_plan p = plan_concat(op, inputs, axis);
    check_out(op, "out", out, inputs[0].type(), p.out_shape.span());
    for (std::size_t i = 0; i < inputs.size(); ++i) check_no_overlap(op, "out", out, input_name(i), inputs[i]);
    run_concat(*this, inputs, p.axis, out);
}

}  // namespace tenferro::detail
