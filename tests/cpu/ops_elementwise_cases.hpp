#pragma once
// What the elementwise op tests share (ops_elementwise_binary_test.cpp,
// ops_elementwise_unary_test.cpp): every binary and unary op of
// backend_session with its scalar reference and accuracy bound, and the
// checks against those references.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "op_test_support.hpp"
#include "tenferro/backend_session.hpp"

namespace tenferro::test {

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

inline double max_ref(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (a >= b ? a : b); }
inline double min_ref(double a, double b) { return std::isnan(a) ? a : std::isnan(b) ? b : (a <= b ? a : b); }

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
inline std::uint64_t ulps(dtype t, double got, long double ref) {
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
inline std::vector<double> nonzero(std::vector<double> v) {
    for (auto& x : v)
        if (std::fabs(x) < 1e-3) x = 0.5;
    return v;
}

}  // namespace tenferro::test
