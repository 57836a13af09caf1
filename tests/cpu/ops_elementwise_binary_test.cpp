// The binary elementwise ops (add, sub, mul, div, maximum, minimum) against
// their scalar references, broadcasting, NaN propagation; and what every
// elementwise op shares: _into forms, parallelism, argument errors, pooled
// buffers. The unary ops, scale and axpby: ops_elementwise_unary_test.cpp.
#include "tenferro/backend_session.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "op_test_support.hpp"
#include "ops_elementwise_cases.hpp"
#include "tenferro/cpu_backend.hpp"

using namespace tenferro;
using namespace tenferro::test;

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
