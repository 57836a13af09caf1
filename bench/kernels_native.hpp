#pragma once
// The floors and peers of bench/kernels.cpp that must be compiled -O3 -march=native: STREAM-style
// loops, the plain scalar loops a user writes without the library, and Eigen. They live in their own
// translation unit (kernels_native.cpp, the only file of the benchmark built with -march=native) and
// are reached through plain, non-inline functions, so the benchmark driver and tenferro itself are
// built without -march.

#include <cstdint>

namespace tenferro::bench {

// STREAM-style: what the memory system delivers. copy: 1 read + 1 write; triad: 2 reads + 1 write;
// read: 1 read (several vector accumulators, so not latency-bound); read2: 2 reads (a[i] * b[i]
// into several vector accumulators: a hand-written dot, the two-stream read limit).
void stream_copy(const float* a, float* c, std::int64_t n);
void stream_triad(const float* a, const float* b, float* c, float s, std::int64_t n);
float stream_read(const float* a, std::int64_t n);
float stream_read2(const float* a, const float* b, std::int64_t n);

// Plain scalar loops, as written without the library (the compiler vectorises what it may: the sums
// stay sequential without -ffast-math, and std::exp / std::tanh stay scalar calls).
void scalar_add(const float* a, const float* b, float* c, std::int64_t n);
void scalar_axpby(float alpha, const float* x, float beta, const float* y, float* out, std::int64_t n);
float scalar_sum(const float* x, std::int64_t n);
float scalar_dot(const float* a, const float* b, std::int64_t n);
void scalar_exp(const float* x, float* out, std::int64_t n);
void scalar_tanh(const float* x, float* out, std::int64_t n);
void scalar_sigmoid(const float* x, float* out, std::int64_t n);
// Row-wise over a row-major [rows, cols] matrix, last axis: numerically stable softmax (max
// subtracted, std::exp) and top-k (a sorted insertion buffer of k, ties to the lower index).
void scalar_softmax(const float* x, float* out, std::int64_t rows, std::int64_t cols);
void scalar_top_k(const float* x, float* values, std::int64_t* indices, std::int64_t rows, std::int64_t cols,
                  std::int64_t k);

// Eigen 3.4 on Map'd arrays (Eigen::ArrayXf / VectorXf), one thread.
void eigen_add(const float* a, const float* b, float* c, std::int64_t n);
void eigen_axpby(float alpha, const float* x, float beta, const float* y, float* out, std::int64_t n);
void eigen_copy(const float* a, float* c, std::int64_t n);
float eigen_sum(const float* x, std::int64_t n);
float eigen_dot(const float* a, const float* b, std::int64_t n);
void eigen_exp(const float* x, float* out, std::int64_t n);
void eigen_tanh(const float* x, float* out, std::int64_t n);
void eigen_sigmoid(const float* x, float* out, std::int64_t n);

// The instruction set this translation unit was compiled for, e.g. "avx2" or "avx512f".
const char* native_isa();

}  // namespace tenferro::bench
