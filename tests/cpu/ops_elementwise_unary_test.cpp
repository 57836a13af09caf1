// The unary elementwise ops (neg, abs, exp, log, tanh, sqrt, rsqrt, sigmoid,
// relu) within their ULP bounds and on special values, broadcast, rank-0 and
// empty inputs; and scale and axpby. The binary ops and what every elementwise
// op shares: ops_elementwise_binary_test.cpp.
#include "tenferro/backend_session.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "op_test_support.hpp"
#include "ops_elementwise_cases.hpp"
#include "tenferro/cpu_backend.hpp"

using namespace tenferro;
using namespace tenferro::test;

TEST_CASE("unary ops are within their ULP bounds on every target, size and layout", "[elementwise]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            for (const auto& c : unary_cases) {
                const std::uint64_t bound = t == dtype::f32 ? c.f32_ulp : c.f64_ulp;
                for (const std::int64_t n : odd_sizes) {
                    const shape_t shape{n};
                    std::vector<double> xv;
                    if (std::string(c.name) == "log" || std::string(c.name) == "rsqrt") {
                        // Log-uniform over [lo, hi], plus values next to 1.
                        xv = random_values(static_cast<std::size_t>(n), std::log(c.lo), std::log(c.hi), 11);
                        for (std::size_t i = 0; i < xv.size(); ++i)
                            xv[i] = i % 7 == 3 ? 1.0 + (xv[i] - 1.0) * 1e-4 : std::exp(xv[i]);
                    } else {
                        xv = random_values(static_cast<std::size_t>(n), c.lo, c.hi, 11);
                        for (std::size_t i = 0; i < xv.size(); i += 9) xv[i] *= 1e-5;  // near 0
                    }
                    for (const layout l : {layout::contiguous, layout::strided, layout::reversed}) {
                        const laid_out x = lay_out(t, xv, shape, l);
                        tensor r = in_session(cpu, 1, [&](backend_session& s) { return (s.*c.fn)(x.view); });
                        REQUIRE(r.type() == t);
                        const auto xr = values_of(x.view);
                        check_close(
                            r, [&](std::size_t i) { return c.ref(static_cast<long double>(xr[i])); }, bound,
                            target + " " + c.name + " " + std::string(to_string(t)) + " n=" + std::to_string(n) + " " +
                                name_of(l));
                    }
                }
                const shape_t shape{33, 17};
                const auto xv = random_values(33 * 17, c.lo > 0 ? c.lo : 0.001, c.hi, 12);
                const laid_out x = lay_out(t, xv, shape, layout::transposed);
                tensor r = in_session(cpu, 1, [&](backend_session& s) { return (s.*c.fn)(x.view); });
                const auto xr = values_of(x.view);
                check_close(
                    r, [&](std::size_t i) { return c.ref(static_cast<long double>(xr[i])); }, bound,
                    target + " " + c.name + " transposed");
            }
        }
    });
}

TEST_CASE("transcendental ops follow C99 on special values", "[elementwise]") {
    cpu_backend cpu(two_permits());
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for_each_target([&](const std::string& target) {
        INFO(target);
        for (const dtype t : {dtype::f32, dtype::f64}) {
            INFO(to_string(t));
            const std::vector<double> xs = {nan, inf, -inf, 0.0, -0.0, 1000.0, -1000.0, -1.0, 1e-30, 100.0, -100.0};
            tensor x = tensor_of(t, xs, {static_cast<std::int64_t>(xs.size())});
            auto [e, l, th, sg] = in_session(cpu, 1, [&](backend_session& s) {
                return std::tuple{s.exp(x), s.log(x), s.tanh(x), s.sigmoid(x)};
            });
            const auto ev = values_of(e), lv = values_of(l), tv = values_of(th), sv = values_of(sg);
            CHECK(std::isnan(ev[0]));
            CHECK(ev[1] == inf);
            CHECK(ev[2] == 0.0);
            CHECK(ev[3] == 1.0);
            CHECK(ev[5] == inf);
            CHECK(ev[6] == 0.0);
            CHECK(std::isnan(lv[0]));
            CHECK(lv[1] == inf);
            CHECK(std::isnan(lv[2]));
            CHECK(lv[3] == -inf);
            CHECK(lv[4] == -inf);
            CHECK(std::isnan(lv[7]));
            CHECK(std::isnan(tv[0]));
            CHECK(tv[1] == 1.0);
            CHECK(tv[2] == -1.0);
            CHECK(tv[3] == 0.0);
            CHECK(std::signbit(tv[4]));
            CHECK(tv[5] == 1.0);
            CHECK(tv[6] == -1.0);
            CHECK(std::isnan(sv[0]));
            CHECK(sv[1] == 1.0);
            CHECK(sv[2] == 0.0);
            CHECK(sv[3] == 0.5);
            CHECK(sv[6] == 0.0);
            CHECK(sv[9] == 1.0);
            // sigmoid(-100) keeps the tiny value instead of flushing to 0.
            const long double s100 = 1.0L / (1.0L + std::exp(100.0L));
            CHECK(ulps(t, sv[10], s100) <= 4);
            if (t == dtype::f32) CHECK(ev[9] == inf);  // e^100 overflows f32
        }
    });
}

TEST_CASE("sqrt is correctly rounded in f64", "[elementwise]") {
    cpu_backend cpu(two_permits());
    const auto xv = random_values(4099, 0, 1e3, 77);
    tensor x = tensor_of<double>(xv, {4099});
    for_each_target([&](const std::string& target) {
        INFO(target);
        tensor r = in_session(cpu, 1, [&](backend_session& s) { return s.sqrt(x); });
        std::size_t bad = 0;
        for (std::size_t i = 0; i < xv.size(); ++i)
            if (r.data<double>()[i] != std::sqrt(xv[i])) ++bad;
        CHECK(bad == 0);
    });
}

TEST_CASE("unary ops and scale accept broadcast (zero-stride) inputs", "[elementwise]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        INFO(target);
        tensor row = tensor::from<float>({0.5f, -1.5f, 2.0f}, {3});
        const const_tensor_view b = row.broadcast_to({300, 3});  // strides [0, 1]
        const const_tensor_view col = row.slice(0, 0, 1).broadcast_to({4, 1000});  // strides [0, 0]
        auto r = in_session(cpu, 1, [&](backend_session& s) {
            return std::vector<tensor>{s.exp(b), s.neg(b), s.tanh(col), s.abs(col), s.scale(col, 2.0)};
        });
        const auto e = values_of(r[0]), n = values_of(r[1]), t = values_of(r[2]), a = values_of(r[3]),
                   sc = values_of(r[4]);
        const auto rv = values_of(row);
        std::size_t bad = 0;
        for (std::size_t i = 0; i < e.size(); ++i)
            if (e[i] != e[i % 3] || n[i] != -rv[i % 3]) ++bad;
        CHECK(bad == 0);
        CHECK(ulps(dtype::f32, e[1], std::exp(-1.5L)) <= 2);
        bad = 0;
        for (std::size_t i = 0; i < t.size(); ++i)
            if (t[i] != t[0] || a[i] != 0.5 || sc[i] != 1.0) ++bad;
        CHECK(bad == 0);
        CHECK(ulps(dtype::f32, t[0], std::tanh(0.5L)) <= 3);
    });
}

TEST_CASE("unary ops on rank-0 and empty inputs", "[elementwise]") {
    cpu_backend cpu(two_permits());
    tensor x = tensor::from<float>({2.0f}, std::span<const std::int64_t>{});
    tensor e = tensor::zeros(dtype::f64, {0, 4});
    auto [r, z] = in_session(cpu, 1, [&](backend_session& s) { return std::pair{s.sqrt(x), s.exp(e)}; });
    CHECK(r.rank() == 0);
    CHECK(r.data<float>()[0] == std::sqrt(2.0f));
    CHECK(z.size() == 0);
    CHECK(std::ranges::equal(z.shape(), shape_t{0, 4}));
}

TEST_CASE("every unary op and scale / axpby on rank-0 and broadcast inputs on every target", "[elementwise]") {
    cpu_backend cpu(two_permits());
    const std::vector<double> row_values = {0.75, 2.5, 0.03125};  // inside every op's domain
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            tensor scalar = tensor_of(t, {row_values[0]}, {});
            tensor row = tensor_of(t, row_values, {3});
            const const_tensor_view broadcast = row.broadcast_to({300, 3});  // strides [0, 1]
            for (const auto& c : unary_cases) {
                INFO(target << " " << c.name << " " << to_string(t));
                const std::uint64_t bound = t == dtype::f32 ? c.f32_ulp : c.f64_ulp;
                auto [r0, rb, rr] = in_session(cpu, 1, [&](backend_session& s) {
                    return std::tuple{(s.*c.fn)(scalar), (s.*c.fn)(broadcast), (s.*c.fn)(row)};
                });
                REQUIRE(r0.rank() == 0);
                REQUIRE(std::ranges::equal(rb.shape(), shape_t{300, 3}));
                const auto xr = values_of(row);
                CHECK(ulps(t, values_of(r0)[0], c.ref(static_cast<long double>(xr[0]))) <= bound);
                // Every broadcast row equals the op on the row itself, bit for bit.
                const auto got = values_of(rb), once = values_of(rr);
                std::size_t differing = 0;
                for (std::size_t i = 0; i < got.size(); ++i)
                    if (std::memcmp(&got[i], &once[i % 3], sizeof(double)) != 0) ++differing;
                CHECK(differing == 0);
                for (std::size_t j = 0; j < 3; ++j)
                    CHECK(ulps(t, once[j], c.ref(static_cast<long double>(xr[j]))) <= bound);
            }
            INFO(target << " scale / axpby " << to_string(t));
            tensor y0 = tensor_of(t, {-2.0}, {});
            tensor out3 = tensor_of(t, {0.0, 0.0, 0.0}, {3});
            tensor yb = tensor_of(t, std::vector<double>(900, 1.0), {300, 3});
            auto [sc0, scb] = in_session(cpu, 1, [&](backend_session& s) {
                s.axpby(2.0, scalar, 3.0, y0);                  // y0 = 2 * 0.75 + 3 * -2
                s.axpby_into(4.0, scalar, 0.5, row, out3);       // rank-0 x broadcast against y
                return std::pair{s.scale(scalar, -4.0), s.scale(broadcast, 2.0)};
            });
            CHECK(values_of(y0)[0] == 2.0 * 0.75 + 3.0 * -2.0);
            CHECK(values_of(sc0)[0] == -3.0);
            const auto o3 = values_of(out3);
            for (std::size_t j = 0; j < 3; ++j) CHECK(o3[j] == 4.0 * 0.75 + 0.5 * values_of(row)[j]);
            const auto sb = values_of(scb);
            for (std::size_t i = 0; i < sb.size(); ++i) CHECK(sb[i] == 2.0 * values_of(row)[i % 3]);
            in_session(cpu, 1, [&](backend_session& s) { s.axpby(1.0, broadcast, -1.0, yb); });
            const auto ybv = values_of(yb);
            for (std::size_t i = 0; i < ybv.size(); ++i) CHECK(ybv[i] == values_of(row)[i % 3] - 1.0);
        }
    });
}

TEST_CASE("scale and axpby", "[elementwise]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            for (const std::int64_t n : odd_sizes) {
                INFO(target << " " << to_string(t) << " n=" << n);
                const shape_t shape{n};
                const auto xv = random_values(static_cast<std::size_t>(n), -3, 3, 21);
                const auto yv = random_values(static_cast<std::size_t>(n), -3, 3, 22);
                const double alpha = 1.75, beta = -0.5;
                for (const layout lx : {layout::contiguous, layout::strided, layout::reversed}) {
                    const laid_out x = lay_out(t, xv, shape, lx);
                    tensor sc = in_session(cpu, 1, [&](backend_session& s) { return s.scale(x.view, alpha); });
                    const auto xr = values_of(x.view);
                    check_close(
                        sc, [&](std::size_t i) { return static_cast<long double>(alpha) * xr[i]; }, 0,
                        "scale " + std::string(name_of(lx)));

                    tensor y = tensor_of(t, yv, shape);
                    in_session(cpu, 1, [&](backend_session& s) { s.axpby(alpha, x.view, beta, y); });
                    // alpha * x + beta * y with at most two roundings (one where the target fuses the
                    // multiply-add): |error| <= 2 eps (|alpha x| + |beta y|).
                    const auto got = values_of(y);
                    const double eps = t == dtype::f32 ? 0x1p-24 : 0x1p-53;
                    std::size_t bad = 0;
                    for (std::size_t i = 0; i < got.size(); ++i) {
                        const long double xi = t == dtype::f32 ? static_cast<float>(xv[i]) : xv[i];
                        const long double yi = t == dtype::f32 ? static_cast<float>(yv[i]) : yv[i];
                        const long double exact = alpha * xi + beta * yi;
                        const long double tol = 2 * eps * (std::fabs(alpha * xi) + std::fabs(beta * yi));
                        if (std::fabs(got[i] - exact) > tol) ++bad;
                    }
                    INFO("axpby " << name_of(lx));
                    CHECK(bad == 0);
                }
            }
        }
    });
}

TEST_CASE("axpby in place on strided y, with x broadcast, aliasing and beta == 0", "[elementwise]") {
    cpu_backend cpu(two_permits());
    // y is a strided (transposed) view; x broadcasts along rows.
    tensor ys = tensor_of<double>(random_values(12, -1, 1, 5), {4, 3});
    tensor_view y = ys.transposed();  // [3, 4], strides [1, 3]
    const auto before = values_of(y);
    tensor x = tensor::from<double>({1.0, 2.0, 3.0, 4.0}, {4});
    in_session(cpu, 1, [&](backend_session& s) { s.axpby(2.0, x, 0.5, y); });
    const auto after = values_of(y);
    for (std::size_t i = 0; i < after.size(); ++i) CHECK(after[i] == Approx(2.0 * (1.0 + i % 4) + 0.5 * before[i]));

    // x is y itself: y = 2y + 3y.
    tensor z = tensor::from<float>({1.0f, -2.0f, 4.0f}, {3});
    in_session(cpu, 1, [&](backend_session& s) { s.axpby(2.0, z, 3.0, z); });
    CHECK(values_of(z) == std::vector<double>{5.0, -10.0, 20.0});

    // beta == 0 does not read y: NaNs in y do not propagate.
    tensor w = tensor::from<float>({std::nanf(""), std::nanf("")}, {2});
    tensor v = tensor::from<float>({1.0f, 2.0f}, {2});
    in_session(cpu, 1, [&](backend_session& s) { s.axpby(3.0, v, 0.0, w); });
    CHECK(values_of(w) == std::vector<double>{3.0, 6.0});

    // axpby_into: x and y broadcast together into out.
    tensor a = tensor::from<float>({1.0f, 2.0f, 3.0f}, {3});
    tensor b = tensor::from<float>({10.0f, 20.0f}, {2, 1});
    tensor out = tensor::zeros(dtype::f32, {2, 3});
    in_session(cpu, 1, [&](backend_session& s) { s.axpby_into(1.0, a, 2.0, b, out); });
    CHECK(values_of(out) == std::vector<double>{21, 22, 23, 41, 42, 43});
}
