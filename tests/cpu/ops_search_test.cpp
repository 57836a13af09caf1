// matmul_top_k(_into): bit for bit top_k(matmul(a, b), k, -1) on every Highway target, every
// layout, with and without the packed constant; NaN, infinities, signed zeros and ties; batch
// invariance of matmul and matmul_top_k; batch axes and vectors; errors.

#include "tenferro/backend_session.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "hwy_targets.hpp"
#include "kernels/search_bf16.hpp"
#include "op_test_support.hpp"
#include "tenferro/cpu_backend.hpp"
#include "tenferro/cpu_runtime_cache.hpp"

using namespace tenferro;
using namespace tenferro::test;

namespace {

shape_t search_vec(std::span<const std::int64_t> s) { return shape_t(s.begin(), s.end()); }

struct search_result {
    tensor values, indices;
};

search_result fused(cpu_backend& cpu, std::size_t permits, const_tensor_view a, const_tensor_view b, std::int64_t k) {
    auto [v, i] = in_session(cpu, permits, [&](backend_session& s) { return s.matmul_top_k(a, b, k); });
    return {std::move(v), std::move(i)};
}

search_result unfused(cpu_backend& cpu, std::size_t permits, const_tensor_view a, const_tensor_view b, std::int64_t k) {
    auto [v, i] = in_session(cpu, permits, [&](backend_session& s) { return s.top_k(s.matmul(a, b), k, -1); });
    return {std::move(v), std::move(i)};
}

// Both tensors of two results have the same shape and bits.
bool same_bits(const search_result& x, const search_result& y) {
    return bitwise_equal(x.values, y.values) && bitwise_equal(x.indices, y.indices);
}

struct search_case {
    std::int64_t m, n, d, k;
};

}  // namespace

TEST_CASE("matmul_top_k is top_k(matmul) bit for bit on every target, layout and parallelism", "[search]") {
    cpu_backend cpu(two_permits());
    // Rows around the tile heights (6, 14) and the score tile; columns around the micro-panel
    // widths (8..32) and the column split; depths of one and several K slices (kc 256 / 512).
    const std::vector<search_case> cases = {
        {1, 1, 1, 1},         {1, 37, 5, 37},    {2, 100, 16, 10},  {3, 257, 128, 10}, {14, 33, 7, 3},
        {15, 1000, 128, 100}, {64, 531, 33, 10}, {131, 700, 64, 7}, {5, 300, 700, 10}, {40, 129, 1100, 1},
    };
    for (dtype t : {dtype::f32, dtype::f64}) {
        for (const search_case& c : cases) {
            const tensor q = tensor_of(t, random_values(static_cast<std::size_t>(c.m * c.d), -1, 1, 7), {c.m, c.d});
            const tensor corpus =
                tensor_of(t, random_values(static_cast<std::size_t>(c.n * c.d), -1, 1, 8), {c.n, c.d});
            const tensor rowmajor_b =
                in_session(cpu, 1, [&](backend_session& s) { return s.copy(corpus.transposed()); });
            for_each_target([&](const std::string& target) {
                INFO(to_string(t) << " m " << c.m << " n " << c.n << " d " << c.d << " k " << c.k << " on " << target);
                const search_result want = unfused(cpu, 1, q, corpus.transposed(), c.k);
                CHECK(search_vec(want.values.shape()) == shape_t{c.m, c.k});
                CHECK(same_bits(fused(cpu, 1, q, corpus.transposed(), c.k), want));
                CHECK(same_bits(fused(cpu, 2, q, corpus.transposed(), c.k), want));
                CHECK(same_bits(fused(cpu, 2, q, rowmajor_b, c.k), want));
                CHECK(same_bits(unfused(cpu, 2, q, rowmajor_b, c.k), want));
                // The corpus packed once in the cache, as the server marks it.
                cpu_runtime_cache cache;
                cache.mark_constant(corpus);
                auto r = cpu.with_backend_session_cached(
                                cache, [&](backend_session& s) { return s.matmul_top_k(q, corpus.transposed(), c.k); },
                                asio::use_future)
                             .get();
                REQUIRE(r.has_value());
                CHECK(same_bits({std::move(r->first), std::move(r->second)}, want));
            });
        }
    }
}

TEST_CASE("matmul_top_k orders NaN, infinities, signed zeros and ties as top_k does", "[search]") {
    cpu_backend cpu(two_permits());
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    for (dtype t : {dtype::f32, dtype::f64}) {
        // Corpus rows (d = 2) that give scores NaN, +inf, -inf, +0, -0 and exact ties, scattered
        // over 300 rows so that they fall in both column tasks and several score tiles.
        const std::int64_t n = 300, d = 2;
        std::vector<double> rows(static_cast<std::size_t>(n * d));
        for (std::int64_t j = 0; j < n; ++j) {
            double x = static_cast<double>((j * 37) % 11) - 5;  // ties: eleven values over 300 rows
            if (j % 50 == 3) x = nan;
            if (j % 70 == 5) x = inf;
            if (j % 90 == 7) x = -inf;
            if (j % 60 == 11) x = -0.0;
            rows[static_cast<std::size_t>(j * d)] = x;
            rows[static_cast<std::size_t>(j * d + 1)] = 0.0;
        }
        const tensor corpus = tensor_of(t, rows, {n, d});
        // Query rows: +1 (larger is better), -1 (reversed, so -inf scores +inf), 0 (every score is
        // 0, NaN or NaN from inf * 0), -0.
        const tensor q = tensor_of(t, {1, 0, -1, 0, 0, 0, -0.0, 1}, {4, d});
        for_each_target([&](const std::string& target) {
            INFO(to_string(t) << " on " << target);
            for (std::int64_t k : {1, 5, 10, 40, 299, 300}) {
                INFO("k " << k);
                const search_result want = unfused(cpu, 2, q, corpus.transposed(), k);
                const search_result got = fused(cpu, 2, q, corpus.transposed(), k);
                CHECK(same_bits(got, want));
                CHECK(same_bits(fused(cpu, 1, q, corpus.transposed(), k), want));
            }
        });
        // The order itself, row 0 (scores = the first column): NaNs first (lower index first),
        // then +inf, then the ties in index order.
        const search_result r = fused(cpu, 2, q, corpus.transposed(), 12);
        const std::vector<double> v = values_of(r.values);
        const std::vector<double> ids = values_of(r.indices);
        CHECK(std::isnan(v[0]));
        CHECK(ids[0] == 3);
        CHECK(ids[1] == 53);
        std::size_t first_number = 0;
        while (first_number < 12 && std::isnan(v[first_number])) ++first_number;
        CHECK(first_number == 6);  // rows 3, 53, ..., 253
        CHECK(v[first_number] == inf);
        for (std::size_t i = first_number + 1; i < 12; ++i) {
            CHECK(v[i] <= v[i - 1]);
            if (v[i] == v[i - 1]) CHECK(ids[i] > ids[i - 1]);
        }
    }
}

TEST_CASE("matmul and matmul_top_k are batch-invariant on every target and parallelism", "[search][invariance]") {
    cpu_backend cpu(two_permits());
    const std::int64_t rows = 40, n = 150;
    for (std::int64_t d : {16, 128, 768}) {
        const tensor q = tensor_of(dtype::f32, random_values(static_cast<std::size_t>(rows * d), -1, 1, 11), {rows, d});
        const tensor corpus = tensor_of(dtype::f32, random_values(static_cast<std::size_t>(n * d), -1, 1, 12), {n, d});
        for_each_target([&](const std::string& target) {
            const tensor all = in_session(cpu, 2, [&](backend_session& s) { return s.matmul(q, corpus.transposed()); });
            const search_result all_top = fused(cpu, 2, q, corpus.transposed(), 10);
            for (std::int64_t b : {1, 2, 3, 8, 14, 15, 16, 17, 39}) {
                for (std::int64_t start : {std::int64_t{0}, rows - b}) {
                    for (std::size_t permits : {1, 2}) {
                        INFO("d " << d << " batch " << b << " from row " << start << ", " << permits << " permits, on "
                                  << target);
                        const const_tensor_view qb = q.slice(0, start, start + b);
                        const tensor part = in_session(
                            cpu, permits, [&](backend_session& s) { return s.matmul(qb, corpus.transposed()); });
                        CHECK(bitwise_equal(part, all.slice(0, start, start + b)));
                        const search_result top = fused(cpu, permits, qb, corpus.transposed(), 10);
                        CHECK(bitwise_equal(top.values, all_top.values.slice(0, start, start + b)));
                        CHECK(bitwise_equal(top.indices, all_top.indices.slice(0, start, start + b)));
                    }
                }
            }
            // A single query as a vector, and the corpus as the left operand (matmul(corpus, q)).
            const const_tensor_view q0 = q.slice(0, 0, 1).reshaped({d});
            const tensor v0 = in_session(cpu, 1, [&](backend_session& s) { return s.matmul(q0, corpus.transposed()); });
            CHECK(bitwise_equal(v0, all.slice(0, 0, 1).reshaped({n})));
            const tensor cols =
                in_session(cpu, 2, [&](backend_session& s) { return s.matmul(corpus, q.transposed()); });
            const tensor col0 =
                in_session(cpu, 2, [&](backend_session& s) { return s.matmul(corpus, q.slice(0, 0, 1).transposed()); });
            CHECK(bitwise_equal(col0, cols.slice(1, 0, 1)));
        });
    }
}

TEST_CASE("matmul_top_k: batch axes broadcast, vectors, strided outputs, empty extents", "[search]") {
    cpu_backend cpu(two_permits());
    const tensor q = tensor_of(dtype::f32, random_values(2 * 3 * 20, -1, 1, 31), {2, 3, 20});
    const tensor corpus = tensor_of(dtype::f32, random_values(50 * 20, -1, 1, 32), {50, 20});
    const tensor stacked = tensor_of(dtype::f32, random_values(2 * 20 * 50, -1, 1, 33), {2, 20, 50});
    // [2, 3, 20] x [20, 50] and [2, 3, 20] x [2, 20, 50] -> [2, 3, 4]
    for (const_tensor_view b : {const_tensor_view(corpus.transposed()), const_tensor_view(stacked)}) {
        const search_result want = unfused(cpu, 2, q, b, 4);
        const search_result got = fused(cpu, 2, q, b, 4);
        CHECK(search_vec(got.values.shape()) == shape_t{2, 3, 4});
        CHECK(same_bits(got, want));
    }
    // A vector query [20] -> [4]; a vector b [20] makes the product [2, 3]: top along m.
    const const_tensor_view q1 = q.slice(0, 0, 1).slice(1, 0, 1).reshaped({20});
    CHECK(same_bits(fused(cpu, 1, q1, corpus.transposed(), 4), unfused(cpu, 1, q1, corpus.transposed(), 4)));
    const const_tensor_view bvec = corpus.slice(0, 0, 1).reshaped({20});
    const search_result along_m = fused(cpu, 1, q, bvec, 2);
    CHECK(search_vec(along_m.values.shape()) == shape_t{2, 2});
    CHECK(same_bits(along_m, unfused(cpu, 1, q, bvec, 2)));
    // _into with transposed (strided) outputs.
    tensor values = tensor::zeros(dtype::f32, {4, 3});
    tensor indices = tensor::zeros(dtype::i64, {4, 3});
    const const_tensor_view q2 = q.slice(0, 0, 1).reshaped({3, 20});
    in_session(cpu, 2, [&](backend_session& s) {
        s.matmul_top_k_into(q2, corpus.transposed(), 4, values.transposed(), indices.transposed());
    });
    const search_result want2 = unfused(cpu, 2, q2, corpus.transposed(), 4);
    CHECK(bitwise_equal(values.transposed(), want2.values));
    CHECK(bitwise_equal(indices.transposed(), want2.indices));
    // k == 0, m == 0, depth 0 (every score +0: the first k columns).
    CHECK(search_vec(fused(cpu, 1, q2, corpus.transposed(), 0).values.shape()) == shape_t{3, 0});
    CHECK(search_vec(fused(cpu, 1, tensor::zeros(dtype::f32, {0, 20}), corpus.transposed(), 3).values.shape()) ==
          shape_t{0, 3});
    const search_result flat = fused(cpu, 1, tensor::zeros(dtype::f64, {2, 0}), tensor::zeros(dtype::f64, {0, 7}), 3);
    CHECK(same_bits(flat, unfused(cpu, 1, tensor::zeros(dtype::f64, {2, 0}), tensor::zeros(dtype::f64, {0, 7}), 3)));
    CHECK(values_of(flat.indices) == std::vector<double>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("matmul_top_k shares the packed constant with matmul", "[search][cache]") {
    cpu_backend cpu(two_permits());
    const tensor q = tensor_of(dtype::f32, random_values(8 * 64, -1, 1, 41), {8, 64});
    const tensor corpus = tensor_of(dtype::f32, random_values(500 * 64, -1, 1, 42), {500, 64});
    cpu_runtime_cache cache;
    cache.mark_constant(corpus);
    auto cached = [&](auto f) {
        auto r = cpu.with_backend_session_cached(cache, f, asio::use_future).get();
        REQUIRE(r.has_value());
        return std::move(*r);
    };
    cached([&](backend_session& s) { return s.matmul(q, corpus.transposed()); });
    const std::size_t entries = cache.stats().entries;  // the plan and the packed corpus
    CHECK(entries == 2);
    const std::uint64_t hits = cache.stats().hits;
    cached([&](backend_session& s) { return s.matmul_top_k(q, corpus.transposed(), 5); });
    CHECK(cache.stats().entries == entries);  // no second packed copy
    CHECK(cache.stats().hits == hits + 1);
}

TEST_CASE("matmul_top_k over a constant corpus: the bf16 first pass, the same bits, counted", "[search][cache]") {
    cpu_backend cpu(two_permits());
    const std::int64_t m = 20, n = 3000, d = 96, k = 10;
    std::vector<double> qv = random_values(static_cast<std::size_t>(m * d), -1, 1, 51);
    qv[5 * d + 3] = std::numeric_limits<double>::quiet_NaN();  // query 5: the f32 path
    qv[6 * d + 0] = 1e30;                                      // query 6: past the range guard
    const tensor q = tensor_of(dtype::f32, qv, {m, d});
    std::vector<double> xv = random_values(static_cast<std::size_t>(n * d), -1, 1, 52);
    xv[100 * d + 7] = std::numeric_limits<double>::infinity();  // a flagged row, always kept
    const tensor corpus = tensor_of(dtype::f32, xv, {n, d});
    for_each_target([&](const std::string& target) {
        INFO(target);
        const bool native = tenferro::kernels::native_first_pass_available();
        const search_result want = unfused(cpu, 1, q, corpus.transposed(), k);
        for (const std::size_t permits : {1, 2}) {
            cpu_runtime_cache cache;
            cache.mark_constant(corpus);
            for (int call = 0; call < 2; ++call) {  // the copy made, then found
                auto r = cpu.with_backend_session_cached(
                                cache, session_options{.permits = permits},
                                [&](backend_session& s) { return s.matmul_top_k(q, corpus.transposed(), k); },
                                asio::use_future)
                             .get();
                REQUIRE(r.has_value());
                CHECK(same_bits({std::move(r->first), std::move(r->second)}, want));
            }
            const search_stats st = cache.search_stats();
            CHECK(st.queries == 2 * m);
            CHECK(st.first_pass + st.fallback == 2 * m);
            CHECK(st.copy_too_large == 0);
            if (native) {
                CHECK(st.fallback == 4);  // queries 5 and 6, twice
                CHECK(st.reranked >= st.first_pass * k);
                CHECK(st.reranked <= st.first_pass * (k + 30));
            } else {
                CHECK(st.first_pass == 0);
            }
        }
        // A cache that holds the packed f32 corpus but not the bf16 copy beside it: the f32 path,
        // said in the stats.
        cpu_runtime_cache small(static_cast<std::size_t>(n * d) * 4 + (64 << 10));
        small.mark_constant(corpus);
        auto r = cpu.with_backend_session_cached(
                        small, [&](backend_session& s) { return s.matmul_top_k(q, corpus.transposed(), k); },
                        asio::use_future)
                     .get();
        REQUIRE(r.has_value());
        CHECK(same_bits({std::move(r->first), std::move(r->second)}, want));
        CHECK(small.search_stats().fallback == static_cast<std::uint64_t>(m));
        CHECK(small.search_stats().copy_too_large == (native ? 1u : 0u));
    });
}

TEST_CASE("matmul_top_k errors name the op and the operands", "[search][errors]") {
    cpu_backend cpu(two_permits());
    const tensor q = tensor::zeros(dtype::f32, {3, 8});
    const tensor corpus = tensor::zeros(dtype::f32, {10, 8});
    auto err = [&](auto f) { return tensor_error_of(cpu, f); };
    CHECK_THAT(err([&](backend_session& s) { s.matmul_top_k(q, corpus.transposed(), 11); }),
               Catch::Contains("matmul_top_k: k = 11 exceeds the extent 10"));
    CHECK_THAT(err([&](backend_session& s) { s.matmul_top_k(q, corpus.transposed(), -1); }),
               Catch::Contains("matmul_top_k: k = -1 is negative"));
    CHECK_THAT(err([&](backend_session& s) { s.matmul_top_k(q, corpus, 1); }),
               Catch::Contains("matmul_top_k: operand a has shape [3, 8] and b has shape [10, 8]"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.matmul_top_k(tensor::zeros(dtype::f32, {8}), tensor::zeros(dtype::f32, {8}), 1);
               }),
               Catch::Contains("both vectors"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.matmul_top_k(tensor::zeros(dtype::i32, {3, 8}), corpus.transposed(), 1);
               }),
               Catch::Contains("matmul_top_k: operand a has dtype i32"));
    CHECK_THAT(err([&](backend_session& s) {
                   s.matmul_top_k(q, tensor::zeros(dtype::f64, {8, 10}), 1);
               }),
               Catch::Contains("matmul_top_k"));
    tensor values = tensor::zeros(dtype::f32, {3, 2});
    tensor indices = tensor::zeros(dtype::i64, {3, 2});
    CHECK_THAT(err([&](backend_session& s) { s.matmul_top_k_into(q, corpus.transposed(), 3, values, indices); }),
               Catch::Contains("matmul_top_k_into"));
    tensor wrong_type = tensor::zeros(dtype::f32, {3, 2});
    CHECK_THAT(err([&](backend_session& s) { s.matmul_top_k_into(q, corpus.transposed(), 2, values, wrong_type); }),
               Catch::Contains("matmul_top_k_into"));
    tensor scratch = tensor::zeros(dtype::f32, {3, 8});
    CHECK_THAT(err([&](backend_session& s) {
                   s.matmul_top_k_into(scratch, corpus.transposed(), 2, scratch.slice(1, 0, 2), indices);
               }),
               Catch::Contains("matmul_top_k_into: values (shape [3, 2]) overlaps operand a"));
}
