// Floors and peers of bench/kernels.cpp, compiled -O3 -march=native (see kernels_native.hpp). Every
// function is noinline and takes raw pointers, so each is one loop the compiler optimises on its own
// and the driver cannot fold it into its timing loop.

#include "kernels_native.hpp"

#include <cmath>

#include <Eigen/Core>

namespace tenferro::bench {
namespace {

// One native vector register (GCC lowers a wider vector type through memory on narrower targets).
#if defined(__AVX512F__)
constexpr int vector_bytes = 64;
#else
constexpr int vector_bytes = 32;
#endif
using vf = float __attribute__((vector_size(vector_bytes)));
constexpr std::int64_t lanes = vector_bytes / sizeof(float);

// An unaligned, aliasing view of the same vector, for loads straight from a float array.
using vf_unaligned = float __attribute__((vector_size(vector_bytes), aligned(4), may_alias));
inline vf load(const float* p) { return *reinterpret_cast<const vf_unaligned*>(p); }

inline float lanes_sum(const vf& v) {
    float s = 0.0f;
    for (std::int64_t i = 0; i < lanes; ++i) s += v[i];
    return s;
}

using fmap = Eigen::Map<Eigen::ArrayXf>;
using cfmap = Eigen::Map<const Eigen::ArrayXf>;
using cvmap = Eigen::Map<const Eigen::VectorXf>;

}  // namespace

// GCC recognises this loop as a memcpy and calls glibc's (which switches to non-temporal stores for
// copies larger than about 3/4 of the last-level cache): STREAM built with GCC does the same.
__attribute__((noinline)) void stream_copy(const float* a, float* c, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) c[i] = a[i];
}

__attribute__((noinline)) void stream_triad(const float* a, const float* b, float* c, float s, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) c[i] = a[i] + s * b[i];
}

// Eight accumulators: two vector adds per cycle at a latency of three or four cycles need six to eight
// independent chains.
__attribute__((noinline)) float stream_read(const float* a, std::int64_t n) {
    vf s[8] = {};
    std::int64_t i = 0;
    for (; i + 8 * lanes <= n; i += 8 * lanes)
        for (int k = 0; k < 8; ++k) s[k] += load(a + i + k * lanes);
    const vf total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    float r = lanes_sum(total);
    for (; i < n; ++i) r += a[i];
    return r;
}

__attribute__((noinline)) float stream_read2(const float* a, const float* b, std::int64_t n) {
    vf s[8] = {};
    std::int64_t i = 0;
    for (; i + 8 * lanes <= n; i += 8 * lanes)
        for (int k = 0; k < 8; ++k) s[k] += load(a + i + k * lanes) * load(b + i + k * lanes);
    const vf total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    float r = lanes_sum(total);
    for (; i < n; ++i) r += a[i] * b[i];
    return r;
}

__attribute__((noinline)) void scalar_add(const float* a, const float* b, float* c, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

__attribute__((noinline)) void scalar_axpby(float alpha, const float* x, float beta, const float* y, float* out,
                                            std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + beta * y[i];
}

__attribute__((noinline)) float scalar_sum(const float* x, std::int64_t n) {
    float s = 0.0f;
    for (std::int64_t i = 0; i < n; ++i) s += x[i];
    return s;
}

__attribute__((noinline)) float scalar_dot(const float* a, const float* b, std::int64_t n) {
    float s = 0.0f;
    for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

__attribute__((noinline)) void scalar_exp(const float* x, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
}

__attribute__((noinline)) void scalar_tanh(const float* x, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = std::tanh(x[i]);
}

__attribute__((noinline)) void scalar_sigmoid(const float* x, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

__attribute__((noinline)) void scalar_softmax(const float* x, float* out, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        float* y = out + r * cols;
        float m = row[0];
        for (std::int64_t j = 1; j < cols; ++j) m = row[j] > m ? row[j] : m;
        float s = 0.0f;
        for (std::int64_t j = 0; j < cols; ++j) {
            y[j] = std::exp(row[j] - m);
            s += y[j];
        }
        for (std::int64_t j = 0; j < cols; ++j) y[j] /= s;
    }
}

__attribute__((noinline)) void scalar_top_k(const float* x, float* values, std::int64_t* indices, std::int64_t rows,
                                            std::int64_t cols, std::int64_t k) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        float* v = values + r * k;
        std::int64_t* id = indices + r * k;
        std::int64_t held = 0;
        for (std::int64_t j = 0; j < cols; ++j) {
            const float xj = row[j];
            // Full and not above the k-th: out (an equal value has a higher index, so it ranks lower).
            if (held == k && !(xj > v[k - 1])) continue;
            std::int64_t p = held < k ? held++ : k - 1;
            for (; p > 0 && v[p - 1] < xj; --p) {
                v[p] = v[p - 1];
                id[p] = id[p - 1];
            }
            v[p] = xj;
            id[p] = j;
        }
    }
}

__attribute__((noinline)) void eigen_add(const float* a, const float* b, float* c, std::int64_t n) {
    fmap(c, n) = cfmap(a, n) + cfmap(b, n);
}

__attribute__((noinline)) void eigen_axpby(float alpha, const float* x, float beta, const float* y, float* out,
                                           std::int64_t n) {
    fmap(out, n) = alpha * cfmap(x, n) + beta * cfmap(y, n);
}

__attribute__((noinline)) void eigen_copy(const float* a, float* c, std::int64_t n) { fmap(c, n) = cfmap(a, n); }

__attribute__((noinline)) float eigen_sum(const float* x, std::int64_t n) { return cvmap(x, n).sum(); }

__attribute__((noinline)) float eigen_dot(const float* a, const float* b, std::int64_t n) {
    return cvmap(a, n).dot(cvmap(b, n));
}

__attribute__((noinline)) void eigen_exp(const float* x, float* out, std::int64_t n) {
    fmap(out, n) = cfmap(x, n).exp();
}

__attribute__((noinline)) void eigen_tanh(const float* x, float* out, std::int64_t n) {
    fmap(out, n) = cfmap(x, n).tanh();
}

// The same formula as tenferro's sigmoid is defined by (through exp). Eigen's own `.logistic()` is a
// rational approximation with another accuracy; see the note in docs/benchmarks.md.
__attribute__((noinline)) void eigen_sigmoid(const float* x, float* out, std::int64_t n) {
    fmap(out, n) = 1.0f / (1.0f + (-cfmap(x, n)).exp());
}

const char* native_isa() {
#if defined(__AVX512F__)
    return "avx512f";
#elif defined(__AVX2__)
    return "avx2";
#elif defined(__AVX__)
    return "avx";
#else
    return "sse2";
#endif
}

}  // namespace tenferro::bench
