// The contiguous fast path of the `_into` forms (src/cpu/ops/op_support.hpp):
// every fast-pathed op is computed on dense operands of one shape (the fast
// path) and on the same values laid out strided, broadcast or into a strided
// output (the general path); both must match a reference, and the elementwise
// ops, the reductions and vdot must match each other bit for bit (the
// reductions' order is defined on positions, kernels/reduce.hpp).
// Calls that look dense but are invalid (overlapping, another dtype, integer
// operands, max of nothing) must still throw the general path's errors.
#include "tenferro/backend_session.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "op_test_support.hpp"
#include "tenferro/cpu_backend.hpp"

using namespace tenferro;
using namespace tenferro::test;

namespace {

using binary_into_fn = void (backend_session::*)(const const_tensor_view&, const const_tensor_view&,
                                                 const tensor_view&);
using unary_into_fn = void (backend_session::*)(const const_tensor_view&, const tensor_view&);

// Shapes on both sides of the vector width, a multi-leaf reduction, and one
// above the parallel threshold (the ops split over two workers).
const std::vector<shape_t> shapes = {{}, {1}, {3, 5}, {37}, {2, 3, 700}, {70001}};

// `values` rounded to `t` (so references see the operands the op sees).
std::vector<double> rounded(dtype t, std::vector<double> values) {
    if (t == dtype::f32)
        for (double& v : values) v = static_cast<float>(v);
    return values;
}

// The reference result of an elementwise op rounded to `t`, computed in T.
template <class F>
std::vector<double> reference(dtype t, std::size_t n, F f) {
    std::vector<double> r(n);
    for (std::size_t i = 0; i < n; ++i) r[i] = t == dtype::f32 ? static_cast<double>(f(float{}, i)) : f(double{}, i);
    return r;
}

bool close(const std::vector<double>& got, const std::vector<double>& want, double rel) {
    if (got.size() != want.size()) return false;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(want[i]) && std::isnan(got[i])) continue;
        if (std::abs(got[i] - want[i]) > rel * (1.0 + std::abs(want[i]))) return false;
    }
    return true;
}

// A zeroed output of `shape` in every other element of a larger buffer: a
// valid, non-dense `_into` output (forces the general path).
struct strided_out {
    tensor storage;
    tensor_view view;
};
strided_out strided_output(dtype t, const shape_t& shape) {
    shape_t big = shape;
    if (big.empty()) big.push_back(1);
    big.back() *= 2;
    tensor s = tensor::zeros(t, std::span<const std::int64_t>(big));
    tensor_view v = s.view().slice(static_cast<std::int64_t>(big.size() - 1), 0, big.back(), 2);
    if (shape.empty()) v = v.reshaped(std::span<const std::int64_t>{});
    return {s, v};
}

struct fast_binary_case {
    const char* name;
    binary_into_fn into;
    double (*ref)(double, double);  // exact in T when applied to T operands and rounded to T
};
double max_ref(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (a >= b ? a : b); }
double min_ref(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (a <= b ? a : b); }
const fast_binary_case fast_binary_cases[] = {
    {"add_into", &backend_session::add_into, [](double a, double b) { return a + b; }},
    {"sub_into", &backend_session::sub_into, [](double a, double b) { return a - b; }},
    {"mul_into", &backend_session::mul_into, [](double a, double b) { return a * b; }},
    {"div_into", &backend_session::div_into, [](double a, double b) { return a / b; }},
    {"maximum_into", &backend_session::maximum_into, max_ref},
    {"minimum_into", &backend_session::minimum_into, min_ref},
};

struct fast_unary_case {
    const char* name;
    unary_into_fn into;
    double (*ref)(double);
    double lo, hi;
    double rel;  // 0: exact (bitwise, after rounding to the dtype)
};
const fast_unary_case fast_unary_cases[] = {
    {"neg_into", &backend_session::neg_into, [](double x) { return -x; }, -5, 5, 0},
    {"abs_into", &backend_session::abs_into, [](double x) { return std::abs(x); }, -5, 5, 0},
    {"relu_into", &backend_session::relu_into, [](double x) { return x > 0 ? x : 0.0; }, -5, 5, 0},
    {"sqrt_into", &backend_session::sqrt_into, [](double x) { return std::sqrt(x); }, 0, 9, 1e-6},
    {"rsqrt_into", &backend_session::rsqrt_into, [](double x) { return 1.0 / std::sqrt(x); }, 0.5, 9, 1e-6},
    {"exp_into", &backend_session::exp_into, [](double x) { return std::exp(x); }, -5, 5, 1e-6},
    {"log_into", &backend_session::log_into, [](double x) { return std::log(x); }, 0.1, 9, 1e-6},
    {"tanh_into", &backend_session::tanh_into, [](double x) { return std::tanh(x); }, -5, 5, 1e-6},
    {"sigmoid_into", &backend_session::sigmoid_into, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -5, 5, 1e-6},
};

}  // namespace

TEST_CASE("fast path: binary ops on dense operands match the general path and the reference", "[fast_path]") {
    cpu_backend cpu(two_permits());
    for (const dtype t : {dtype::f32, dtype::f64}) {
        for (const shape_t& shape : shapes) {
            const auto n = static_cast<std::size_t>(count_of(shape));
            const std::vector<double> av = rounded(t, random_values(n, -4, 4, 1));
            std::vector<double> bv = rounded(t, random_values(n, -4, 4, 2));
            if (n > 2) bv[1] = av[1];  // an equal pair for maximum / minimum
            for (const fast_binary_case& c : fast_binary_cases) {
                INFO(c.name << " " << to_string(t) << " " << to_string(std::span<const std::int64_t>(shape)));
                std::vector<double> want(n);
                for (std::size_t i = 0; i < n; ++i) want[i] = c.ref(av[i], bv[i]);
                want = rounded(t, want);
                const tensor a = tensor_of(t, av, shape), b = tensor_of(t, bv, shape);
                // Fast: dense a, b, out of one shape.
                tensor fast = tensor::zeros(t, std::span<const std::int64_t>(shape));
                in_session(cpu, 2, [&](backend_session& s) { (s.*c.into)(a, b, fast.view()); });
                CHECK(values_of(fast) == want);
                // General: strided inputs; and dense inputs into a strided output.
                const laid_out as = lay_out(t, av, shape, layout::strided);
                const laid_out bs = lay_out(t, bv, shape, layout::strided);
                tensor general = tensor::zeros(t, std::span<const std::int64_t>(shape));
                in_session(cpu, 2, [&](backend_session& s) { (s.*c.into)(as.view, bs.view, general.view()); });
                CHECK(bitwise_equal(fast, general));
                strided_out so = strided_output(t, shape);
                in_session(cpu, 2, [&](backend_session& s) { (s.*c.into)(a, b, so.view); });
                CHECK(values_of(so.view) == want);
            }
        }
        // General: broadcasting ([3, 5] op [5] and [1] op [3, 5]).
        const std::vector<double> m = rounded(t, random_values(15, -4, 4, 3));
        const std::vector<double> row = rounded(t, random_values(5, -4, 4, 4));
        const tensor tm = tensor_of(t, m, {3, 5}), tr = tensor_of(t, row, {5}), one = tensor_of(t, {2.5}, {1});
        tensor out = tensor::zeros(t, {3, 5});
        in_session(cpu, 1, [&](backend_session& s) { s.sub_into(tm, tr, out.view()); });
        std::vector<double> want(15);
        for (std::size_t i = 0; i < 15; ++i) want[i] = m[i] - row[i % 5];
        CHECK(values_of(out) == rounded(t, want));
        in_session(cpu, 1, [&](backend_session& s) { s.div_into(one, tm, out.view()); });
        for (std::size_t i = 0; i < 15; ++i) want[i] = 2.5 / m[i];
        CHECK(values_of(out) == rounded(t, want));
    }
}

TEST_CASE("fast path: unary ops, scale_into and axpby_into on dense operands", "[fast_path]") {
    cpu_backend cpu(two_permits());
    for (const dtype t : {dtype::f32, dtype::f64}) {
        const double rel = t == dtype::f32 ? 1e-6 : 1e-14;
        for (const shape_t& shape : shapes) {
            const auto n = static_cast<std::size_t>(count_of(shape));
            const std::string where = std::string(to_string(t)) + " " + to_string(std::span<const std::int64_t>(shape));
            for (const fast_unary_case& c : fast_unary_cases) {
                INFO(c.name << " " << where);
                const std::vector<double> xv = rounded(t, random_values(n, c.lo, c.hi, 5));
                std::vector<double> want(n);
                for (std::size_t i = 0; i < n; ++i) want[i] = c.ref(xv[i]);
                want = rounded(t, want);
                const tensor x = tensor_of(t, xv, shape);
                tensor fast = tensor::zeros(t, std::span<const std::int64_t>(shape));
                in_session(cpu, 2, [&](backend_session& s) { (s.*c.into)(x, fast.view()); });
                if (c.rel == 0)
                    CHECK(values_of(fast) == want);
                else
                    CHECK(close(values_of(fast), want, t == dtype::f32 ? c.rel : c.rel * 1e-8));
                const laid_out xs = lay_out(t, xv, shape, layout::reversed);
                tensor general = tensor::zeros(t, std::span<const std::int64_t>(shape));
                in_session(cpu, 2, [&](backend_session& s) { (s.*c.into)(xs.view, general.view()); });
                CHECK(bitwise_equal(fast, general));
            }
            INFO("scale_into / axpby_into " << where);
            const std::vector<double> xv = rounded(t, random_values(n, -4, 4, 6));
            const std::vector<double> yv = rounded(t, random_values(n, -4, 4, 7));
            const tensor x = tensor_of(t, xv, shape), y = tensor_of(t, yv, shape);
            const laid_out xs = lay_out(t, xv, shape, layout::strided), ys = lay_out(t, yv, shape, layout::strided);
            std::vector<double> want(n);
            for (std::size_t i = 0; i < n; ++i) want[i] = -0.75 * xv[i];
            tensor fast = tensor::zeros(t, std::span<const std::int64_t>(shape));
            tensor general = tensor::zeros(t, std::span<const std::int64_t>(shape));
            in_session(cpu, 2, [&](backend_session& s) {
                s.scale_into(x, -0.75, fast.view());
                s.scale_into(xs.view, -0.75, general.view());
            });
            CHECK(values_of(fast) == rounded(t, want));
            CHECK(bitwise_equal(fast, general));
            for (std::size_t i = 0; i < n; ++i) want[i] = 0.5 * xv[i] + 1.5 * yv[i];
            in_session(cpu, 2, [&](backend_session& s) {
                s.axpby_into(0.5, x, 1.5, y, fast.view());
                s.axpby_into(0.5, xs.view, 1.5, ys.view, general.view());
            });
            CHECK(close(values_of(fast), want, rel));
            CHECK(bitwise_equal(fast, general));
            // beta == 0 does not read y (NaNs there do not propagate), on both paths.
            const tensor nan_y = tensor_of(t, std::vector<double>(n, std::nan("")), shape);
            const laid_out nan_ys = lay_out(t, std::vector<double>(n, std::nan("")), shape, layout::strided);
            for (std::size_t i = 0; i < n; ++i) want[i] = 0.5 * xv[i];
            in_session(cpu, 2, [&](backend_session& s) {
                s.axpby_into(0.5, x, 0.0, nan_y, fast.view());
                s.axpby_into(0.5, xs.view, 0.0, nan_ys.view, general.view());
            });
            CHECK(values_of(fast) == rounded(t, want));
            CHECK(values_of(general) == rounded(t, want));
        }
    }
}

TEST_CASE("fast path: copy_into of every dtype", "[fast_path]") {
    cpu_backend cpu(two_permits());
    for (const dtype t : {dtype::f32, dtype::f64, dtype::i32, dtype::i64}) {
        for (const shape_t& shape : shapes) {
            INFO(to_string(t) << " " << to_string(std::span<const std::int64_t>(shape)));
            const auto n = static_cast<std::size_t>(count_of(shape));
            std::vector<double> v = random_values(n, -1000, 1000, 8);
            for (double& e : v) e = std::floor(e);
            const tensor src = tensor_of(t, v, shape);
            tensor fast = tensor::zeros(t, std::span<const std::int64_t>(shape));
            in_session(cpu, 2, [&](backend_session& s) { s.copy_into(src, fast.view()); });
            CHECK(values_of(fast) == v);
            const laid_out ss = lay_out(t, v, shape, layout::transposed);
            strided_out so = strided_output(t, shape);
            in_session(cpu, 2, [&](backend_session& s) { s.copy_into(ss.view, so.view); });
            CHECK(values_of(so.view) == v);
        }
    }
}

namespace {

// One dtype and shape of the test below: every reduction to one value and
// vdot, the fast path against the general path (all axes listed) and a strided
// copy of the operand, which the general path gathers leaf by leaf in the same
// position order, so the documented order makes all three equal bit for bit.
void reductions_case(cpu_backend& cpu, const std::string& target, dtype t, const shape_t& shape) {
    const double rel = t == dtype::f32 ? 1e-4 : 1e-12;
    const auto n = static_cast<std::size_t>(count_of(shape));
    INFO(target << " " << to_string(t) << " " << to_string(std::span<const std::int64_t>(shape)));
    const std::vector<double> xv = rounded(t, random_values(n, 0.5, 1.5, 9));
    const std::vector<double> yv = rounded(t, random_values(n, -1, 1, 10));
    const tensor x = tensor_of(t, xv, shape), y = tensor_of(t, yv, shape);
    const laid_out xs = lay_out(t, xv, shape, layout::strided), ys = lay_out(t, yv, shape, layout::strided);
    std::vector<std::int64_t> every_axis(shape.size());
    for (std::size_t d = 0; d < shape.size(); ++d) every_axis[d] = static_cast<std::int64_t>(d);
    long double sum = 0, prod = 1, dot = 0;
    double mx = -INFINITY, mn = INFINITY;
    for (std::size_t i = 0; i < n; ++i) {
        sum += xv[i];
        prod *= xv[i];
        dot += static_cast<long double>(xv[i]) * yv[i];
        mx = std::max(mx, xv[i]);
        mn = std::min(mn, xv[i]);
    }
    struct reduction {
        void (backend_session::*into)(const const_tensor_view&, std::span<const std::int64_t>, const tensor_view&);
        double want;
        double rel;
    };
    const reduction reductions[] = {
        {&backend_session::reduce_sum_into, static_cast<double>(sum), rel},
        {&backend_session::reduce_prod_into, static_cast<double>(prod), n > 1000 ? 1.0 : rel},  // may overflow
        {&backend_session::reduce_max_into, mx, 0},
        {&backend_session::reduce_min_into, mn, 0},
    };
    for (const reduction& r : reductions) {
        tensor fast = tensor::zeros(t, {}), general = tensor::zeros(t, {}), strided = tensor::zeros(t, {});
        in_session(cpu, 2, [&](backend_session& s) {
            (s.*r.into)(x, std::span<const std::int64_t>{}, fast.view());  // fast: every axis
            (s.*r.into)(x, every_axis, general.view());  // general (rank != 1) or fast (rank 1): same order
            (s.*r.into)(xs.view, std::span<const std::int64_t>{}, strided.view());  // general
        });
        CHECK(bitwise_equal(fast, general));
        // The strided x is gathered leaf by leaf in the same position
        // order (positive strides): the documented order makes it the
        // dense result bit for bit.
        CHECK(bitwise_equal(fast, strided));
        if (r.rel == 0) {
            CHECK(values_of(fast)[0] == r.want);
            CHECK(values_of(strided)[0] == r.want);
        } else if (r.rel < 1.0) {
            CHECK(close(values_of(fast), {r.want}, r.rel));
            CHECK(close(values_of(strided), {r.want}, r.rel));
        }
    }
    if (shape.size() == 1) {  // axes {-1} of a rank-1 x: the fast path too
        tensor a = tensor::zeros(t, {}), b = tensor::zeros(t, {});
        in_session(cpu, 1, [&](backend_session& s) {
            s.reduce_sum_into(x, {-1}, a.view());
            s.reduce_sum_into(x, {}, b.view());
        });
        CHECK(bitwise_equal(a, b));
    }
    tensor fast = tensor::zeros(t, {}), general = tensor::zeros(t, {});
    in_session(cpu, 2, [&](backend_session& s) {
        s.vdot_into(x, y, fast.view());
        s.vdot_into(xs.view, ys.view, general.view());
    });
    CHECK(close(values_of(fast), {static_cast<double>(dot)}, rel * 10));
    CHECK(bitwise_equal(fast, general));  // the same order, as for the reductions
}

// The same three ways with a NaN and a -0.0 among the values: sum, max and
// min must give NaN, and every way the same bits.
void special_values_case(cpu_backend& cpu, const std::string& target, dtype t, const shape_t& shape) {
    const auto n = static_cast<std::size_t>(count_of(shape));
    INFO(target << " " << to_string(t) << " " << to_string(std::span<const std::int64_t>(shape)) << " with NaN");
    std::vector<double> xv = rounded(t, random_values(n, -1.5, 1.5, 11));
    xv[0] = -0.0;
    xv[n / 2] = std::nan("");
    const tensor x = tensor_of(t, xv, shape);
    const laid_out xs = lay_out(t, xv, shape, layout::strided);
    std::vector<std::int64_t> every_axis(shape.size());
    for (std::size_t d = 0; d < shape.size(); ++d) every_axis[d] = static_cast<std::int64_t>(d);
    using into_fn =
        void (backend_session::*)(const const_tensor_view&, std::span<const std::int64_t>, const tensor_view&);
    const into_fn reductions[] = {&backend_session::reduce_sum_into, &backend_session::reduce_prod_into,
                                  &backend_session::reduce_max_into, &backend_session::reduce_min_into};
    for (const into_fn into : reductions) {
        tensor fast = tensor::zeros(t, {}), general = tensor::zeros(t, {}), strided = tensor::zeros(t, {});
        in_session(cpu, 2, [&](backend_session& s) {
            (s.*into)(x, std::span<const std::int64_t>{}, fast.view());
            (s.*into)(x, every_axis, general.view());
            (s.*into)(xs.view, std::span<const std::int64_t>{}, strided.view());
        });
        CHECK(std::isnan(values_of(fast)[0]));
        CHECK(bitwise_equal(fast, general));
        CHECK(bitwise_equal(fast, strided));
    }
    tensor fast = tensor::zeros(t, {}), general = tensor::zeros(t, {});
    in_session(cpu, 2, [&](backend_session& s) {
        s.vdot_into(x, x, fast.view());
        s.vdot_into(xs.view, xs.view, general.view());
    });
    CHECK(std::isnan(values_of(fast)[0]));
    CHECK(bitwise_equal(fast, general));
}

}  // namespace

TEST_CASE("fast path: reductions to one value and vdot_into", "[fast_path]") {
    // On every Highway target: the dense entry points and the general path's
    // gathered leaves are separate code on each.
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            for (const shape_t& shape : shapes) {
                reductions_case(cpu, target, t, shape);
                special_values_case(cpu, target, t, shape);
            }
        }
    });
}

TEST_CASE("fast path: dense but invalid calls throw the general path's errors", "[fast_path]") {
    cpu_backend cpu(two_permits());
    auto expect_error = [&](auto body, const std::string& text) {
        CHECK_THAT(tensor_error_of(cpu, body), Catch::Matchers::Contains(text));
    };
    // 16 elements: [0, 15) and [1, 16) of one buffer overlap partially.
    tensor buf = tensor_of(dtype::f32, random_values(16, 1, 2, 11), {16});
    const tensor_view lo = buf.view().slice(0, 0, 15), hi = buf.view().slice(0, 1, 16);
    const tensor f = tensor_of(dtype::f32, random_values(15, 1, 2, 12), {15});
    const tensor d = tensor_of(dtype::f64, random_values(15, 1, 2, 12), {15});
    const tensor i = tensor_of(dtype::i32, random_values(15, 1, 2, 12), {15});
    tensor fout = tensor::zeros(dtype::f32, {15}), dout = tensor::zeros(dtype::f64, {15});
    tensor f0 = tensor::zeros(dtype::f32, {});
    const std::vector<double> before = values_of(buf);

    expect_error([&](backend_session& s) { s.add_into(lo, f, hi); },
                 "add_into: out (shape [15]) overlaps operand a (shape [15])");
    expect_error([&](backend_session& s) { s.mul_into(f, lo, lo); },
                 "mul_into: out (shape [15]) overlaps operand b (shape [15])");
    expect_error([&](backend_session& s) { s.add_into(f, f, dout.view()); },
                 "add_into: out has dtype f64, but the result has dtype f32");
    expect_error([&](backend_session& s) { s.sub_into(f, d, fout.view()); },
                 "sub_into: operand b has dtype f64, which differs from a's dtype f32");
    expect_error([&](backend_session& s) { s.div_into(i, i, fout.view()); },
                 "div_into: operand a has dtype i32, but div_into needs f32 or f64");
    expect_error([&](backend_session& s) { s.exp_into(hi, lo); }, "exp_into: out (shape [15]) overlaps operand x");
    expect_error([&](backend_session& s) { s.exp_into(d, fout.view()); },
                 "exp_into: out has dtype f32, but the result has dtype f64");
    expect_error([&](backend_session& s) { s.neg_into(i, fout.view()); },
                 "neg_into: operand x has dtype i32, but neg_into needs f32 or f64");
    expect_error([&](backend_session& s) { s.scale_into(lo, 2.0, hi); },
                 "scale_into: out (shape [15]) overlaps operand x");
    expect_error([&](backend_session& s) { s.axpby_into(1.0, f, 1.0, hi, lo); },
                 "axpby_into: out (shape [15]) overlaps operand y");
    expect_error([&](backend_session& s) { s.axpby_into(1.0, f, 1.0, d, dout.view()); },
                 "axpby_into: operand y has dtype f64, which differs from x's dtype f32");
    expect_error([&](backend_session& s) { s.copy_into(lo, hi); }, "copy_into: dst (shape [15]) overlaps operand src");
    expect_error([&](backend_session& s) { s.copy_into(d, fout.view()); },
                 "copy_into: dst has dtype f32, but the result has dtype f64");
    const tensor_view first = buf.view().slice(0, 0, 1).reshaped(std::span<const std::int64_t>{});
    expect_error([&](backend_session& s) { s.reduce_sum_into(lo, {}, first); },
                 "reduce_sum_into: out (shape []) overlaps operand x (shape [15])");
    expect_error([&](backend_session& s) { s.reduce_sum_into(f, {}, tensor::zeros(dtype::f64, {}).view()); },
                 "reduce_sum_into: out has dtype f64, but the result has dtype f32");
    expect_error([&](backend_session& s) { s.reduce_sum_into(f, {1}, f0.view()); },
                 "reduce_sum_into: axis 1 is out of range");
    expect_error([&](backend_session& s) { s.reduce_max_into(tensor::zeros(dtype::f32, {0}), {}, f0.view()); },
                 "reduce_max_into: operand x of shape [0] has no elements along the reduced axes");
    expect_error([&](backend_session& s) { s.reduce_min_into(i, {}, f0.view()); },
                 "reduce_min_into: operand x has dtype i32, but reduce_min_into needs f32 or f64");
    expect_error([&](backend_session& s) { s.vdot_into(lo, f, first); },
                 "vdot_into: out (shape []) overlaps operand a (shape [15])");
    expect_error([&](backend_session& s) { s.vdot_into(f, lo.slice(0, 0, 14), f0.view()); },
                 "vdot_into: operand b has shape [14], which differs from a's shape [15]");
    expect_error([&](backend_session& s) { s.vdot_into(f, d, f0.view()); },
                 "vdot_into: operand b has dtype f64, which differs from a's dtype f32");
    // Nothing was written by the failed calls.
    CHECK(values_of(buf) == before);
    CHECK(values_of(fout) == std::vector<double>(15, 0.0));
    CHECK(values_of(f0) == std::vector<double>{0.0});
}
