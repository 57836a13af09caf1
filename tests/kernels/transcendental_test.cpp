#include "kernels/transcendental.hpp"
// The header under test comes first, alone: it must compile on its own.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hwy_targets.hpp"
#include "kernels/hwy_control.hpp"

// Every compiled Highway target is checked against a higher-precision scalar reference: f32 results
// against the double-precision std:: function, f64 results against the long double (x87, 64-bit
// significand) one. Errors are measured in fractional ULPs of the exact result (the reference): a
// correctly rounded result scores <= 0.5.
//
// Environment:
//   TENFERRO_TEST_VERBOSE=1  print the max-ULP table (per function and target) to stdout.
// Hidden test (not part of `meson test`): `transcendental_test "[exhaustive]"` sweeps all 2^32 floats
// through every f32 function on every target (about 20 CPU minutes); docs/kernels-transcendental.md quotes it.

namespace {

namespace k = tenferro::kernels;

constexpr double f32_bound = 2.0;  // ULP, documented contract (docs/kernels-transcendental.md)
constexpr double f64_bound = 3.0;

// Unoptimised and sanitizer builds run Highway code 10-50x slower: they sweep every 16th point instead,
// so the test stays well inside its timeout there too.
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
constexpr std::uint32_t sweep_thinning = 1;
#else
constexpr std::uint32_t sweep_thinning = 16;
#endif

bool verbose() {
    const char* v = std::getenv("TENFERRO_TEST_VERBOSE");
    return v != nullptr && *v != '\0' && *v != '0';
}

using tenferro::test::for_each_target;

// ------------------------------------------------------------------------------------------------
// Functions under test and their references
// ------------------------------------------------------------------------------------------------

template <typename T>
using kernel_fn = void (*)(const T*, T*, std::int64_t);

template <typename T>
struct traits;

template <>
struct traits<float> {
    using ref_t = double;
    using bits_t = std::uint32_t;
    static constexpr int mant = 23;
    static constexpr double bound = f32_bound;
};

template <>
struct traits<double> {
    using ref_t = long double;
    using bits_t = std::uint64_t;
    static constexpr int mant = 52;
    static constexpr double bound = f64_bound;
};

template <typename T>
struct function {
    const char* name;
    kernel_fn<T> kernel;
    typename traits<T>::ref_t (*reference)(typename traits<T>::ref_t);
};

double ref_exp(double x) { return std::exp(x); }
double ref_log(double x) { return std::log(x); }
double ref_tanh(double x) { return std::tanh(x); }
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
long double ref_expl(long double x) { return std::exp(x); }
long double ref_logl(long double x) { return std::log(x); }
long double ref_tanhl(long double x) { return std::tanh(x); }
long double ref_sigmoidl(long double x) { return 1.0L / (1.0L + std::exp(-x)); }

const function<float> f32_functions[] = {
    {"exp", k::exp_f32, ref_exp},
    {"log", k::log_f32, ref_log},
    {"tanh", k::tanh_f32, ref_tanh},
    {"sigmoid", k::sigmoid_f32, ref_sigmoid},
};
const function<double> f64_functions[] = {
    {"exp", k::exp_f64, ref_expl},
    {"log", k::log_f64, ref_logl},
    {"tanh", k::tanh_f64, ref_tanhl},
    {"sigmoid", k::sigmoid_f64, ref_sigmoidl},
};

// Error of `got` in ULPs of the exact value `ref` (given in a wider type R). Infinite results count as
// the next power of two past the largest finite value, so an overflow to inf where the exact value
// is just representable costs ~1 ULP instead of infinity. NaN must match NaN.
template <typename T, typename R>
double ulp_error(T got, R ref) {
    if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0.0 : HUGE_VAL;
    // An exact value beyond the overflow threshold must give inf (the correctly rounded result).
    if (std::isinf(static_cast<T>(ref)) && std::isinf(got)) return (ref > 0) == (got > 0) ? 0.0 : HUGE_VAL;
    constexpr int max_exp = std::numeric_limits<T>::max_exponent;  // 128 / 1024
    constexpr int mant = std::numeric_limits<T>::digits - 1;       // 23 / 52
    constexpr int min_exp = std::numeric_limits<T>::min_exponent;  // -125 / -1021
    const R g = std::isinf(got) ? std::copysign(std::ldexp(R(1), max_exp), R(got)) : R(got);
    const R r = std::isinf(ref) ? std::copysign(std::ldexp(R(1), max_exp), ref) : ref;
    int e = 0;
    std::frexp(r, &e);  // |r| in [2^(e-1), 2^e)
    if (r == 0 || e < min_exp) e = min_exp;  // subnormal range: fixed ULP 2^(min_exp - 1 - mant)
    const R ulp = std::ldexp(R(1), e - 1 - mant);
    return static_cast<double>(std::fabs(g - r) / ulp);
}

// ulp_error for f32 without frexp/ldexp: the exhaustive sweep evaluates it 2^32 times per target.
double ulp_error_f32(float got, double ref) {
    const auto biased = static_cast<int>((std::bit_cast<std::uint64_t>(ref) >> 52) & 0x7FF);
    if (biased == 0x7FF || !std::isfinite(got)) return ulp_error(got, ref);  // NaN and inf: the general rules
    const int e = std::max(biased - 1023, -126);  // |ref| in [2^e, 2^(e+1)), ULP 2^(e-23) (subnormals: 2^-149)
    const double inv_ulp = std::bit_cast<double>(static_cast<std::uint64_t>(1023 + 23 - e) << 52);
    return std::fabs(static_cast<double>(got) - ref) * inv_ulp;
}

struct stats {
    double max_ulp = 0;
    double worst_x = 0;
    double worst_got = 0;
    std::size_t count = 0;
};

// Runs `fn` over `xs` on the current target and folds the errors against `refs` into `s`.
template <typename T>
void measure(const function<T>& fn, const std::vector<T>& xs, const std::vector<typename traits<T>::ref_t>& refs,
             std::vector<T>& out, stats& s) {
    out.assign(xs.size(), T(0));
    fn.kernel(xs.data(), out.data(), static_cast<std::int64_t>(xs.size()));
    for (std::size_t i = 0; i < xs.size(); ++i) {
        double err;
        if constexpr (sizeof(T) == 4) {
            err = ulp_error_f32(out[i], refs[i]);
        } else {
            err = ulp_error(out[i], refs[i]);
        }
        if (!(err <= s.max_ulp)) {
            s.max_ulp = err;
            s.worst_x = static_cast<double>(xs[i]);
            s.worst_got = static_cast<double>(out[i]);
        }
    }
    s.count += xs.size();
}

template <typename T>
using stats_by_target = std::map<std::int64_t, stats>;

// Evaluates `xs` (references computed once) on every target.
template <typename T>
void sweep(const function<T>& fn, const std::vector<T>& xs, stats_by_target<T>& by_target) {
    std::vector<typename traits<T>::ref_t> refs(xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) refs[i] = fn.reference(xs[i]);
    std::vector<T> out;
    for_each_target([&](std::int64_t target) { measure(fn, xs, refs, out, by_target[target]); });
}

template <typename T>
void check_and_report(const char* type, const function<T>& fn, const stats_by_target<T>& by_target) {
    for (const auto& [target, s] : by_target) {
        if (verbose()) {
            std::printf("%-4s %-8s %-8s max %.3f ULP over %zu points (worst x = %.9g -> %.9g)\n", type, fn.name,
                        tenferro::kernels::hwy_control::target_name(target), s.max_ulp, s.count, s.worst_x,
                        s.worst_got);
        }
        INFO(type << " " << fn.name << " on " << tenferro::kernels::hwy_control::target_name(target)
                  << ": worst x = " << s.worst_x << " (hex " << std::hexfloat << s.worst_x << std::defaultfloat
                  << ") gives " << s.worst_got);
        CHECK(s.max_ulp <= traits<T>::bound);
    }
}

// Appends every float with bit pattern in [from, to).
void append_range(std::vector<float>& xs, float from, float to, std::uint32_t step = 1) {
    const std::uint32_t end = std::bit_cast<std::uint32_t>(to);
    for (std::uint32_t b = std::bit_cast<std::uint32_t>(from); b < end; b += step) {
        xs.push_back(std::bit_cast<float>(b));
    }
}

// Appends the `radius` floats / doubles either side of `at`.
template <typename T>
void append_around(std::vector<T>& xs, T at, int radius) {
    T lo = at;
    T hi = at;
    xs.push_back(at);
    for (int i = 0; i < radius; ++i) {
        lo = std::nextafter(lo, -std::numeric_limits<T>::infinity());
        hi = std::nextafter(hi, std::numeric_limits<T>::infinity());
        xs.push_back(lo);
        xs.push_back(hi);
    }
}

// Binades (sign included) swept exhaustively in the unit test, per function: where each algorithm has
// its edges (near 0, the fast/slow boundary, overflow and gradual underflow, the tanh saturation).
std::vector<std::pair<float, float>> exhaustive_binades(const std::string& name) {
    if (name == "exp") return {{0.5f, 1.0f}, {64.0f, 128.0f}, {-64.0f, -128.0f}};
    if (name == "log") return {{0.5f, 1.0f}, {1.0f, 2.0f}, {0x1p-127f, 0x1p-126f}};
    if (name == "tanh") return {{0.125f, 0.25f}, {0.5f, 1.0f}, {-8.0f, -16.0f}};
    return {{1.0f, 2.0f}, {-8.0f, -16.0f}, {-64.0f, -128.0f}};  // sigmoid
}

template <typename T>
std::vector<T> special_values() {
    using lim = std::numeric_limits<T>;
    std::vector<T> v = {T(0),
                        -T(0),
                        T(1),
                        -T(1),
                        T(0.5),
                        -T(0.5),
                        lim::min(),
                        -lim::min(),
                        lim::denorm_min(),
                        -lim::denorm_min(),
                        lim::max(),
                        -lim::max(),
                        lim::infinity(),
                        -lim::infinity(),
                        lim::quiet_NaN(),
                        -lim::quiet_NaN(),
                        lim::epsilon(),
                        T(1) - lim::epsilon() / 2,
                        T(1) + lim::epsilon()};
    const T edges[] = {T(88.72283935546875),
                       T(-87.33654475055310898657),
                       T(-103.972077083991796),
                       T(-104),
                       T(709.782712893383973096),
                       T(-708.396418532264106224),
                       T(-745.133219101941108420),
                       T(9.01),
                       T(19.06),
                       T(87),
                       T(-87),
                       T(708),
                       T(-708),
                       T(1e-20),
                       T(-1e-20)};
    for (const T e : edges) {
        if (std::isfinite(e)) {
            v.push_back(e);
            v.push_back(std::nextafter(e, lim::infinity()));
            v.push_back(std::nextafter(e, -lim::infinity()));
        }
    }
    return v;
}

// A mix of everything: mostly ordinary values (fast path), with special and out-of-range values
// sprinkled in so that some unrolled groups take the slow path.
template <typename T>
std::vector<T> mixed_values(std::size_t n, std::uint32_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> ordinary(-12.0, 12.0);
    const std::vector<T> specials = special_values<T>();
    std::vector<T> v(n);
    for (auto& x : v) {
        const auto pick = rng() % 64;
        if (pick == 0) {
            x = specials[rng() % specials.size()];
        } else if (pick == 1) {
            x = static_cast<T>(ordinary(rng) * 100.0);
        } else {
            x = static_cast<T>(ordinary(rng));
        }
    }
    return v;
}

template <typename T>
bool same_bits(T a, T b) {
    return std::bit_cast<typename traits<T>::bits_t>(a) == std::bit_cast<typename traits<T>::bits_t>(b);
}

// Room for n elements in `storage`, starting one element past a 64-byte boundary (element -1 is valid).
template <typename T>
T* misaligned(std::vector<T>& storage, std::size_t n) {
    storage.assign(n + 2 + 64 / sizeof(T), T(0));
    auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
    addr = (addr + 63) / 64 * 64;
    return reinterpret_cast<T*>(addr) + 1;
}

// Results do not depend on the array length or position: a length-n call must equal n length-1 calls
// (which take the scalar-tail path), bit for bit, NaN payloads aside. Also: no write past out[n), in
// place equals out of place, and misaligned pointers give the same bits.
template <typename T>
void check_layouts(const function<T>& fn) {
    const std::size_t sizes[] = {0, 1, 3, 17, 1023, 65537};
    for_each_target([&](std::int64_t target) {
        INFO(fn.name << " on " << tenferro::kernels::hwy_control::target_name(target));
        for (const std::size_t n : sizes) {
            INFO("n = " << n);
            const std::vector<T> xs = mixed_values<T>(n, static_cast<std::uint32_t>(n) + 7);

            // One element at a time (the tail path), with a reference check.
            std::vector<T> single(n);
            std::size_t bad_ref = 0;
            for (std::size_t i = 0; i < n; ++i) {
                fn.kernel(&xs[i], &single[i], 1);
                if (!(ulp_error(single[i], fn.reference(xs[i])) <= traits<T>::bound)) ++bad_ref;
            }
            CHECK(bad_ref == 0);

            // Whole array, with canaries either side.
            const T canary = T(-12345.0);
            std::vector<T> out(n + 2, canary);
            fn.kernel(xs.data(), out.data() + 1, static_cast<std::int64_t>(n));
            CHECK(same_bits(out.front(), canary));
            CHECK(same_bits(out.back(), canary));
            std::size_t diff = 0;
            for (std::size_t i = 0; i < n; ++i) {
                const T a = out[i + 1];
                const T b = single[i];
                if (!(same_bits(a, b) || (std::isnan(a) && std::isnan(b)))) ++diff;
            }
            CHECK(diff == 0);

            // In place.
            std::vector<T> inplace = xs;
            fn.kernel(inplace.data(), inplace.data(), static_cast<std::int64_t>(n));
            std::size_t diff_inplace = 0;
            for (std::size_t i = 0; i < n; ++i) {
                if (!(same_bits(inplace[i], out[i + 1]) || (std::isnan(inplace[i]) && std::isnan(out[i + 1])))) {
                    ++diff_inplace;
                }
            }
            CHECK(diff_inplace == 0);

            // Misaligned input and output: one element past a 64-byte boundary, so no vector access is
            // aligned.
            std::vector<T> src_storage;
            std::vector<T> dst_storage;
            T* const src = misaligned(src_storage, n);
            T* const dst = misaligned(dst_storage, n);
            std::copy(xs.begin(), xs.end(), src);
            dst[-1] = canary;
            fn.kernel(src, dst, static_cast<std::int64_t>(n));
            CHECK(same_bits(dst[-1], canary));
            std::size_t diff_unaligned = 0;
            for (std::size_t i = 0; i < n; ++i) {
                if (!(same_bits(dst[i], out[i + 1]) || (std::isnan(dst[i]) && std::isnan(out[i + 1])))) {
                    ++diff_unaligned;
                }
            }
            CHECK(diff_unaligned == 0);

            // Misaligned in place.
            fn.kernel(src, src, static_cast<std::int64_t>(n));
            std::size_t diff_inplace_unaligned = 0;
            for (std::size_t i = 0; i < n; ++i) {
                if (!same_bits(src[i], dst[i])) ++diff_inplace_unaligned;
            }
            CHECK(diff_inplace_unaligned == 0);
        }
        // A negative count is a no-op.
        T x = T(1);
        T y = T(7);
        fn.kernel(&x, &y, -3);
        CHECK(y == T(7));
    });
}

// Exact expectations where the C standard (Annex F) fixes the result; a NaN result must be a NaN.
template <typename T>
void check_specials(const function<T>& fn) {
    using lim = std::numeric_limits<T>;
    const T inf = lim::infinity();
    const T nan = lim::quiet_NaN();
    struct expect {
        T x;
        T y;
    };
    std::vector<expect> cases;
    const std::string name = fn.name;
    if (name == "exp") {
        cases = {{T(0), T(1)},
                 {-T(0), T(1)},
                 {inf, inf},
                 {-inf, T(0)},
                 {nan, nan},
                 {-nan, nan},
                 {lim::max(), inf},
                 {-lim::max(), T(0)},
                 {T(1000), inf},
                 {T(-1000), T(0)},
                 {T(1e6), inf},
                 {T(-1e6), T(0)},
                 {lim::denorm_min(), T(1)},
                 {-lim::denorm_min(), T(1)}};
    } else if (name == "log") {
        cases = {{T(1), T(0)},
                 {T(0), -inf},
                 {-T(0), -inf},
                 {inf, inf},
                 {-inf, nan},
                 {T(-1), nan},
                 {-lim::denorm_min(), nan},
                 {-lim::max(), nan},
                 {nan, nan},
                 {-nan, nan}};
    } else if (name == "tanh") {
        cases = {{T(0), T(0)},
                 {-T(0), -T(0)},
                 {inf, T(1)},
                 {-inf, T(-1)},
                 {nan, nan},
                 {-nan, nan},
                 {lim::max(), T(1)},
                 {-lim::max(), T(-1)},
                 {T(30), T(1)},
                 {T(-30), T(-1)},
                 {lim::denorm_min(), lim::denorm_min()},
                 {-lim::denorm_min(), -lim::denorm_min()},
                 {lim::min(), lim::min()}};
    } else {
        cases = {{T(0), T(0.5)}, {-T(0), T(0.5)},    {inf, T(1)},         {-inf, T(0)},    {nan, nan},
                 {-nan, nan},    {lim::max(), T(1)}, {-lim::max(), T(0)}, {T(1000), T(1)}, {T(-1e6), T(0)}};
    }
    for_each_target([&](std::int64_t target) {
        for (const auto& c : cases) {
            // Alone (tail path) and inside a full unrolled group of otherwise ordinary values.
            std::vector<T> xs(257, T(0.25));
            xs[100] = c.x;
            std::vector<T> out(xs.size());
            fn.kernel(xs.data(), out.data(), static_cast<std::int64_t>(xs.size()));
            T alone = T(0);
            fn.kernel(&c.x, &alone, 1);
            INFO(fn.name << "(" << c.x << ") on " << tenferro::kernels::hwy_control::target_name(target) << ": got "
                         << out[100] << " and " << alone << ", want " << c.y);
            if (std::isnan(c.y)) {
                CHECK(std::isnan(out[100]));
                CHECK(std::isnan(alone));
            } else {
                CHECK(same_bits(out[100], c.y));
                CHECK(same_bits(alone, c.y));
            }
            // Neighbours are unaffected by a special value in their group.
            T neighbour = T(0);
            const T quarter = T(0.25);
            fn.kernel(&quarter, &neighbour, 1);
            CHECK(same_bits(out[99], neighbour));
            CHECK(same_bits(out[101], neighbour));
        }
    });
}

// Dense f32 sweep: a stride through all 2^32 bit patterns (every binade, both signs, subnormals, NaNs,
// infinities), exhaustive binades, and the neighbourhoods of the range edges.
void f32_sweep(const function<float>& fn) {
    stats_by_target<float> by_target;
    std::vector<float> xs;
    // 1021 is prime: ~4.2 M patterns covering every exponent and mantissa residue.
    const std::uint64_t stride = std::uint64_t{1021} * sweep_thinning;
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += stride) {
        xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
        if (xs.size() == (1u << 20)) {
            sweep(fn, xs, by_target);
            xs.clear();
        }
    }
    for (const float e : special_values<float>()) {
        if (std::isfinite(e)) append_around(xs, e, 2000);
    }
    sweep(fn, xs, by_target);
    for (const auto& [from, to] : exhaustive_binades(fn.name)) {
        xs.clear();
        append_range(xs, from, to, sweep_thinning);
        sweep(fn, xs, by_target);
    }
    check_and_report("f32", fn, by_target);
}

// Dense f64 sweep: random bit patterns, uniform draws over each function's interesting range, and the
// neighbourhoods of the range edges.
void f64_sweep(const function<double>& fn) {
    stats_by_target<double> by_target;
    std::mt19937_64 rng(42);
    std::vector<double> xs;
    for (std::uint32_t i = 0; i < (1u << 20) / sweep_thinning; ++i) {
        xs.push_back(std::bit_cast<double>(rng()));
    }
    sweep(fn, xs, by_target);
    const std::string name = fn.name;
    std::vector<std::pair<double, double>> ranges;
    if (name == "exp") ranges = {{-1.0, 1.0}, {-750.0, 750.0}, {-746.0, -700.0}};
    if (name == "log") ranges = {{0.5, 2.0}, {0.0, 1e-300}, {1.0, 1e300}};
    if (name == "tanh") ranges = {{-1.0, 1.0}, {-25.0, 25.0}, {-1e-3, 1e-3}};
    if (name == "sigmoid") ranges = {{-1.0, 1.0}, {-50.0, 50.0}, {-746.0, -700.0}};
    for (const auto& [lo, hi] : ranges) {
        xs.clear();
        std::uniform_real_distribution<double> dist(lo, hi);
        for (std::uint32_t i = 0; i < (1u << 19) / sweep_thinning; ++i) xs.push_back(dist(rng));
        sweep(fn, xs, by_target);
    }
    xs.clear();
    for (const double e : special_values<double>()) {
        if (std::isfinite(e)) append_around(xs, e, 2000);
    }
    sweep(fn, xs, by_target);
    check_and_report("f64", fn, by_target);
}

}  // namespace

TEST_CASE("transcendental f32: accuracy over a dense sweep on every target", "[kernels][transcendental]") {
    for (const auto& fn : f32_functions) {
        SECTION(fn.name) { f32_sweep(fn); }
    }
}

TEST_CASE("transcendental f64: accuracy over a dense sweep on every target", "[kernels][transcendental]") {
    for (const auto& fn : f64_functions) {
        SECTION(fn.name) { f64_sweep(fn); }
    }
}

TEST_CASE("transcendental: special values follow std::", "[kernels][transcendental]") {
    for (const auto& fn : f32_functions) {
        SECTION(std::string("f32 ") + fn.name) { check_specials(fn); }
    }
    for (const auto& fn : f64_functions) {
        SECTION(std::string("f64 ") + fn.name) { check_specials(fn); }
    }
}

TEST_CASE("transcendental: sizes, tails, in place and misaligned pointers", "[kernels][transcendental]") {
    for (const auto& fn : f32_functions) {
        SECTION(std::string("f32 ") + fn.name) { check_layouts(fn); }
    }
    for (const auto& fn : f64_functions) {
        SECTION(std::string("f64 ") + fn.name) { check_layouts(fn); }
    }
}

TEST_CASE("transcendental: every target compiled is exercised", "[kernels][transcendental]") {
    const auto targets = tenferro::kernels::hwy_control::supported_and_generated();
    REQUIRE(!targets.empty());
    if (verbose()) {
        for (const auto t : targets) std::printf("target %s\n", tenferro::kernels::hwy_control::target_name(t));
    }
}

TEST_CASE("transcendental f32: exhaustive over all 2^32 inputs", "[.][exhaustive]") {
    for (const auto& fn : f32_functions) {
        stats_by_target<float> by_target;
        std::vector<float> xs;
        xs.reserve(1u << 22);
        for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); ++b) {
            xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
            if (xs.size() == (1u << 22)) {
                sweep(fn, xs, by_target);
                xs.clear();
            }
        }
        for (const auto& [target, s] : by_target) {
            std::printf("f32 %-8s %-8s max %.3f ULP over all 2^32 inputs (worst x = %.9g -> %.9g)\n", fn.name,
                        tenferro::kernels::hwy_control::target_name(target), s.max_ulp, s.worst_x, s.worst_got);
        }
        check_and_report("f32", fn, by_target);
    }
}
