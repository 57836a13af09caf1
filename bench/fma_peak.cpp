// The machine's f32 FMA peak, measured: a register-only loop of independent vector FMAs (compiled
// -march=native, the widest vectors this CPU has) on `threads` threads at once. The search
// benchmark reports its GFLOP/s as a fraction of this.

#include "fma_peak.hpp"

#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace tenferro::bench {
namespace {

#if defined(__AVX512F__)
using vec = __m512;
constexpr int lanes = 16;
inline vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
inline vec splat(float x) { return _mm512_set1_ps(x); }
inline float first(vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__FMA__)
using vec = __m256;
constexpr int lanes = 8;
inline vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
inline vec splat(float x) { return _mm256_set1_ps(x); }
inline float first(vec v) { return _mm256_cvtss_f32(v); }
#else
#error "fma_peak.cpp needs FMA (x86-64-v3 or later)"
#endif

// 12 independent chains, each its own variable (an array loop is kept in memory at -O2), cover
// FMA latency x throughput on the cores this runs on (4-5 cycles x 2 pipes); the values stay
// finite (x * 1 + 0).
float run(std::int64_t iterations) {
    const vec one = splat(1.0f), zero = splat(0.0f);
    vec a0 = splat(0), a1 = splat(1), a2 = splat(2), a3 = splat(3), a4 = splat(4), a5 = splat(5);
    vec a6 = splat(6), a7 = splat(7), a8 = splat(8), a9 = splat(9), a10 = splat(10), a11 = splat(11);
    for (std::int64_t it = 0; it < iterations; ++it) {
        a0 = fma(a0, one, zero);
        a1 = fma(a1, one, zero);
        a2 = fma(a2, one, zero);
        a3 = fma(a3, one, zero);
        a4 = fma(a4, one, zero);
        a5 = fma(a5, one, zero);
        a6 = fma(a6, one, zero);
        a7 = fma(a7, one, zero);
        a8 = fma(a8, one, zero);
        a9 = fma(a9, one, zero);
        a10 = fma(a10, one, zero);
        a11 = fma(a11, one, zero);
    }
    return first(a0) + first(a1) + first(a2) + first(a3) + first(a4) + first(a5) + first(a6) + first(a7) + first(a8) +
           first(a9) + first(a10) + first(a11);
}

#if defined(__AVX512BF16__)
// The same with VDPBF16PS: 12 chains of a += 1 * 0 over bf16 pairs.
float run_dpbf16(std::int64_t iterations) {
    const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));  // bf16 1.0
    const __m512bh y = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0));
    __m512 a0 = splat(0), a1 = splat(1), a2 = splat(2), a3 = splat(3), a4 = splat(4), a5 = splat(5);
    __m512 a6 = splat(6), a7 = splat(7), a8 = splat(8), a9 = splat(9), a10 = splat(10), a11 = splat(11);
    for (std::int64_t it = 0; it < iterations; ++it) {
        a0 = _mm512_dpbf16_ps(a0, x, y);
        a1 = _mm512_dpbf16_ps(a1, x, y);
        a2 = _mm512_dpbf16_ps(a2, x, y);
        a3 = _mm512_dpbf16_ps(a3, x, y);
        a4 = _mm512_dpbf16_ps(a4, x, y);
        a5 = _mm512_dpbf16_ps(a5, x, y);
        a6 = _mm512_dpbf16_ps(a6, x, y);
        a7 = _mm512_dpbf16_ps(a7, x, y);
        a8 = _mm512_dpbf16_ps(a8, x, y);
        a9 = _mm512_dpbf16_ps(a9, x, y);
        a10 = _mm512_dpbf16_ps(a10, x, y);
        a11 = _mm512_dpbf16_ps(a11, x, y);
    }
    return first(a0) + first(a1) + first(a2) + first(a3) + first(a4) + first(a5) + first(a6) + first(a7) + first(a8) +
           first(a9) + first(a10) + first(a11);
}
#endif

double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

template <class Loop>
double peak_of(Loop loop, double flops_per_step, int threads, double seconds, bool cpu_clock) {
    const std::int64_t chunk = 1 << 22;
    double best = 0;
    for (int round = 0; round < 3; ++round) {
        std::vector<std::thread> pool;
        std::vector<std::int64_t> done(static_cast<std::size_t>(threads), 0);
        std::vector<float> sink(static_cast<std::size_t>(threads), 0);
        const auto start = std::chrono::steady_clock::now();
        const double cpu_start = cpu_seconds();
        const auto until = start + std::chrono::duration<double>(seconds / 3);
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] {
                while (std::chrono::steady_clock::now() < until) {
                    sink[static_cast<std::size_t>(t)] += loop(chunk);
                    done[static_cast<std::size_t>(t)] += chunk;
                }
            });
        for (auto& th : pool) th.join();
        const double secs = cpu_clock ? cpu_seconds() - cpu_start
                                      : std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        double flops = 0;
        for (std::int64_t d : done) flops += static_cast<double>(d) * flops_per_step;
        best = std::max(best, flops / secs / 1e9);
    }
    return best;
}

}  // namespace

double dpbf16_peak_gflops(int threads, double seconds, bool cpu_clock) {
#if defined(__AVX512BF16__)
    return peak_of(run_dpbf16, 12.0 * 32 * 2, threads, seconds, cpu_clock);
#else
    (void)threads, (void)seconds, (void)cpu_clock;
    return 0;
#endif
}

double fma_peak_gflops(int threads, double seconds, bool cpu_clock) {
    return peak_of(run, 12.0 * lanes * 2, threads, seconds, cpu_clock);
}

const char* fma_peak_isa() {
#if defined(__AVX512F__)
    return "AVX-512";
#else
    return "AVX2+FMA";
#endif
}

}  // namespace tenferro::bench
