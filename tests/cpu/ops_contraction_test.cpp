#include "tenferro/backend_session.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <future>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "op_test_support.hpp"
#include "tenferro/cpu_backend.hpp"
#include "tenferro/cpu_runtime_cache.hpp"

using namespace tenferro;
using namespace tenferro::test;

namespace {

shape_t shape_vec(std::span<const std::int64_t> s) { return shape_t(s.begin(), s.end()); }
std::string str_of(const shape_t& s) { return to_string(std::span<const std::int64_t>(s)); }

// The exact dot_general of two views (long double sums), with the magnitude
// sum |a_i * b_i| per output element for the error bound.
struct contraction_ref {
    shape_t shape;
    std::vector<long double> value, magnitude;
    std::int64_t k = 1;
};

contraction_ref dot_reference(const const_tensor_view& a, const const_tensor_view& b, const dot_config& cfg) {
    const auto ra = static_cast<std::int64_t>(a.rank()), rb = static_cast<std::int64_t>(b.rank());
    auto norm = [](std::int64_t ax, std::int64_t r) { return ax < 0 ? ax + r : ax; };
    shape_t lb, rb_, lc, rc, lf, rf;
    for (auto x : cfg.lhs_batch) lb.push_back(norm(x, ra));
    for (auto x : cfg.rhs_batch) rb_.push_back(norm(x, rb));
    for (auto x : cfg.lhs_contracting) lc.push_back(norm(x, ra));
    for (auto x : cfg.rhs_contracting) rc.push_back(norm(x, rb));
    for (std::int64_t i = 0; i < ra; ++i)
        if (std::find(lb.begin(), lb.end(), i) == lb.end() && std::find(lc.begin(), lc.end(), i) == lc.end())
            lf.push_back(i);
    for (std::int64_t i = 0; i < rb; ++i)
        if (std::find(rb_.begin(), rb_.end(), i) == rb_.end() && std::find(rc.begin(), rc.end(), i) == rc.end())
            rf.push_back(i);
    contraction_ref r;
    for (auto x : lb) r.shape.push_back(a.shape()[static_cast<std::size_t>(x)]);
    for (auto x : lf) r.shape.push_back(a.shape()[static_cast<std::size_t>(x)]);
    for (auto x : rf) r.shape.push_back(b.shape()[static_cast<std::size_t>(x)]);
    shape_t kshape;
    for (auto x : lc) kshape.push_back(a.shape()[static_cast<std::size_t>(x)]);
    r.k = count_of(kshape);
    shape_t ia(a.rank()), ib(b.rank());
    for_each_index(r.shape, [&](std::span<const std::int64_t> o) {
        std::size_t p = 0;
        for (std::size_t i = 0; i < lb.size(); ++i, ++p) {
            ia[static_cast<std::size_t>(lb[i])] = o[p];
            ib[static_cast<std::size_t>(rb_[i])] = o[p];
        }
        for (auto x : lf) ia[static_cast<std::size_t>(x)] = o[p++];
        for (auto x : rf) ib[static_cast<std::size_t>(x)] = o[p++];
        long double sum = 0, mag = 0;
        auto add = [&] {
            const long double prod = static_cast<long double>(read_at(a, ia)) * read_at(b, ib);
            sum += prod;
            mag += std::fabs(prod);
        };
        if (kshape.empty()) {
            add();
        } else {
            for_each_index(kshape, [&](std::span<const std::int64_t> kk) {
                for (std::size_t i = 0; i < lc.size(); ++i) {
                    ia[static_cast<std::size_t>(lc[i])] = kk[i];
                    ib[static_cast<std::size_t>(rc[i])] = kk[i];
                }
                add();
            });
        }
        r.value.push_back(sum);
        r.magnitude.push_back(mag);
    });
    return r;
}

// Every element within the stated bound: |got - exact| <= 2 * k * eps * sum|a_i b_i|
// (+ the smallest normal, for sums that cancel to zero).
void check_close(const const_tensor_view& got, const contraction_ref& ref, double alpha = 1.0) {
    REQUIRE(shape_vec(got.shape()) == ref.shape);
    const double eps = got.type() == dtype::f32 ? 0x1p-24 : 0x1p-53;
    const std::vector<double> v = values_of(got);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const long double exact = alpha * ref.value[i];
        const long double bound =
            2.0L * static_cast<long double>(ref.k + 2) * eps * std::fabs(alpha) * ref.magnitude[i] +
            std::numeric_limits<float>::min();
        if (!(std::fabs(v[i] - exact) <= bound)) {
            if (bad++ < 3) INFO("element " << i << ": got " << v[i] << ", exact " << static_cast<double>(exact));
        }
    }
    CHECK(bad == 0);
}

// matmul as a dot_general reference: build the batched views by hand.
contraction_ref matmul_reference(const const_tensor_view& a, const const_tensor_view& b) {
    // Promote, broadcast the batch axes with broadcast_to, then a batched dot_general reference.
    shape_t as = shape_vec(a.shape()), bs = shape_vec(b.shape());
    const_tensor_view av = a, bv = b;
    const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
    if (a_vec) av = a.reshaped({1, as[0]});
    if (b_vec) bv = b.reshaped({bs[0], 1});
    as = shape_vec(av.shape());
    bs = shape_vec(bv.shape());
    const std::size_t nb = std::max(as.size(), bs.size()) - 2;
    shape_t batch(nb, 1);
    for (std::size_t i = 0; i < nb; ++i) {
        const std::size_t ai = i + as.size() - 2, bi = i + bs.size() - 2;
        const std::int64_t ea = ai >= nb ? as[ai - nb] : 1;
        const std::int64_t eb = bi >= nb ? bs[bi - nb] : 1;
        batch[i] = std::max(ea, eb);
    }
    shape_t afull = batch, bfull = batch;
    afull.push_back(as[as.size() - 2]);
    afull.push_back(as.back());
    bfull.push_back(bs[bs.size() - 2]);
    bfull.push_back(bs.back());
    const const_tensor_view ab = av.broadcast_to(afull), bb = bv.broadcast_to(bfull);
    dot_config cfg;
    for (std::size_t i = 0; i < nb; ++i) {
        cfg.lhs_batch.push_back(static_cast<std::int64_t>(i));
        cfg.rhs_batch.push_back(static_cast<std::int64_t>(i));
    }
    cfg.lhs_contracting = {static_cast<std::int64_t>(nb + 1)};
    cfg.rhs_contracting = {static_cast<std::int64_t>(nb)};
    contraction_ref r = dot_reference(ab, bb, cfg);
    // Drop the promoted axes.
    if (b_vec) r.shape.pop_back();
    if (a_vec) r.shape.erase(r.shape.end() - (b_vec ? 1 : 2));
    return r;
}

struct mm_case {
    shape_t a, b;
};

}  // namespace

TEST_CASE("matmul matches the exact product on every layout, size and parallelism", "[contraction]") {
    cpu_backend cpu(two_permits());
    const std::vector<mm_case> cases = {
        {{1, 1}, {1, 1}},       {{1, 17}, {17, 33}},      {{257, 3}, {3, 1}},   {{3, 17}, {17, 255}},
        {{255, 257}, {257, 3}}, {{17, 1000}, {1000, 17}}, {{64, 64}, {64, 64}}, {{130, 67}, {67, 129}},
        {{1000, 9}, {9, 1}},    {{1, 300}, {300, 1}},
    };
    for (dtype t : {dtype::f32, dtype::f64}) {
        unsigned seed = 1;
        for (const auto& c : cases) {
            const auto va = random_values(static_cast<std::size_t>(count_of(c.a)), -1, 1, seed++);
            const auto vb = random_values(static_cast<std::size_t>(count_of(c.b)), -1, 1, seed++);
            for (layout la : {layout::contiguous, layout::transposed, layout::reversed, layout::strided}) {
                for (layout lb : {layout::contiguous, layout::transposed, layout::strided}) {
                    INFO(to_string(t) << " a " << str_of(c.a) << " " << name_of(la) << ", b " << str_of(c.b) << " "
                                      << name_of(lb));
                    const laid_out a = lay_out(t, va, c.a, la), b = lay_out(t, vb, c.b, lb);
                    const tensor one = in_session(cpu, 1, [&](backend_session& s) { return s.matmul(a.view, b.view); });
                    const tensor two = in_session(cpu, 2, [&](backend_session& s) { return s.matmul(a.view, b.view); });
                    check_close(one, matmul_reference(a.view, b.view));
                    CHECK(bitwise_equal(one, two));
                }
            }
        }
    }
}

TEST_CASE("matmul promotes vectors and broadcasts batch axes as numpy does", "[contraction]") {
    cpu_backend cpu(two_permits());
    const std::vector<mm_case> cases = {
        {{7}, {7}},
        {{7}, {7, 5}},
        {{4, 7}, {7}},
        {{3, 4, 7}, {7}},
        {{7}, {2, 7, 5}},
        {{2, 1, 3, 4}, {5, 4, 2}},
        {{6, 3, 4}, {4, 2}},
        {{3, 4}, {6, 4, 2}},
        {{1, 3, 4}, {6, 4, 2}},
        {{9, 2, 2}, {9, 2, 2}},
        {{40, 16, 8}, {40, 8, 16}},
    };
    for (dtype t : {dtype::f32, dtype::f64}) {
        unsigned seed = 100;
        for (const auto& c : cases) {
            INFO(to_string(t) << " a " << str_of(c.a) << ", b " << str_of(c.b));
            const tensor a = tensor_of(t, random_values(static_cast<std::size_t>(count_of(c.a)), -2, 2, seed++), c.a);
            const tensor b = tensor_of(t, random_values(static_cast<std::size_t>(count_of(c.b)), -2, 2, seed++), c.b);
            const tensor one = in_session(cpu, 1, [&](backend_session& s) { return s.matmul(a, b); });
            const tensor two = in_session(cpu, 2, [&](backend_session& s) { return s.matmul(a, b); });
            check_close(one, matmul_reference(a, b));
            CHECK(bitwise_equal(one, two));
            // matmul_into a strided output gives the same bits.
            const shape_t os = shape_vec(one.shape());
            if (!os.empty()) {
                shape_t big = os;
                big.back() *= 2;
                tensor storage = tensor::zeros(t, std::span<const std::int64_t>(big));
                tensor_view out = storage.slice(static_cast<std::int64_t>(os.size() - 1), 1, big.back(), 2);
                in_session(cpu, 2, [&](backend_session& s) { s.matmul_into(a, b, out); });
                CHECK(bitwise_equal(one, out));
            }
        }
    }
}

TEST_CASE("dot_general: batch, lhs free, rhs free; merged and permuted (TTGT) operands", "[contraction]") {
    cpu_backend cpu(two_permits());
    struct dg_case {
        shape_t a, b;
        dot_config cfg;
    };
    const std::vector<dg_case> cases = {
        {{5, 7}, {7, 3}, {{1}, {0}, {}, {}}},                   // plain matrix product
        {{7, 5}, {3, 7}, {{0}, {1}, {}, {}}},                   // both transposed
        {{4, 5, 6}, {4, 6, 3}, {{2}, {1}, {0}, {0}}},           // batched (attention-like)
        {{2, 3, 4, 5}, {5, 6, 3}, {{3, 1}, {0, 2}, {}, {}}},    // two contracting axes, not in a's order
        {{2, 3, 4, 5}, {3, 5, 6}, {{-1, -3}, {1, 0}, {}, {}}},  // negative axes
        {{3, 2, 4}, {4, 3, 5, 2}, {{2}, {0}, {0}, {1}}},        // batch axes at different positions
        {{6, 4, 3}, {3, 6}, {{1}, {}, {}, {}}},                 // (invalid: filtered below)
        {{3, 4}, {5, 6}, {{}, {}, {}, {}}},                     // outer product
        {{3, 4, 5}, {5, 4, 3}, {{0, 1, 2}, {2, 1, 0}, {}, {}}}, // full contraction: rank 0
        {{2, 3, 5, 4}, {2, 4, 5, 7}, {{3, 2}, {1, 2}, {0}, {0}}},
    };
    for (dtype t : {dtype::f32, dtype::f64}) {
        unsigned seed = 200;
        for (const auto& c : cases) {
            if (c.cfg.lhs_contracting.size() != c.cfg.rhs_contracting.size()) continue;
            for (layout la : {layout::contiguous, layout::transposed, layout::reversed}) {
                for (layout lb : {layout::contiguous, layout::strided}) {
                    INFO(to_string(t) << " a " << str_of(c.a) << " " << name_of(la) << ", b " << str_of(c.b) << " "
                                      << name_of(lb));
                    const laid_out a =
                        lay_out(t, random_values(static_cast<std::size_t>(count_of(c.a)), -1, 1, seed), c.a, la);
                    const laid_out b =
                        lay_out(t, random_values(static_cast<std::size_t>(count_of(c.b)), -1, 1, seed + 1), c.b, lb);
                    ++seed;
                    const tensor one =
                        in_session(cpu, 1, [&](backend_session& s) { return s.dot_general(a.view, b.view, c.cfg); });
                    const tensor two =
                        in_session(cpu, 2, [&](backend_session& s) { return s.dot_general(a.view, b.view, c.cfg); });
                    check_close(one, dot_reference(a.view, b.view, c.cfg));
                    CHECK(bitwise_equal(one, two));
                }
            }
        }
    }
}

TEST_CASE("dot_general_into: alpha and beta, beta == 0 does not read out, any out layout", "[contraction]") {
    cpu_backend cpu(two_permits());
    const dot_config cfg{{1}, {0}, {}, {}};
    for (dtype t : {dtype::f32, dtype::f64}) {
        const tensor a = tensor_of(t, random_values(33 * 20, -1, 1, 7), {33, 20});
        const tensor b = tensor_of(t, random_values(20 * 19, -1, 1, 8), {20, 19});
        const contraction_ref ab = dot_reference(a, b, cfg);
        const std::vector<double> c0 = random_values(33 * 19, -1, 1, 9);
        for (const std::pair<double, double> scales :
             {std::pair{1.0, 0.0}, {2.5, 0.0}, {1.0, 1.0}, {-0.5, 2.0}, {0.0, 3.0}}) {
            // (Named copies, not a structured binding: clang 14 cannot capture
            // a structured binding in the lambdas below.)
            const double alpha = scales.first, beta = scales.second;
            for (bool transposed_out : {false, true}) {
                INFO(to_string(t) << " alpha " << alpha << " beta " << beta << " transposed out " << transposed_out);
                // The output: [33, 19], either row-major or the transpose of a [19, 33]
                // tensor (its row and column axes then swap roles: out goes through a temporary).
                tensor storage = transposed_out ? tensor::zeros(t, {19, 33}) : tensor::zeros(t, {33, 19});
                tensor_view out = transposed_out ? storage.transposed() : storage.view();
                std::size_t i = 0;
                for_each_index(out.shape(), [&](std::span<const std::int64_t> idx) {
                    const double v = beta == 0.0 ? std::numeric_limits<double>::quiet_NaN() : c0[i];
                    if (t == dtype::f32)
                        out.at<float>(idx) = static_cast<float>(v);
                    else
                        out.at<double>(idx) = v;
                    ++i;
                });
                in_session(cpu, 2, [&](backend_session& s) { s.dot_general_into(a, b, cfg, out, alpha, beta); });
                const std::vector<double> got = values_of(out);
                const double eps = t == dtype::f32 ? 0x1p-24 : 0x1p-53;
                std::size_t bad = 0;
                for (std::size_t j = 0; j < got.size(); ++j) {
                    const long double exact = alpha * ab.value[j] + (beta == 0.0 ? 0.0L : beta * c0[j]);
                    const long double bound =
                        4.0L * (ab.k + 4) * eps * (std::fabs(alpha) * ab.magnitude[j] + std::fabs(beta * c0[j])) +
                        1e-30L;
                    if (!(std::fabs(got[j] - exact) <= bound)) ++bad;
                }
                CHECK(bad == 0);
            }
        }
    }
}

TEST_CASE("contractions on every compiled Highway target", "[contraction]") {
    cpu_backend cpu(two_permits());
    for (dtype t : {dtype::f32, dtype::f64}) {
        const tensor a = tensor_of(t, random_values(67 * 129, -1, 1, 21), {67, 129});
        const tensor b = tensor_of(t, random_values(129 * 45, -1, 1, 22), {129, 45});
        const tensor x = tensor_of(t, random_values(3 * 5 * 17, -1, 1, 23), {3, 5, 17});
        const tensor y = tensor_of(t, random_values(3 * 17 * 9, -1, 1, 24), {3, 17, 9});
        const contraction_ref r1 = matmul_reference(a, b), r2 = matmul_reference(x, y);
        for_each_target([&](const std::string& target) {
            INFO(to_string(t) << " on " << target);
            const tensor p1 = in_session(cpu, 2, [&](backend_session& s) { return s.matmul(a, b); });
            const tensor p2 =
                in_session(cpu, 1, [&](backend_session& s) { return s.matmul(a.transposed().transposed(), b); });
            const tensor p3 = in_session(cpu, 2, [&](backend_session& s) { return s.matmul(x, y); });
            check_close(p1, r1);
            check_close(p3, r2);
            CHECK(bitwise_equal(p1, p2));
        });
    }
}

TEST_CASE("contractions with empty extents", "[contraction]") {
    cpu_backend cpu(two_permits());
    const tensor a = tensor::zeros(dtype::f32, {3, 0});
    const tensor b = tensor::zeros(dtype::f32, {0, 4});
    const tensor p = in_session(cpu, 1, [&](backend_session& s) { return s.matmul(a, b); });
    CHECK(shape_vec(p.shape()) == shape_t{3, 4});
    CHECK(values_of(p) == std::vector<double>(12, 0.0));
    tensor out = tensor_of(dtype::f32, std::vector<double>(12, 2.0), {3, 4});
    in_session(cpu, 1, [&](backend_session& s) { s.dot_general_into(a, b, {{1}, {0}, {}, {}}, out, 1.0, 0.5); });
    CHECK(values_of(out) == std::vector<double>(12, 1.0));
    const tensor e = in_session(cpu, 1, [&](backend_session& s) {
        return s.matmul(tensor::zeros(dtype::f64, {0, 5}), tensor::zeros(dtype::f64, {5, 2}));
    });
    CHECK(shape_vec(e.shape()) == shape_t{0, 2});
}

TEST_CASE("contraction errors name the op, both operands and the axes", "[contraction][errors]") {
    cpu_backend cpu(two_permits());
    const tensor a = tensor::zeros(dtype::f32, {2, 3});
    const tensor b = tensor::zeros(dtype::f32, {4, 5});
    const tensor b64 = tensor::zeros(dtype::f64, {3, 5});
    const tensor ai = tensor::zeros(dtype::i32, {2, 3});
    auto err = [&](auto f) { return tensor_error_of(cpu, f); };
    using Catch::Matchers::Contains;

    CHECK_THAT(
        err([&](backend_session& s) {
            s.dot_general(a, b, {{1}, {0}, {}, {}});
        }),
        Contains("dot_general") && Contains("contracting axis 1 of a") && Contains("[2, 3]") && Contains("[4, 5]"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general(a, b, {{1, 1}, {0, 1}, {}, {}});
               }),
               Contains("dot_general") && Contains("more than once"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general(a, b, {{2}, {0}, {}, {}});
               }),
               Contains("dot_general") && Contains("out of range") && Contains("[2, 3]"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general(a, b, {{1}, {}, {}, {}});
               }),
               Contains("lhs_contracting") && Contains("rhs_contracting") && Contains("[4, 5]"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general(a, b, {{}, {}, {0}, {0}});
               }),
               Contains("batch axis 0 of a") && Contains("extent 2") && Contains("extent 4"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general(a, b, {{}, {}, {0}, {}});
               }),
               Contains("lhs_batch") && Contains("rhs_batch"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general(a, b64, {{1}, {0}, {}, {}});
               }),
               Contains("dot_general") && Contains("f64") && Contains("f32"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general(ai, ai, {{1}, {1}, {}, {}});
               }),
               Contains("dot_general") && Contains("i32"));
    CHECK(err([&](backend_session& s) { s.dot_general(a, a, {{0}, {0}, {1}, {1}}); }) == "(no exception)");
    tensor wrong = tensor::zeros(dtype::f32, {2, 4});
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general_into(a, b64, {{1}, {0}, {}, {}}, wrong);
               }),
               Contains("dot_general_into") && Contains("f64"));
    const tensor a2 = tensor::zeros(dtype::f32, {3, 5});
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general_into(a, a2, {{1}, {0}, {}, {}}, wrong);
               }),
               Contains("dot_general_into") && Contains("out") && Contains("[2, 5]"));
    tensor big = tensor::zeros(dtype::f32, {3, 3});
    CHECK_THAT(err([&](backend_session& s) {
                   s.dot_general_into(big.slice(0, 0, 2), big.slice(1, 0, 3), {{1}, {0}, {}, {}}, big.slice(0, 0, 2));
               }),
               Contains("overlap"));
    // matmul
    CHECK_THAT(err([&](backend_session& s) { s.matmul(a, b); }),
               Contains("matmul") && Contains("[2, 3]") && Contains("[4, 5]"));
    const tensor scalar = tensor::zeros(dtype::f32, std::span<const std::int64_t>{});
    CHECK_THAT(err([&](backend_session& s) { s.matmul(scalar, a); }), Contains("matmul") && Contains("rank-0"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.matmul(tensor::zeros(dtype::f32, {2, 2, 3}), tensor::zeros(dtype::f32, {3, 3, 4}));
               }),
               Contains("matmul") && Contains("broadcast"));
    CHECK_THAT(err([&](backend_session& s) { s.matmul(a, b64); }), Contains("matmul") && Contains("f64"));
    tensor out23 = tensor::zeros(dtype::f32, {2, 3});
    CHECK_THAT(err([&](backend_session& s) { s.matmul_into(a, a2, out23); }),
               Contains("matmul_into") && Contains("[2, 5]"));
    // A cache hit does not skip the checks on out.
    tensor out25 = tensor::zeros(dtype::f32, {2, 5});
    in_session(cpu, 1, [&](backend_session& s) { s.matmul_into(a, a2, out25); });
    tensor out35 = tensor::zeros(dtype::f32, {3, 5});  // same strides as out25: the same plan key
    CHECK_THAT(err([&](backend_session& s) { s.matmul_into(a, a2, out35); }),
               Contains("matmul_into") && Contains("[3, 5]") && Contains("[2, 5]"));
}

TEST_CASE("with_backend_session_cached: plans hit, results equal, LRU eviction, clear", "[contraction][cache]") {
    cpu_backend cpu(two_permits());
    const tensor a = tensor_of(dtype::f32, random_values(40 * 30, -1, 1, 31), {40, 30});
    const tensor b = tensor_of(dtype::f32, random_values(30 * 20, -1, 1, 32), {30, 20});
    auto cached = [&](cpu_runtime_cache& cache, auto f) {
        auto r = cpu.with_backend_session_cached(cache, f, asio::use_future).get();
        REQUIRE(r.has_value());
        return std::move(*r);
    };
    cpu_runtime_cache cache;
    CHECK(cache.stats().entries == 0);
    const tensor first = cached(cache, [&](backend_session& s) { return s.matmul(a, b); });
    cache_stats st = cache.stats();
    CHECK(st.misses == 1);
    CHECK(st.hits == 0);
    CHECK(st.entries == 1);
    CHECK(st.retained_bytes > 0);
    const tensor second = cached(cache, [&](backend_session& s) { return s.matmul(a, b); });
    st = cache.stats();
    CHECK(st.hits == 1);
    CHECK(st.misses == 1);
    CHECK(bitwise_equal(first, second));
    const tensor plain = in_session(cpu, 1, [&](backend_session& s) { return s.matmul(a, b); });
    CHECK(bitwise_equal(first, plain));
    // A different layout is a different plan.
    cached(cache, [&](backend_session& s) { return s.matmul(a.slice(0, 0, 20), b); });
    CHECK(cache.stats().entries == 2);
    // The backend's own cache served the plain session, not this one.
    CHECK(cpu.default_cache().stats().misses >= 1);
    cache.clear();
    st = cache.stats();
    CHECK(st.entries == 0);
    CHECK(st.retained_bytes == 0);
    CHECK(st.clears == 1);

    // A cap that holds about one plan: alternating layouts evict each other.
    const std::size_t one_plan = [&] {
        cpu_runtime_cache probe;
        cached(probe, [&](backend_session& s) { return s.matmul(a, b); });
        return probe.stats().retained_bytes;
    }();
    cpu_runtime_cache small(one_plan + one_plan / 2);
    for (int i = 0; i < 3; ++i) {
        cached(small, [&](backend_session& s) { return s.matmul(a, b); });
        cached(small, [&](backend_session& s) { return s.matmul(a.slice(0, 0, 20), b); });
    }
    st = small.stats();
    CHECK(st.entries == 1);
    CHECK(st.evictions == 5);
    CHECK(st.hits == 0);
    CHECK(st.retained_bytes <= small.capacity_bytes());
    // A zero-capacity cache retains nothing and still computes.
    cpu_runtime_cache none(0);
    const tensor z = cached(none, [&](backend_session& s) { return s.matmul(a, b); });
    CHECK(bitwise_equal(z, first));
    CHECK(none.stats().entries == 0);
}

TEST_CASE("constant operands are packed once and reused; unmark drops the packed copy", "[contraction][cache]") {
    cpu_backend cpu(two_permits());
    const tensor x = tensor_of(dtype::f32, random_values(64 * 96, -1, 1, 41), {64, 96});
    const tensor w = tensor_of(dtype::f32, random_values(96 * 80, -1, 1, 42), {96, 80});
    auto cached = [&](cpu_runtime_cache& cache, auto f) {
        auto r = cpu.with_backend_session_cached(cache, f, asio::use_future).get();
        REQUIRE(r.has_value());
        return std::move(*r);
    };
    cpu_runtime_cache cache;
    const tensor plain = cached(cache, [&](backend_session& s) { return s.matmul(x, w); });
    const std::size_t plan_only = cache.stats().retained_bytes;
    cache.mark_constant(w);
    const tensor p1 = cached(cache, [&](backend_session& s) { return s.matmul(x, w); });
    cache_stats st = cache.stats();
    CHECK(st.entries == 2);                                          // the plan and the packed w
    CHECK(st.retained_bytes >= plan_only + 96 * 80 * sizeof(float));  // the packed copy is counted
    const tensor p2 = cached(cache, [&](backend_session& s) { return s.matmul(x, w); });
    CHECK(cache.stats().hits == st.hits + 2);  // plan and packed copy both hit
    CHECK(bitwise_equal(plain, p1));
    CHECK(bitwise_equal(plain, p2));
    // A slice of the constant is inside it too: packed under its own key.
    const tensor p3 = cached(cache, [&](backend_session& s) { return s.matmul(x, w.slice(1, 0, 40)); });
    CHECK(cache.stats().entries == 4);
    CHECK(bitwise_equal(p3, in_session(cpu, 1, [&](backend_session& s) { return s.matmul(x, w.slice(1, 0, 40)); })));
    const std::uint64_t ev = cache.stats().evictions;
    cache.unmark_constant(w);
    st = cache.stats();
    CHECK(st.entries == 2);  // the two plans stay
    CHECK(st.evictions == ev + 2);
    // The backend's own cache takes marks too.
    cpu.default_cache().mark_constant(w);
    const tensor p4 = in_session(cpu, 2, [&](backend_session& s) { return s.matmul(x, w); });
    CHECK(bitwise_equal(plain, p4));
    CHECK(cpu.default_cache().stats().entries >= 2);
}

TEST_CASE("a cache held by a running session makes another cached entry contended (S9)", "[contraction][cache]") {
    cpu_backend cpu(two_permits());
    cpu_runtime_cache cache;
    std::promise<void> entered, release;
    auto first = cpu.with_backend_session_cached(
        cache,
        [&](backend_session&) {
            entered.set_value();
            release.get_future().wait();
            return 1;
        },
        asio::use_future);
    entered.get_future().wait();
    CHECK(cache.in_use());
    bool ran = false;
    auto second = cpu.with_backend_session_cached(
                         cache,
                         [&](backend_session&) {
                             ran = true;
                             return 2;
                         },
                         asio::use_future)
                      .get();
    release.set_value();
    REQUIRE(!second.has_value());
    CHECK(second.error().code() == session_entry_errc::contended);
    CHECK(!ran);
    CHECK(first.get().value() == 1);
    CHECK(!cache.in_use());
}
