#pragma once
// Helpers for the operation tests: the backend they use, running a body in a
// real cpu_backend session (through asio::use_future, no coroutines), looping
// over every compiled Highway target (hwy_targets.hpp), building inputs in
// several memory layouts, reading any view back in row-major order, and ULP
// distances.

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_asio.hpp"

#include "hwy_targets.hpp"
#include "tenferro/cpu_backend.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro::test {

using shape_t = std::vector<std::int64_t>;

/// Runs `f(session)` in a session of `cpu` holding `permits` permits; returns
/// f's value, rethrows f's exception, throws std::runtime_error on an
/// admission failure.
template <class F>
auto in_session(cpu_backend& cpu, std::size_t permits, F f) {
    session_options options;
    options.permits = permits;
    auto result = cpu.with_backend_session(options, std::move(f), asio::use_future).get();
    if (!result) throw std::runtime_error(result.error().message());
    if constexpr (!std::is_void_v<typename decltype(result)::value_type>) return std::move(*result);
}

/// The message of the `tensor_error` that `f(session)` throws, or a note that
/// it threw none (or something else).
template <class F>
std::string tensor_error_of(cpu_backend& cpu, F f) {
    try {
        in_session(cpu, 1, std::move(f));
    } catch (const tensor_error& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("(not a tensor_error: ") + e.what() + ")";
    }
    return "(no exception)";
}

/// Options of a backend with two permits (the operation tests' backend).
inline cpu_backend_options two_permits() {
    cpu_backend_options o;
    o.permits = 2;
    return o;
}

inline std::int64_t count_of(const shape_t& shape) {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    return n;
}

/// Calls f(index) for every index of `shape` in row-major order.
template <class F>
void for_each_index(std::span<const std::int64_t> shape, F&& f) {
    shape_t idx(shape.size(), 0);
    for (auto e : shape)
        if (e == 0) return;
    for (;;) {
        f(std::span<const std::int64_t>(idx));
        std::size_t d = shape.size();
        for (;;) {
            if (d == 0) return;
            --d;
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

/// The element at `index` as a double.
inline double read_at(const const_tensor_view& v, std::span<const std::int64_t> index) {
    switch (v.type()) {
    case dtype::f32:
        return v.at<float>(index);
    case dtype::f64:
        return v.at<double>(index);
    case dtype::i32:
        return v.at<std::int32_t>(index);
    case dtype::i64:
        return static_cast<double>(v.at<std::int64_t>(index));
    }
    return 0;
}

/// Every element of `v` in row-major order, as doubles.
inline std::vector<double> values_of(const const_tensor_view& v) {
    std::vector<double> out;
    out.reserve(static_cast<std::size_t>(v.size()));
    for_each_index(v.shape(), [&](std::span<const std::int64_t> i) { out.push_back(read_at(v, i)); });
    return out;
}

/// Every element of `v` in row-major order, with its exact type.
template <class T>
std::vector<T> typed_values_of(const const_tensor_view& v) {
    std::vector<T> out;
    out.reserve(static_cast<std::size_t>(v.size()));
    for_each_index(v.shape(), [&](std::span<const std::int64_t> i) { out.push_back(v.at<T>(i)); });
    return out;
}

/// Bitwise equality of two views' elements (row-major order, same shape).
inline bool bitwise_equal(const const_tensor_view& a, const const_tensor_view& b) {
    if (a.type() != b.type() || !std::ranges::equal(a.shape(), b.shape())) return false;
    bool same = true;
    for_each_index(a.shape(), [&](std::span<const std::int64_t> i) {
        const auto pa = static_cast<const unsigned char*>(a.data());
        const auto pb = static_cast<const unsigned char*>(b.data());
        std::int64_t oa = 0, ob = 0;
        for (std::size_t d = 0; d < i.size(); ++d) {
            oa += i[d] * a.strides()[d];
            ob += i[d] * b.strides()[d];
        }
        const auto sz = static_cast<std::int64_t>(a.itemsize());
        for (std::int64_t k = 0; k < sz; ++k)
            if (pa[oa * sz + k] != pb[ob * sz + k]) same = false;
    });
    return same;
}

/// Memory layouts an input can be given in; all present the same logical values.
enum class layout { contiguous, strided, reversed, transposed };

inline const char* name_of(layout l) {
    switch (l) {
    case layout::contiguous:
        return "contiguous";
    case layout::strided:
        return "strided";
    case layout::reversed:
        return "reversed";
    case layout::transposed:
        return "transposed";
    }
    return "?";
}

/// A view with the given logical shape and row-major values, laid out as asked,
/// and the tensor that owns its memory.
struct laid_out {
    tensor storage;
    const_tensor_view view;
};

template <class T>
tensor tensor_of(const std::vector<double>& values, const shape_t& shape) {
    std::vector<T> v(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) v[i] = static_cast<T>(values[i]);
    return tensor::from(v, std::span<const std::int64_t>(shape));
}

inline tensor tensor_of(dtype t, const std::vector<double>& values, const shape_t& shape) {
    switch (t) {
    case dtype::f32:
        return tensor_of<float>(values, shape);
    case dtype::f64:
        return tensor_of<double>(values, shape);
    case dtype::i32:
        return tensor_of<std::int32_t>(values, shape);
    case dtype::i64:
        return tensor_of<std::int64_t>(values, shape);
    }
    return {};
}

inline laid_out lay_out(dtype t, const std::vector<double>& values, const shape_t& shape, layout l) {
    const std::size_t r = shape.size();
    if (r == 0 || l == layout::contiguous) {
        tensor s = tensor_of(t, values, shape);
        const_tensor_view v = std::as_const(s).view();
        return {s, v};
    }
    if (l == layout::strided) {
        // Every other element of the last axis (and of the first, for rank >= 2).
        shape_t big = shape;
        big[r - 1] *= 2;
        if (r >= 2) big[0] = big[0] * 2;
        std::vector<double> fill(static_cast<std::size_t>(count_of(big)), -777.0);
        tensor s = tensor_of(t, fill, big);
        const_tensor_view v = std::as_const(s).slice(static_cast<std::int64_t>(r - 1), 0, big[r - 1], 2);
        if (r >= 2) v = v.slice(0, 0, big[0], 2);
        // Write the values through a mutable twin of the view.
        tensor_view w(const_cast<void*>(v.data()), t, v.shape(), v.strides());
        std::size_t k = 0;
        for_each_index(shape, [&](std::span<const std::int64_t> i) {
            switch (t) {
            case dtype::f32:
                w.at<float>(i) = static_cast<float>(values[k]);
                break;
            case dtype::f64:
                w.at<double>(i) = values[k];
                break;
            case dtype::i32:
                w.at<std::int32_t>(i) = static_cast<std::int32_t>(values[k]);
                break;
            case dtype::i64:
                w.at<std::int64_t>(i) = static_cast<std::int64_t>(values[k]);
                break;
            }
            ++k;
        });
        return {s, v};
    }
    if (l == layout::reversed) {
        tensor s = tensor_of(t, std::vector<double>(values.size(), 0.0), shape);
        tensor_view w = s.view();
        for (std::size_t d = 0; d < r; ++d)
            w = w.slice(static_cast<std::int64_t>(d), -1, std::numeric_limits<std::int64_t>::min(), -1);
        std::size_t k = 0;
        for_each_index(shape, [&](std::span<const std::int64_t> i) {
            switch (t) {
            case dtype::f32:
                w.at<float>(i) = static_cast<float>(values[k]);
                break;
            case dtype::f64:
                w.at<double>(i) = values[k];
                break;
            case dtype::i32:
                w.at<std::int32_t>(i) = static_cast<std::int32_t>(values[k]);
                break;
            case dtype::i64:
                w.at<std::int64_t>(i) = static_cast<std::int64_t>(values[k]);
                break;
            }
            ++k;
        });
        return {s, const_tensor_view(w)};
    }
    // transposed: storage has the reversed shape; its .T view has `shape`.
    shape_t rev(shape.rbegin(), shape.rend());
    tensor s = tensor_of(t, std::vector<double>(values.size(), 0.0), rev);
    tensor_view w = s.transposed();
    std::size_t k = 0;
    for_each_index(shape, [&](std::span<const std::int64_t> i) {
        switch (t) {
        case dtype::f32:
            w.at<float>(i) = static_cast<float>(values[k]);
            break;
        case dtype::f64:
            w.at<double>(i) = values[k];
            break;
        case dtype::i32:
            w.at<std::int32_t>(i) = static_cast<std::int32_t>(values[k]);
            break;
        case dtype::i64:
            w.at<std::int64_t>(i) = static_cast<std::int64_t>(values[k]);
            break;
        }
        ++k;
    });
    return {s, const_tensor_view(w)};
}

/// Uniform random values in [lo, hi), deterministic per seed.
inline std::vector<double> random_values(std::size_t n, double lo, double hi, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<double> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

/// Distance in units in the last place between two values of type T (0 when
/// both are NaN, or equal; max when exactly one is NaN).
template <class T>
std::uint64_t ulp_distance(T a, T b) {
    if (std::isnan(a) && std::isnan(b)) return 0;
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<std::uint64_t>::max();
    if (a == b) return 0;
    using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
    auto ordered = [](T x) {
        const I i = std::bit_cast<I>(x);
        return i < 0 ? static_cast<std::int64_t>(std::numeric_limits<I>::min()) - i : static_cast<std::int64_t>(i);
    };
    const std::int64_t d = ordered(a) - ordered(b);
    return static_cast<std::uint64_t>(d < 0 ? -d : d);
}

}  // namespace tenferro::test
