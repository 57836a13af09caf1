#include "kernels/search_bf16.hpp"
// The header under test comes first, alone: it must compile on its own.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hwy_targets.hpp"
#include "kernels/gemm_top_k.hpp"
#include "kernels/hwy_control.hpp"

// The bf16 first pass with exact re-ranking (docs/design/exact-search-first-pass.md) against the
// f32 fused kernel, bit for bit, on every compiled target this CPU supports: through the
// emulation of VDPBF16PS everywhere, and through the instruction itself where the target has it.
// The emulation itself is compared with the instruction lane by lane where the CPU has it.

namespace {

namespace k = tenferro::kernels;
using tenferro::test::for_each_target;

std::uint32_t bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float from_bits(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

struct aligned_buffer {
    struct del {
        void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
    };
    std::unique_ptr<std::byte[], del> p;
    explicit aligned_buffer(std::size_t n) : p(static_cast<std::byte*>(::operator new[](n, std::align_val_t{64}))) {}
};

// m queries and a corpus of n rows, d values each (row-major: the corpus is B = corpus^T, k x n).
struct problem {
    std::int64_t m, n, d, count;
    std::vector<float> q, x;
};

struct result {
    std::vector<float> values;
    std::vector<std::int64_t> indices;
};

k::gemm_top_k_operands operands(const problem& p, result& r) {
    r.values.assign(static_cast<std::size_t>(p.m * p.count), -1.0f);
    r.indices.assign(static_cast<std::size_t>(p.m * p.count), -1);
    k::gemm_top_k_operands op{};
    op.m = p.m;
    op.n = p.n;
    op.k = p.d;
    op.count = p.count;
    op.a = p.q.data();
    op.a_row_stride = p.d;
    op.a_col_stride = 1;
    op.b = p.x.data();
    op.b_row_stride = 1;
    op.b_col_stride = p.d;
    op.values = r.values.data();
    op.values_row_stride = p.count;
    op.values_col_stride = 1;
    op.indices = r.indices.data();
    op.indices_row_stride = p.count;
    op.indices_col_stride = 1;
    return op;
}

// Runs a task partition one piece at a time, so that a plan of several tasks runs them all.
const auto serial_runner = [](std::int64_t count, k::gemm_body body) {
    for (std::int64_t t = 0; t < count; ++t) body(t, t + 1);
};

void require_same(const problem& p, const result& want, const result& got, const std::string& what) {
    for (std::int64_t i = 0; i < p.m; ++i)
        for (std::int64_t e = 0; e < p.count; ++e) {
            const auto at = static_cast<std::size_t>(i * p.count + e);
            if (bits(want.values[at]) != bits(got.values[at]) || want.indices[at] != got.indices[at]) {
                INFO(what << ": query " << i << ", rank " << e << ": f32 " << want.values[at] << " at "
                          << want.indices[at] << ", first pass " << got.values[at] << " at " << got.indices[at]);
                REQUIRE(false);
            }
        }
}

// The f32 result and the first pass's (emulated, and native where the target has it), with one
// and with three tasks, with and without the packed f32 corpus. Returns the counters of the
// emulated single-task run.
k::search_counters check(const problem& p, const std::string& what) {
    aligned_buffer corpus(k::bf16_corpus_bytes(p.d, p.n));
    k::make_bf16_corpus(p.x.data(), 1, p.d, p.d, p.n, corpus.p.get());
    k::search_counters first{};
    for (const int threads : {1, 3}) {
        const k::gemm_top_k_plan plan = k::plan_gemm_top_k(k::gemm_type::f32, p.m, p.n, p.d, p.count, threads);
        result want;
        k::gemm_top_k(k::gemm_type::f32, operands(p, want), plan, nullptr, nullptr, serial_runner);
        std::vector<std::byte> packed(k::packed_b_bytes(plan.gemm));
        k::pack_b(plan.gemm, p.x.data(), 1, p.d, packed.data());
        std::vector<k::first_pass> hows{k::first_pass::emulated};
        if (k::native_first_pass_available()) hows.push_back(k::first_pass::native);
        for (const k::first_pass how : hows)
            for (const bool use_packed : {false, true}) {
                result got;
                k::search_counters counters{};
                k::gemm_top_k_bf16(operands(p, got), plan, use_packed ? packed.data() : nullptr, corpus.p.get(), how,
                                   &counters, serial_runner);
                require_same(p, want, got,
                             what + (how == k::first_pass::native ? ", native" : ", emulated") + ", " +
                                 std::to_string(threads) + " task(s)" + (use_packed ? ", packed" : ""));
                REQUIRE(counters.queries == p.m);
                REQUIRE(counters.first_pass + counters.fallback == p.m);
                if (threads == 1 && how == k::first_pass::emulated && !use_packed) first = counters;
            }
    }
    return first;
}

problem gaussian(std::int64_t m, std::int64_t n, std::int64_t d, std::int64_t count, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    problem p{m, n, d, count, {}, {}};
    p.q.resize(static_cast<std::size_t>(m * d));
    p.x.resize(static_cast<std::size_t>(n * d));
    for (float& v : p.q) v = g(rng);
    for (float& v : p.x) v = g(rng);
    return p;
}

}  // namespace

TEST_CASE("to_bf16 rounds to nearest even and flushes denormals", "[search_bf16]") {
    REQUIRE(k::to_bf16(1.0f) == 0x3f80);
    REQUIRE(k::to_bf16(-2.0f) == 0xc000);
    REQUIRE(k::to_bf16(from_bits(0x3f808000)) == 0x3f80);  // tie, even below
    REQUIRE(k::to_bf16(from_bits(0x3f818000)) == 0x3f82);  // tie, even above
    REQUIRE(k::to_bf16(from_bits(0x3f808001)) == 0x3f81);  // above the tie
    REQUIRE(k::to_bf16(from_bits(0x3f807fff)) == 0x3f80);  // below the tie
    REQUIRE(k::to_bf16(from_bits(0x00400000)) == 0x0000);  // denormal: +0
    REQUIRE(k::to_bf16(from_bits(0x80000001)) == 0x8000);  // denormal: -0
    REQUIRE(k::to_bf16(from_bits(0x00800000)) == 0x0080);  // the smallest normal stays
    REQUIRE(k::to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to infinity
    REQUIRE(k::to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
    REQUIRE(k::to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
    REQUIRE((k::to_bf16(from_bits(0x7f800001)) & 0x7fc0) == 0x7fc0);  // a signalling NaN: quiet NaN
    for (std::uint32_t h = 0; h < 0x10000; ++h) {  // every finite normal bf16 converts to itself
        const auto b = static_cast<std::uint16_t>(h);
        const std::uint32_t e = h & 0x7f80u;
        if (e == 0 || e == 0x7f80u) continue;
        REQUIRE(k::to_bf16(k::from_bf16(b)) == b);
    }
}

TEST_CASE("emulate_vdpbf16ps: the order, the flushing and the rounding of the instruction", "[search_bf16]") {
    auto pair = [](float lo, float hi) {
        return static_cast<std::uint32_t>(k::to_bf16(lo)) | static_cast<std::uint32_t>(k::to_bf16(hi)) << 16;
    };
    // Odd element first: (1 + 2^24 * 1) + 1 * 1 rounds twice to 2^24 (ties to even); the even
    // element first would give (1 + 1) + 2^24 = 2^24 + 2, one fused two-term sum 2^24 + 2 too.
    REQUIRE(k::emulate_vdpbf16ps(1.0f, pair(1.0f, 0x1p24f), pair(1.0f, 1.0f)) == 0x1p24f);
    REQUIRE(k::emulate_vdpbf16ps(0.0f, pair(1.0f, 0x1p24f), pair(1.0f, 1.0f)) == 0x1p24f);
    // Denormal results are flushed to a zero of their sign, denormal inputs read as zero.
    REQUIRE(bits(k::emulate_vdpbf16ps(0.0f, pair(0.0f, 0x1p-70f), pair(0.0f, 0x1p-70f))) == 0u);
    REQUIRE(bits(k::emulate_vdpbf16ps(0.0f, pair(-0x1p-70f, 0.0f), pair(0x1p-70f, 0.0f))) == 0x80000000u);
    // (-0 flushed from the odd pair) + 0 * 0 is +0.
    REQUIRE(bits(k::emulate_vdpbf16ps(0.0f, pair(0.0f, -0x1p-70f), pair(0.0f, 0x1p-70f))) == 0u);
    REQUIRE(k::emulate_vdpbf16ps(from_bits(0x00400000), pair(0.0f, 0.0f), pair(0.0f, 0.0f)) == 0.0f);
    // Tininess after rounding: 2^-126 - 1.5 * 2^-151 rounds (24 bits) below 2^-126: flushed;
    // 2^-126 - 2^-152 rounds to 2^-126: kept.
    const std::uint32_t one_pair = pair(0.0f, 1.0f);
    REQUIRE(k::emulate_vdpbf16ps(0x1p-126f, pair(0.0f, -1.5f * 0x1p-75f), pair(0.0f, 0x1p-76f)) == 0.0f);
    REQUIRE(k::emulate_vdpbf16ps(0x1p-126f, pair(0.0f, -0x1p-76f), pair(0.0f, 0x1p-76f)) == 0x1p-126f);
    REQUIRE(k::emulate_vdpbf16ps(2.0f, one_pair, one_pair) == 3.0f);

    // Against the instruction, where this CPU and a compiled target have it.
    std::mt19937 rng(47);
    std::vector<float> acc;
    std::vector<std::uint32_t> a, b;
    auto any_bf16 = [&](int lo_exp, int hi_exp) {
        std::uniform_int_distribution<int> e(lo_exp, hi_exp), mant(0, 127), sign(0, 1);
        const int ex = e(rng);
        const float v = std::ldexp(1.0f + static_cast<float>(mant(rng)) / 128.0f, ex);
        return k::to_bf16(sign(rng) != 0 ? -v : v);
    };
    auto any_float = [&](int lo_exp, int hi_exp) {
        std::uniform_int_distribution<int> e(lo_exp, hi_exp), sign(0, 1);
        std::uniform_int_distribution<std::uint32_t> mant(0, (1u << 23) - 1);
        const float v = std::ldexp(1.0f + static_cast<float>(mant(rng)) * 0x1p-23f, e(rng));
        return sign(rng) != 0 ? -v : v;
    };
    for (int i = 0; i < 16 * 4096; ++i) {
        const int kind = i % 4;
        // 0: ordinary values; 1: near the underflow threshold; 2: denormal accumulators and
        // bf16 denormals (raw bits); 3: cancellation.
        if (kind == 0) {
            acc.push_back(any_float(-20, 20));
            a.push_back(any_bf16(-20, 20) | static_cast<std::uint32_t>(any_bf16(-20, 20)) << 16);
            b.push_back(any_bf16(-20, 20) | static_cast<std::uint32_t>(any_bf16(-20, 20)) << 16);
        } else if (kind == 1) {
            acc.push_back(any_float(-128, -124));
            a.push_back(any_bf16(-66, -60) | static_cast<std::uint32_t>(any_bf16(-66, -60)) << 16);
            b.push_back(any_bf16(-66, -60) | static_cast<std::uint32_t>(any_bf16(-66, -60)) << 16);
        } else if (kind == 2) {
            std::uniform_int_distribution<std::uint32_t> small(0, 0x007fffff), half(0, 0x007f);
            acc.push_back(from_bits(small(rng)));
            a.push_back(half(rng) | (half(rng) | 0x3f80u) << 16);
            b.push_back((half(rng) | 0x4000u) | half(rng) << 16);
        } else {
            const float x = any_float(-10, 10);
            acc.push_back(x);
            const std::uint16_t h = k::to_bf16(-x);
            a.push_back(k::to_bf16(1.0f) | static_cast<std::uint32_t>(h) << 16);
            b.push_back(any_bf16(-30, -20) | static_cast<std::uint32_t>(k::to_bf16(1.0f)) << 16);
        }
    }
    // The crafted lanes above, too.
    acc.insert(acc.end(), {0x1p-126f, 0x1p-126f, 1.0f, 0.0f});
    a.insert(a.end(), {pair(0.0f, -1.5f * 0x1p-75f), pair(0.0f, -0x1p-76f), pair(1.0f, 0x1p24f), pair(0.0f, 0x1p-70f)});
    b.insert(b.end(), {pair(0.0f, 0x1p-76f), pair(0.0f, 0x1p-76f), pair(1.0f, 1.0f), pair(0.0f, 0x1p-70f)});
    while (acc.size() % 16 != 0) {
        acc.push_back(1.0f);
        a.push_back(one_pair);
        b.push_back(one_pair);
    }
    int compared = 0;
    for_each_target([&](const std::string& target) {
        std::vector<float> out(acc.size());
        if (!k::native_vdpbf16ps(acc.data(), a.data(), b.data(), out.data(), acc.size())) return;
        ++compared;
        for (std::size_t i = 0; i < acc.size(); ++i) {
            const float e = k::emulate_vdpbf16ps(acc[i], a[i], b[i]);
            if (bits(e) != bits(out[i])) {
                INFO(target << " lane " << i << ": acc " << bits(acc[i]) << " a " << a[i] << " b " << b[i]
                            << ": instruction " << bits(out[i]) << ", emulation " << bits(e));
                REQUIRE(false);
            }
        }
    });
    // Where this CPU runs a compiled target with the instruction, the comparison must have run.
    bool cpu_has_it = false;
    for (const std::int64_t t : k::hwy_control::supported_and_generated()) {
        const std::string name = k::hwy_control::target_name(t);
        cpu_has_it = cpu_has_it || name == "AVX3_ZEN4" || name == "AVX3_SPR";
    }
    REQUIRE(compared == (cpu_has_it ? 1 : 0));
    if (compared == 0) WARN("no target with VDPBF16PS on this CPU: the emulation was not compared with it");
}

TEST_CASE("bf16 first pass: random corpora, the f32 path's bits", "[search_bf16]") {
    for_each_target([&](const std::string& target) {
        for (const std::int64_t d : {16, 129, 768}) {
            const std::int64_t n = d == 768 ? 640 : 1500, m = d == 768 ? 5 : 11;
            for (const std::int64_t count : {1, 10}) {
                const problem p = gaussian(m, n, d, count, static_cast<std::uint32_t>(d * 100 + count));
                const k::search_counters c = check(p, target + " gaussian d=" + std::to_string(d));
                // The first pass answers every such query and re-ranks few rows.
                REQUIRE(c.first_pass == m);
                REQUIRE(c.reranked <= m * (count + 40));
            }
        }
        // k = 100 over 2,000 rows.
        const problem p = gaussian(4, 2000, 64, 100, 9);
        const k::search_counters c = check(p, target + " gaussian k=100");
        REQUIRE(c.first_pass == 4);
    });
}

TEST_CASE("bf16 first pass: adversarial corpora stay exact", "[search_bf16]") {
    for_each_target([&](const std::string& target) {
        const std::int64_t n = 700, d = 48, m = 6;
        SECTION("all-equal scores: every query falls back") {
            problem p = gaussian(m, n, d, 10, 1);
            for (std::int64_t j = 1; j < n; ++j) std::copy_n(p.x.begin(), d, p.x.begin() + j * d);
            const k::search_counters c = check(p, target + " all equal");
            REQUIRE(c.fallback == m);
        }
        SECTION("near ties: rows one ulp apart") {
            problem p = gaussian(m, n, d, 10, 2);
            for (std::int64_t j = 1; j < n; j += 2)
                for (std::int64_t e = 0; e < d; ++e) {
                    const float v = p.x[static_cast<std::size_t>((j - 1) * d + e)];
                    p.x[static_cast<std::size_t>(j * d + e)] = e == j % d ? std::nextafter(v, 2 * v) : v;
                }
            check(p, target + " near ties");
        }
        SECTION("huge dynamic range: rows and queries scaled by 2^-40 .. 2^40") {
            problem p = gaussian(m, n, d, 10, 3);
            std::mt19937 rng(3);
            std::uniform_int_distribution<int> e(-40, 40);
            for (std::int64_t j = 0; j < n; ++j) {
                const int s = e(rng);
                for (std::int64_t t = 0; t < d; ++t) p.x[static_cast<std::size_t>(j * d + t)] *= std::ldexp(1.0f, s);
            }
            for (std::int64_t i = 0; i < m; ++i) {
                const int s = e(rng);
                for (std::int64_t t = 0; t < d; ++t) p.q[static_cast<std::size_t>(i * d + t)] *= std::ldexp(1.0f, s);
            }
            check(p, target + " dynamic range");
        }
        SECTION("within a row: elements from 2^-60 to 2^30") {
            problem p = gaussian(m, n, d, 10, 4);
            for (std::size_t t = 0; t < p.x.size(); ++t) p.x[t] *= std::ldexp(1.0f, static_cast<int>(t % 91) - 60);
            check(p, target + " row range");
        }
        SECTION("tiny and zero norms: denormal rows, zero rows, a zero query") {
            problem p = gaussian(m, n, d, 10, 5);
            for (std::int64_t j = 0; j < n; ++j)
                for (std::int64_t t = 0; t < d; ++t) {
                    float& v = p.x[static_cast<std::size_t>(j * d + t)];
                    if (j % 3 == 0) v *= 0x1p-140f;  // denormal
                    if (j % 3 == 1) v *= 0x1p-120f;  // tiny products: flushed in the first pass
                    if (j % 7 == 0) v = 0.0f;
                }
            for (std::int64_t t = 0; t < d; ++t) p.q[static_cast<std::size_t>(2 * d + t)] = 0.0f;
            for (std::int64_t t = 0; t < d; ++t) p.q[static_cast<std::size_t>(3 * d + t)] *= 0x1p-100f;
            check(p, target + " tiny norms");
        }
        SECTION("NaN and infinities in rows and queries; norms past the range guard") {
            problem p = gaussian(m, n, d, 10, 6);
            const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
            p.x[static_cast<std::size_t>(17 * d + 3)] = nan;
            p.x[static_cast<std::size_t>(40 * d + 0)] = inf;  // inf * 0 where a query has 0 there: NaN
            p.x[static_cast<std::size_t>(41 * d + 5)] = -inf;
            p.x[static_cast<std::size_t>(600 * d + 7)] = 0x1p100f;  // flagged by its norm
            p.x[static_cast<std::size_t>(601 * d + 7)] = -0x1p70f;
            p.q[static_cast<std::size_t>(1 * d + 0)] = 0.0f;
            p.q[static_cast<std::size_t>(2 * d + 9)] = inf;       // the query falls back
            p.q[static_cast<std::size_t>(3 * d + 9)] = 0x1p90f;  // past the range guard: falls back
            p.q[static_cast<std::size_t>(4 * d + 1)] = nan;
            const k::search_counters c = check(p, target + " nan inf");
            REQUIRE(c.fallback >= 3);
        }
        SECTION("k close to n") {
            problem p = gaussian(3, 300, d, 299, 7);
            const k::search_counters c = check(p, target + " k = n - 1");
            REQUIRE(c.fallback == 3);
            problem q = gaussian(3, 1300, d, 90, 8);  // the first pass runs, many candidates
            check(q, target + " k = 90 of 1300");
        }
        SECTION("one adversarial query in a batch falls back alone") {
            problem p = gaussian(m, n, d, 5, 10);
            // Query 2 is orthogonal to a subspace where rows 0..599 differ: its scores are all equal.
            for (std::int64_t j = 0; j < n; ++j)
                for (std::int64_t t = d / 2; t < d; ++t) p.x[static_cast<std::size_t>(j * d + t)] = 1.0f;
            for (std::int64_t t = 0; t < d; ++t) p.q[static_cast<std::size_t>(2 * d + t)] = t < d / 2 ? 0.0f : 1.0f;
            const k::search_counters c = check(p, target + " one adversarial query");
            REQUIRE(c.fallback == 1);
            REQUIRE(c.first_pass == m - 1);
        }
    });
}
