#include "tenferro/backend_session.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "op_test_support.hpp"
#include "tenferro/cpu_backend.hpp"

using namespace tenferro;
using namespace tenferro::test;

namespace {

enum class rop { sum, prod, max, min };

const char* name_of(rop op) {
    switch (op) {
    case rop::sum:
        return "reduce_sum";
    case rop::prod:
        return "reduce_prod";
    case rop::max:
        return "reduce_max";
    case rop::min:
        return "reduce_min";
    }
    return "?";
}

tensor call(backend_session& s, rop op, const const_tensor_view& x, const shape_t& axes) {
    const std::span<const std::int64_t> a(axes);
    switch (op) {
    case rop::sum:
        return s.reduce_sum(x, a);
    case rop::prod:
        return s.reduce_prod(x, a);
    case rop::max:
        return s.reduce_max(x, a);
    case rop::min:
        return s.reduce_min(x, a);
    }
    return {};
}

struct expected {
    shape_t shape;
    std::vector<long double> value;
    std::vector<long double> magnitude;  // sum of |x| (sum) or element count (prod)
};

// The exact reduction of row-major `values` of `shape` over `axes` (empty = all).
expected reference(rop op, const std::vector<double>& values, const shape_t& shape, shape_t axes) {
    const std::size_t r = shape.size();
    std::vector<bool> reduced(r, axes.empty());
    for (auto a : axes) reduced[static_cast<std::size_t>(a < 0 ? a + static_cast<std::int64_t>(r) : a)] = true;
    expected e;
    for (std::size_t d = 0; d < r; ++d)
        if (!reduced[d]) e.shape.push_back(shape[d]);
    const auto n = static_cast<std::size_t>(count_of(e.shape));
    const long double init = op == rop::prod  ? 1.0L
                             : op == rop::sum ? 0.0L
                                              : std::numeric_limits<long double>::quiet_NaN();
    e.value.assign(n, init);
    e.magnitude.assign(n, 0.0L);
    std::vector<bool> seen(n, false), nan(n, false);
    std::size_t k = 0;
    for_each_index(shape, [&](std::span<const std::int64_t> idx) {
        std::size_t o = 0;
        for (std::size_t d = 0; d < r; ++d)
            if (!reduced[d]) o = o * static_cast<std::size_t>(shape[d]) + static_cast<std::size_t>(idx[d]);
        const long double v = values[k++];
        if (std::isnan(v)) nan[o] = true;
        switch (op) {
        case rop::sum:
            e.value[o] += v;
            e.magnitude[o] += std::fabs(v);
            break;
        case rop::prod:
            e.value[o] *= v;
            e.magnitude[o] += 1;
            break;
        case rop::max:
            if (!seen[o] || v > e.value[o]) e.value[o] = v;
            break;
        case rop::min:
            if (!seen[o] || v < e.value[o]) e.value[o] = v;
            break;
        }
        seen[o] = true;
    });
    for (std::size_t o = 0; o < n; ++o)
        if (nan[o]) e.value[o] = std::numeric_limits<long double>::quiet_NaN();
    return e;
}

// Compares `got` with the reference: max / min exactly, sum within 16 eps sum|x|,
// prod within (count + 16) eps relative.
void check_reduction(rop op, const tensor& got, const expected& e, const std::string& what) {
    INFO(what);
    REQUIRE(std::ranges::equal(got.shape(), e.shape));
    const auto g = values_of(got);
    const long double eps = got.type() == dtype::f32 ? 0x1p-24L : 0x1p-53L;
    std::size_t bad = 0, first_bad = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
        bool ok;
        const long double ref = e.value[i];
        if (std::isnan(ref)) {
            ok = std::isnan(g[i]);
        } else if (op == rop::max || op == rop::min) {
            ok = g[i] == (got.type() == dtype::f32 ? static_cast<float>(ref) : static_cast<double>(ref));
        } else if (op == rop::sum) {
            ok = std::fabs(g[i] - ref) <= 16 * eps * e.magnitude[i] + 1e-300L;
        } else {
            ok = std::fabs(g[i] - ref) <= (e.magnitude[i] + 16) * eps * std::fabs(ref) + 1e-300L;
        }
        if (!ok && bad++ == 0) first_bad = i;
    }
    INFO("first mismatch at " << first_bad << ": got " << (g.empty() ? 0.0 : g[first_bad]) << " expected "
                              << static_cast<double>(e.value.empty() ? 0.0L : e.value[first_bad]));
    CHECK(bad == 0);
}

std::vector<shape_t> axis_subsets(std::size_t rank) {
    std::vector<shape_t> out;
    for (std::uint32_t m = 0; m < (1u << rank); ++m) {
        shape_t axes;
        for (std::size_t d = 0; d < rank; ++d)
            if (m & (1u << d))
                axes.push_back(d % 2 == 0 ? static_cast<std::int64_t>(d)
                                          : static_cast<std::int64_t>(d) - static_cast<std::int64_t>(rank));
        out.push_back(axes);
    }
    return out;
}

}  // namespace

TEST_CASE("reductions match a scalar reference on every target, size, layout and axis set", "[reduce]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            for (const rop op : {rop::sum, rop::prod, rop::max, rop::min}) {
                const double lo = op == rop::prod ? 0.999 : -10, hi = op == rop::prod ? 1.001 : 10;
                // 1-D, odd sizes.
                for (const std::int64_t n : {1, 3, 17, 1023, 65537}) {
                    const auto v = random_values(static_cast<std::size_t>(n), lo, hi, 5);
                    for (const layout l : {layout::contiguous, layout::strided, layout::reversed}) {
                        const laid_out x = lay_out(t, v, {n}, l);
                        const auto xv = values_of(x.view);
                        for (const shape_t& axes : {shape_t{}, shape_t{0}, shape_t{-1}}) {
                            tensor r =
                                in_session(cpu, 1, [&](backend_session& s) { return call(s, op, x.view, axes); });
                            check_reduction(op, r, reference(op, xv, {n}, axes),
                                            target + " " + name_of(op) + " " + std::string(to_string(t)) +
                                                " n=" + std::to_string(n) + " " + test::name_of(l));
                        }
                    }
                }
                // 2-D and 3-D, every axis subset, every layout.
                for (const shape_t& shape : {shape_t{17, 33}, shape_t{5, 7, 9}, shape_t{300, 37}}) {
                    const auto v = random_values(static_cast<std::size_t>(count_of(shape)), lo, hi, 6);
                    for (const layout l : {layout::contiguous, layout::strided, layout::reversed, layout::transposed}) {
                        const laid_out x = lay_out(t, v, shape, l);
                        const auto xv = values_of(x.view);
                        for (const shape_t& axes : axis_subsets(shape.size())) {
                            tensor r =
                                in_session(cpu, 1, [&](backend_session& s) { return call(s, op, x.view, axes); });
                            check_reduction(op, r, reference(op, xv, shape, axes),
                                            target + " " + name_of(op) + " " + std::string(to_string(t)) + " shape " +
                                                to_string(shape) + " axes " + to_string(axes) + " " + test::name_of(l));
                        }
                    }
                }
            }
        }
    });
}

TEST_CASE("reduce_sum of 10^7 copies of 0.1f is within 1e-4 relative", "[reduce]") {
    cpu_backend cpu(two_permits());
    const std::int64_t n = 10'000'000;
    tensor x = tensor::empty(dtype::f32, {n});
    std::fill_n(x.data<float>(), n, 0.1f);
    const long double exact = static_cast<long double>(0.1f) * n;
    tensor s1 = in_session(cpu, 1, [&](backend_session& s) { return s.reduce_sum(x); });
    tensor s2 = in_session(cpu, 2, [&](backend_session& s) { return s.reduce_sum(x); });
    const float got = s1.data<float>()[0];
    CHECK(std::fabs(got - exact) / exact < 1e-4L);
    CHECK(std::fabs(got - exact) / exact < 1e-6L);  // what the blocked pairwise order actually achieves
    CHECK(bitwise_equal(s1, s2));
    // vdot and norm_squared share the order.
    tensor ones = tensor::empty(dtype::f32, {n});
    std::fill_n(ones.data<float>(), n, 1.0f);
    tensor d = in_session(cpu, 2, [&](backend_session& s) { return s.vdot(x, ones); });
    CHECK(std::fabs(d.data<float>()[0] - exact) / exact < 1e-6L);
}

TEST_CASE("reductions are bitwise identical at parallelism 1 and 2 and independent of chunking", "[reduce]") {
    cpu_backend cpu(two_permits());
    const std::int64_t n = 5 * 65536 + 4099;  // several fixed chunks plus a ragged one
    const auto v = random_values(static_cast<std::size_t>(n), -1, 1, 9);
    for (const dtype t : {dtype::f32, dtype::f64}) {
        INFO(to_string(t));
        const laid_out x = lay_out(t, v, {n}, layout::contiguous);
        const laid_out xr = lay_out(t, v, {n}, layout::reversed);
        const laid_out m = lay_out(t, v, {n / 7, 7}, layout::transposed);  // n divisible by 7? keep n / 7 rows
        auto run = [&](std::size_t permits) {
            return in_session(cpu, permits, [&](backend_session& s) {
                std::vector<tensor> r;
                r.push_back(s.reduce_sum(x.view));
                r.push_back(s.reduce_prod(x.view));
                r.push_back(s.reduce_max(xr.view));
                r.push_back(s.reduce_min(x.view));
                r.push_back(s.reduce_sum(xr.view));
                r.push_back(s.vdot(x.view, xr.view));
                r.push_back(s.norm_squared(x.view));
                r.push_back(s.reduce_sum(m.view, {0}));
                r.push_back(s.reduce_sum(m.view, {1}));
                return r;
            });
        };
        const auto r1 = run(1), r2 = run(2);
        for (std::size_t i = 0; i < r1.size(); ++i) {
            INFO("result " << i);
            CHECK(bitwise_equal(r1[i], r2[i]));
        }
        // The chunked single-output path and the one-output-per-row path build the same tree:
        // two identical rows reduced along axis 1 equal the whole-vector sum bit for bit.
        tensor rows = tensor::empty(t, {2, n});
        for (int row = 0; row < 2; ++row)
            for (std::int64_t i = 0; i < n; ++i) {
                if (t == dtype::f32)
                    rows.data<float>()[row * n + i] = static_cast<float>(v[static_cast<std::size_t>(i)]);
                else
                    rows.data<double>()[row * n + i] = v[static_cast<std::size_t>(i)];
            }
        tensor per_row = in_session(cpu, 2, [&](backend_session& s) { return s.reduce_sum(rows, {1}); });
        const auto pr = values_of(per_row);
        CHECK(pr[0] == values_of(r1[0])[0]);
        CHECK(pr[1] == values_of(r1[0])[0]);
    }
}

TEST_CASE("reductions propagate NaN and handle empty and rank-0 inputs", "[reduce]") {
    cpu_backend cpu(two_permits());
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for_each_target([&](const std::string& target) {
        INFO(target);
        std::vector<double> v(2000, 1.0);
        v[1500] = nan;
        tensor x = tensor_of<float>(v, {2000});
        tensor m = tensor_of<double>(std::vector<double>{1, nan, 3, 4, 5, 6}, {2, 3});
        auto r = in_session(cpu, 1, [&](backend_session& s) {
            return std::vector<tensor>{s.reduce_max(x), s.reduce_min(x), s.reduce_sum(x), s.reduce_max(m, {0}),
                                       s.reduce_min(m, {1})};
        });
        CHECK(std::isnan(values_of(r[0])[0]));
        CHECK(std::isnan(values_of(r[1])[0]));
        CHECK(std::isnan(values_of(r[2])[0]));
        CHECK(values_of(r[3])[0] == 4.0);
        CHECK(std::isnan(values_of(r[3])[1]));
        CHECK(values_of(r[3])[2] == 6.0);
        CHECK(std::isnan(values_of(r[4])[0]));
        CHECK(values_of(r[4])[1] == 4.0);
    });

    tensor e = tensor::zeros(dtype::f32, {0, 3});
    tensor scalar = tensor::from<double>({2.5}, std::span<const std::int64_t>{});
    auto r = in_session(cpu, 1, [&](backend_session& s) {
        return std::vector<tensor>{s.reduce_sum(e, {0}), s.reduce_prod(e, {0}), s.reduce_sum(e),
                                   s.reduce_max(e, {1}), s.reduce_sum(scalar),  s.reduce_max(scalar, {}),
                                   s.vdot(e, e),         s.norm_squared(scalar)};
    });
    CHECK(values_of(r[0]) == std::vector<double>{0, 0, 0});
    CHECK(values_of(r[1]) == std::vector<double>{1, 1, 1});
    CHECK(r[2].rank() == 0);
    CHECK(values_of(r[2])[0] == 0.0);
    CHECK(std::ranges::equal(r[3].shape(), shape_t{0}));  // nothing to reduce into: no error
    CHECK(values_of(r[4])[0] == 2.5);
    CHECK(values_of(r[5])[0] == 2.5);
    CHECK(values_of(r[6])[0] == 0.0);
    CHECK(values_of(r[7])[0] == 6.25);
}

TEST_CASE("reductions accept broadcast (zero-stride) inputs", "[reduce]") {
    cpu_backend cpu(two_permits());
    tensor row = tensor::from<double>({1.0, 2.0, 3.0}, {3});
    const const_tensor_view b = row.broadcast_to({5000, 3});  // strides [0, 1]
    auto r = in_session(cpu, 2, [&](backend_session& s) {
        return std::vector<tensor>{s.reduce_sum(b), s.reduce_sum(b, {0}), s.reduce_max(b, {1}), s.norm_squared(b),
                                   s.vdot(b, b)};
    });
    CHECK(values_of(r[0])[0] == 30000.0);
    CHECK(values_of(r[1]) == std::vector<double>{5000.0, 10000.0, 15000.0});
    CHECK(values_of(r[2]) == std::vector<double>(5000, 3.0));
    CHECK(values_of(r[3])[0] == 70000.0);
    CHECK(values_of(r[4])[0] == 70000.0);
}

TEST_CASE("vdot and norm_squared match a reference on every target and layout", "[reduce]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : {dtype::f32, dtype::f64}) {
            for (const shape_t& shape :
                 {shape_t{1}, shape_t{3}, shape_t{17}, shape_t{1023}, shape_t{65537}, shape_t{33, 17}, shape_t{}}) {
                const auto av = random_values(static_cast<std::size_t>(count_of(shape)), -2, 2, 13);
                const auto bv = random_values(static_cast<std::size_t>(count_of(shape)), -2, 2, 14);
                for (const layout la : {layout::contiguous, layout::strided, layout::reversed, layout::transposed}) {
                    const laid_out a = lay_out(t, av, shape, la);
                    const laid_out b = lay_out(t, bv, shape, layout::contiguous);
                    auto [d, n2] = in_session(cpu, 1, [&](backend_session& s) {
                        return std::pair{s.vdot(a.view, b.view), s.norm_squared(a.view)};
                    });
                    REQUIRE(d.rank() == 0);
                    REQUIRE(n2.rank() == 0);
                    const auto ar = values_of(a.view), br = values_of(b.view);
                    long double ref = 0, mag = 0, ref2 = 0;
                    for (std::size_t i = 0; i < ar.size(); ++i) {
                        ref += static_cast<long double>(ar[i]) * br[i];
                        mag += std::fabs(static_cast<long double>(ar[i]) * br[i]);
                        ref2 += static_cast<long double>(ar[i]) * ar[i];
                    }
                    const long double eps = t == dtype::f32 ? 0x1p-24L : 0x1p-53L;
                    INFO(target << " " << to_string(t) << " shape " << to_string(shape) << " " << test::name_of(la));
                    CHECK(std::fabs(values_of(d)[0] - ref) <= 16 * eps * mag);
                    CHECK(std::fabs(values_of(n2)[0] - ref2) <= 16 * eps * ref2);
                }
            }
        }
    });
}

TEST_CASE("reduction _into forms write strided outputs", "[reduce]") {
    cpu_backend cpu(two_permits());
    const auto v = random_values(4 * 6, -1, 1, 3);
    tensor x = tensor_of<double>(v, {4, 6});
    tensor storage = tensor_of<double>(std::vector<double>(12, std::nan("")), {12});
    tensor_view out = storage.slice(0, 11, std::numeric_limits<std::int64_t>::min(), -2);  // 6 elements, stride -2
    tensor scalar = tensor::zeros(dtype::f64, {});
    in_session(cpu, 1, [&](backend_session& s) {
        s.reduce_sum_into(x, {0}, out);
        s.vdot_into(x, x, scalar);
    });
    const auto got = values_of(out);
    for (std::size_t j = 0; j < 6; ++j) {
        long double ref = 0;
        for (std::size_t i = 0; i < 4; ++i) ref += v[i * 6 + j];
        CHECK(got[j] == Approx(static_cast<double>(ref)));
    }
    long double n2 = 0;
    for (auto e : v) n2 += static_cast<long double>(e) * e;
    CHECK(scalar.data<double>()[0] == Approx(static_cast<double>(n2)));
}

TEST_CASE("reductions reject bad arguments with messages naming op, operand and axes", "[reduce]") {
    cpu_backend cpu(two_permits());
    tensor f23 = tensor::zeros(dtype::f32, {2, 3});
    tensor d23 = tensor::zeros(dtype::f64, {2, 3});
    tensor i23 = tensor::zeros(dtype::i32, {2, 3});
    tensor f3 = tensor::zeros(dtype::f32, {3});
    tensor f2 = tensor::zeros(dtype::f32, {2});
    tensor f0 = tensor::zeros(dtype::f32, {});
    tensor empty = tensor::zeros(dtype::f32, {0, 3});
    auto expect_error = [&](auto body, const std::string& text) {
        CHECK_THAT(tensor_error_of(cpu, body), Catch::Matchers::Contains(text));
    };
    expect_error([&](backend_session& s) { s.reduce_sum(f23, {2}); },
                 "reduce_sum: axis 2 is out of range for operand x of shape [2, 3] (rank 2)");
    expect_error([&](backend_session& s) { s.reduce_prod(f23, {-3}); },
                 "reduce_prod: axis -3 is out of range for operand x of shape [2, 3] (rank 2)");
    expect_error(
        [&](backend_session& s) {
            s.reduce_max(f23, {1, -1});
        },
        "reduce_max: axis -1 is repeated in axes [1, -1] of operand x with shape [2, 3]");
    expect_error([&](backend_session& s) { s.reduce_min(i23, {}); },
                 "reduce_min: operand x has dtype i32, but reduce_min needs f32 or f64");
    expect_error([&](backend_session& s) { s.reduce_max(empty, {0}); },
                 "reduce_max: operand x of shape [0, 3] has no elements along the reduced axes [0]");
    expect_error([&](backend_session& s) { s.reduce_min(empty); },
                 "reduce_min: operand x of shape [0, 3] has no elements");
    expect_error([&](backend_session& s) { s.reduce_sum_into(f23, {0}, f2); },
                 "reduce_sum_into: out has shape [2], but the result has shape [3]");
    expect_error([&](backend_session& s) { s.reduce_sum_into(d23, {1}, f2); },
                 "reduce_sum_into: out has dtype f32, but the result has dtype f64");
    expect_error([&](backend_session& s) { s.reduce_sum_into(f23, {1}, f23.slice(1, 0, 1).reshaped({2})); },
                 "reduce_sum_into: out (shape [2]) overlaps operand x");
    expect_error([&](backend_session& s) { s.vdot(f3, f2); },
                 "vdot: operand b has shape [2], which differs from a's shape [3]");
    expect_error([&](backend_session& s) { s.vdot(f23, d23); },
                 "vdot: operand b has dtype f64, which differs from a's dtype f32");
    expect_error([&](backend_session& s) { s.vdot(i23, i23); }, "vdot: operand a has dtype i32");
    expect_error([&](backend_session& s) { s.vdot_into(f3, f3, f2); },
                 "vdot_into: out has shape [2], but the result has shape []");
    expect_error([&](backend_session& s) { s.norm_squared(i23); }, "norm_squared: operand x has dtype i32");
    expect_error([&](backend_session& s) { s.norm_squared_into(f3, d23.slice(0, 0, 1).slice(1, 0, 1).reshaped({})); },
                 "norm_squared_into: out has dtype f64, but the result has dtype f32");
    expect_error([&](backend_session& s) { s.norm_squared_into(f3, f3.slice(0, 0, 1).reshaped({})); },
                 "norm_squared_into: out (shape []) overlaps operand x");
    (void)f0;
}
