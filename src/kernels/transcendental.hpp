#pragma once

/// \file
/// Vectorised exp, log, tanh and sigmoid over contiguous f32 / f64 arrays.
///
/// Private to the library (src/ only): the unary-op layer calls these on the unit-stride inner dimension.
/// Each function dispatches once per call to the best Highway target the CPU supports (AVX3, AVX2, SSE4,
/// SSSE3 or the portable emulation), then runs one of our own polynomial kernels; none uses an
/// approximate reciprocal, and every quotient is a true IEEE division.
///
/// Common contract of every function below:
/// - reads `x[0..n)`, writes `out[0..n)`; `out == x` (in place) is allowed, any other overlap is not;
/// - no alignment requirement; `n <= 0` does nothing;
/// - thread-safe (pure functions of their input; the dispatch table is initialised once, thread-safely,
///   by Highway);
/// - results are identical for a given target whatever the array length, the element's position in it,
///   or how the array is split across calls (each element is computed independently), so splitting work
///   over threads is bitwise reproducible;
/// - special values follow `std::` (C99 Annex F): NaN in gives a quiet NaN out; no floating-point
///   exception is relied on, and no trap is raised (the flags set are unspecified).
///
/// Accuracy (max error over exhaustive f32 / dense f64 sweeps, measured on every compiled target; see
/// docs/kernels-transcendental.md for the table and the method): f32 within 2 ULP of the correctly
/// rounded result, f64 within 3 ULP; subnormal results are produced with gradual underflow (no flush to
/// zero), subnormal inputs are handled exactly (no denormals-are-zero).
///
/// Example:
/// \code
///   std::vector<float> v = ...;
///   tenferro::kernels::exp_f32(v.data(), v.data(), static_cast<std::int64_t>(v.size()));  // in place
/// \endcode

#include <cstdint>

namespace tenferro::kernels {

/// `out[i] = e^x[i]`. Overflow gives +inf (f32: x > 88.7228, f64: x > 709.7827), -inf gives +0,
/// results below the smallest normal underflow gradually to subnormals and then to +0.
void exp_f32(const float* x, float* out, std::int64_t n);
/// \copydoc exp_f32
void exp_f64(const double* x, double* out, std::int64_t n);

/// `out[i] = ln x[i]`. `log(±0) = -inf`, `log(x < 0) = NaN`, `log(+inf) = +inf`; subnormal inputs are
/// exact (rescaled before the exponent is extracted).
void log_f32(const float* x, float* out, std::int64_t n);
/// \copydoc log_f32
void log_f64(const double* x, double* out, std::int64_t n);

/// `out[i] = tanh x[i]`, odd (`tanh(-0) = -0`), saturating to ±1 (exactly, for |x| beyond the point where
/// tanh rounds to 1), `tanh(±inf) = ±1`. Accurate near 0 (relative error, including subnormals).
void tanh_f32(const float* x, float* out, std::int64_t n);
/// \copydoc tanh_f32
void tanh_f64(const double* x, double* out, std::int64_t n);

/// `out[i] = 1 / (1 + e^-x[i])` (the logistic function). Never overflows: for x < 0 it is evaluated as
/// `e^x / (1 + e^x)`, so large negative x gives the tiny (possibly subnormal) true value rather than 0,
/// and `sigmoid(-inf) = +0`, `sigmoid(+inf) = 1`.
void sigmoid_f32(const float* x, float* out, std::int64_t n);
/// \copydoc sigmoid_f32
void sigmoid_f64(const double* x, double* out, std::int64_t n);

}  // namespace tenferro::kernels
