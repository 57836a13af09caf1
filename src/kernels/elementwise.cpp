// Elementwise kernels: binary ops, unary ops, scale and axpby (see elementwise.hpp).

#include "kernels/elementwise.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>

#include "kernels/transcendental.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/elementwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/map-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace {

// Binary functors ------------------------------------------------------------

struct add_f {
    template <class D, class V>
    HWY_INLINE V operator()(D, V a, V b) const {
        return hn::Add(a, b);
    }
};
struct sub_f {
    template <class D, class V>
    HWY_INLINE V operator()(D, V a, V b) const {
        return hn::Sub(a, b);
    }
};
struct mul_f {
    template <class D, class V>
    HWY_INLINE V operator()(D, V a, V b) const {
        return hn::Mul(a, b);
    }
};
struct div_f {
    template <class D, class V>
    HWY_INLINE V operator()(D, V a, V b) const {
        return hn::Div(a, b);
    }
};
// numpy's maximum: a NaN operand wins; equal values give a.
struct maximum_f {
    template <class D, class V>
    HWY_INLINE V operator()(D, V a, V b) const {
        return hn::IfThenElse(hn::Or(hn::Ge(a, b), hn::IsNaN(a)), a, b);
    }
};
struct minimum_f {
    template <class D, class V>
    HWY_INLINE V operator()(D, V a, V b) const {
        return hn::IfThenElse(hn::Or(hn::Le(a, b), hn::IsNaN(a)), a, b);
    }
};

// Unary functors -------------------------------------------------------------

struct neg_f {
    template <class D, class V>
    HWY_INLINE V operator()(D, V x) const {
        return hn::Neg(x);
    }
};
struct abs_f {
    template <class D, class V>
    HWY_INLINE V operator()(D, V x) const {
        return hn::Abs(x);
    }
};
struct sqrt_f {
    template <class D, class V>
    HWY_INLINE V operator()(D, V x) const {
        return hn::Sqrt(x);
    }
};
// A true division of the correctly rounded square root: no approximate reciprocal.
struct rsqrt_f {
    template <class D, class V>
    HWY_INLINE V operator()(D d, V x) const {
        return hn::Div(hn::Set(d, 1), hn::Sqrt(x));
    }
};
// max(x, 0) with NaN propagated and -0 mapped to +0.
struct relu_f {
    template <class D, class V>
    HWY_INLINE V operator()(D d, V x) const {
        return hn::IfThenZeroElse(hn::Le(x, hn::Zero(d)), x);
    }
};

// Scalar-parameter functors --------------------------------------------------

template <class T>
struct scale_f {
    T alpha;
    template <class D, class V>
    HWY_INLINE V operator()(D d, V x) const {
        return hn::Mul(hn::Set(d, alpha), x);
    }
};
template <class T>
struct axpby_f {
    T alpha, beta;
    template <class D, class V>
    HWY_INLINE V operator()(D d, V x, V y) const {
        return hn::MulAdd(hn::Set(d, alpha), x, hn::Mul(hn::Set(d, beta), y));
    }
};

// Loops ------------------------------------------------------------------------

template <class Op, class T>
HWY_INLINE void binary_loop(const Op& op, const nd_loop<3>& loop, T* out, const T* a, const T* b, std::int64_t begin,
                            std::int64_t end, bool stream) {
    const hn::ScalableTag<T> d;
    run_cursor<3> cursor(loop, begin, end);
    std::int64_t off[3];
    std::int64_t n;
    while (cursor.next(off, n))
        map2_run(d, op, out + off[0], loop.inner_stride(0), a + off[1], loop.inner_stride(1), b + off[2],
                 loop.inner_stride(2), n, stream);
    if (stream) hwy::FlushStream();
}

template <class Op, class T>
HWY_INLINE void unary_loop(const Op& op, const nd_loop<2>& loop, T* out, const T* x, std::int64_t begin,
                           std::int64_t end, bool stream) {
    const hn::ScalableTag<T> d;
    run_cursor<2> cursor(loop, begin, end);
    std::int64_t off[2];
    std::int64_t n;
    while (cursor.next(off, n))
        map1_run(d, op, out + off[0], loop.inner_stride(0), x + off[1], loop.inner_stride(1), n, stream);
    if (stream) hwy::FlushStream();
}

// One switch per op family from the runtime op to its functor; every form
// (strided loop, dense run) goes through it, so an op is added in one place.
// `f` is called with the functor; the unary transcendental ops have none here
// (unary() and unary_dense() below route them to kernels/transcendental).
template <class F>
HWY_INLINE void with_binary_functor(binary_op op, F&& f) {
    switch (op) {
    case binary_op::add:
        return f(add_f{});
    case binary_op::sub:
        return f(sub_f{});
    case binary_op::mul:
        return f(mul_f{});
    case binary_op::div:
        return f(div_f{});
    case binary_op::maximum:
        return f(maximum_f{});
    case binary_op::minimum:
        return f(minimum_f{});
    }
}

template <class F>
HWY_INLINE void with_unary_functor(unary_op op, F&& f) {
    switch (op) {
    case unary_op::neg:
        return f(neg_f{});
    case unary_op::abs:
        return f(abs_f{});
    case unary_op::sqrt:
        return f(sqrt_f{});
    case unary_op::rsqrt:
        return f(rsqrt_f{});
    case unary_op::relu:
        return f(relu_f{});
    case unary_op::exp:
    case unary_op::log:
    case unary_op::tanh:
    case unary_op::sigmoid:
        break;
    }
}

template <class T>
HWY_INLINE void binary_t(binary_op op, const nd_loop<3>& loop, T* out, const T* a, const T* b, std::int64_t begin,
                         std::int64_t end, bool stream) {
    with_binary_functor(op, [&](const auto& f) { binary_loop(f, loop, out, a, b, begin, end, stream); });
}

template <class T>
HWY_INLINE void unary_t(unary_op op, const nd_loop<2>& loop, T* out, const T* x, std::int64_t begin, std::int64_t end,
                        bool stream) {
    with_unary_functor(op, [&](const auto& f) { unary_loop(f, loop, out, x, begin, end, stream); });
}

template <class T>
HWY_INLINE void axpby_t(const nd_loop<3>& loop, T alpha, const T* x, T beta, const T* y, T* out, std::int64_t begin,
                        std::int64_t end, bool stream) {
    if (beta == T(0)) {
        // y is not read: drop it from the loop.
        nd_loop<2> l2;
        l2.rank = loop.rank;
        for (int d = 0; d < loop.rank; ++d) {
            l2.shape[d] = loop.shape[d];
            l2.strides[0][d] = loop.strides[0][d];
            l2.strides[1][d] = loop.strides[1][d];
        }
        return unary_loop(scale_f<T>{alpha}, l2, out, x, begin, end, stream);
    }
    binary_loop(axpby_f<T>{alpha, beta}, loop, out, x, y, begin, end, stream);
}

// Dense arrays: one unit-stride run, the map*_unit call map2_run / map1_run
// make for a run whose operands are all unit-stride (the same stream rule).
template <class Op, class T>
HWY_INLINE void binary_dense_run(const Op& op, T* out, const T* a, const T* b, std::int64_t n, bool stream) {
    const hn::ScalableTag<T> d;
    map2_unit_s<1, 1>(d, op, out, a, b, n, stream && n * static_cast<std::int64_t>(sizeof(T)) >= stream_min_run_bytes);
    if (stream) hwy::FlushStream();
}

template <class Op, class T>
HWY_INLINE void unary_dense_run(const Op& op, T* out, const T* x, std::int64_t n, bool stream) {
    const hn::ScalableTag<T> d;
    if (stream && n * static_cast<std::int64_t>(sizeof(T)) >= stream_min_run_bytes)
        map1_unit<true>(d, op, out, x, n);
    else
        map1_unit(d, op, out, x, n);
    if (stream) hwy::FlushStream();
}

template <class T>
HWY_INLINE void binary_dense_t(binary_op op, T* out, const T* a, const T* b, std::int64_t n, bool stream) {
    with_binary_functor(op, [&](const auto& f) { binary_dense_run(f, out, a, b, n, stream); });
}

template <class T>
HWY_INLINE void unary_dense_t(unary_op op, T* out, const T* x, std::int64_t n, bool stream) {
    with_unary_functor(op, [&](const auto& f) { unary_dense_run(f, out, x, n, stream); });
}

template <class T>
HWY_INLINE void axpby_dense_t(T alpha, const T* x, T beta, const T* y, T* out, std::int64_t n, bool stream) {
    if (beta == T(0)) return unary_dense_run(scale_f<T>{alpha}, out, x, n, stream);  // y is not read
    binary_dense_run(axpby_f<T>{alpha, beta}, out, x, y, n, stream);
}

}  // namespace

void BinaryDenseF32(binary_op op, float* out, const float* a, const float* b, std::int64_t n, bool stream) {
    binary_dense_t(op, out, a, b, n, stream);
}
void BinaryDenseF64(binary_op op, double* out, const double* a, const double* b, std::int64_t n, bool stream) {
    binary_dense_t(op, out, a, b, n, stream);
}
void UnaryDenseF32(unary_op op, float* out, const float* x, std::int64_t n, bool stream) {
    unary_dense_t(op, out, x, n, stream);
}
void UnaryDenseF64(unary_op op, double* out, const double* x, std::int64_t n, bool stream) {
    unary_dense_t(op, out, x, n, stream);
}
void AxpbyDenseF32(float alpha, const float* x, float beta, const float* y, float* out, std::int64_t n, bool stream) {
    axpby_dense_t(alpha, x, beta, y, out, n, stream);
}
void AxpbyDenseF64(double alpha, const double* x, double beta, const double* y, double* out, std::int64_t n,
                   bool stream) {
    axpby_dense_t(alpha, x, beta, y, out, n, stream);
}

void BinaryF32(binary_op op, const nd_loop<3>& loop, float* out, const float* a, const float* b, std::int64_t begin,
               std::int64_t end, bool stream) {
    binary_t(op, loop, out, a, b, begin, end, stream);
}
void BinaryF64(binary_op op, const nd_loop<3>& loop, double* out, const double* a, const double* b, std::int64_t begin,
               std::int64_t end, bool stream) {
    binary_t(op, loop, out, a, b, begin, end, stream);
}
void UnaryF32(unary_op op, const nd_loop<2>& loop, float* out, const float* x, std::int64_t begin, std::int64_t end,
              bool stream) {
    unary_t(op, loop, out, x, begin, end, stream);
}
void UnaryF64(unary_op op, const nd_loop<2>& loop, double* out, const double* x, std::int64_t begin, std::int64_t end,
              bool stream) {
    unary_t(op, loop, out, x, begin, end, stream);
}
void AxpbyF32(const nd_loop<3>& loop, float alpha, const float* x, float beta, const float* y, float* out,
              std::int64_t begin, std::int64_t end, bool stream) {
    axpby_t(loop, alpha, x, beta, y, out, begin, end, stream);
}
void AxpbyF64(const nd_loop<3>& loop, double alpha, const double* x, double beta, const double* y, double* out,
              std::int64_t begin, std::int64_t end, bool stream) {
    axpby_t(loop, alpha, x, beta, y, out, begin, end, stream);
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tenferro::kernels {

HWY_EXPORT(BinaryF32);
HWY_EXPORT(BinaryF64);
HWY_EXPORT(UnaryF32);
HWY_EXPORT(UnaryF64);
HWY_EXPORT(AxpbyF32);
HWY_EXPORT(AxpbyF64);
HWY_EXPORT(BinaryDenseF32);
HWY_EXPORT(BinaryDenseF64);
HWY_EXPORT(UnaryDenseF32);
HWY_EXPORT(UnaryDenseF64);
HWY_EXPORT(AxpbyDenseF32);
HWY_EXPORT(AxpbyDenseF64);

namespace {

// The size of the last-level cache (the largest data or unified cache the
// system reports), read once: glibc's sysconf, else sysfs, else 32 MiB.
std::size_t last_level_cache_bytes() noexcept {
    std::size_t best = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    for (const int name : {_SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL4_CACHE_SIZE}) {
        const long v = ::sysconf(name);
        if (v > 0) best = std::max(best, static_cast<std::size_t>(v));
    }
#endif
    if (best == 0) {
        for (int index = 0; index < 8; ++index) {
            const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
            std::ifstream type_file(dir + "type"), size_file(dir + "size");
            std::string type, size;
            if (!(type_file >> type) || !(size_file >> size) || type == "Instruction") continue;
            char* rest = nullptr;
            std::size_t v = std::strtoull(size.c_str(), &rest, 10);
            if (rest != nullptr && (*rest == 'K' || *rest == 'k')) v <<= 10;
            if (rest != nullptr && (*rest == 'M' || *rest == 'm')) v <<= 20;
            best = std::max(best, v);
        }
    }
    return best > 0 ? best : std::size_t{32} << 20;
}

std::atomic<std::size_t> stream_threshold_override{0};

// Whether an op over `total` elements writes its output with non-temporal
// stores: when the bytes it touches (`operands` arrays of `total` elements, the
// output included) exceed the last-level cache. Then the start of the output
// has left the cache before the op ends, so caching it only costs a
// read-for-ownership of every output line (a third of a triad's traffic) and
// evicts the inputs. Decided on the whole op (a loop's size, a dense op's
// total), not the chunk, so every worker of a split op chooses alike; the
// stores' values are the same either way.
bool stream_dense(std::int64_t total, std::size_t itemsize, int operands) noexcept {
    const auto bytes = static_cast<std::size_t>(total) * itemsize * static_cast<std::size_t>(operands);
    return bytes > stream_threshold_bytes();
}
bool stream_output(const nd_loop<2>& loop, std::size_t itemsize, int operands = 2) noexcept {
    return stream_dense(loop.size(), itemsize, operands);
}
bool stream_output(const nd_loop<3>& loop, std::size_t itemsize, int operands = 3) noexcept {
    return stream_dense(loop.size(), itemsize, operands);
}

}  // namespace

std::size_t stream_threshold_bytes() noexcept {
    const std::size_t forced = stream_threshold_override.load(std::memory_order_relaxed);
    if (forced != 0) return forced;
    static const std::size_t llc = last_level_cache_bytes();
    return llc;
}

void set_stream_threshold_bytes(std::size_t bytes) noexcept {
    stream_threshold_override.store(bytes, std::memory_order_relaxed);
}

void binary(binary_op op, const nd_loop<3>& loop, float* out, const float* a, const float* b, std::int64_t begin,
            std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(BinaryF32)(op, loop, out, a, b, begin, end, stream_output(loop, sizeof(float)));
}
void binary(binary_op op, const nd_loop<3>& loop, double* out, const double* a, const double* b, std::int64_t begin,
            std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(BinaryF64)(op, loop, out, a, b, begin, end, stream_output(loop, sizeof(double)));
}
namespace {

template <class T>
using array_fn = void (*)(const T*, T*, std::int64_t);

// Applies a contiguous-array kernel (kernels/transcendental, which dispatches
// per call) along a strided loop: long unit-stride runs are handed over in
// place; everything else is gathered into a block buffer, several runs at a
// time, so short or strided runs do not cost one dispatch each. The array
// kernels compute each element independently of its position, so both paths
// give identical results.
template <class T>
void map_array_fn(array_fn<T> fn, const nd_loop<2>& loop, T* out, const T* x, std::int64_t begin, std::int64_t end) {
    const std::int64_t so = loop.inner_stride(0), sx = loop.inner_stride(1);
    constexpr std::int64_t block = 1024;
    constexpr std::int64_t direct = 128;  // unit-stride runs at least this long skip the buffer
    struct segment {
        T* out;
        std::int64_t n;
    };
    alignas(64) T bx[block];
    alignas(64) T bo[block];
    segment segs[block];
    std::int64_t nseg = 0, fill = 0;
    auto flush = [&] {
        if (fill == 0) return;
        fn(bx, bo, fill);
        std::int64_t k = 0;
        for (std::int64_t i = 0; i < nseg; ++i) {
            T* o = segs[i].out;
            for (std::int64_t j = 0; j < segs[i].n; ++j) o[j * so] = bo[k + j];
            k += segs[i].n;
        }
        nseg = fill = 0;
    };
    run_cursor<2> cursor(loop, begin, end);
    std::int64_t off[2];
    std::int64_t n;
    while (cursor.next(off, n)) {
        T* o = out + off[0];
        const T* xi = x + off[1];
        if (so == 1 && sx == 1 && n >= direct) {
            flush();
            fn(xi, o, n);
            continue;
        }
        while (n > 0) {
            const std::int64_t m = std::min(n, block - fill);
            for (std::int64_t j = 0; j < m; ++j) bx[fill + j] = xi[j * sx];
            segs[nseg++] = {o, m};
            fill += m;
            xi += m * sx;
            o += m * so;
            n -= m;
            if (fill == block) flush();
        }
    }
    flush();
}

template <class T>
array_fn<T> transcendental(unary_op op) noexcept {
    if constexpr (sizeof(T) == 4) {
        switch (op) {
        case unary_op::exp:
            return exp_f32;
        case unary_op::log:
            return log_f32;
        case unary_op::tanh:
            return tanh_f32;
        case unary_op::sigmoid:
            return sigmoid_f32;
        default:
            return nullptr;
        }
    } else {
        switch (op) {
        case unary_op::exp:
            return exp_f64;
        case unary_op::log:
            return log_f64;
        case unary_op::tanh:
            return tanh_f64;
        case unary_op::sigmoid:
            return sigmoid_f64;
        default:
            return nullptr;
        }
    }
}

}  // namespace

void unary(unary_op op, const nd_loop<2>& loop, float* out, const float* x, std::int64_t begin, std::int64_t end) {
    if (const auto fn = transcendental<float>(op)) return map_array_fn(fn, loop, out, x, begin, end);
    HWY_DYNAMIC_DISPATCH(UnaryF32)(op, loop, out, x, begin, end, stream_output(loop, sizeof(float)));
}
void unary(unary_op op, const nd_loop<2>& loop, double* out, const double* x, std::int64_t begin, std::int64_t end) {
    if (const auto fn = transcendental<double>(op)) return map_array_fn(fn, loop, out, x, begin, end);
    HWY_DYNAMIC_DISPATCH(UnaryF64)(op, loop, out, x, begin, end, stream_output(loop, sizeof(double)));
}
void axpby(const nd_loop<3>& loop, float alpha, const float* x, float beta, const float* y, float* out,
           std::int64_t begin, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(AxpbyF32)
    (loop, alpha, x, beta, y, out, begin, end, stream_output(loop, sizeof(float), beta == float(0) ? 2 : 3));
}
void axpby(const nd_loop<3>& loop, double alpha, const double* x, double beta, const double* y, double* out,
           std::int64_t begin, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(AxpbyF64)
    (loop, alpha, x, beta, y, out, begin, end, stream_output(loop, sizeof(double), beta == double(0) ? 2 : 3));
}

void binary_dense(binary_op op, float* out, const float* a, const float* b, std::int64_t n, std::int64_t total) {
    if (n <= 0) return;  // (the unit loops read a[0] and b[0] for broadcasts, even for no elements)
    HWY_DYNAMIC_DISPATCH(BinaryDenseF32)(op, out, a, b, n, stream_dense(total, sizeof(float), 3));
}
void binary_dense(binary_op op, double* out, const double* a, const double* b, std::int64_t n, std::int64_t total) {
    if (n <= 0) return;
    HWY_DYNAMIC_DISPATCH(BinaryDenseF64)(op, out, a, b, n, stream_dense(total, sizeof(double), 3));
}
void unary_dense(unary_op op, float* out, const float* x, std::int64_t n, std::int64_t total) {
    if (n <= 0) return;
    // (The array kernels compute each element on its own: the same values as
    // map_array_fn's buffered and direct paths.)
    if (const auto fn = transcendental<float>(op)) return fn(x, out, n);
    HWY_DYNAMIC_DISPATCH(UnaryDenseF32)(op, out, x, n, stream_dense(total, sizeof(float), 2));
}
void unary_dense(unary_op op, double* out, const double* x, std::int64_t n, std::int64_t total) {
    if (n <= 0) return;
    if (const auto fn = transcendental<double>(op)) return fn(x, out, n);
    HWY_DYNAMIC_DISPATCH(UnaryDenseF64)(op, out, x, n, stream_dense(total, sizeof(double), 2));
}
void axpby_dense(float alpha, const float* x, float beta, const float* y, float* out, std::int64_t n,
                 std::int64_t total) {
    if (n <= 0) return;
    HWY_DYNAMIC_DISPATCH(AxpbyDenseF32)
    (alpha, x, beta, y, out, n, stream_dense(total, sizeof(float), beta == float(0) ? 2 : 3));
}
void axpby_dense(double alpha, const double* x, double beta, const double* y, double* out, std::int64_t n,
                 std::int64_t total) {
    if (n <= 0) return;
    HWY_DYNAMIC_DISPATCH(AxpbyDenseF64)
    (alpha, x, beta, y, out, n, stream_dense(total, sizeof(double), beta == double(0) ? 2 : 3));
}

}  // namespace tenferro::kernels
#endif  // HWY_ONCE
