// Per-target vector math shared by the kernel families: exp, log, tanh and
// sigmoid with IEEE special values, built on Highway 1.0.3's contrib math
// (Exp: 1 ULP, Log: 4 ULP, Tanh: 4 ULP over their valid ranges) plus the
// fix-ups that contrib leaves out (NaN in, overflow, log of 0 / negatives / inf).
// Include after hwy/highway.h inside a foreach_target translation unit.

// Re-inclusion guard per target, the Highway way.
#if defined(TENFERRO_KERNELS_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TENFERRO_KERNELS_MATH_INL_H_
#undef TENFERRO_KERNELS_MATH_INL_H_
#else
#define TENFERRO_KERNELS_MATH_INL_H_
#endif

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// e^x. contrib's Exp is valid up to 104 (f32) / 706 (f64); above that the
// result is +inf, and NaN passes through. Below the lower bound it returns +0.
template <class D, class V>
HWY_INLINE V exp_v(D d, V x) {
    using T = hn::TFromD<D>;
    const V upper = hn::Set(d, static_cast<T>(sizeof(T) == 4 ? 104.0 : 706.0));
    V y = hn::Exp(d, x);
    y = hn::IfThenElse(hn::Gt(x, upper), hn::Inf(d), y);
    return hn::IfThenElse(hn::IsNaN(x), x, y);
}

// ln x with log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, NaN passes through.
template <class D, class V>
HWY_INLINE V log_v(D d, V x) {
    const V zero = hn::Zero(d);
    const V inf = hn::Inf(d);
    V y = hn::Log(d, x);
    y = hn::IfThenElse(hn::Eq(x, inf), inf, y);
    y = hn::IfThenElse(hn::Eq(x, zero), hn::Neg(inf), y);
    y = hn::IfThenElse(hn::Lt(x, zero), hn::NaN(d), y);
    return hn::IfThenElse(hn::IsNaN(x), x, y);
}

// tanh x: contrib's Tanh saturates to +-1 for |x| > 18.7 and propagates NaN.
template <class D, class V>
HWY_INLINE V tanh_v(D d, V x) {
    const V y = hn::Tanh(d, x);
    return hn::IfThenElse(hn::IsNaN(x), x, y);
}

// 1 / (1 + e^-x), evaluated as (x >= 0 ? 1 : e) / (1 + e) with e = e^-|x|, so
// it never overflows and keeps the tiny values for large negative x. One true
// division, no approximate reciprocal.
template <class D, class V>
HWY_INLINE V sigmoid_v(D d, V x) {
    const V one = hn::Set(d, 1);
    const V e = exp_v(d, hn::Neg(hn::Abs(x)));
    const V num = hn::IfThenElse(hn::Ge(x, hn::Zero(d)), one, e);
    return hn::Div(num, hn::Add(one, e));
}

}  // namespace tenferro::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TENFERRO_KERNELS_MATH_INL_H_
