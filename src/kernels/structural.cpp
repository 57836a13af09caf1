// Structural kernels: strided copies and dtype conversions (see structural.hpp).
// The scalar loops here are compiled once per Highway target too, so the
// compiler vectorises the contiguous ones with that target's instructions.

#include "kernels/structural.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/structural.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

template <class T>
HWY_INLINE void copy_run(T* o, std::int64_t so, const T* x, std::int64_t sx, std::int64_t n) {
    if (so == 1) {
        if (sx == 1) {
            std::memcpy(o, x, static_cast<std::size_t>(n) * sizeof(T));
            return;
        }
        if (sx == 0) {
            std::fill_n(o, n, *x);
            return;
        }
        if (sx == -1) {
            // x[0], x[-1], x[-2], ...: load the N elements ending at x[-i], reverse them.
            const hn::ScalableTag<T> d;
            const auto N = static_cast<std::int64_t>(hn::Lanes(d));
            std::int64_t i = 0;
            for (; i + N <= n; i += N) hn::StoreU(hn::Reverse(d, hn::LoadU(d, x - i - (N - 1))), d, o + i);
            for (; i < n; ++i) o[i] = x[-i];
            return;
        }
        for (std::int64_t i = 0; i < n; ++i) o[i] = x[i * sx];
        return;
    }
    for (std::int64_t i = 0; i < n; ++i) o[i * so] = x[i * sx];
}

template <class T>
HWY_INLINE void copy_t(const nd_loop<2>& loop, T* out, const T* x, std::int64_t begin, std::int64_t end) {
    run_cursor<2> cursor(loop, begin, end);
    std::int64_t off[2];
    std::int64_t n;
    while (cursor.next(off, n)) copy_run(out + off[0], loop.inner_stride(0), x + off[1], loop.inner_stride(1), n);
}

template <class T>
HWY_INLINE void copy_tiled_t(const nd_loop<2>& loop, T* out, const T* x, std::int64_t begin, std::int64_t end) {
    const int r = loop.rank;
    const std::int64_t rows = loop.shape[r - 2], cols = loop.shape[r - 1];
    const std::int64_t so_r = loop.strides[0][r - 2], so_c = loop.strides[0][r - 1];
    const std::int64_t sx_r = loop.strides[1][r - 2], sx_c = loop.strides[1][r - 1];
    const std::int64_t row_blocks = (rows + copy_tile - 1) / copy_tile;
    for (std::int64_t u = begin; u < end; ++u) {
        // The plane (index over the leading axes) and the block of rows in it.
        std::int64_t plane = u / row_blocks;
        const std::int64_t r0 = (u % row_blocks) * copy_tile;
        const std::int64_t r1 = std::min(rows, r0 + copy_tile);
        std::int64_t oo = 0, ox = 0;
        for (int dd = r - 3; dd >= 0; --dd) {
            const std::int64_t i = plane % loop.shape[dd];
            plane /= loop.shape[dd];
            oo += i * loop.strides[0][dd];
            ox += i * loop.strides[1][dd];
        }
        for (std::int64_t c0 = 0; c0 < cols; c0 += copy_tile) {
            const std::int64_t c1 = std::min(cols, c0 + copy_tile);
            for (std::int64_t i = r0; i < r1; ++i) {
                T* o = out + oo + i * so_r;
                const T* s = x + ox + i * sx_r;
                for (std::int64_t j = c0; j < c1; ++j) o[j * so_c] = s[j * sx_c];
            }
        }
    }
}

// Float -> integer: truncation toward zero; NaN -> 0; saturation outside the range.
template <class To, class From>
HWY_INLINE To convert(From v) {
    if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
        constexpr From lower = static_cast<From>(std::numeric_limits<To>::min());  // -2^(bits-1), exact
        constexpr From upper = -lower;                                             // 2^(bits-1), exact
        if (!(v == v)) return To(0);
        if (v >= upper) return std::numeric_limits<To>::max();
        if (v < lower) return std::numeric_limits<To>::min();  // (lower - 1, lower) truncates to lower anyway
        return static_cast<To>(v);
    } else {
        return static_cast<To>(v);
    }
}

template <class To, class From>
HWY_INLINE void cast_t(const nd_loop<2>& loop, To* out, const From* x, std::int64_t begin, std::int64_t end) {
    run_cursor<2> cursor(loop, begin, end);
    std::int64_t off[2];
    std::int64_t n;
    const std::int64_t so = loop.inner_stride(0), sx = loop.inner_stride(1);
    while (cursor.next(off, n)) {
        To* o = out + off[0];
        const From* s = x + off[1];
        if (so == 1 && sx == 1) {
            for (std::int64_t i = 0; i < n; ++i) o[i] = convert<To>(s[i]);
        } else {
            for (std::int64_t i = 0; i < n; ++i) o[i * so] = convert<To>(s[i * sx]);
        }
    }
}

template <class To>
HWY_INLINE void cast_from(const nd_loop<2>& loop, To* out, elem from, const void* x, std::int64_t begin,
                          std::int64_t end) {
    switch (from) {
    case elem::f32:
        return cast_t(loop, out, static_cast<const float*>(x), begin, end);
    case elem::f64:
        return cast_t(loop, out, static_cast<const double*>(x), begin, end);
    case elem::i32:
        return cast_t(loop, out, static_cast<const std::int32_t*>(x), begin, end);
    case elem::i64:
        return cast_t(loop, out, static_cast<const std::int64_t*>(x), begin, end);
    }
}

}  // namespace

void Copy(const nd_loop<2>& loop, std::size_t itemsize, void* out, const void* x, std::int64_t begin,
          std::int64_t end) {
    if (itemsize == 4)
        copy_t(loop, static_cast<std::uint32_t*>(out), static_cast<const std::uint32_t*>(x), begin, end);
    else
        copy_t(loop, static_cast<std::uint64_t*>(out), static_cast<const std::uint64_t*>(x), begin, end);
}

void CopyTiled(const nd_loop<2>& loop, std::size_t itemsize, void* out, const void* x, std::int64_t begin,
               std::int64_t end) {
    if (itemsize == 4)
        copy_tiled_t(loop, static_cast<std::uint32_t*>(out), static_cast<const std::uint32_t*>(x), begin, end);
    else
        copy_tiled_t(loop, static_cast<std::uint64_t*>(out), static_cast<const std::uint64_t*>(x), begin, end);
}

void Cast(const nd_loop<2>& loop, elem to, void* out, elem from, const void* x, std::int64_t begin, std::int64_t end) {
    switch (to) {
    case elem::f32:
        return cast_from(loop, static_cast<float*>(out), from, x, begin, end);
    case elem::f64:
        return cast_from(loop, static_cast<double*>(out), from, x, begin, end);
    case elem::i32:
        return cast_from(loop, static_cast<std::int32_t*>(out), from, x, begin, end);
    case elem::i64:
        return cast_from(loop, static_cast<std::int64_t*>(out), from, x, begin, end);
    }
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tenferro::kernels {

HWY_EXPORT(Copy);
HWY_EXPORT(CopyTiled);
HWY_EXPORT(Cast);

void copy(const nd_loop<2>& loop, std::size_t itemsize, void* out, const void* x, std::int64_t begin,
          std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(Copy)(loop, itemsize, out, x, begin, end);
}

std::int64_t copy_tiled_units(const nd_loop<2>& loop) noexcept {
    std::int64_t planes = 1;
    for (int d = 0; d + 2 < loop.rank; ++d) planes *= loop.shape[d];
    return planes * ((loop.shape[loop.rank - 2] + copy_tile - 1) / copy_tile);
}

void copy_tiled(const nd_loop<2>& loop, std::size_t itemsize, void* out, const void* x, std::int64_t begin,
                std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(CopyTiled)(loop, itemsize, out, x, begin, end);
}

void cast(const nd_loop<2>& loop, elem to, void* out, elem from, const void* x, std::int64_t begin, std::int64_t end) {
    HWY_DYNAMIC_DISPATCH(Cast)(loop, to, out, from, x, begin, end);
}

}  // namespace tenferro::kernels
#endif  // HWY_ONCE
