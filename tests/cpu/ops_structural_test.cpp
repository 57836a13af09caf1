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

const dtype all_dtypes[] = {dtype::f32, dtype::f64, dtype::i32, dtype::i64};

// Integer-valued data so that every dtype holds it exactly.
std::vector<double> int_values(std::size_t n, unsigned seed) {
    auto v = random_values(n, -1000, 1000, seed);
    for (auto& x : v) x = std::round(x);
    return v;
}

}  // namespace

TEST_CASE("copy materialises any strided view contiguously, for every dtype and target", "[structural]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : all_dtypes) {
            for (const shape_t& shape : {shape_t{1}, shape_t{3}, shape_t{17}, shape_t{1023}, shape_t{65537},
                                         shape_t{17, 33}, shape_t{5, 7, 9}, shape_t{}, shape_t{0, 3}}) {
                const auto v = int_values(static_cast<std::size_t>(count_of(shape)), 3);
                for (const layout l : {layout::contiguous, layout::strided, layout::reversed, layout::transposed}) {
                    const laid_out x = lay_out(t, v, shape, l);
                    tensor c = in_session(cpu, 1, [&](backend_session& s) { return s.copy(x.view); });
                    INFO(target << " " << to_string(t) << " " << to_string(shape) << " " << test::name_of(l));
                    REQUIRE(c.type() == t);
                    REQUIRE(std::ranges::equal(c.shape(), shape));
                    CHECK(c.data() != x.view.data());
                    CHECK(values_of(c) == v);
                }
            }
        }
        // Broadcast (zero-stride) sources are materialised.
        tensor row = tensor::from<std::int64_t>({1, 2, 3}, {3});
        tensor b = in_session(cpu, 1, [&](backend_session& s) { return s.copy(row.broadcast_to({2, 3})); });
        CHECK(values_of(b) == std::vector<double>{1, 2, 3, 1, 2, 3});
        tensor one = tensor::from<float>({7.0f}, {1});
        tensor bb = in_session(cpu, 1, [&](backend_session& s) { return s.copy(one.broadcast_to({1000})); });
        CHECK(values_of(bb) == std::vector<double>(1000, 7.0));
    });
}

TEST_CASE("copy_into writes strided destinations and broadcasts the source", "[structural]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        INFO(target);
        const auto v = int_values(6 * 5, 4);
        tensor src = tensor_of<std::int32_t>(v, {6, 5});
        tensor storage = tensor::zeros(dtype::i32, {5, 12});
        tensor_view dst = storage.slice(1, 11, std::numeric_limits<std::int64_t>::min(), -2).transposed();  // [6, 5]
        in_session(cpu, 1, [&](backend_session& s) { s.copy_into(src, dst); });
        CHECK(values_of(dst) == v);
        tensor dst2 = tensor::zeros(dtype::f64, {4, 3});
        tensor r = tensor::from<double>({1, 2, 3}, {3});
        in_session(cpu, 1, [&](backend_session& s) { s.copy_into(r, dst2); });
        CHECK(values_of(dst2) == std::vector<double>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
    });
}

TEST_CASE("transpose materialises any permutation, tiled or not", "[structural]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : all_dtypes) {
            struct c {
                shape_t shape, perm;
            };
            const c cases[] = {
                {{3, 5}, {1, 0}},
                {{100, 70}, {1, 0}},
                {{300, 257}, {-1, 0}},
                {{4, 5, 6}, {2, 0, 1}},
                {{9, 40, 33}, {0, 2, 1}},
                {{2, 3, 40, 50}, {3, 1, 0, 2}},
                {{7}, {0}},
                {{}, {}},
            };
            for (const auto& cs : cases) {
                const auto v = int_values(static_cast<std::size_t>(count_of(cs.shape)), 5);
                for (const layout l : {layout::contiguous, layout::reversed}) {
                    const laid_out x = lay_out(t, v, cs.shape, l);
                    tensor r = in_session(cpu, 1, [&](backend_session& s) { return s.transpose(x.view, cs.perm); });
                    const const_tensor_view ref = x.view.transposed(std::span<const std::int64_t>(cs.perm));
                    INFO(target << " " << to_string(t) << " " << to_string(cs.shape) << " perm " << to_string(cs.perm)
                                << " " << test::name_of(l));
                    REQUIRE(std::ranges::equal(r.shape(), ref.shape()));
                    CHECK(values_of(r) == values_of(ref));
                }
            }
        }
    });
    tensor m = tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    tensor out = tensor::zeros(dtype::f32, {3, 2});
    tensor t = in_session(cpu, 1, [&](backend_session& s) {
        s.transpose_into(m, {1, 0}, out);
        return s.transpose(m, {-1, -2});
    });
    CHECK(values_of(out) == std::vector<double>{1, 4, 2, 5, 3, 6});
    CHECK(values_of(t) == std::vector<double>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("cast converts among all four dtypes like numpy astype", "[structural]") {
    cpu_backend cpu(two_permits());
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for_each_target([&](const std::string& target) {
        INFO(target);
        // Every pair, on integer-valued data (exact everywhere), in several layouts and sizes.
        for (const dtype from : all_dtypes) {
            for (const dtype to : all_dtypes) {
                for (const shape_t& shape : {shape_t{17}, shape_t{1023}, shape_t{33, 17}}) {
                    const auto v = int_values(static_cast<std::size_t>(count_of(shape)), 6);
                    for (const layout l : {layout::contiguous, layout::strided, layout::transposed}) {
                        const laid_out x = lay_out(from, v, shape, l);
                        tensor r = in_session(cpu, 1, [&](backend_session& s) { return s.cast(x.view, to); });
                        INFO(to_string(from)
                             << " -> " << to_string(to) << " " << to_string(shape) << " " << test::name_of(l));
                        REQUIRE(r.type() == to);
                        CHECK(values_of(r) == v);
                    }
                }
            }
        }
        // Truncation toward zero, NaN -> 0, saturation.
        tensor f = tensor_of<double>(
            {2.9, -2.9, 0.5, -0.5, nan, inf, -inf, 3e9, -3e9, 1e30, -2147483648.5, 2147483647.9}, {12});
        auto [i32, i64, f32] = in_session(cpu, 1, [&](backend_session& s) {
            return std::tuple{s.cast(f, dtype::i32), s.cast(f, dtype::i64), s.cast(f, dtype::f32)};
        });
        const std::int64_t i32min = std::numeric_limits<std::int32_t>::min(),
                           i32max = std::numeric_limits<std::int32_t>::max();
        const std::int64_t i64min = std::numeric_limits<std::int64_t>::min(),
                           i64max = std::numeric_limits<std::int64_t>::max();
        CHECK(typed_values_of<std::int32_t>(i32) ==
              std::vector<std::int32_t>{2, -2, 0, 0, 0, static_cast<std::int32_t>(i32max),
                                        static_cast<std::int32_t>(i32min), static_cast<std::int32_t>(i32max),
                                        static_cast<std::int32_t>(i32min), static_cast<std::int32_t>(i32max),
                                        static_cast<std::int32_t>(i32min), static_cast<std::int32_t>(i32max)});
        CHECK(typed_values_of<std::int64_t>(i64) == std::vector<std::int64_t>{2, -2, 0, 0, 0, i64max, i64min,
                                                                              3000000000, -3000000000, i64max,
                                                                              -2147483648, 2147483647});
        const auto fv = values_of(f32);
        CHECK(fv[0] == static_cast<float>(2.9));
        CHECK(std::isnan(fv[4]));
        CHECK(fv[9] == static_cast<float>(1e30));
        tensor big = tensor_of<double>({1e300, -1e300}, {2});
        tensor bf = in_session(cpu, 1, [&](backend_session& s) { return s.cast(big, dtype::f32); });
        CHECK(values_of(bf) == std::vector<double>{inf, -inf});
        // i64 -> i32 wraps; large i64 -> f32 rounds to nearest.
        tensor w = tensor::from<std::int64_t>(
            {(std::int64_t{1} << 32) + 5, -(std::int64_t{1} << 32) - 1, (std::int64_t{1} << 53) + 1}, {3});
        auto [wi, wf] = in_session(cpu, 1, [&](backend_session& s) {
            return std::pair{s.cast(w, dtype::i32), s.cast(w, dtype::f64)};
        });
        CHECK(typed_values_of<std::int32_t>(wi) == std::vector<std::int32_t>{5, -1, 1});
        CHECK(typed_values_of<double>(wf)[2] == 9007199254740992.0);
        // cast_into takes the dtype from out; a float -> f32 _into on a strided out.
        tensor outs = tensor::zeros(dtype::i64, {12, 2});
        tensor_view o = outs.slice(1, 1, 2).reshaped({12});
        in_session(cpu, 1, [&](backend_session& s) { s.cast_into(f, o); });
        CHECK(typed_values_of<std::int64_t>(o) == typed_values_of<std::int64_t>(i64));
    });
}

TEST_CASE("concatenate joins along any axis", "[structural]") {
    cpu_backend cpu(two_permits());
    for_each_target([&](const std::string& target) {
        for (const dtype t : all_dtypes) {
            INFO(target << " " << to_string(t));
            const auto av = int_values(2 * 3, 1), bv = int_values(2 * 4, 2), cv = int_values(2 * 0, 3);
            const laid_out a = lay_out(t, av, {2, 3}, layout::transposed);
            const laid_out b = lay_out(t, bv, {2, 4}, layout::reversed);
            const laid_out c = lay_out(t, cv, {2, 0}, layout::contiguous);
            tensor r = in_session(cpu, 1, [&](backend_session& s) {
                return s.concatenate({a.view, b.view, c.view}, -1);
            });
            REQUIRE(std::ranges::equal(r.shape(), shape_t{2, 7}));
            std::vector<double> expect;
            for (int i = 0; i < 2; ++i) {
                for (int j = 0; j < 3; ++j) expect.push_back(av[static_cast<std::size_t>(i * 3 + j)]);
                for (int j = 0; j < 4; ++j) expect.push_back(bv[static_cast<std::size_t>(i * 4 + j)]);
            }
            CHECK(values_of(r) == expect);
            // Axis 0, big enough to run in parallel, from a std::vector of views.
            const auto xv = int_values(300 * 257, 4);
            const laid_out x = lay_out(t, xv, {300, 257}, layout::strided);
            std::vector<const_tensor_view> parts{x.view, x.view.slice(0, 0, 100)};
            tensor r2 = in_session(cpu, 2, [&](backend_session& s) { return s.concatenate(parts, 0); });
            REQUIRE(std::ranges::equal(r2.shape(), shape_t{400, 257}));
            auto expect2 = xv;
            expect2.insert(expect2.end(), xv.begin(), xv.begin() + 100 * 257);
            CHECK(values_of(r2) == expect2);
        }
    });
    tensor a = tensor::from<float>({1, 2}, {2});
    tensor b = tensor::from<float>({3}, {1});
    tensor out = tensor::zeros(dtype::f32, {3});
    in_session(cpu, 1, [&](backend_session& s) { s.concatenate_into({a, b}, 0, out); });
    CHECK(values_of(out) == std::vector<double>{1, 2, 3});
}

TEST_CASE("structural results are bitwise identical at parallelism 1 and 2", "[structural]") {
    cpu_backend cpu(two_permits());
    const auto v = random_values(512 * 300, -9, 9, 8);
    for (const dtype t : all_dtypes) {
        const laid_out x = lay_out(t, v, {512, 300}, layout::transposed);
        auto run = [&](std::size_t permits) {
            return in_session(cpu, permits, [&](backend_session& s) {
                return std::vector<tensor>{s.copy(x.view), s.transpose(x.view, {1, 0}), s.cast(x.view, dtype::f32),
                                           s.cast(x.view, dtype::i32), s.concatenate({x.view, x.view}, 1)};
            });
        };
        const auto r1 = run(1), r2 = run(2);
        for (std::size_t i = 0; i < r1.size(); ++i) {
            INFO(to_string(t) << " result " << i);
            CHECK(bitwise_equal(r1[i], r2[i]));
        }
    }
}

TEST_CASE("structural ops reject bad arguments with messages naming op, operand and shapes", "[structural]") {
    cpu_backend cpu(two_permits());
    tensor f23 = tensor::zeros(dtype::f32, {2, 3});
    tensor f24 = tensor::zeros(dtype::f32, {2, 4});
    tensor d23 = tensor::zeros(dtype::f64, {2, 3});
    tensor i32 = tensor::zeros(dtype::i32, {3});
    tensor f0 = tensor::zeros(dtype::f32, {});
    tensor f32_ = tensor::zeros(dtype::f32, {3, 2});
    auto expect_error = [&](auto body, const std::string& text) {
        CHECK_THAT(tensor_error_of(cpu, body), Catch::Matchers::Contains(text));
    };
    expect_error([&](backend_session& s) { s.copy_into(f24, f23); },
                 "copy_into: operand src has shape [2, 4], which does not broadcast with dst's shape [2, 3]");
    expect_error(
        [&](backend_session& s) {
            s.copy_into(tensor::zeros(dtype::f32, {4, 2, 3}), f23);
        },
        "copy_into: operand src has shape [4, 2, 3], which does not broadcast to dst's shape [2, 3]");
    expect_error([&](backend_session& s) { s.copy_into(d23, f23); },
                 "copy_into: dst has dtype f32, but the result has dtype f64");
    expect_error([&](backend_session& s) { s.copy_into(f23, f23); },
                 "copy_into: dst (shape [2, 3]) overlaps operand src");
    expect_error(
        [&](backend_session& s) {
            s.copy_into(f23.slice(0, 0, 1), f23.slice(0, 0, 1).broadcast_to({2, 3}));
        },
        "copy_into: dst has stride 0 on axis 0");
    expect_error(
        [&](backend_session& s) {
            s.transpose(f23, {0, 0});
        },
        "transpose: perm [0, 0] is not a permutation of the 2 axes of operand x with shape [2, 3]");
    expect_error([&](backend_session& s) { s.transpose(f23, {0}); },
                 "transpose: perm [0] is not a permutation of the 2 axes");
    expect_error([&](backend_session& s) { s.transpose(f23, {0, 2}); }, "transpose: perm [0, 2] is not a permutation");
    expect_error(
        [&](backend_session& s) {
            s.transpose_into(f23, {1, 0}, f23);
        },
        "transpose_into: out has shape [2, 3], but the result has shape [3, 2]");
    expect_error(
        [&](backend_session& s) {
            s.transpose_into(f23, {1, 0}, d23.transposed());
        },
        "transpose_into: out has dtype f64, but the result has dtype f32");
    expect_error([&](backend_session& s) { s.cast(f23, static_cast<dtype>(9)); }, "cast: dtype 9 is not one of");
    expect_error([&](backend_session& s) { s.cast_into(f23, f32_); },
                 "cast_into: out has shape [3, 2], but the result has shape [2, 3]");
    expect_error([&](backend_session& s) { s.concatenate(std::span<const const_tensor_view>{}, 0); },
                 "concatenate: needs at least one input");
    expect_error(
        [&](backend_session& s) {
            s.concatenate({f23, d23}, 0);
        },
        "concatenate: operand inputs[1] has dtype f64, which differs from inputs[0]'s dtype f32");
    expect_error(
        [&](backend_session& s) {
            s.concatenate({f23, f24}, 0);
        },
        "concatenate: operand inputs[1] has shape [2, 4], which does not match inputs[0]'s shape [2, 3] outside axis "
        "0");
    expect_error(
        [&](backend_session& s) {
            s.concatenate({f23, i32}, 0);
        },
        "concatenate: operand inputs[1] has dtype i32");
    expect_error(
        [&](backend_session& s) {
            s.concatenate({f23, tensor::zeros(dtype::f32, {3})}, 0);
        },
        "concatenate: operand inputs[1] has shape [3] of rank 1, but inputs[0] has shape [2, 3] of rank 2");
    expect_error(
        [&](backend_session& s) {
            s.concatenate({f0, f0}, 0);
        },
        "concatenate: axis 0 is out of range for operand inputs[0] of shape [] (rank 0)");
    expect_error(
        [&](backend_session& s) {
            s.concatenate({f23, f23}, 2);
        },
        "concatenate: axis 2 is out of range for operand inputs[0] of shape [2, 3] (rank 2)");
    tensor big = tensor::zeros(dtype::f32, {4, 3});
    expect_error(
        [&](backend_session& s) {
            s.concatenate_into({f23, big.slice(0, 0, 2)}, 0, big);
        },
        "concatenate_into: out (shape [4, 3]) overlaps operand inputs[1]");
    expect_error(
        [&](backend_session& s) {
            s.concatenate_into({f23, f23}, 0, f24);
        },
        "concatenate_into: out has shape [2, 4], but the result has shape [4, 3]");
}
