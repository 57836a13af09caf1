// The live corpus (contract section 9), deterministic: writes and their errors (L1, L2, L7),
// snapshots (L3), exact search against matmul_top_k over the same rows gathered in id order
// (L4), filters (L5), compaction never changing a result (L8), on every Highway target.

#include "tenferro/live_corpus.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "corpus/corpus_state.hpp"
#include "cpu_session_fixture.hpp"
#include "hwy_targets.hpp"
#include "kernels/search_bf16.hpp"

using namespace tenferro;
using tenferro::test::cpu_session_fixture;

namespace {

struct model_row {
    std::vector<float> v;
    std::vector<row_label> labels;
};
using model = std::map<row_id, model_row>;

std::vector<float> random_vector(std::mt19937_64& rng, std::int64_t dim) {
    std::normal_distribution<float> g;
    std::vector<float> v(static_cast<std::size_t>(dim));
    for (float& x : v) x = g(rng);
    return v;
}

// The reference (L4): matmul_top_k over the model's rows that pass `f`, gathered in id order,
// so that its tie to the lower index is the tie to the lower id.
std::vector<corpus_hit> reference(backend_session& s, const model& rows, std::span<const float> q, std::int64_t k,
                                  const row_filter* f) {
    std::vector<float> data;
    std::vector<row_id> ids;
    for (const auto& [id, r] : rows) {
        if (f != nullptr && f->ids && std::find(f->ids->begin(), f->ids->end(), id) == f->ids->end()) continue;
        if (f != nullptr && f->labels && std::none_of(r.labels.begin(), r.labels.end(), [&](row_label l) {
                return std::find(f->labels->begin(), f->labels->end(), l) != f->labels->end();
            }))
            continue;
        data.insert(data.end(), r.v.begin(), r.v.end());
        ids.push_back(id);
    }
    const auto n = static_cast<std::int64_t>(ids.size());
    const auto dim = static_cast<std::int64_t>(q.size());
    if (n == 0 || k == 0) return {};
    const tensor corpus = tensor::from(std::span<const float>(data), {n, dim});
    const tensor query = tensor::from(q, {1, dim});
    auto [values, indices] = s.matmul_top_k(query.view(), corpus.view().transposed(), std::min(k, n));
    std::vector<corpus_hit> out;
    for (std::int64_t j = 0; j < values.shape()[1]; ++j)
        out.push_back(
            corpus_hit{ids[static_cast<std::size_t>(indices.data<std::int64_t>()[j])], values.data<float>()[j]});
    return out;
}

// Every query of `queries` against the reference, bit for bit.
void check_exact(backend_session& s, const corpus_snapshot& snap, const model& rows, const std::vector<float>& queries,
                 std::int64_t dim, std::int64_t k, const std::vector<row_filter>& filters) {
    const auto m = static_cast<std::int64_t>(queries.size()) / dim;
    const tensor q = tensor::from(std::span<const float>(queries), {m, dim});
    const corpus_hits got = search(s, snap, q.view(), k, filters);
    REQUIRE(got.queries() == static_cast<std::size_t>(m));
    REQUIRE(got.seq == snap.seq());
    for (std::int64_t i = 0; i < m; ++i) {
        const auto want = reference(s, rows, std::span<const float>(queries).subspan(i * dim, dim), k,
                                    filters.empty() ? nullptr : &filters[static_cast<std::size_t>(i)]);
        const auto have = got[static_cast<std::size_t>(i)];
        REQUIRE(have.size() == want.size());
        for (std::size_t j = 0; j < want.size(); ++j) {
            INFO("query " << i << " rank " << j);
            REQUIRE(have[j].id == want[j].id);
            REQUIRE(std::bit_cast<std::uint32_t>(have[j].score) == std::bit_cast<std::uint32_t>(want[j].score));
        }
    }
}

}  // namespace

TEST_CASE("a write is applied atomically with the next sequence number, visible to later snapshots") {
    live_corpus corpus({.dim = 3, .segment_rows = 4});
    CHECK(corpus.snapshot().seq() == 0);
    CHECK(corpus.snapshot().rows() == 0);

    corpus_write w;
    w.upsert(7, {1, 0, 0}, {1, 2});
    w.upsert(std::numeric_limits<row_id>::max(), {0, 1, 0});
    w.erase(99);  // absent: counts as an item, erases nothing
    const write_result r = corpus.apply(w);
    REQUIRE(r);
    CHECK(r.seq == 1);
    CHECK(r.upserted == 2);
    CHECK(r.erased == 0);
    CHECK(corpus.snapshot().rows() == 2);

    const auto row = corpus.get(std::numeric_limits<row_id>::max());
    REQUIRE(row);
    CHECK(row->vector == std::vector<float>{0, 1, 0});
    CHECK(row->labels.empty());
    CHECK(corpus.get(7)->labels == std::vector<row_label>{1, 2});
    CHECK_FALSE(corpus.get(8));

    corpus_write u;
    u.upsert(7, {0, 0, 2}, {5});  // replaces vector and labels together
    u.erase(std::numeric_limits<row_id>::max());
    const write_result r2 = corpus.apply(u);
    CHECK(r2.seq == 2);
    CHECK(r2.upserted == 1);
    CHECK(r2.erased == 1);
    CHECK(corpus.get(7)->vector == std::vector<float>{0, 0, 2});
    CHECK(corpus.get(7)->labels == std::vector<row_label>{5});
    CHECK_FALSE(corpus.get(std::numeric_limits<row_id>::max()));
    CHECK(corpus.stats().rows == 1);
    CHECK(corpus.stats().writes == 2);
}

TEST_CASE("an invalid write names its first offending item and changes nothing (L7)") {
    live_corpus corpus({.dim = 2});
    corpus_write ok;
    ok.upsert(1, {1, 1});
    REQUIRE(corpus.apply(ok).seq == 1);
    const std::vector<row_label> seventeen(17, 3);
    struct bad_case {
        const char* name;
        corpus_write w;
        std::size_t item;
        corpus_errc code;
    };
    std::vector<bad_case> cases(5);
    cases[0] = {"wrong length", {}, 1, corpus_errc::wrong_dimension};
    cases[0].w.upsert(2, {1, 2});
    cases[0].w.upsert(3, {1, 2, 3});
    cases[1] = {"NaN", {}, 0, corpus_errc::not_finite};
    cases[1].w.upsert(2, {std::numeric_limits<float>::quiet_NaN(), 0});
    cases[2] = {"infinity", {}, 2, corpus_errc::not_finite};
    cases[2].w.erase(1);
    cases[2].w.upsert(2, {0, 1});
    cases[2].w.upsert(4, {0, std::numeric_limits<float>::infinity()});
    cases[3] = {"repeated id", {}, 2, corpus_errc::duplicate_id};
    cases[3].w.upsert(5, {0, 1});
    cases[3].w.upsert(6, {0, 1});
    cases[3].w.erase(5);
    cases[4] = {"17 labels", {}, 0, corpus_errc::too_many_labels};
    cases[4].w.upsert(5, std::vector<float>{0, 1}, seventeen);
    for (const bad_case& c : cases) {
        INFO(c.name);
        const write_result r = corpus.apply(c.w);
        CHECK(r.error == c.code);
        CHECK(r.item == c.item);
        CHECK_FALSE(r);
        CHECK(corpus.snapshot().seq() == 1);
        CHECK(corpus.snapshot().rows() == 1);
        CHECK(corpus.get(1));
    }
    CHECK(make_error_code(corpus_errc::duplicate_id).message().find("more than once") != std::string::npos);
}

TEST_CASE("a held snapshot never changes: writes and compaction go on beside it (L3, L8)") {
    cpu_session_fixture f(2);
    live_corpus corpus({.dim = 4, .segment_rows = 3});
    std::mt19937_64 rng(1);
    model rows;
    for (row_id id = 0; id < 10; ++id) {
        corpus_write w;
        auto v = random_vector(rng, 4);
        w.upsert(id * 3, v, {static_cast<row_label>(id % 3)});
        rows[id * 3] = {v, {static_cast<row_label>(id % 3)}};
        REQUIRE(corpus.apply(w));
    }
    const corpus_snapshot held = corpus.snapshot();
    const model at_held = rows;
    const auto queries = random_vector(rng, 4 * 3);
    check_exact(f.session, held, at_held, queries, 4, 5, {});

    corpus_write w;
    w.erase(0);
    w.erase(3);
    auto v = random_vector(rng, 4);
    w.upsert(6, v);
    rows.erase(0);
    rows.erase(3);
    rows[6] = {v, {}};
    REQUIRE(corpus.apply(w));
    REQUIRE(corpus.compact(f.session));
    CHECK(corpus.stats().segments == 1);
    CHECK_FALSE(corpus.needs_compaction());

    check_exact(f.session, held, at_held, queries, 4, 5, {});  // unchanged
    check_exact(f.session, corpus.snapshot(), rows, queries, 4, 5, {});
    CHECK(held.seq() == 10);
    CHECK(corpus.snapshot().seq() == 11);  // compaction writes nothing
}

TEST_CASE("a snapshot outlives its corpus and still holds its rows") {
    cpu_session_fixture f(1);
    corpus_snapshot snap;
    model rows;
    {
        live_corpus corpus({.dim = 2});
        corpus_write w;
        w.upsert(5, {1, 2});
        rows[5] = {{1, 2}, {}};
        REQUIRE(corpus.apply(w));
        snap = corpus.snapshot();
    }
    check_exact(f.session, snap, rows, {1, 1}, 2, 3, {});
}

TEST_CASE(
    "search is matmul_top_k over the live rows in id order, bit for bit, across segments and "
    "after compaction, with filters, on every target (L4, L5)") {
    cpu_session_fixture f(2);
    tenferro::test::for_each_target([&](const std::string& target) {
        INFO("target " << target);
        for (const std::int64_t dim : {3, 37, 130}) {
            INFO("dim " << dim);
            std::mt19937_64 rng(static_cast<std::uint64_t>(dim));
            live_corpus corpus({.dim = dim, .segment_rows = 97});
            model rows;
            std::uniform_int_distribution<row_id> pick_id(0, 700);
            for (int round = 0; round < 8; ++round) {
                corpus_write w;
                std::vector<row_id> used;
                for (int i = 0; i < 120; ++i) {
                    const row_id id = pick_id(rng);
                    if (std::find(used.begin(), used.end(), id) != used.end()) continue;
                    used.push_back(id);
                    if (rng() % 5 == 0) {
                        w.erase(id);
                        rows.erase(id);
                        continue;
                    }
                    // Some rows repeat an existing vector: ties, settled by the lower id.
                    std::vector<float> v = random_vector(rng, dim);
                    if (rng() % 7 == 0 && !rows.empty()) v = rows.begin()->second.v;
                    std::vector<row_label> labels;
                    for (std::uint64_t l = rng() % 4; l-- > 0;) labels.push_back(static_cast<row_label>(rng() % 6));
                    w.upsert(id, v, labels);
                    rows[id] = {v, labels};
                }
                REQUIRE(corpus.apply(w));
                if (round == 5) REQUIRE(corpus.compact(f.session));
            }
            const auto queries = random_vector(rng, dim * 6);
            std::vector<row_filter> filters(6);
            filters[1].labels = std::vector<row_label>{2};
            filters[2].labels = std::vector<row_label>{0, 4};
            filters[3].ids = std::vector<row_id>{};
            for (const auto& [id, r] : rows)
                if (id % 9 == 0) filters[3].ids->push_back(id);
            filters[3].ids->push_back(100000);  // an id that does not exist
            filters[4].ids = filters[3].ids;
            filters[4].labels = std::vector<row_label>{1};
            filters[5].labels = std::vector<row_label>{};  // passes nothing
            for (const std::int64_t k : {1, 10, 2000}) {
                INFO("k " << k);
                check_exact(f.session, corpus.snapshot(), rows, queries, dim, k, {});
                check_exact(f.session, corpus.snapshot(), rows, queries, dim, k, filters);
            }
            REQUIRE(corpus.compact(f.session));
            const corpus_stats before = corpus.stats();
            check_exact(f.session, corpus.snapshot(), rows, queries, dim, 10, {});
            const corpus_stats after = corpus.stats();
            // One compacted segment with nothing erased: the fused kernel, with the first pass
            // where the target has the instruction.
            CHECK(after.queries - before.queries == 6);
            if (kernels::native_first_pass_available() && kernels::first_pass_applies(after.rows, dim, 10))
                CHECK(after.first_pass + after.fallback - before.first_pass - before.fallback == 6);
            check_exact(f.session, corpus.snapshot(), rows, queries, dim, 10, filters);
        }
    });
}

TEST_CASE("a compacted corpus runs the bf16 first pass where the target has it, exactly") {
    cpu_session_fixture f(2);
    tenferro::test::for_each_target([&](const std::string& target) {
        INFO("target " << target);
        const std::int64_t dim = 48;
        std::mt19937_64 rng(3);
        live_corpus corpus({.dim = dim, .segment_rows = 1000});
        model rows;
        for (row_id base = 0; base < 6000; base += 1500) {
            corpus_write w;
            for (row_id id = base; id < base + 1500; ++id) {
                auto v = random_vector(rng, dim);
                w.upsert(id * 7919 % 100003, v);
                rows[id * 7919 % 100003] = {v, {}};
            }
            REQUIRE(corpus.apply(w));
        }
        REQUIRE(corpus.compact(f.session));
        const auto queries = random_vector(rng, dim * 5);
        const corpus_stats before = corpus.stats();
        check_exact(f.session, corpus.snapshot(), rows, queries, dim, 10, {});
        const corpus_stats after = corpus.stats();
        if (kernels::native_first_pass_available()) {
            CHECK(after.first_pass - before.first_pass == 5);
            CHECK(after.rows_scored - before.rows_scored < 5 * 6000 / 4);
        } else {
            CHECK(after.first_pass == before.first_pass);
        }
    });
}

TEST_CASE("search is batch-invariant: a query's hits do not depend on the others in its batch") {
    cpu_session_fixture f(2);
    const std::int64_t dim = 64;
    std::mt19937_64 rng(9);
    live_corpus corpus({.dim = dim, .segment_rows = 500});
    for (row_id base = 0; base < 3000; base += 600) {
        corpus_write w;
        for (row_id id = base; id < base + 600; ++id)
            w.upsert(id, random_vector(rng, dim), {static_cast<row_label>(id % 10)});
        REQUIRE(corpus.apply(w));
    }
    corpus_write e;
    for (row_id id = 0; id < 3000; id += 17) e.erase(id);
    REQUIRE(corpus.apply(e));
    const auto snap = corpus.snapshot();
    const auto queries = random_vector(rng, dim * 40);
    std::vector<row_filter> filters(40);
    for (std::size_t i = 0; i < 40; i += 3) filters[i].labels = std::vector<row_label>{static_cast<row_label>(i % 10)};
    const tensor all = tensor::from(std::span<const float>(queries), {40, dim});
    const corpus_hits together = search(f.session, snap, all.view(), 7, filters);
    for (std::int64_t i = 0; i < 40; ++i) {
        const tensor one = tensor::from(std::span<const float>(queries).subspan(i * dim, dim), {1, dim});
        const corpus_hits alone = search(f.session, snap, one.view(), 7,
                                         std::span<const row_filter>(&filters[static_cast<std::size_t>(i)], 1));
        REQUIRE(std::equal(alone[0].begin(), alone[0].end(), together[static_cast<std::size_t>(i)].begin(),
                           together[static_cast<std::size_t>(i)].end()));
    }
}

TEST_CASE("search refuses bad operands with a tensor_error naming them") {
    cpu_session_fixture f(1);
    live_corpus corpus({.dim = 4});
    const auto snap = corpus.snapshot();
    const tensor q3 = tensor::from(std::vector<float>{1, 2, 3}, {1, 3});
    CHECK_THROWS_WITH(search(f.session, snap, q3.view(), 1), Catch::Contains("dimension is 4"));
    const tensor q4 = tensor::from(std::vector<float>{1, 2, 3, 4}, {1, 4});
    CHECK_THROWS_WITH(search(f.session, snap, q4.view(), -1), Catch::Contains("k is negative"));
    std::vector<row_filter> two(2);
    CHECK_THROWS_WITH(search(f.session, snap, q4.view(), 1, two), Catch::Contains("filters has 2"));
    CHECK_THROWS_WITH(search(f.session, corpus_snapshot{}, q4.view(), 1), Catch::Contains("snapshot is empty"));
    CHECK(search(f.session, snap, q4.view(), 3)[0].empty());
}

TEST_CASE("a normalising corpus searches unit rows and returns rows as written; it refuses zero vectors") {
    cpu_session_fixture f(1);
    live_corpus corpus({.dim = 3, .normalize = true});
    corpus_write w;
    w.upsert(1, {3, 0, 4});
    w.upsert(2, {0, 0.1f, 0});
    REQUIRE(corpus.apply(w));
    CHECK(corpus.get(1)->vector == std::vector<float>{3, 0, 4});
    corpus_write zero;
    zero.upsert(3, {0, 0, 0});
    const write_result r = corpus.apply(zero);
    CHECK(r.error == corpus_errc::zero_vector);
    model unit;
    unit[1] = {{static_cast<float>(3.0 / 5.0), 0, static_cast<float>(4.0 / 5.0)}, {}};
    unit[2] = {{0, 1, 0}, {}};
    check_exact(f.session, corpus.snapshot(), unit, {0.6f, 0.8f, 0}, 3, 2, {});
    REQUIRE(corpus.compact());
    CHECK(corpus.get(2)->vector == std::vector<float>{0, 0.1f, 0});
    check_exact(f.session, corpus.snapshot(), unit, {0.6f, 0.8f, 0}, 3, 2, {});
}

TEST_CASE("the first pass with masks (erased rows, filters) is exact on every target, native or emulated") {
    cpu_session_fixture f(2);
    struct emulate_guard {
        emulate_guard() { detail::corpus::emulate_first_pass = true; }
        ~emulate_guard() { detail::corpus::emulate_first_pass = false; }
    } emulate;
    tenferro::test::for_each_target([&](const std::string& target) {
        INFO("target " << target);
        const std::int64_t dim = 40;
        std::mt19937_64 rng(17);
        live_corpus corpus({.dim = dim, .segment_rows = 1000});
        model rows;
        corpus_write w;
        for (row_id id = 0; id < 5000; ++id) {
            auto v = random_vector(rng, dim);
            if (id % 11 == 0) v = rows.begin() == rows.end() ? v : rows.begin()->second.v;  // ties
            const std::vector<row_label> labels{static_cast<row_label>(id % 3)};
            w.upsert(id, v, labels);
            rows[id] = {v, labels};
        }
        REQUIRE(corpus.apply(w));
        REQUIRE(corpus.compact(f.session));
        corpus_write e;  // 5 % erased after the compaction: the compacted segment now masks them
        for (row_id id = 0; id < 5000; id += 20) {
            e.erase(id);
            rows.erase(id);
        }
        REQUIRE(corpus.apply(e));
        const auto queries = random_vector(rng, dim * 4);
        std::vector<row_filter> filters(4);
        filters[1].labels = std::vector<row_label>{1, 2};  // two thirds pass: the fused kernel
        filters[2].labels = std::vector<row_label>{0};     // a third pass: still fused
        filters[3].ids = std::vector<row_id>{};
        for (row_id id = 1; id < 5000; id += 3) filters[3].ids->push_back(id);
        const corpus_stats before = corpus.stats();
        check_exact(f.session, corpus.snapshot(), rows, queries, dim, 10, filters);
        check_exact(f.session, corpus.snapshot(), rows, queries, dim, 10, {});
        const corpus_stats after = corpus.stats();
        CHECK(after.first_pass + after.fallback - before.first_pass - before.fallback == 8);
    });
}

TEST_CASE("an unsorted segment's ties at the k-th place go to the lower id, not to the earlier row") {
    cpu_session_fixture f(1);
    live_corpus corpus({.dim = 2});
    corpus_write w;
    for (row_id id : {50, 40, 30, 20, 10}) w.upsert(id, {1, 1});  // one vector, ids in falling order
    w.upsert(60, {0, 1});
    REQUIRE(corpus.apply(w));
    const tensor q = tensor::from(std::vector<float>{1, 0}, {1, 2});
    const corpus_hits hits = search(f.session, corpus.snapshot(), q.view(), 2);
    REQUIRE(hits[0].size() == 2);
    CHECK(hits[0][0].id == 10);
    CHECK(hits[0][1].id == 20);
    model rows;
    for (row_id id : {50, 40, 30, 20, 10}) rows[id] = {{1, 1}, {}};
    rows[60] = {{0, 1}, {}};
    for (const std::int64_t k : {1, 3, 5, 6}) check_exact(f.session, corpus.snapshot(), rows, {1, 0}, 2, k, {});
}
