#include "cpu/ops/op_support.hpp"

#include <cstdint>
#include <functional>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/pairwise.hpp"

using namespace tenferro;
using namespace tenferro::detail::ops;

namespace {
std::vector<std::int64_t> vec(std::span<const std::int64_t> s) { return {s.begin(), s.end()}; }
using V = std::vector<std::int64_t>;
}  // namespace

TEST_CASE("op_support: numpy broadcasting of shapes", "[op_support]") {
    CHECK(vec(broadcast_shapes("add", "a", V{2, 3}, "b", V{3})) == V{2, 3});
    CHECK(vec(broadcast_shapes("add", "a", V{2, 1}, "b", V{1, 3})) == V{2, 3});
    CHECK(vec(broadcast_shapes("add", "a", V{}, "b", V{4, 5})) == V{4, 5});
    CHECK(vec(broadcast_shapes("add", "a", V{0, 1}, "b", V{1})) == V{0, 1});
    CHECK(vec(broadcast_shapes("add", "a", V{5, 1, 7}, "b", V{3, 1})) == V{5, 3, 7});
    CHECK_THROWS_WITH(broadcast_shapes("add", "a", V{2, 3}, "b", V{2, 4}),
                      "add: operand b has shape [2, 4], which does not broadcast with a's shape [2, 3]");
}

TEST_CASE("op_support: broadcast strides", "[op_support]") {
    std::vector<float> data(6);
    const_tensor_view v(data.data(), dtype::f32, {2, 1, 3});
    CHECK(vec(broadcast_strides(v, V{4, 2, 5, 3})) == V{0, 3, 0, 1});
}

TEST_CASE("op_support: axes", "[op_support]") {
    CHECK(normalize_axis("softmax", -1, "x", V{2, 3}) == 1);
    CHECK(normalize_axis("softmax", 0, "x", V{2, 3}) == 0);
    CHECK_THROWS_WITH(normalize_axis("softmax", 2, "x", V{2, 3}),
                      "softmax: axis 2 is out of range for operand x of shape [2, 3] (rank 2)");
    CHECK_THROWS_WITH(normalize_axis("softmax", -3, "x", V{2, 3}),
                      "softmax: axis -3 is out of range for operand x of shape [2, 3] (rank 2)");
    CHECK_THROWS_AS(normalize_axis("softmax", 0, "x", V{}), tensor_error);
    CHECK(axes_mask("reduce_sum", V{}, "x", V{2, 3, 4}) == 0b111);
    CHECK(axes_mask("reduce_sum", V{}, "x", V{}) == 0);
    CHECK(axes_mask("reduce_sum", V{0, -1}, "x", V{2, 3, 4}) == 0b101);
    CHECK_THROWS_WITH(axes_mask("reduce_sum", V{1, -1}, "x", V{2, 3}),
                      "reduce_sum: axis -1 is repeated in axes [1, -1] of operand x with shape [2, 3]");
    CHECK_THROWS_WITH(axes_mask("reduce_sum", V{5}, "x", V{2, 3}),
                      Catch::Contains("axis 5 is out of range for operand x"));
}

TEST_CASE("op_support: dtype checks", "[op_support]") {
    CHECK_NOTHROW(require_float("exp", "x", dtype::f64));
    CHECK_THROWS_WITH(require_float("exp", "x", dtype::i32), "exp: operand x has dtype i32, but exp needs f32 or f64");
    CHECK_THROWS_WITH(require_same_dtype("add", "a", dtype::f32, "b", dtype::f64),
                      "add: operand b has dtype f64, which differs from a's dtype f32");
}

TEST_CASE("op_support: _into output checks", "[op_support]") {
    std::vector<float> data(12);
    tensor_view out(data.data(), dtype::f32, {2, 3});
    CHECK_NOTHROW(check_out("add_into", "out", out, dtype::f32, V{2, 3}));
    CHECK_THROWS_WITH(check_out("add_into", "out", out, dtype::f64, V{2, 3}),
                      "add_into: out has dtype f32, but the result has dtype f64");
    CHECK_THROWS_WITH(check_out("add_into", "out", out, dtype::f32, V{3, 2}),
                      "add_into: out has shape [2, 3], but the result has shape [3, 2]");
    tensor_view bcast(data.data(), dtype::f32, {2, 3}, {0, 1});
    CHECK_THROWS_WITH(check_out("add_into", "out", bcast, dtype::f32, V{2, 3}),
                      Catch::Contains("out has stride 0 on axis 0"));
    const_tensor_view in(data.data() + 3, dtype::f32, {6});
    const_tensor_view apart(data.data() + 6, dtype::f32, {6});
    CHECK_THROWS_WITH(check_no_overlap("add_into", "out", out, "a", in),
                      Catch::Contains("out (shape [2, 3]) overlaps operand a"));
    CHECK_NOTHROW(check_no_overlap("add_into", "out", tensor_view(data.data(), dtype::f32, {6}), "a", apart));
}

TEST_CASE("op_support: loops merge axes every operand steps through alike", "[op_support]") {
    {
        const V shape{2, 3, 4}, s1{12, 4, 1}, s2{12, 4, 1};
        const auto loop = make_loop<2>(shape, {std::span<const std::int64_t>(s1), std::span<const std::int64_t>(s2)});
        CHECK(loop.rank == 1);
        CHECK(loop.shape[0] == 24);
        CHECK(loop.strides[0][0] == 1);
    }
    {
        // The second operand broadcasts along axis 0: axes 1 and 2 merge, axis 0 stays.
        const V shape{2, 3, 4}, s1{12, 4, 1}, s2{0, 4, 1};
        const auto loop = make_loop<2>(shape, {std::span<const std::int64_t>(s1), std::span<const std::int64_t>(s2)});
        CHECK(loop.rank == 2);
        CHECK(loop.shape[0] == 2);
        CHECK(loop.shape[1] == 12);
        CHECK(loop.strides[1][0] == 0);
    }
    {
        const V shape{}, s{};
        const auto loop = make_loop<1>(shape, {std::span<const std::int64_t>(s)});
        CHECK(loop.rank == 1);
        CHECK(loop.size() == 1);
    }
    {
        // A transposed, reversed dense view visits memory in order once sorted.
        const V shape{4, 3}, s{-1, 4};  // element [i, j] at 3 - i + 4 j ... reversed rows of a transposed [3, 4]
        std::int64_t base = 0;
        const auto loop = make_memory_order_loop(shape, s, base);
        CHECK(base == -3);
        CHECK(loop.rank == 1);
        CHECK(loop.shape[0] == 12);
        CHECK(loop.strides[0][0] == 1);
    }
}

TEST_CASE("op_support: for_each_run visits every position once, in order", "[op_support]") {
    const V shape{3, 5}, s{10, 2};
    const auto loop = make_loop<1>(shape, {std::span<const std::int64_t>(s)});
    for (std::int64_t b = 0; b <= 15; ++b) {
        for (std::int64_t e = b; e <= 15; ++e) {
            std::vector<std::int64_t> seen;
            tenferro::kernels::for_each_run(loop, b, e, [&](const std::int64_t(&off)[1], std::int64_t n) {
                for (std::int64_t i = 0; i < n; ++i) seen.push_back(off[0] + i * loop.inner_stride(0));
            });
            std::vector<std::int64_t> expect;
            for (std::int64_t p = b; p < e; ++p) expect.push_back((p / 5) * 10 + (p % 5) * 2);
            CHECK(seen == expect);
        }
    }
}

TEST_CASE("op_support: chunked pairwise combination equals the unchunked tree", "[op_support]") {
    // Leaves are values; chunks of 2^3 leaves reduce to level-3 partials.
    auto combine = [](double a, double b) { return a + b + 1e-3 * a * b; };  // non-associative on purpose
    for (int n = 1; n < 70; ++n) {
        std::vector<double> leaves(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) leaves[static_cast<std::size_t>(i)] = 1.0 + 0.37 * i;
        tenferro::kernels::pairwise_stack<double, decltype(combine)> whole(combine);
        for (double v : leaves) whole.push(v, 0);
        const double expect = whole.finish(0.0);

        tenferro::kernels::pairwise_stack<double, decltype(combine)> outer(combine);
        for (int c = 0; c < n; c += 8) {
            tenferro::kernels::pairwise_stack<double, decltype(combine)> inner(combine);
            const int e = std::min(n, c + 8);
            for (int i = c; i < e; ++i) inner.push(leaves[static_cast<std::size_t>(i)], 0);
            outer.push(inner.finish(0.0), e - c == 8 ? 3 : tenferro::kernels::no_merge_level);
        }
        CHECK(outer.finish(0.0) == expect);
    }
}
