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
#include "tenferro/cpu_backend.hpp"

using namespace tenferro;
using namespace tenferro::test;

namespace {

const std::vector<std::int64_t> odd_sizes = {1, 3, 17, 1023, 65537};

using binary_fn = tensor (backend_session::*)(const const_tensor_view&, const const_tensor_view&);
using binary_into_fn = void (backend_session::*)(const const_tensor_view&, const const_tensor_view&,
                                                 const tensor_view&);
using unary_fn = tensor (backend_session::*)(const const_tensor_view&);
using unary_into_fn = void (backend_session::*)(const const_tensor_view&, const tensor_view&);

struct binary_case {
    const char* name;
    binary_fn fn;
    binary_into_fn into;
    double (*ref)(double, double);
};

double max_ref(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (a >= b ? a : b); }
double min_ref(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (a <= b ? a : b); }

const binary_case binary_cases[] = {
    {"add", &backend_session::add, &backend_session::add_into, [](double a, double b) { return a + b; }},
    {"sub", &backend_session::sub, &backend_session::sub_into, [](double a, double b) { return a - b; }},
    {"mul", &backend_session::mul, &backend_session::mul_into, [](double a, double b) { return a * b; }},
    {"div", &backend_session::div, &backend_session::div_into, [](double a, double b) { return a / b; }},
    {"maximum", &backend_session::maximum, &backend_session::maximum_into, max_ref},
    {"minimum", &backend_session::minimum, &backend_session::minimum_into, min_ref},
};

struct unary_case {
    const char* name;
    unary_fn fn;
    unary_into_fn into;
    long double (*ref)(long double);
    double lo, hi;              // random input range
    std::uint64_t f32_ulp, f64_ulp;  // accuracy bound against the long double reference
};

const unary_case unary_cases[] = {
    {"neg", &backend_session::neg, &backend_session::neg_into, [](long double x) { return -x; }, -100, 100, 0, 0},
    {"abs", &backend_session::abs, &backend_session::abs_into, [](long double x) { return x < 0 ? -x : x; }, -100, 100,
     0, 0},
    {"exp", &backend_session::exp, &backend_session::exp_into, [](long double x) { return std::exp(x); }, -80, 80, 2,
     2},
    {"log", &backend_session::log, &backend_session::log_into, [](long double x) { return std::log(x); }, 1e-6, 1e6, 2,
     2},
    {"tanh", &backend_session::tanh, &backend_session::tanh_into, [](long double x) { return std::tanh(x); }, -12, 12,
     3, 3},
    // sqrt is correctly rounded; the 80-bit reference double-rounds to f64, hence 1 there.
    {"sqrt", &backend_session::sqrt, &backend_session::sqrt_into, [](long double x) { return std::sqrt(x); }, 0, 1e6, 0,
     1},
    {"rsqrt", &backend_session::rsqrt, &backend_session::rsqrt_into, [](long double x) { return 1.0L / std::sqrt(x); },
     1e-6, 1e6, 1, 1},
    {"sigmoid", &backend_session::sigmoid, &backend_session::sigmoid_into,
     [](long double x) { return 1.0L / (1.0L + std::exp(-x)); }, -80, 80, 2, 2},
    {"relu", &backend_session::relu, &backend_session::relu_into, [](long double x) { return x > 0 ? x : 0.0L; }, -100,
     100, 0, 0},
};

// ULP distance of `got` (dtype t) from the exact `ref`, rounded to t.
std::uint64_t ulps(dtype t, double got, long double ref) {
    if (t == dtype::f32) return ulp_distance(static_cast<float>(got), static_cast<float>(ref));
    return ulp_distance(got, static_cast<double>(ref));
}

// Checks every element of `got` against `ref(i)` within `bound` ULP; reports the worst.
template <class Ref>
void check_close(const const_tensor_view& got, Ref ref, std::uint64_t bound, const std::string& what) {
    const std::vector<double> g = values_of(got);
    std::uint64_t worst = 0;
    std::size_t worst_i = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
        const std::uint64_t u = ulps(got.type(), g[i], ref(i));
        if (u > worst) {
            worst = u;
            worst_i = i;
        }
    }
    INFO(what << ": worst " << worst << " ULP at element " << worst_i
              << (g.empty() ? std::string() : " got " + std::to_string(g[worst_i])));
    CHECK(worst <= bound);
}

// Inputs avoiding 0 for div's b.
std::vector<double> nonzero(std::vector<double> v) {
    for (auto& x : v)
        if (std::fabs(x) < 1e-3) x = 0.5;
    return v;
}

}  // namespace

TEST_CASE("binary ops match a scalar reference on every target, size and layout", "[elementwise]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            for (const auto& c : binary_cases) {
                for (const std::int64_t n : odd_sizes) {
                    const shape_t shape{n};
                    auto av = random_values(static_cast<std::size_t>(n), -10, 10, 1);
                    auto bv = nonzero(random_values(static_cast<std::size_t>(n), -10, 10, 2));
                    // Some equal pairs and NaNs for maximum / minimum.
                    if (n > 5) {
                        bv[1] = av[1];
                        av[2] = std::numeric_limits<double>::quiet_NaN();
                        bv[4] = std::numeric_limits<double>::quiet_NaN();
                    }
                    for (const layout la : {layout::contiguous, layout::strided, layout::reversed}) {
                        const laid_out a = lay_out(t, av, shape, la);
                        const laid_out b = lay_out(t, bv, shape, layout::contiguous);
                        tensor r = in_session(cpu, 1, [&](backend_session& s) { return (s.*c.fn)(a.view, b.view); });
                        REQUIRE(r.type() == t);
                        REQUIRE(std::ranges::equal(r.shape(), shape));
                        const auto ar = values_of(a.view), br = values_of(b.view);
                        check_close(
                            r, [&](std::size_t i) { return static_cast<long double>(c.ref(ar[i], br[i])); }, 0,
                            target + " " + c.name + " " + std::string(to_string(t)) + " n=" + std::to_string(n) +
                                " a " + name_of(la));
                    }
                }
                // 2-D layouts (transposed, strided on both axes) on both operands.
                const shape_t shape{17, 33};
                const auto av = random_values(17 * 33, -10, 10, 3);
                const auto bv = nonzero(random_values(17 * 33, -10, 10, 4));
                for (const layout la : {layout::strided, layout::reversed, layout::transposed}) {
                    for (const layout lb : {layout::contiguous, layout::transposed, layout::reversed}) {
                        const laid_out a = lay_out(t, av, shape, la);
                        const laid_out b = lay_out(t, bv, shape, lb);
                        tensor r = in_session(cpu, 1, [&](backend_session& s) { return (s.*c.fn)(a.view, b.view); });
                        const auto ar = values_of(a.view), br = values_of(b.view);
                        check_close(
                            r, [&](std::size_t i) { return static_cast<long double>(c.ref(ar[i], br[i])); }, 0,
                            target + " " + c.name + " 2-D a " + name_of(la) + " b " + name_of(lb));
                    }
                }
            }
        }
    });
}

TEST_CASE("binary ops broadcast like numpy", "[elementwise]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        INFO(target);
        struct bc {
            shape_t a, b, out;
        };
        const bc cases[] = {
            {{4, 1, 3}, {2, 1}, {4, 2, 3}}, {{}, {5}, {5}},        {{3}, {2, 3}, {2, 3}},      {{2, 3}, {}, {2, 3}},
            {{0, 3}, {3}, {0, 3}},          {{1}, {1027}, {1027}}, {{5, 1}, {1, 70}, {5, 70}}, {{}, {}, {}},
        };
        for (const auto& c : cases) {
            const auto av = random_values(static_cast<std::size_t>(count_of(c.a)), -5, 5, 7);
            const auto bv = random_values(static_cast<std::size_t>(count_of(c.b)), -5, 5, 8);
            tensor a = tensor_of<float>(av, c.a);
            tensor b = tensor_of<float>(bv, c.b);
            tensor r = in_session(cpu, 1, [&](backend_session& s) { return s.sub(a, b); });
            REQUIRE(std::ranges::equal(r.shape(), c.out));
            // Reference through broadcast views.
            const const_tensor_view ab = a.broadcast_to(std::span<const std::int64_t>(c.out));
            const const_tensor_view bb = b.broadcast_to(std::span<const std::int64_t>(c.out));
            const auto ar = values_of(ab), br = values_of(bb), rr = values_of(r);
            std::size_t bad = 0;
            for (std::size_t i = 0; i < rr.size(); ++i)
                if (static_cast<float>(rr[i]) != static_cast<float>(ar[i] - br[i])) ++bad;
            CHECK(bad == 0);
            // Explicit broadcast (stride-0) views as inputs give the same.
            tensor r2 = in_session(cpu, 1, [&](backend_session& s) { return s.sub(ab, bb); });
            CHECK(bitwise_equal(r, r2));
        }
    });
}

TEST_CASE("maximum and minimum propagate NaN as numpy does", "[elementwise]") {
    cpu_backend cpu(two_permits());
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for_each_target([&](const std::string& target) {
        INFO(target);
        tensor a = tensor::from<double>({nan, 1.0, nan, -inf, 2.0, -0.0}, {6});
        tensor b = tensor::from<double>({1.0, nan, nan, 3.0, 2.0, 0.0}, {6});
        auto [mx, mn] = in_session(cpu, 1, [&](backend_session& s) {
            return std::pair{s.maximum(a, b), s.minimum(a, b)};
        });
        const auto x = values_of(mx), m = values_of(mn);
        CHECK(std::isnan(x[0]));
        CHECK(std::isnan(x[1]));
        CHECK(std::isnan(x[2]));
        CHECK(x[3] == 3.0);
        CHECK(x[4] == 2.0);
        CHECK(std::signbit(x[5]));  // equal operands give a (-0.0)
        CHECK(std::isnan(m[0]));
        CHECK(std::isnan(m[1]));
        CHECK(std::isnan(m[2]));
        CHECK(m[3] == -inf);
        CHECK(std::signbit(m[5]));
    });
}

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

TEST_CASE("_into forms write strided outputs and never read them", "[elementwise]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        INFO(target);
        const auto av = random_values(6 * 5, -2, 2, 31);
        const auto bv = random_values(5, -2, 2, 32);
        tensor a = tensor_of<float>(av, {6, 5});
        tensor b = tensor_of<float>(bv, {5});
        // out: a transposed view over NaN-filled storage.
        tensor storage = tensor_of<float>(std::vector<double>(30, std::nan("")), {5, 6});
        tensor_view out = storage.transposed();
        in_session(cpu, 1, [&](backend_session& s) { s.mul_into(a, b, out); });
        const auto r = values_of(out);
        for (std::size_t i = 0; i < r.size(); ++i)
            CHECK(static_cast<float>(r[i]) == static_cast<float>(av[i]) * static_cast<float>(bv[i % 5]));
        tensor o2 = tensor_of<float>(std::vector<double>(30, std::nan("")), {6, 5});
        in_session(cpu, 1, [&](backend_session& s) { s.tanh_into(a, o2); });
        tensor o3 = in_session(cpu, 1, [&](backend_session& s) { return s.tanh(a); });
        CHECK(bitwise_equal(o2, o3));
        tensor o4 = tensor::zeros(dtype::f32, {6, 5});
        in_session(cpu, 1, [&](backend_session& s) { s.scale_into(a, -1.0, o4); });
        CHECK(values_of(o4) == values_of(in_session(cpu, 1, [&](backend_session& s) { return s.neg(a); })));
    });
}

TEST_CASE("elementwise results are bitwise identical at parallelism 1 and 2", "[elementwise]") {
    cpu_backend cpu(two_permits());
    const std::int64_t n = 4 * 65537;
    const auto av = random_values(static_cast<std::size_t>(n), -5, 5, 41);
    const auto bv = random_values(static_cast<std::size_t>(n), -5, 5, 42);
    for (const dtype t : {dtype::f32, dtype::f64}) {
        INFO(to_string(t));
        const laid_out a = lay_out(t, av, {n}, layout::contiguous);
        const laid_out ar = lay_out(t, av, {4, 65537}, layout::reversed);
        const laid_out b = lay_out(t, bv, {n}, layout::strided);
        auto run = [&](std::size_t permits) {
            return in_session(cpu, permits, [&](backend_session& s) {
                std::vector<tensor> r;
                r.push_back(s.add(a.view, b.view));
                r.push_back(s.exp(a.view));
                r.push_back(s.sigmoid(b.view));
                r.push_back(s.tanh(ar.view));
                r.push_back(s.scale(ar.view, 0.3));
                tensor y = tensor_of(t, bv, {n});
                s.axpby(0.25, a.view, 1.5, y);
                r.push_back(y);
                r.push_back(tensor::from<double>({static_cast<double>(s.parallelism())}, {1}));
                return r;
            });
        };
        const auto r1 = run(1);
        const auto r2 = run(2);
        CHECK(r1.back().data<double>()[0] == 1.0);
        CHECK(r2.back().data<double>()[0] == 2.0);
        for (std::size_t i = 0; i + 1 < r1.size(); ++i) {
            INFO("result " << i);
            CHECK(bitwise_equal(r1[i], r2[i]));
        }
    }
}

TEST_CASE("every binary and unary op (both forms) is bitwise identical at parallelism 1 and 2 on every target",
          "[elementwise]") {
    cpu_backend cpu(two_permits());
    // Above the parallel threshold for every op, with a ragged last chunk.
    const std::int64_t n = 3 * 65537;
    const auto av = random_values(static_cast<std::size_t>(n), 0.01, 20, 51);  // positive: log, sqrt, rsqrt
    const auto bv = random_values(static_cast<std::size_t>(n), -20, 20, 52);
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            const laid_out a = lay_out(t, av, {n}, layout::contiguous);
            const laid_out b = lay_out(t, nonzero(bv), {n}, layout::reversed);
            auto run = [&](std::size_t permits) {
                return in_session(cpu, permits, [&](backend_session& s) {
                    std::vector<tensor> r;
                    for (const auto& c : binary_cases) {
                        r.push_back((s.*c.fn)(a.view, b.view));
                        tensor out = tensor::empty(t, {n});
                        (s.*c.into)(b.view, a.view, out);
                        r.push_back(std::move(out));
                    }
                    for (const auto& c : unary_cases) {
                        r.push_back((s.*c.fn)(a.view));
                        tensor out = tensor::empty(t, {n});
                        (s.*c.into)(b.view, out);
                        r.push_back(std::move(out));
                    }
                    tensor out = tensor::empty(t, {n});
                    s.axpby_into(0.75, a.view, -1.25, b.view, out);
                    r.push_back(std::move(out));
                    r.push_back(s.scale(b.view, 3.5));
                    return r;
                });
            };
            const auto r1 = run(1), r2 = run(2);
            REQUIRE(r1.size() == r2.size());
            std::size_t differing = 0;
            for (std::size_t i = 0; i < r1.size(); ++i)
                if (!bitwise_equal(r1[i], r2[i])) ++differing;
            INFO(target << " " << to_string(t));
            CHECK(differing == 0);
        }
    });
}

TEST_CASE("elementwise ops reject bad arguments with messages naming op, operand and shapes", "[elementwise]") {
    cpu_backend cpu(two_permits());
    tensor f23 = tensor::zeros(dtype::f32, {2, 3});
    tensor f24 = tensor::zeros(dtype::f32, {2, 4});
    tensor d23 = tensor::zeros(dtype::f64, {2, 3});
    tensor i23 = tensor::zeros(dtype::i32, {2, 3});
    tensor out23 = tensor::zeros(dtype::f32, {2, 3});
    tensor out32 = tensor::zeros(dtype::f32, {3, 2});
    auto expect_error = [&](auto body, const std::string& text) {
        CHECK_THAT(tensor_error_of(cpu, body), Catch::Matchers::Contains(text));
    };
    expect_error([&](backend_session& s) { s.add(f23, f24); },
                 "add: operand b has shape [2, 4], which does not broadcast with a's shape [2, 3]");
    expect_error([&](backend_session& s) { s.mul(f23, d23); },
                 "mul: operand b has dtype f64, which differs from a's dtype f32");
    expect_error([&](backend_session& s) { s.div(i23, i23); },
                 "div: operand a has dtype i32, but div needs f32 or f64");
    expect_error([&](backend_session& s) { s.exp(i23); }, "exp: operand x has dtype i32, but exp needs f32 or f64");
    expect_error([&](backend_session& s) { s.add_into(f23, f23, out32); },
                 "add_into: out has shape [3, 2], but the result has shape [2, 3]");
    expect_error([&](backend_session& s) { s.sub_into(d23, d23, out23); },
                 "sub_into: out has dtype f32, but the result has dtype f64");
    expect_error([&](backend_session& s) { s.maximum_into(f23, out23, out23); },
                 "maximum_into: out (shape [2, 3]) overlaps operand b (shape [2, 3])");
    expect_error([&](backend_session& s) { s.log_into(out23, out23); },
                 "log_into: out (shape [2, 3]) overlaps operand x");
    expect_error(
        [&](backend_session& s) {
            s.relu_into(f23, out23.slice(0, 0, 1).broadcast_to({2, 3}));
        },
        "relu_into: out has stride 0 on axis 0");
    expect_error([&](backend_session& s) { s.scale(i23, 2.0); }, "scale: operand x has dtype i32");
    expect_error([&](backend_session& s) { s.scale_into(f23, 2.0, out32); }, "scale_into: out has shape [3, 2]");
    expect_error([&](backend_session& s) { s.axpby(1.0, f24, 1.0, out23); },
                 "axpby: operand y has shape [2, 3], which does not broadcast with x's shape [2, 4]");
    expect_error(
        [&](backend_session& s) {
            s.axpby(1.0, tensor::zeros(dtype::f32, {4, 2, 3}), 1.0, out23);
        },
        "axpby: operand x has shape [4, 2, 3], which does not broadcast to y's shape [2, 3]");
    expect_error([&](backend_session& s) { s.axpby(1.0, d23, 1.0, out23); },
                 "axpby: operand y has dtype f32, which differs from x's dtype f64");
    expect_error([&](backend_session& s) { s.axpby(1.0, out23.slice(1, 0, 2), 1.0, out23.slice(1, 1, 3)); },
                 "axpby: y (shape [2, 2]) overlaps operand x");
    expect_error(
        [&](backend_session& s) {
            s.axpby(1.0, f23, 1.0, out23.slice(0, 0, 1).broadcast_to({2, 3}));
        },
        "axpby: y has stride 0 on axis 0");
    expect_error([&](backend_session& s) { s.axpby_into(1.0, f23, 1.0, f23, out23.slice(0, 0, 1)); },
                 "axpby_into: out has shape [1, 3], but the result has shape [2, 3]");
    // Nothing was written by the failed calls.
    CHECK(values_of(out23) == std::vector<double>(6, 0.0));
}

TEST_CASE("a steady loop of elementwise ops reuses pooled buffers", "[elementwise][buffer_pool]") {
    cpu_backend cpu(two_permits());
    tensor a = tensor::zeros(dtype::f32, {1000});
    for (int i = 0; i < 10; ++i) {
        tensor r = in_session(cpu, 1, [&](backend_session& s) { return s.exp(s.add(a, a)); });
        CHECK(r.data<float>()[0] == 1.0f);
    }
    const buffer_pool_stats st = cpu.buffer_pool_stats();
    CHECK(st.allocations == 20);
    CHECK(st.hits >= 17);
    CHECK(st.outstanding_bytes == 0);
}
