#include "tenferro/backend_session.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "op_test_support.hpp"
#include "tenferro/cpu_backend.hpp"

using namespace tenferro;
using namespace tenferro::test;

namespace {

// Row-major strides of a shape.
shape_t strides_of(const shape_t& shape) {
    shape_t s(shape.size(), 1);
    for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
    return s;
}

// Calls f(base, stride) for every row along `axis` of a row-major `shape`
// (base = flat index of the row's first element).
template <class F>
void for_each_row(const shape_t& shape, std::size_t axis, F f) {
    const shape_t st = strides_of(shape);
    shape_t other = shape;
    other[axis] = 1;
    for_each_index(other, [&](std::span<const std::int64_t> idx) {
        std::int64_t base = 0;
        for (std::size_t d = 0; d < idx.size(); ++d) base += idx[d] * st[d];
        f(base, st[axis]);
    });
}

std::vector<long double> softmax_ref(const std::vector<double>& v, const shape_t& shape, std::size_t axis) {
    std::vector<long double> out(v.size());
    const std::int64_t n = shape[axis];
    for_each_row(shape, axis, [&](std::int64_t base, std::int64_t st) {
        long double m = -INFINITY;
        for (std::int64_t i = 0; i < n; ++i) m = std::max<long double>(m, v[base + i * st]);
        long double sum = 0;
        for (std::int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<long double>(v[base + i * st]) - m);
        for (std::int64_t i = 0; i < n; ++i)
            out[base + i * st] = std::exp(static_cast<long double>(v[base + i * st]) - m) / sum;
    });
    return out;
}

// The maximum of each element's row, per element.
std::vector<double> softmax_rowmax(const std::vector<double>& v, const shape_t& shape, std::size_t axis) {
    std::vector<double> out(v.size());
    const std::int64_t n = shape[axis];
    for_each_row(shape, axis, [&](std::int64_t base, std::int64_t st) {
        double m = -INFINITY;
        for (std::int64_t i = 0; i < n; ++i) m = std::max(m, v[base + i * st]);
        for (std::int64_t i = 0; i < n; ++i) out[base + i * st] = m;
    });
    return out;
}

bool ranks_above(double a, std::int64_t ia, double b, std::int64_t ib) {
    if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
    if (!std::isnan(a) && a != b) return a > b;
    return ia < ib;
}

// Reference top-k along `axis`: (values, indices) in row-major order of the output shape.
std::pair<std::vector<double>, std::vector<std::int64_t>> top_k_ref(const std::vector<double>& v, const shape_t& shape,
                                                                    std::size_t axis, std::int64_t k) {
    shape_t out_shape = shape;
    out_shape[axis] = k;
    const shape_t ost = strides_of(out_shape);
    const shape_t ist = strides_of(shape);
    std::vector<double> vals(static_cast<std::size_t>(count_of(out_shape)));
    std::vector<std::int64_t> ids(vals.size());
    shape_t other = shape;
    other[axis] = 1;
    for_each_index(other, [&](std::span<const std::int64_t> idx) {
        std::int64_t ib = 0, ob = 0;
        for (std::size_t d = 0; d < idx.size(); ++d) {
            ib += idx[d] * ist[d];
            ob += idx[d] * ost[d];
        }
        std::vector<std::int64_t> order(static_cast<std::size_t>(shape[axis]));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
            return ranks_above(v[ib + a * ist[axis]], a, v[ib + b * ist[axis]], b);
        });
        for (std::int64_t j = 0; j < k; ++j) {
            vals[ob + j * ost[axis]] = v[ib + order[j] * ist[axis]];
            ids[ob + j * ost[axis]] = order[j];
        }
    });
    return {vals, ids};
}

}  // namespace

TEST_CASE("softmax matches a reference on every target, size, layout and axis", "[rowwise]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            struct c {
                shape_t shape;
                std::int64_t axis;
            };
            const c cases[] = {{{1}, 0},      {{3}, -1},     {{17}, 0},      {{1023}, 0},     {{65537}, -1},
                               {{17, 33}, 0}, {{17, 33}, 1}, {{5, 7, 9}, 1}, {{5, 7, 9}, -3}, {{4, 1}, 1}};
            for (const auto& cs : cases) {
                const auto v = random_values(static_cast<std::size_t>(count_of(cs.shape)), -10, 10, 3);
                for (const layout l : {layout::contiguous, layout::strided, layout::reversed, layout::transposed}) {
                    const laid_out x = lay_out(t, v, cs.shape, l);
                    tensor r = in_session(cpu, 1, [&](backend_session& s) { return s.softmax(x.view, cs.axis); });
                    REQUIRE(std::ranges::equal(r.shape(), cs.shape));
                    const auto xv = values_of(x.view);
                    const auto axis = static_cast<std::size_t>(
                        cs.axis < 0 ? cs.axis + static_cast<std::int64_t>(cs.shape.size()) : cs.axis);
                    const auto ref = softmax_ref(xv, cs.shape, axis);
                    const auto got = values_of(r);
                    // x - max is rounded before exp (as in numpy / scipy): the relative error is
                    // about (|x - max| + a few) units of roundoff.
                    const auto rowmax = softmax_rowmax(xv, cs.shape, axis);
                    const long double eps = t == dtype::f32 ? 0x1p-24L : 0x1p-53L;
                    std::size_t bad = 0;
                    for (std::size_t i = 0; i < got.size(); ++i) {
                        const long double tol = (std::fabs(xv[i] - rowmax[i]) + 8) * eps * ref[i];
                        if (!(std::fabs(got[i] - ref[i]) <= tol)) ++bad;
                    }
                    INFO(target << " " << to_string(t) << " shape " << to_string(cs.shape) << " axis " << cs.axis << " "
                                << test::name_of(l));
                    CHECK(bad == 0);
                }
            }
        }
    });
}

TEST_CASE("softmax is max-subtracted and follows the NaN rules", "[rowwise]") {
    cpu_backend cpu(two_permits());
    const double inf = std::numeric_limits<double>::infinity();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for_each_target([&](const std::string& target) {
        INFO(target);
        tensor x = tensor_of<float>({1000, 1001, 0, 5, nan, 1, inf, 1, 2, -inf, 3, 0, -inf, -inf, -inf, 0}, {4, 4});
        // rows: [1000, 1001, 0, 5], [nan, 1, inf, 1], [2, -inf, 3, 0], [-inf x3, 0]
        tensor r = in_session(cpu, 1, [&](backend_session& s) { return s.softmax(x, 1); });
        const auto v = values_of(r);
        const long double e = std::exp(-1.0L);
        CHECK(v[0] == Approx(static_cast<double>(e / (1 + e))));
        CHECK(v[1] == Approx(static_cast<double>(1 / (1 + e))));
        CHECK(v[2] == 0.0);
        for (int i = 4; i < 8; ++i) CHECK(std::isnan(v[static_cast<std::size_t>(i)]));
        CHECK(v[9] == 0.0);  // exp(-inf) is 0
        CHECK(v[8] + v[10] + v[11] == Approx(1.0));
        CHECK(v[12] == 0.0);
        CHECK(v[15] == 1.0);
        tensor all_neg_inf = tensor_of<double>({-inf, -inf}, {2});
        tensor z = in_session(cpu, 1, [&](backend_session& s) { return s.softmax(all_neg_inf, 0); });
        CHECK(std::isnan(values_of(z)[0]));
    });
}

TEST_CASE("top_k matches a stable-sort reference on every target, size, layout and axis", "[rowwise]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            struct c {
                shape_t shape;
                std::int64_t axis, k;
            };
            const c cases[] = {
                {{1}, 0, 1},       {{3}, 0, 2},       {{17}, -1, 17},    {{1023}, 0, 5},
                {{1023}, 0, 300},  {{65537}, 0, 10},  {{17, 300}, 1, 5}, {{17, 300}, 1, 100},
                {{300, 17}, 0, 7}, {{5, 7, 9}, 1, 3}, {{5, 7, 9}, 2, 0}, {{4, 64}, 1, 8},
            };
            // Inputs: random with many ties (rounded to quarters) and signed zeros, with or
            // without NaNs; ascending; descending. (NaN-free rows take the threshold path.)
            for (const auto& cs : cases)
                for (int kind = 0; kind < 4; ++kind) {
                    auto v = random_values(static_cast<std::size_t>(count_of(cs.shape)), -3, 3, 17);
                    for (std::size_t i = 0; i < v.size(); ++i) {
                        v[i] = std::round(v[i] * 4) / 4;
                        if (kind == 0 && i % 97 == 13) v[i] = std::numeric_limits<double>::quiet_NaN();
                        if (i % 89 == 7) v[i] = i % 2 ? -0.0 : 0.0;
                        if (kind == 2) v[i] = static_cast<double>(i % 1000);
                        if (kind == 3) v[i] = -static_cast<double>(i % 1000);
                    }
                    const auto axis = static_cast<std::size_t>(
                        cs.axis < 0 ? cs.axis + static_cast<std::int64_t>(cs.shape.size()) : cs.axis);
                    for (const layout l : {layout::contiguous, layout::strided, layout::reversed, layout::transposed}) {
                        const laid_out x = lay_out(t, v, cs.shape, l);
                        auto [vals, ids] =
                            in_session(cpu, 1, [&](backend_session& s) { return s.top_k(x.view, cs.k, cs.axis); });
                        shape_t out_shape = cs.shape;
                        out_shape[axis] = cs.k;
                        REQUIRE(std::ranges::equal(vals.shape(), out_shape));
                        REQUIRE(ids.type() == dtype::i64);
                        REQUIRE(std::ranges::equal(ids.shape(), out_shape));
                        const auto [rv, ri] = top_k_ref(values_of(x.view), cs.shape, axis, cs.k);
                        const auto gv = values_of(vals);
                        const auto gi = typed_values_of<std::int64_t>(ids);
                        std::size_t bad = 0;
                        for (std::size_t i = 0; i < gv.size(); ++i) {
                            const bool same = (std::isnan(gv[i]) && std::isnan(rv[i])) || gv[i] == rv[i];
                            if (!same || gi[i] != ri[i]) ++bad;
                        }
                        INFO(target << " " << to_string(t) << " shape " << to_string(cs.shape) << " axis " << cs.axis
                                    << " k " << cs.k << " " << test::name_of(l) << " input kind " << kind);
                        CHECK(bad == 0);
                    }
                }
        }
    });
}

TEST_CASE("top_k ranks NaN first and breaks ties by lower index", "[rowwise]") {
    cpu_backend cpu(two_permits());
    const double nan = std::numeric_limits<double>::quiet_NaN();
    tensor x = tensor_of<float>({1, nan, 3, 3, -0.0, 0.0, nan, 3}, {8});
    auto [v, i] = in_session(cpu, 1, [&](backend_session& s) { return s.top_k(x, 8, 0); });
    const auto vi = typed_values_of<std::int64_t>(i);
    CHECK(vi == std::vector<std::int64_t>{1, 6, 2, 3, 7, 0, 4, 5});
    const auto vv = values_of(v);
    CHECK(std::isnan(vv[0]));
    CHECK(std::isnan(vv[1]));
    CHECK(vv[2] == 3.0);
    CHECK(vv[5] == 1.0);
}

TEST_CASE("row-wise ops accept broadcast (zero-stride) and rank-1 inputs", "[rowwise]") {
    cpu_backend cpu(two_permits());
    tensor row = tensor::from<float>({3.0f, 1.0f, 2.0f, 3.0f}, {4});
    const const_tensor_view b = row.broadcast_to({100, 4});  // strides [0, 1]
    const const_tensor_view c = row.slice(0, 0, 1).broadcast_to({5, 6});  // all zero strides
    auto r = in_session(cpu, 1, [&](backend_session& s) {
        auto [v, i] = s.top_k(b, 2, 1);
        auto [cv, ci] = s.top_k(c, 3, 1);
        return std::vector<tensor>{s.softmax(b, 1), v, i, s.softmax(c, 0), cv, ci};
    });
    const auto sm = values_of(r[0]);
    for (std::size_t i = 4; i < sm.size(); ++i) CHECK(sm[i] == sm[i % 4]);
    CHECK(values_of(r[1])[0] == 3.0);
    CHECK(typed_values_of<std::int64_t>(r[2])[0] == 0);
    CHECK(typed_values_of<std::int64_t>(r[2])[1] == 3);  // the tie goes to the lower index first
    for (double v : values_of(r[3])) CHECK(v == Approx(0.2));
    CHECK(typed_values_of<std::int64_t>(r[5])[0] == 0);
    CHECK(typed_values_of<std::int64_t>(r[5])[2] == 2);
}

TEST_CASE("row-wise ops write strided _into outputs", "[rowwise]") {
    cpu_backend cpu(two_permits());
    const auto v = random_values(6 * 40, -2, 2, 5);
    tensor x = tensor_of<double>(v, {6, 40});
    tensor sm_store = tensor::zeros(dtype::f64, {40, 6});
    tensor_view sm = sm_store.transposed();
    tensor vals_store = tensor::zeros(dtype::f64, {3, 6});
    tensor ids_store = tensor::zeros(dtype::i64, {3, 6});
    tensor_view vals = vals_store.transposed(), ids = ids_store.transposed();
    in_session(cpu, 1, [&](backend_session& s) {
        s.softmax_into(x, 1, sm);
        s.top_k_into(x, 3, -1, vals, ids);
    });
    tensor ref = in_session(cpu, 1, [&](backend_session& s) { return s.softmax(x, -1); });
    CHECK(bitwise_equal(sm, ref));
    auto [rv, ri] = in_session(cpu, 1, [&](backend_session& s) { return s.top_k(x, 3, 1); });
    CHECK(bitwise_equal(vals, rv));
    CHECK(bitwise_equal(ids, ri));
}

TEST_CASE("row-wise results are bitwise identical at parallelism 1 and 2", "[rowwise]") {
    cpu_backend cpu(two_permits());
    const auto v = random_values(2048 * 257, -5, 5, 23);
    for (const dtype t : {dtype::f32, dtype::f64}) {
        const laid_out x = lay_out(t, v, {2048, 257}, layout::contiguous);
        const laid_out xt = lay_out(t, v, {2048, 257}, layout::transposed);
        auto run = [&](std::size_t permits) {
            return in_session(cpu, permits, [&](backend_session& s) {
                auto [tv, ti] = s.top_k(x.view, 16, 1);
                auto [uv, ui] = s.top_k(xt.view, 200, 0);
                return std::vector<tensor>{s.softmax(x.view, 1), s.softmax(xt.view, 0), tv, ti, uv, ui};
            });
        };
        const auto r1 = run(1), r2 = run(2);
        for (std::size_t i = 0; i < r1.size(); ++i) {
            INFO(to_string(t) << " result " << i);
            CHECK(bitwise_equal(r1[i], r2[i]));
        }
    }
}

TEST_CASE("row-wise ops reject bad arguments with messages naming op, operand and axis", "[rowwise]") {
    cpu_backend cpu(two_permits());
    tensor f23 = tensor::zeros(dtype::f32, {2, 3});
    tensor i23 = tensor::zeros(dtype::i32, {2, 3});
    tensor f0 = tensor::zeros(dtype::f32, {});
    tensor out22 = tensor::zeros(dtype::f32, {2, 2});
    tensor i22 = tensor::zeros(dtype::i64, {2, 2});
    tensor f22 = tensor::zeros(dtype::f32, {2, 2});
    auto expect_error = [&](auto body, const std::string& text) {
        CHECK_THAT(tensor_error_of(cpu, body), Catch::Matchers::Contains(text));
    };
    expect_error([&](backend_session& s) { s.softmax(f23, 2); },
                 "softmax: axis 2 is out of range for operand x of shape [2, 3] (rank 2)");
    expect_error([&](backend_session& s) { s.softmax(f0, -1); },
                 "softmax: axis -1 is out of range for operand x of shape [] (rank 0)");
    expect_error([&](backend_session& s) { s.softmax(i23, 0); }, "softmax: operand x has dtype i32");
    expect_error([&](backend_session& s) { s.softmax_into(f23, 1, out22); },
                 "softmax_into: out has shape [2, 2], but the result has shape [2, 3]");
    expect_error([&](backend_session& s) { s.softmax_into(f23, 1, f23); },
                 "softmax_into: out (shape [2, 3]) overlaps operand x");
    expect_error([&](backend_session& s) { s.top_k(f23, 4, 1); },
                 "top_k: k = 4 exceeds the extent 3 of axis 1 of operand x with shape [2, 3]");
    expect_error([&](backend_session& s) { s.top_k(f23, 3, 0); },
                 "top_k: k = 3 exceeds the extent 2 of axis 0 of operand x with shape [2, 3]");
    expect_error([&](backend_session& s) { s.top_k(f23, -1, 1); }, "top_k: k = -1 is negative");
    expect_error([&](backend_session& s) { s.top_k(f23, 1, -3); },
                 "top_k: axis -3 is out of range for operand x of shape [2, 3] (rank 2)");
    expect_error([&](backend_session& s) { s.top_k(i23, 1, 1); }, "top_k: operand x has dtype i32");
    expect_error([&](backend_session& s) { s.top_k_into(f23, 2, 1, f22, f22); },
                 "top_k_into: indices has dtype f32, but the result has dtype i64");
    expect_error([&](backend_session& s) { s.top_k_into(f23, 2, 1, i22, i22); },
                 "top_k_into: values has dtype i64, but the result has dtype f32");
    expect_error([&](backend_session& s) { s.top_k_into(f23, 1, 1, f22, i22); },
                 "top_k_into: values has shape [2, 2], but the result has shape [2, 1]");
    expect_error([&](backend_session& s) { s.top_k_into(f23, 2, 1, f23.slice(1, 0, 2), i22); },
                 "top_k_into: values (shape [2, 2]) overlaps operand x");
    tensor both = tensor::zeros(dtype::i64, {2, 4});
    tensor_view ids = both.slice(1, 0, 2);
    tensor_view fake = tensor_view(both.data(), dtype::f32, {2, 2}, {8, 1});
    expect_error([&](backend_session& s) { s.top_k_into(f23, 2, 1, fake, ids); },
                 "top_k_into: values (shape [2, 2]) overlaps indices");
}
