// Transcendental kernels benchmark: Gelem/s of tenferro::kernels exp / tanh / sigmoid (f32) against
// Eigen's array().exp() / tanh() / 1/(1+exp(-x)) and a scalar std:: loop, side by side in one run
// (see docs/bench-protocol.md and docs/kernels-transcendental.md).
//
// This file is compiled -O3 -march=native, so the Eigen peer and the scalar floor get AVX-512 where the
// CPU has it. Our kernels live in libtenferro, compiled without -march (Highway dynamic dispatch).
//
// Method: one thread, out-of-place, input uniform in [-10, 10]. For each size the systems run in
// interleaved rounds (A B C A B C ...); each sample processes >= 2^22 elements (the array repeated).
// Output: one JSON object per line (best and median sample), then a table of ratios of the best samples
// (ours / Eigen, ours / scalar loop of the same op, ours / scalar std::exp loop, ours / STREAM scale).
//
// Usage: tenferro-bench-kernels-transcendental [--rounds R] [--sizes n1,n2,...] [--target NAME]
//
// --target NAME (AVX3, AVX2, SSE4, ...) forces our dispatch to that Highway target. The
// tenferro-bench-kernels-transcendental-avx2 build of this file compiles the Eigen peer and the scalar
// loops for x86-64-v3 (AVX2 + FMA): with --target AVX2 it compares both at AVX2 on an AVX-512 machine,
// a stand-in for CPUs without AVX-512 (not a substitute for measuring on them).

#include "kernels/transcendental.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "hwy_target_select.hpp"

namespace {

using kernel = void (*)(const float*, float*, std::int64_t);

// Scalar floors: what a user writes without the library. noinline keeps each a separate loop the
// compiler optimises on its own (GCC cannot vectorise std::exp without -ffast-math).
__attribute__((noinline)) void scalar_exp(const float* x, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
}
__attribute__((noinline)) void scalar_tanh(const float* x, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = std::tanh(x[i]);
}
__attribute__((noinline)) void scalar_sigmoid(const float* x, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

// STREAM-style scale (one read, one write per element, regular stores like every system here): the
// memory-bandwidth limit at sizes that do not fit in cache.
__attribute__((noinline)) void stream_scale(const float* x, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = 3.0f * x[i];
}

__attribute__((noinline)) void eigen_exp(const float* x, float* out, std::int64_t n) {
    Eigen::Map<Eigen::ArrayXf>(out, n) = Eigen::Map<const Eigen::ArrayXf>(x, n).exp();
}
__attribute__((noinline)) void eigen_tanh(const float* x, float* out, std::int64_t n) {
    Eigen::Map<Eigen::ArrayXf>(out, n) = Eigen::Map<const Eigen::ArrayXf>(x, n).tanh();
}
__attribute__((noinline)) void eigen_sigmoid(const float* x, float* out, std::int64_t n) {
    Eigen::Map<Eigen::ArrayXf>(out, n) = 1.0f / (1.0f + (-Eigen::Map<const Eigen::ArrayXf>(x, n)).exp());
}

struct system {
    const char* name;
    const char* op;
    kernel fn;
};

const system systems[] = {
    {"tenferro", "exp", tenferro::kernels::exp_f32},
    {"eigen", "exp", eigen_exp},
    {"scalar", "exp", scalar_exp},
    {"tenferro", "tanh", tenferro::kernels::tanh_f32},
    {"eigen", "tanh", eigen_tanh},
    {"scalar", "tanh", scalar_tanh},
    {"tenferro", "sigmoid", tenferro::kernels::sigmoid_f32},
    {"eigen", "sigmoid", eigen_sigmoid},
    {"scalar", "sigmoid", scalar_sigmoid},
    {"stream", "scale", stream_scale},
};
constexpr std::size_t stream_index = 9;
constexpr std::size_t n_systems = sizeof(systems) / sizeof(systems[0]);

// 64-byte aligned float buffer, first-touched before timing.
struct buffer {
    explicit buffer(std::size_t n)
        : data(static_cast<float*>(std::aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64))), size(n) {
        if (data == nullptr) {
            std::fprintf(stderr, "out of memory for %zu floats\n", n);
            std::exit(1);
        }
    }
    ~buffer() { std::free(data); }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    float* data;
    std::size_t size;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

std::vector<std::size_t> parse_sizes(const char* s) {
    std::vector<std::size_t> out;
    std::string str(s);
    std::size_t pos = 0;
    while (pos < str.size()) {
        const std::size_t comma = str.find(',', pos);
        out.push_back(std::stoull(str.substr(pos, comma - pos)));
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 15;
    std::vector<std::size_t> sizes = {std::size_t{4} << 10, std::size_t{256} << 10, std::size_t{64} << 20};
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = std::max(1, std::atoi(argv[++i]));
        } else if (std::strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            sizes = parse_sizes(argv[++i]);
        } else if (std::strcmp(argv[i], "--target") == 0 && i + 1 < argc) {
            const char* want = argv[++i];
            if (!tenferro::bench::force_highway_target(want)) {
                std::fprintf(stderr, "target %s is not compiled or not supported here\n", want);
                return 2;
            }
        } else {
            std::fprintf(stderr, "usage: %s [--rounds R] [--sizes n1,n2,...] [--target NAME]\n", argv[0]);
            return 2;
        }
    }
    {
        std::printf("{\"highway_target\":\"%s\",\"peer_isa\":\"%s\"}\n", tenferro::bench::dispatched_highway_target(),
#if defined(__AVX512F__)
                    "avx512f"
#elif defined(__AVX2__)
                    "avx2"
#else
                    "baseline"
#endif
        );
    }

    // best[si][s], median[si][s] in Gelem/s.
    std::vector<double> best(n_systems * sizes.size());
    std::vector<double> med(n_systems * sizes.size());
    for (std::size_t si = 0; si < sizes.size(); ++si) {
        const std::size_t n = sizes[si];
        buffer in(n);
        buffer out(n);
        std::mt19937 rng(1234);
        std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
        for (std::size_t i = 0; i < n; ++i) in.data[i] = dist(rng);
        std::memset(out.data, 0, n * sizeof(float));

        const std::size_t reps = std::max<std::size_t>(1, (std::size_t{1} << 22) / n);
        std::vector<std::vector<double>> samples(n_systems);
        for (std::size_t s = 0; s < n_systems; ++s) systems[s].fn(in.data, out.data, static_cast<std::int64_t>(n));
        for (int r = 0; r < rounds; ++r) {
            for (std::size_t s = 0; s < n_systems; ++s) {
                const auto t0 = std::chrono::steady_clock::now();
                for (std::size_t k = 0; k < reps; ++k) {
                    systems[s].fn(in.data, out.data, static_cast<std::int64_t>(n));
                    asm volatile("" : : "r"(out.data) : "memory");
                }
                const auto t1 = std::chrono::steady_clock::now();
                samples[s].push_back(std::chrono::duration<double>(t1 - t0).count() / static_cast<double>(reps));
            }
        }
        for (std::size_t s = 0; s < n_systems; ++s) {
            const double sec_med = median(samples[s]);
            const double sec_best = *std::min_element(samples[s].begin(), samples[s].end());
            const double elems = static_cast<double>(n);
            best[si * n_systems + s] = elems / sec_best / 1e9;
            med[si * n_systems + s] = elems / sec_med / 1e9;
            std::printf(
                "{\"system\":\"%s\",\"op\":\"%s\",\"dtype\":\"f32\",\"n\":%zu,\"threads\":1,\"rounds\":%d,"
                "\"gelem_per_s_best\":%.4f,\"gelem_per_s_median\":%.4f}\n",
                systems[s].name, systems[s].op, n, rounds, best[si * n_systems + s], med[si * n_systems + s]);
        }
    }

    // Ratios of best-of-rounds figures (the least-disturbed sample of each system on a shared machine);
    // the medians are in the JSON above.
    std::printf("\n%-8s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "op", "n", "tenferro", "eigen", "scalar", "stream",
                "/eigen", "/scalar", "/s.exp", "/stream");
    for (std::size_t si = 0; si < sizes.size(); ++si) {
        const double* g = &best[si * n_systems];
        for (std::size_t s = 0; s < stream_index; s += 3) {
            std::printf("%-8s %9zu %9.3f %9.3f %9.3f %9.3f %8.2fx %8.2fx %8.2fx %8.2fx\n", systems[s].op, sizes[si],
                        g[s], g[s + 1], g[s + 2], g[stream_index], g[s] / g[s + 1], g[s] / g[s + 2], g[s] / g[2],
                        g[s] / g[stream_index]);
        }
    }
    std::printf(
        "(Gelem/s, f32, 1 thread, best of %d interleaved rounds. /eigen, /scalar: ours over the same op in Eigen\n"
        " and in a scalar std:: loop; /s.exp: ours over the scalar std::exp loop; /stream: ours over a STREAM-style\n"
        " scale of the same size, the memory-bandwidth limit once the arrays leave the caches.)\n",
        rounds);
    return 0;
}
