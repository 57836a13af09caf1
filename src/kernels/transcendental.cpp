// Vectorised exp / log / tanh / sigmoid (f32, f64): our own polynomial kernels behind Highway dynamic
// dispatch. Design notes (accuracy budget, special values, why each formulation) are in
// docs/kernels-transcendental.md; the comments here record the invariants the code relies on.
//
// Structure: every function is an "op" with three per-vector entry points:
//   safe(d, v): mask of lanes the fast path handles (finite, in range, no NaN); ops that need no range
//               split (always_fast) have none;
//   fast(d, v): the common case, no special-value fix-ups;
//   slow(d, v): any input at all (NaN, ±inf, zero, subnormal, overflow, underflow).
// The driver loads four vectors, and runs fast on all four when every lane is safe, slow otherwise; the
// tail (fewer than one vector) goes through a zero-padded stack buffer and slow. For any lane, fast and
// slow return the same bits where both are defined, so the result never depends on the array length, the
// element's position or its neighbours (slow reuses fast's arithmetic and only adds range handling).

#include "kernels/transcendental.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/transcendental.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tenferro::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {  // internal linkage: other kernel families define their own helpers in this namespace

// Per-type constants. Coefficients are minimax fits (Remez, 50-digit mpmath; the script is reproduced in
// docs/kernels-transcendental.md) rounded to the target precision.
template <typename T>
struct tc;

template <>
struct tc<float> {
    using bits = std::int32_t;
    static constexpr int mant_bits = 23;
    static constexpr bits one_bits = 0x3F800000;
    static constexpr bits exp_bias = 127;
    static constexpr bits sqrt_half_bits = 0x3F3504F3;  // 0.70710677f
    static constexpr bits mant_mask = 0x007FFFFF;
    // Round-to-integer shifter: 1.5 * 2^23. x * log2e + shifter rounds to an integer n, and the low
    // mantissa bits of the sum hold n in two's complement (|n| < 2^22).
    static constexpr float shifter = 0x1.8p23f;
    static constexpr float log2e = 0x1.715476p+0f;
    // Cody-Waite split of ln 2: ln2_hi has 9 significant bits so n * ln2_hi is exact for |n| < 2^15,
    // also on targets without FMA.
    static constexpr float ln2_hi = 0x1.63p-1f;  // 0.693359375
    static constexpr float ln2_lo = -0x1.bd0106p-13f;
    static constexpr float ln2_half = 0x1.62e43p-2f;  // ln2 / 2, rounded
    // exp fast path: |x| <= 87 keeps 2^n and the result normal, so the scale can be added to p's
    // exponent field. The slow path clamps to [-104, 89]: exp(-104) < 2^-150 (rounds to 0),
    // exp(89) > FLT_MAX.
    static constexpr float exp_fast_bound = 87.0f;
    static constexpr float exp_lo = -104.0f;
    static constexpr float exp_hi = 89.0f;
    // tanh(x) rounds to 1 for |x| > 9.0109; clamping there keeps expm1(2|x|) far from overflow.
    static constexpr float tanh_clamp = 9.1f;
    static constexpr float min_normal = 0x1p-126f;
    static constexpr float max_finite = std::numeric_limits<float>::max();
    static constexpr float subnormal_scale = 0x1p23f;
};

template <>
struct tc<double> {
    using bits = std::int64_t;
    static constexpr int mant_bits = 52;
    static constexpr bits one_bits = 0x3FF0000000000000LL;
    static constexpr bits exp_bias = 1023;
    static constexpr bits sqrt_half_bits = 0x3FE6A09E667F3BCDLL;  // 0.7071067811865476
    static constexpr bits mant_mask = 0x000FFFFFFFFFFFFFLL;
    static constexpr double shifter = 0x1.8p52;
    static constexpr double log2e = 0x1.71547652b82fep+0;
    // fdlibm's split: ln2_hi has 32 significant bits, n * ln2_hi exact for |n| < 2^21.
    static constexpr double ln2_hi = 0x1.62e42feep-1;
    static constexpr double ln2_lo = 0x1.a39ef35793c76p-33;
    static constexpr double ln2_half = 0x1.62e42fefa39efp-2;
    static constexpr double exp_fast_bound = 708.0;
    static constexpr double exp_lo = -746.0;  // exp(-746) < 2^-1075: rounds to 0
    static constexpr double exp_hi = 710.0;   // exp(710) > DBL_MAX
    static constexpr double tanh_clamp = 19.5;  // tanh(x) rounds to 1 for |x| > 19.062
    static constexpr double min_normal = 0x1p-1022;
    static constexpr double max_finite = std::numeric_limits<double>::max();
    static constexpr double subnormal_scale = 0x1p52;
};

// Horner: poly(d, x, Set(c_k), c_{k-1}, ..., c_0) = c_k x^k + ... + c_0. The unrolled driver keeps four
// independent chains in flight, so Horner's dependency chain is not the bottleneck.
template <class D, class V>
HWY_INLINE V poly(D /*d*/, V /*x*/, V acc) {
    return acc;
}
template <class D, class V, typename... Rest>
HWY_INLINE V poly(D d, V x, V acc, hn::TFromD<D> c, Rest... rest) {
    return poly(d, x, hn::MulAdd(acc, x, hn::Set(d, c)), rest...);
}

// q(r) ~ (e^r - 1 - r) / r^2 on |r| <= 1.01 * ln2/2, fitted for the *relative error of expm1*
// (r + r^2 q), the stricter of the two uses: 2^-26.1 (f32, degree 6 overall), 2^-61.6 (f64, degree 12).
template <class D, class V>
HWY_INLINE V exp_q(D d, V r) {
    if constexpr (sizeof(hn::TFromD<D>) == 4) {
        return poly(d, r, hn::Set(d, 0x1.6beb2ep-10f), 0x1.122dp-7f, 0x1.55568p-5f, 0x1.5554aap-3f, 0x1.fffffep-2f);
    } else {
        return poly(d, r, hn::Set(d, 0x1.1ee87101917f4p-29), 0x1.af636eef64982p-26, 0x1.27e53886377ffp-22,
                    0x1.71ddf5d9b9195p-19, 0x1.a01a0179914c8p-16, 0x1.a01a01b0c8c78p-13, 0x1.6c16c16c1fb4fp-10,
                    0x1.111111110f4b4p-7, 0x1.555555555553cp-5, 0x1.5555555555559p-3, 0x1.0p-1);
    }
}

// x = n ln2/Parts + r with n = round(x Parts log2e), |r| <= ln2/(2 Parts) (a hair more without FMA). kf
// holds n in its low mantissa bits (see tc::shifter). Parts, a power of two, scales the constants exactly.
template <int Parts = 1, class D, class V>
HWY_INLINE V reduce(D d, V x, V& kf) {
    using T = hn::TFromD<D>;
    using C = tc<T>;
    kf = hn::MulAdd(x, hn::Set(d, C::log2e * T(Parts)), hn::Set(d, C::shifter));
    const V nf = hn::Sub(kf, hn::Set(d, C::shifter));
    const V r = hn::NegMulAdd(nf, hn::Set(d, C::ln2_hi / T(Parts)), x);
    return hn::NegMulAdd(nf, hn::Set(d, C::ln2_lo / T(Parts)), r);
}

// e^r on the reduced range: 1 + r (1 + r q(r)).
template <class D, class V>
HWY_INLINE V exp_reduced(D d, V r) {
    const V one = hn::Set(d, hn::TFromD<D>(1));
    return hn::MulAdd(hn::MulAdd(exp_q(d, r), r, one), r, one);
}

// AVX-512 scales by 2^n in one instruction (vscalefps); elsewhere that takes two integer ops. Both forms
// give the same bits wherever the result is normal.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define TENFERRO_TRANSCENDENTAL_AVX512 1
#else
#define TENFERRO_TRANSCENDENTAL_AVX512 0
#endif

// p * 2^n for n = round(x log2e) held in kf (see tc::shifter) and as a float in nf, where 2^n and the
// product are normal: exact. Without vscalef, an integer add of n << mant_bits to p's bits.
template <class D, class V>
HWY_INLINE V scale_by_pow2(D d, V p, V kf, V nf) {
#if TENFERRO_TRANSCENDENTAL_AVX512
    (void)d;
    (void)kf;
    if constexpr (sizeof(hn::TFromD<D>) == 4) {
        return V{_mm512_scalef_ps(p.raw, nf.raw)};
    } else {
        return V{_mm512_scalef_pd(p.raw, nf.raw)};
    }
#else
    (void)nf;
    const hn::RebindToSigned<D> di;
    const auto scale = hn::ShiftLeft<tc<hn::TFromD<D>>::mant_bits>(hn::BitCast(di, kf));
    return hn::BitCast(d, hn::Add(hn::BitCast(di, p), scale));
#endif
}

#if TENFERRO_TRANSCENDENTAL_AVX512
// f32 exp on AVX-512 splits x finer: x = (16 n + j) ln2/16 + r, |r| <= ln2/32, so e^x = 2^n 2^(j/16) e^r.
// The sixteen values 2^(j/16) fit one register and vpermps looks them up (the index is j, the low four
// bits of k = 16 n + j in kf's mantissa), and on the 16x narrower range a degree-3 e^r suffices (relative
// error 2^-28.6; minimax with the script in docs/kernels-transcendental.md). That is seven FMA-unit ops
// per vector instead of ten: the scaling by 2^n moves to the integer units. The rounded table adds at
// most half an ULP; the exhaustive f32 sweep measures the whole kernel (see the docs).
// e^r - 1 for x = k ln2/16 + r; kf holds k = 16 n + j in its low mantissa bits (as reduce's kf).
template <class D, class V>
HWY_INLINE V exp16_em1(D d, V x, V& kf) {
    const V r = reduce<16>(d, x, kf);
    return hn::Mul(
        r, hn::MulAdd(hn::MulAdd(hn::Set(d, 0x1.55576cp-3f), r, hn::Set(d, 0x1.00029ep-1f)), r, hn::Set(d, 1.0f)));
}

// 2^(j/16) for j = 0..15, rounded to f32 (as bits); `biased` subtracts j << 19 from each entry, so that
// adding k << 19 (= n << 23 + j << 19) yields the bits of 2^n 2^(j/16) in one integer add.
template <bool Biased>
HWY_INLINE __m512 exp16_table() {
    if constexpr (Biased) {
        return _mm512_castsi512_ps(_mm512_setr_epi32(
            0x3F800000, 0x3F7DAAC3, 0x3F7B95C2, 0x3F79C3D3, 0x3F7837F0, 0x3F76F532, 0x3F75FED7, 0x3F75583F, 0x3F7504F3,
            0x3F7508A4, 0x3F75672A, 0x3F76248C, 0x3F7744FD, 0x3F78CCDF, 0x3F7AC0C7, 0x3F7D257D));
    } else {
        return _mm512_castsi512_ps(_mm512_setr_epi32(
            0x3F800000, 0x3F85AAC3, 0x3F8B95C2, 0x3F91C3D3, 0x3F9837F0, 0x3F9EF532, 0x3FA5FED7, 0x3FAD583F, 0x3FB504F3,
            0x3FBD08A4, 0x3FC5672A, 0x3FCE248C, 0x3FD744FD, 0x3FE0CCDF, 0x3FEAC0C7, 0x3FF5257D));
    }
}

// 2^(j/16) with j = kf's low four bits: Biased, times 2^n as well (exact where 2^n 2^(j/16) is normal).
template <bool Biased, class D, class V>
HWY_INLINE V exp16_scale(D d, V kf) {
    const hn::RebindToSigned<D> di;
    const V t = V{_mm512_permutexvar_ps(_mm512_castps_si512(kf.raw), exp16_table<Biased>())};
    if constexpr (!Biased) return t;
    // kf's bits are those of the shifter plus k; shifted left by 19 the shifter's bits leave the word.
    return hn::BitCast(d, hn::Add(hn::BitCast(di, t), hn::ShiftLeft<19>(hn::BitCast(di, kf))));
}
#endif

// Fast exp: valid for |x| <= exp_fast_bound, where both 2^n and the result are normal, so the scaling
// by 2^n is exact.
// Table: the AVX-512 f32 table form (above) where it applies; sigmoid asks for the polynomial form,
// whose smaller error (0.93 ULP instead of 0.98) its own 2 ULP budget needs.
template <bool Table = true, class D, class V>
HWY_INLINE V exp_fast(D d, V x) {
    using C = tc<hn::TFromD<D>>;
#if TENFERRO_TRANSCENDENTAL_AVX512
    if constexpr (Table && sizeof(hn::TFromD<D>) == 4) {
        // s = 2^n 2^(j/16) >= 2^-126 for x >= -87, and s e^r = s + s (e^r - 1) in one rounding.
        V kf;
        const V em1 = exp16_em1(d, x, kf);
        const V s = exp16_scale<true>(d, kf);
        return hn::MulAdd(s, em1, s);
    }
#endif
    V kf;
    const V p = exp_reduced(d, reduce(d, x, kf));
    return scale_by_pow2(d, p, kf, hn::Sub(kf, hn::Set(d, C::shifter)));
}

// Full-range exp. Clamping keeps n in [-151, 128] (f32) / [-1076, 1024] (f64); 2^n is applied as two
// normal factors 2^(n>>1) * 2^(n - (n>>1)), so p * 2^n1 is exact and the second multiply rounds once:
// gradual underflow is correctly rounded up to p's own error, and overflow gives +inf.
template <bool Table = true, class D, class V>
HWY_INLINE V exp_slow(D d, V x) {
    using C = tc<hn::TFromD<D>>;
    const hn::RebindToSigned<D> di;
    const V xc = hn::Min(hn::Max(x, hn::Set(d, C::exp_lo)), hn::Set(d, C::exp_hi));
    // The table form: kf holds k = 16 n + j, else n.
    constexpr bool table = TENFERRO_TRANSCENDENTAL_AVX512 && Table && sizeof(hn::TFromD<D>) == 4;
    V kf;
    V p;
    if constexpr (table) {
#if TENFERRO_TRANSCENDENTAL_AVX512
        // exp_fast's arithmetic at 2^0: p = 2^(j/16) e^r rounded once, so p 2^n gives exp_fast's bits
        // wherever both apply. n = k >> 4 (floor) is in [-151, 128].
        const V em1 = exp16_em1(d, xc, kf);
        const V t = exp16_scale<false>(d, kf);
        p = hn::MulAdd(t, em1, t);
#endif
    } else {
        p = exp_reduced(d, reduce(d, xc, kf));
    }
    auto n = hn::Sub(hn::BitCast(di, kf), hn::BitCast(di, hn::Set(d, C::shifter)));
    if constexpr (table) n = hn::ShiftRight<4>(n);
    const auto n1 = hn::ShiftRight<1>(n);
    const auto n2 = hn::Sub(n, n1);
    const auto bias = hn::Set(di, C::exp_bias);
    const V s1 = hn::BitCast(d, hn::ShiftLeft<C::mant_bits>(hn::Add(n1, bias)));
    const V s2 = hn::BitCast(d, hn::ShiftLeft<C::mant_bits>(hn::Add(n2, bias)));
    const V r = hn::Mul(hn::Mul(p, s1), s2);
    return hn::IfThenElse(hn::IsNaN(x), hn::Add(x, x), r);  // x + x quiets a signalling NaN
}

struct exp_op {
    static constexpr bool always_fast = false;
    template <class D, class V>
    static HWY_INLINE hn::Mask<D> safe(D d, V x) {
        return hn::Le(hn::Abs(x), hn::Set(d, tc<hn::TFromD<D>>::exp_fast_bound));  // false for NaN
    }
    template <class D, class V>
    static HWY_INLINE V fast(D d, V x) {
        return exp_fast(d, x);
    }
    template <class D, class V>
    static HWY_INLINE V slow(D d, V x) {
        return exp_slow(d, x);
    }
};

// ln x for positive normal x (and, with Adjust, a rescaled subnormal whose exponent correction is
// eadj). x = 2^e m with m in [sqrt(1/2), sqrt(2)), found with integer ops only (musl's trick: subtracting
// the bits of sqrt(1/2) makes the exponent field e and the masked mantissa, re-biased, m).
template <bool Adjust, class D, class V>
HWY_INLINE V log_core(D d, V x, V eadj) {
    using T = hn::TFromD<D>;
    using C = tc<T>;
    const hn::RebindToSigned<D> di;
    const auto c = hn::Set(di, C::sqrt_half_bits);
    const auto ix = hn::Sub(hn::BitCast(di, x), c);
    const V m = hn::BitCast(d, hn::Add(hn::And(ix, hn::Set(di, C::mant_mask)), c));
    const V f = hn::Sub(m, hn::Set(d, T(1)));  // exact (Sterbenz), in [-0.293, 0.415)
    V ef;
    if constexpr (sizeof(T) == 4) {
        ef = hn::ConvertTo(d, hn::ShiftRight<C::mant_bits>(ix));
    } else {
        // int64 -> double without vcvtqq2pd (absent before AVX-512DQ): bias e into [0, 2047], OR it into
        // the mantissa of 2^52 and subtract. The bias also makes a logical shift suffice.
        const hn::RebindToUnsigned<D> du;
        const auto eb =
            hn::ShiftRight<C::mant_bits>(hn::BitCast(du, hn::Add(ix, hn::Set(di, std::int64_t{1023} << C::mant_bits))));
        ef = hn::Sub(hn::BitCast(d, hn::Or(eb, hn::BitCast(du, hn::Set(d, 0x1p52)))), hn::Set(d, 0x1p52 + 1023.0));
    }
    if constexpr (Adjust) ef = hn::Add(ef, eadj);
    const V ln2_hi = hn::Set(d, C::ln2_hi);  // ef * ln2_hi is exact (|ef| <= 1075)
    const V ln2_lo = hn::Set(d, C::ln2_lo);
    if constexpr (sizeof(T) == 4) {
        // ln(1 + f) = f - f^2/2 + f^3 P(f), P minimax for relative error 2^-27.4 on the m range.
        const V z = hn::Mul(f, f);
        const V p = poly(d, f, hn::Set(d, -0x1.38c1b6p-4f), 0x1.056498p-3f, -0x1.0d8758p-3f, 0x1.22d90ap-3f,
                         -0x1.5471f6p-3f, 0x1.99a012p-3f, -0x1.000228p-2f, 0x1.555554p-2f);
        V y = hn::Mul(hn::Mul(z, f), p);
        y = hn::MulAdd(ef, ln2_lo, y);
        y = hn::NegMulAdd(z, hn::Set(d, 0.5f), y);
        return hn::MulAdd(ef, ln2_hi, hn::Add(f, y));
    } else {
        // fdlibm's formulation: s = f / (2 + f), ln(1 + f) = f - hfsq + s (hfsq + R(s^2)), R minimax
        // (absolute error 2^-64.8 on s^2 <= 0.0295) with our own coefficients.
        const V s = hn::Div(f, hn::Add(f, hn::Set(d, 2.0)));
        const V hfsq = hn::Mul(hn::Set(d, 0.5), hn::Mul(f, f));
        const V z = hn::Mul(s, s);
        const V r = hn::Mul(z, poly(d, z, hn::Set(d, 0x1.0fa728c58b3ebp-3), 0x1.0f57ce0b746f8p-3, 0x1.3b20be7d109cap-3,
                                    0x1.745cdeecee49fp-3, 0x1.c71c7251b8e35p-3, 0x1.2492492437439p-2,
                                    0x1.9999999999cfcp-2, 0x1.5555555555555p-1));
        const V t = hn::MulAdd(s, hn::Add(hfsq, r), hn::Mul(ef, ln2_lo));
        return hn::MulSub(ef, ln2_hi, hn::Sub(hn::Sub(hfsq, t), f));
    }
}

struct log_op {
    static constexpr bool always_fast = false;
    template <class D, class V>
    static HWY_INLINE hn::Mask<D> safe(D d, V x) {
        using C = tc<hn::TFromD<D>>;
        return hn::And(hn::Ge(x, hn::Set(d, C::min_normal)), hn::Le(x, hn::Set(d, C::max_finite)));
    }
    template <class D, class V>
    static HWY_INLINE V fast(D d, V x) {
        return log_core<false>(d, x, hn::Zero(d));
    }
    template <class D, class V>
    static HWY_INLINE V slow(D d, V x) {
        using T = hn::TFromD<D>;
        using C = tc<T>;
        const V zero = hn::Zero(d);
        const auto tiny = hn::Lt(x, hn::Set(d, C::min_normal));
        const V xs = hn::IfThenElse(tiny, hn::Mul(x, hn::Set(d, C::subnormal_scale)), x);
        const V eadj = hn::IfThenElseZero(tiny, hn::Set(d, T(-C::mant_bits)));
        V r = log_core<true>(d, xs, eadj);
        r = hn::IfThenElse(hn::Eq(x, zero), hn::Set(d, -std::numeric_limits<T>::infinity()), r);
        r = hn::IfThenElse(hn::Lt(x, zero), hn::Set(d, std::numeric_limits<T>::quiet_NaN()), r);
        r = hn::IfThenElse(hn::Eq(x, hn::Set(d, std::numeric_limits<T>::infinity())), x, r);
        return hn::IfThenElse(hn::IsNaN(x), hn::Add(x, x), r);
    }
};

// max(v, c) that keeps a NaN v (so NaN flows through the arithmetic and needs no fix-up).
template <class D, class V>
HWY_INLINE V max_keep_nan(D d, V v, V c) {
    (void)d;
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
    return hn::Max(c, v);  // (v)maxps returns its second operand when either is NaN
#else
    return hn::IfThenElse(hn::Lt(v, c), c, v);
#endif
}

// c - a b with (nearly) a single rounding, for |a b| <= |c|. Targets without FMA (SSSE3, SSE4, scalar)
// emulate it with Dekker's exact product (Veltkamp split) and Fast2Sum: about 20 extra ops, spent only
// where the accuracy budget needs it.
template <class D, class V>
HWY_INLINE V neg_mul_add_exact(D d, V a, V b, V c) {
#if HWY_NATIVE_FMA
    (void)d;
    return hn::NegMulAdd(a, b, c);
#else
    using T = hn::TFromD<D>;
    const V split = hn::Set(d, sizeof(T) == 4 ? T(4097) : T(134217729));  // 2^12 + 1, 2^27 + 1
    const V ta = hn::Mul(a, split);
    const V a_hi = hn::Sub(ta, hn::Sub(ta, a));
    const V a_lo = hn::Sub(a, a_hi);
    const V tb = hn::Mul(b, split);
    const V b_hi = hn::Sub(tb, hn::Sub(tb, b));
    const V b_lo = hn::Sub(b, b_hi);
    const V p = hn::Mul(a, b);
    // a b = p + e exactly.
    const V e = hn::Add(hn::Add(hn::Add(hn::Sub(hn::Mul(a_hi, b_hi), p), hn::Mul(a_hi, b_lo)), hn::Mul(a_lo, b_hi)),
                        hn::Mul(a_lo, b_lo));
    const V sum = hn::Sub(c, p);  // Fast2Sum(c, -p), exact since |p| <= |c|
    const V low = hn::Sub(hn::Neg(p), hn::Sub(sum, c));
    return hn::Add(sum, hn::Sub(low, e));
#endif
}

// tanh x = -sign(x) q with q = tanh(y), y = -|x| <= 0, evaluated as q = h / (1 + h) with
// h = expm1(2y) / 2 in (-1/2, 0]. Working on the non-positive side keeps |h| < 1/2, which makes one
// refinement step q = h - h q0 (from q (1 + h) = h) damp the error of the rounded quotient q0
// (denominator rounding + division) by |h| <= 1/2; what remains is h's own error and one rounding.
// Near 0, h ~ y keeps full relative accuracy, so one formula covers the whole range; computing on -|x|
// and restoring the sign keeps tanh exactly odd.
// The reduction works on half the argument (h_r = y - n ln2/2, r = 2 h_r), so 2y is never formed:
// t = expm1(r)/2 = h_r + h_r^2 * 2q(2 h_r) (coefficients scaled by powers of 2, exactly), and
// h = 2^n t + (2^n - 1)/2, where (2^n - 1)/2 is exact for n >= -27.
template <class D, class V>
HWY_INLINE V tanh_core(D d, V x) {
    using T = hn::TFromD<D>;
    using C = tc<T>;
    const V y = max_keep_nan(d, hn::Or(x, hn::SignBit(d)), hn::Set(d, -C::tanh_clamp));
    // The shifter carries the exponent bias: kf's low mantissa bits hold n + bias (n in [-28, 0], so
    // n + bias stays in [1, bias]), and 2^n is those bits shifted into the exponent field, one op
    // without vscalef. n, and so every result, is the same as with the plain shifter: the sum stays in
    // [2^23, 2^24) (f32) / [2^52, 2^53) (f64), where both round to integers alike.
    constexpr T shifter = C::shifter + T(C::exp_bias);
    const V kf = hn::MulAdd(y, hn::Set(d, T(2) * C::log2e), hn::Set(d, shifter));
    const V nf = hn::Sub(kf, hn::Set(d, shifter));
#if HWY_NATIVE_FMA
    // One-constant reduction: n ln2/2 is off by |n| 1e-9 (f32), which tanh damps to < 0.1 ULP for every
    // |n| <= 27 (largest relative to the result at n = -1).
    const V hr = hn::NegMulAdd(nf, hn::Set(d, C::ln2_half), y);
#else
    V hr = hn::NegMulAdd(nf, hn::Set(d, C::ln2_hi * T(0.5)), y);
    hr = hn::NegMulAdd(nf, hn::Set(d, C::ln2_lo * T(0.5)), hr);
#endif
    const V hr2 = hn::Mul(hr, hr);
    V q2;  // 2 q(2 h_r): exp_q's coefficients c_k scaled by 2^(k-1)
    if constexpr (sizeof(T) == 4) {
        // Estrin's split (c0 + c1 h) + h^2 (c2 + c3 h + c4 h^2) instead of Horner: the same op count
        // (h^2 is needed below anyway), a dependency chain three FMAs shorter. tanh's chain is long
        // (reduction, polynomial, division, refinement) and a shorter one measured 3-4% faster.
        const V p01 = hn::MulAdd(hr, hn::Set(d, 0x1.5554aap-3f * 4), hn::Set(d, 0x1.fffffep-2f * 2));
        const V p23 = hn::MulAdd(hr, hn::Set(d, 0x1.122dp-7f * 16), hn::Set(d, 0x1.55568p-5f * 8));
        q2 = hn::MulAdd(hr2, hn::MulAdd(hr2, hn::Set(d, 0x1.6beb2ep-10f * 32), p23), p01);
    } else {
        q2 = poly(d, hr, hn::Set(d, 0x1.1ee87101917f4p-29 * 2048), 0x1.af636eef64982p-26 * 1024,
                  0x1.27e53886377ffp-22 * 512, 0x1.71ddf5d9b9195p-19 * 256, 0x1.a01a0179914c8p-16 * 128,
                  0x1.a01a01b0c8c78p-13 * 64, 0x1.6c16c16c1fb4fp-10 * 32, 0x1.111111110f4b4p-7 * 16,
                  0x1.555555555553cp-5 * 8, 0x1.5555555555559p-3 * 4, 0x1.0p-1 * 2);
    }
    const V t = hn::MulAdd(hr2, q2, hr);
    // 2^n: kf's bits shifted into the exponent field, on every target. (vscalefps would take an FMA
    // port, which tanh is short of; the integer shift measured 2-3% faster on AVX-512.)
    const hn::RebindToSigned<D> di;
    const auto s_bits = hn::ShiftLeft<C::mant_bits>(hn::BitCast(di, kf));
    const V s = hn::BitCast(d, s_bits);
    // (2^n - 1)/2 as 2^(n-1) - 1/2, with 2^(n-1) one integer subtract from 2^n's exponent field (2^n is
    // normal): an integer op and an add instead of an FMA-port op, +2-4% (Zen 5, AVX3). The same bits as
    // s * 0.5 - 0.5 in one FMA, since both round the same exact value once.
    const V s_half = hn::BitCast(d, hn::Sub(s_bits, hn::Set(di, typename C::bits{1} << C::mant_bits)));
    const V h = hn::MulAdd(s, t, hn::Sub(s_half, hn::Set(d, T(0.5))));
    const V q0 = hn::Div(h, hn::Add(h, hn::Set(d, T(1))));
    return hn::CopySign(neg_mul_add_exact(d, h, q0, h), x);  // |q| with x's sign
}

// tanh needs no range split: the clamp handles ±inf and large |x|, NaN flows through the arithmetic.
struct tanh_op {
    static constexpr bool always_fast = true;
    template <class D, class V>
    static HWY_INLINE V fast(D d, V x) {
        return tanh_core(d, x);
    }
    template <class D, class V>
    static HWY_INLINE V slow(D d, V x) {
        return tanh_core(d, x);
    }
};

// sigmoid x = num / (1 + e) with e = exp(-|x|) in (0, 1] and num = 1 (x >= 0) or e (x < 0): exp never
// overflows, and for x < 0 the result keeps e's relative accuracy down into the subnormals.
// One refinement step, from q (1 + e) = num: q = num - e q0. It damps the error of the rounded quotient
// q0 (denominator rounding + division) by the factor e <= 1, for one FMA.
template <class D, class V>
HWY_INLINE V sigmoid_finish(D d, V x, V e) {
    const V one = hn::Set(d, hn::TFromD<D>(1));
    const V num = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), e, one);
    const V q0 = hn::Div(num, hn::Add(e, one));
    return hn::NegMulAdd(e, q0, num);
}

struct sigmoid_op {
    static constexpr bool always_fast = false;
    template <class D, class V>
    static HWY_INLINE hn::Mask<D> safe(D d, V x) {
        return exp_op::safe(d, x);
    }
    template <class D, class V>
    static HWY_INLINE V fast(D d, V x) {
        return sigmoid_finish(d, x, exp_fast<false>(d, hn::Or(x, hn::SignBit(d))));
    }
    template <class D, class V>
    static HWY_INLINE V slow(D d, V x) {
        return sigmoid_finish(d, x, exp_slow<false>(d, hn::Or(x, hn::SignBit(d))));  // NaN stays NaN
    }
};

// Four vectors per iteration: enough independent chains to cover FMA latency (4 cycles, 2 ports) and
// one safety test per group, so the branch costs well under one op per vector. GCC builds this file
// with its pre-allocation scheduler (meson.build, transcendental_schedule_args), which interleaves the
// four chains: written one after another they left the core too few independent ops in reach.
template <class Op, typename T>
HWY_INLINE void apply(const T* x, T* out, std::int64_t count) {
    if (count <= 0) return;
    const hn::ScalableTag<T> d;
    const std::size_t n = static_cast<std::size_t>(count);
    const std::size_t lanes = hn::Lanes(d);
    std::size_t i = 0;
    if (n >= 4 * lanes) {
        for (; i <= n - 4 * lanes; i += 4 * lanes) {
            auto v0 = hn::LoadU(d, x + i);
            auto v1 = hn::LoadU(d, x + i + lanes);
            auto v2 = hn::LoadU(d, x + i + 2 * lanes);
            auto v3 = hn::LoadU(d, x + i + 3 * lanes);
            bool fast = true;
            if constexpr (!Op::always_fast) {
                fast = hn::AllTrue(
                    d, hn::And(hn::And(Op::safe(d, v0), Op::safe(d, v1)), hn::And(Op::safe(d, v2), Op::safe(d, v3))));
            }
            if (HWY_LIKELY(fast)) {
                v0 = Op::fast(d, v0);
                v1 = Op::fast(d, v1);
                v2 = Op::fast(d, v2);
                v3 = Op::fast(d, v3);
            } else {
                v0 = Op::slow(d, v0);
                v1 = Op::slow(d, v1);
                v2 = Op::slow(d, v2);
                v3 = Op::slow(d, v3);
            }
            hn::StoreU(v0, d, out + i);
            hn::StoreU(v1, d, out + i + lanes);
            hn::StoreU(v2, d, out + i + 2 * lanes);
            hn::StoreU(v3, d, out + i + 3 * lanes);
        }
    }
    for (; i + lanes <= n; i += lanes) {
        const auto v = hn::LoadU(d, x + i);
        bool fast = true;
        if constexpr (!Op::always_fast) fast = hn::AllTrue(d, Op::safe(d, v));
        hn::StoreU(fast ? Op::fast(d, v) : Op::slow(d, v), d, out + i);
    }
    if (i < n) {
        // Partial last vector through a zero-padded buffer: no masked loads/stores needed (and none that
        // could fault past the end); zero is a valid input for every op.
        HWY_ALIGN T buf[hn::MaxLanes(d)] = {};
        const std::size_t rem = n - i;
        std::memcpy(buf, x + i, rem * sizeof(T));
        hn::Store(Op::slow(d, hn::Load(d, buf)), d, buf);
        std::memcpy(out + i, buf, rem * sizeof(T));
    }
}

void exp_f32_kernel(const float* x, float* out, std::int64_t n) { apply<exp_op>(x, out, n); }
void exp_f64_kernel(const double* x, double* out, std::int64_t n) { apply<exp_op>(x, out, n); }
void log_f32_kernel(const float* x, float* out, std::int64_t n) { apply<log_op>(x, out, n); }
void log_f64_kernel(const double* x, double* out, std::int64_t n) { apply<log_op>(x, out, n); }
void tanh_f32_kernel(const float* x, float* out, std::int64_t n) { apply<tanh_op>(x, out, n); }
void tanh_f64_kernel(const double* x, double* out, std::int64_t n) { apply<tanh_op>(x, out, n); }
void sigmoid_f32_kernel(const float* x, float* out, std::int64_t n) { apply<sigmoid_op>(x, out, n); }
void sigmoid_f64_kernel(const double* x, double* out, std::int64_t n) { apply<sigmoid_op>(x, out, n); }

#undef TENFERRO_TRANSCENDENTAL_AVX512

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace tenferro::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tenferro::kernels {

HWY_EXPORT(exp_f32_kernel);
HWY_EXPORT(exp_f64_kernel);
HWY_EXPORT(log_f32_kernel);
HWY_EXPORT(log_f64_kernel);
HWY_EXPORT(tanh_f32_kernel);
HWY_EXPORT(tanh_f64_kernel);
HWY_EXPORT(sigmoid_f32_kernel);
HWY_EXPORT(sigmoid_f64_kernel);

void exp_f32(const float* x, float* out, std::int64_t n) { HWY_DYNAMIC_DISPATCH(exp_f32_kernel)(x, out, n); }
void exp_f64(const double* x, double* out, std::int64_t n) { HWY_DYNAMIC_DISPATCH(exp_f64_kernel)(x, out, n); }
void log_f32(const float* x, float* out, std::int64_t n) { HWY_DYNAMIC_DISPATCH(log_f32_kernel)(x, out, n); }
void log_f64(const double* x, double* out, std::int64_t n) { HWY_DYNAMIC_DISPATCH(log_f64_kernel)(x, out, n); }
void tanh_f32(const float* x, float* out, std::int64_t n) { HWY_DYNAMIC_DISPATCH(tanh_f32_kernel)(x, out, n); }
void tanh_f64(const double* x, double* out, std::int64_t n) { HWY_DYNAMIC_DISPATCH(tanh_f64_kernel)(x, out, n); }
void sigmoid_f32(const float* x, float* out, std::int64_t n) { HWY_DYNAMIC_DISPATCH(sigmoid_f32_kernel)(x, out, n); }
void sigmoid_f64(const double* x, double* out, std::int64_t n) { HWY_DYNAMIC_DISPATCH(sigmoid_f64_kernel)(x, out, n); }

}  // namespace tenferro::kernels
#endif  // HWY_ONCE
