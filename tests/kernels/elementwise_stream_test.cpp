#include "kernels/elementwise.hpp"
// The header under test comes first, alone: it must compile on its own.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hwy_targets.hpp"

// The non-temporal-store path of the elementwise kernels (outputs whose operands span more than
// stream_threshold_bytes()). The threshold is forced down so that small arrays take it; every result is
// compared bit for bit with the same op on regular stores and with a scalar reference, at unaligned heads
// and tails (every offset of a vector), with canaries either side of the output, on every Highway target.

namespace {

namespace k = tenferro::kernels;
using tenferro::test::for_each_target;

constexpr float canary = -12345.5f;

// Restores the default threshold when a test ends, also on failure.
struct threshold_guard {
    explicit threshold_guard(std::size_t bytes) { k::set_stream_threshold_bytes(bytes); }
    ~threshold_guard() { k::set_stream_threshold_bytes(0); }
};

std::vector<float> inputs(std::size_t n, std::uint32_t seed) {
    std::vector<float> v(n);
    std::uint32_t s = seed * 2654435761u + 1;
    for (auto& x : v) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        x = static_cast<float>(s >> 8) * (1.0f / 16777216.0f) * 8.0f - 4.0f;
    }
    return v;
}

k::nd_loop<3> loop3(std::int64_t n) {
    const std::int64_t shape[] = {n}, unit[] = {1};
    return k::make_loop<3>(shape, {std::span<const std::int64_t>(unit), std::span<const std::int64_t>(unit),
                                   std::span<const std::int64_t>(unit)});
}

k::nd_loop<2> loop2(std::int64_t n) {
    const std::int64_t shape[] = {n}, unit[] = {1};
    return k::make_loop<2>(shape, {std::span<const std::int64_t>(unit), std::span<const std::int64_t>(unit)});
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// out = a + b and out = a * 0.5 + b * 0.25 (axpby) at output offset `oo` (elements past a 64-byte boundary),
// with streaming forced on (threshold 1 byte) and off; both must equal the scalar reference bit for bit.
void check_binary(std::int64_t n, std::int64_t oo, std::int64_t ao) {
    const auto a_src = inputs(static_cast<std::size_t>(n + ao), 1);
    const auto b_src = inputs(static_cast<std::size_t>(n), 2);
    const float* a = a_src.data() + ao;
    const float* b = b_src.data();
    alignas(64) static float out_buf[(1 << 16) + 64];
    REQUIRE(static_cast<std::size_t>(n + oo + 2) <= std::size(out_buf));
    for (const bool stream : {true, false}) {
        const threshold_guard guard(stream ? 1 : std::numeric_limits<std::size_t>::max());
        // which: 0-2 the loop forms (add, maximum, axpby), 3-5 the same ops through the dense entry
        // points, 6 a dense add in three chunks of one op (offsets and heads that are not the op's;
        // for n < 5 a chunk is empty).
        for (int which = 0; which < 7; ++which) {
            std::fill(std::begin(out_buf), std::end(out_buf), canary);
            float* out = out_buf + 1 + oo;  // out_buf[0] is the canary before
            const auto loop = loop3(n);
            if (which == 0) k::binary(k::binary_op::add, loop, out, a, b, 0, n);
            if (which == 1) k::binary(k::binary_op::maximum, loop, out, a, b, 0, n);
            if (which == 2) k::axpby(loop, 0.5f, a, 0.25f, b, out, 0, n);
            if (which == 3) k::binary_dense(k::binary_op::add, out, a, b, n, n);
            if (which == 4) k::binary_dense(k::binary_op::maximum, out, a, b, n, n);
            if (which == 5) k::axpby_dense(0.5f, a, 0.25f, b, out, n, n);
            if (which == 6) {
                const std::int64_t cut1 = n / 3, cut2 = n - n / 5;
                k::binary_dense(k::binary_op::add, out, a, b, cut1, n);
                k::binary_dense(k::binary_op::add, out + cut1, a + cut1, b + cut1, cut2 - cut1, n);
                k::binary_dense(k::binary_op::add, out + cut2, a + cut2, b + cut2, n - cut2, n);
            }
            INFO("n " << n << " out offset " << oo << " a offset " << ao << " stream " << stream << " op " << which);
            REQUIRE(same_bits(out_buf[oo], canary));
            REQUIRE(same_bits(out[n], canary));
            for (std::int64_t i = 0; i < n; ++i) {
                const int op = which % 3;
                const float want = op == 0   ? a[i] + b[i]
                                   : op == 1 ? (a[i] >= b[i] ? a[i] : b[i])
                                             : std::fma(0.5f, a[i], 0.25f * b[i]);
                // axpby's single rounding holds on FMA targets only; compare it loosely, the rest exactly.
                if (op == 2) {
                    REQUIRE(std::fabs(out[i] - want) <= 1e-6f * (std::fabs(want) + 1.0f));
                } else if (!same_bits(out[i], want)) {
                    FAIL_CHECK("element " << i << ": " << out[i] << " != " << want);
                    return;
                }
            }
        }
    }
}

}  // namespace

TEST_CASE("the streaming threshold defaults to a plausible cache size and can be set", "[elementwise][stream]") {
    const std::size_t llc = k::stream_threshold_bytes();
    CHECK(llc >= (std::size_t{256} << 10));
    CHECK(llc <= (std::size_t{64} << 30));
    {
        const threshold_guard guard(12345);
        CHECK(k::stream_threshold_bytes() == 12345);
    }
    CHECK(k::stream_threshold_bytes() == llc);
}

TEST_CASE("streamed binary and axpby outputs match regular stores at every alignment", "[elementwise][stream]") {
    for_each_target([&](const std::string& target) {
        INFO("target " << target);
        // 1024 floats = the 4 KiB minimum run for streaming; 1023 stays below it; 5003 is odd.
        for (const std::int64_t n : {1, 17, 1023, 1024, 1041, 5003, 65536 - 7}) {
            for (std::int64_t oo = 0; oo < 17; ++oo) check_binary(n, oo, (oo * 5) % 7);
        }
    });
}

TEST_CASE("streamed unary outputs, in place and out of place", "[elementwise][stream]") {
    const std::int64_t n = 4099;
    const auto x = inputs(static_cast<std::size_t>(n + 32), 3);
    for_each_target([&](const std::string& target) {
        INFO("target " << target);
        for (std::int64_t oo = 0; oo < 17; ++oo) {
            std::vector<float> ref(static_cast<std::size_t>(n));
            {
                const threshold_guard guard(std::numeric_limits<std::size_t>::max());
                k::unary(k::unary_op::sqrt, loop2(n), ref.data(), x.data() + oo, 0, n);
            }
            const threshold_guard guard(1);
            std::vector<float> buf(static_cast<std::size_t>(n + 40), canary);
            float* out = buf.data() + 1 + oo;
            k::unary(k::unary_op::sqrt, loop2(n), out, x.data() + oo, 0, n);
            REQUIRE(same_bits(buf[static_cast<std::size_t>(oo)], canary));
            REQUIRE(same_bits(out[n], canary));
            for (std::int64_t i = 0; i < n; ++i) REQUIRE(same_bits(out[i], ref[static_cast<std::size_t>(i)]));
            // The dense entry point, streamed too: the same bits.
            std::fill(buf.begin(), buf.end(), canary);
            k::unary_dense(k::unary_op::sqrt, out, x.data() + oo, n, n);
            REQUIRE(same_bits(buf[static_cast<std::size_t>(oo)], canary));
            REQUIRE(same_bits(out[n], canary));
            for (std::int64_t i = 0; i < n; ++i) REQUIRE(same_bits(out[i], ref[static_cast<std::size_t>(i)]));
            // In place: out = -out, twice, gives the original bits back.
            k::unary(k::unary_op::neg, loop2(n), out, out, 0, n);
            for (std::int64_t i = 0; i < n; ++i) REQUIRE(same_bits(out[i], -ref[static_cast<std::size_t>(i)]));
            k::unary(k::unary_op::neg, loop2(n), out, out, 0, n);
            for (std::int64_t i = 0; i < n; ++i) REQUIRE(same_bits(out[i], ref[static_cast<std::size_t>(i)]));
            k::unary_dense(k::unary_op::neg, out, out, n, n);  // and through the dense entry point
            for (std::int64_t i = 0; i < n; ++i) REQUIRE(same_bits(out[i], -ref[static_cast<std::size_t>(i)]));
        }
    });
}

TEST_CASE("streamed outputs of a strided view (rows with a padded pitch), split into chunks", "[elementwise][stream]") {
    // out is a [rows, cols] view into a buffer with pitch cols + 5, starting 3 elements in: every row is a
    // run of its own, unaligned differently; b is broadcast along the rows (stride 0 on the first axis).
    const std::int64_t rows = 7, cols = 2053, pitch = cols + 5;
    const auto a = inputs(static_cast<std::size_t>(rows * cols), 4);
    const auto b = inputs(static_cast<std::size_t>(cols), 5);
    const std::int64_t shape[] = {rows, cols};
    const std::int64_t so[] = {pitch, 1}, sa[] = {cols, 1}, sb[] = {0, 1};
    const auto loop = k::make_loop<3>(shape, {std::span<const std::int64_t>(so), std::span<const std::int64_t>(sa),
                                              std::span<const std::int64_t>(sb)});
    for_each_target([&](const std::string& target) {
        INFO("target " << target);
        std::vector<float> ref(static_cast<std::size_t>(rows * pitch + 8), canary);
        {
            const threshold_guard guard(std::numeric_limits<std::size_t>::max());
            k::binary(k::binary_op::sub, loop, ref.data() + 3, a.data(), b.data(), 0, rows * cols);
        }
        const threshold_guard guard(1);
        std::vector<float> got(ref.size(), canary);
        // Three chunks, as an op split over workers would run them (boundaries inside rows).
        const std::int64_t total = rows * cols, c1 = total / 3 + 11, c2 = 2 * total / 3 - 7;
        k::binary(k::binary_op::sub, loop, got.data() + 3, a.data(), b.data(), 0, c1);
        k::binary(k::binary_op::sub, loop, got.data() + 3, a.data(), b.data(), c1, c2);
        k::binary(k::binary_op::sub, loop, got.data() + 3, a.data(), b.data(), c2, total);
        for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(same_bits(got[i], ref[i]));
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t c = 0; c < cols; ++c)
                REQUIRE(same_bits(got[static_cast<std::size_t>(3 + r * pitch + c)],
                                  a[static_cast<std::size_t>(r * cols + c)] - b[static_cast<std::size_t>(c)]));
    });
}
