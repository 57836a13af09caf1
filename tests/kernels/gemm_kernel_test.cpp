#include "kernels/gemm.hpp"
// The header under test comes first, alone: it must compile on its own.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "hwy_targets.hpp"
#include "kernels/hwy_control.hpp"

// The GEMM kernel against a naive triple loop in higher precision (double for f32, long double
// for f64), on every compiled Highway target this CPU supports.
//
// Error bound: with u the unit roundoff (eps / 2), the kernel accumulates each k-deep dot product
// with fused (or separate) multiply-adds in blocks of kc, then applies alpha and beta with at most
// three more roundings per block. The classic bound |fl(x.y) - x.y| <= gamma_k sum |x_p||y_p|
// (gamma_k = k u / (1 - k u)) plus the store's roundings gives
//     |C - C_exact| <= (k + 4 * ceil(k / kc) + 4) * eps * (|alpha| sum_p |A_ip||B_pj| + |beta||C0_ij|)
// which the test checks element by element (eps, not u: a factor 2 of slack for gamma_k's
// denominator and the reference's own rounding). A wrong index, a missed or doubled product, a
// wrong alpha/beta or a stale accumulator breaks it by orders of magnitude.

// Under ASan or TSan the threaded-split tests skip their check against the
// higher-precision reference (a scalar O(m n k) loop, instrumented: most of
// their time there); they still compare the 1-, 2- and 3-thread results bit for
// bit, and the accuracy sweep and every other build keep the reference check.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool sanitized_build = true;
#else
constexpr bool sanitized_build = false;
#endif
#else
constexpr bool sanitized_build = false;
#endif

namespace {

namespace k = tenferro::kernels;

using tenferro::test::for_each_target;

template <class T>
constexpr k::gemm_type type_of() {
    return std::is_same_v<T, float> ? k::gemm_type::f32 : k::gemm_type::f64;
}

template <class T>
using ref_t = std::conditional_t<std::is_same_v<T, float>, double, long double>;

// A strided matrix view over its own storage, with guard elements around and between the
// elements it covers (so writes outside the view are seen).
template <class T>
struct strided {
    std::int64_t rows = 0, cols = 0, rs = 0, cs = 0;
    std::vector<T> storage;
    std::int64_t origin = 0;  // index of element (0, 0) in storage

    strided(std::int64_t r, std::int64_t c, std::int64_t row_stride, std::int64_t col_stride, T fill)
        : rows(r), cols(c), rs(row_stride), cs(col_stride) {
        std::int64_t lo = 0, hi = 0;
        auto span = [&](std::int64_t extent, std::int64_t stride) {
            if (extent <= 0) return;
            const std::int64_t last = (extent - 1) * stride;
            if (last < 0)
                lo += last;
            else
                hi += last;
        };
        span(rows, rs);
        span(cols, cs);
        const std::int64_t guard = 8;
        origin = -lo + guard;
        storage.assign(static_cast<std::size_t>(hi - lo + 1 + 2 * guard), fill);
    }
    T* ptr() { return storage.data() + origin; }
    const T* ptr() const { return storage.data() + origin; }
    T& at(std::int64_t i, std::int64_t j) { return ptr()[i * rs + j * cs]; }
    const T& at(std::int64_t i, std::int64_t j) const { return ptr()[i * rs + j * cs]; }
};

enum class layout { row_major, transposed, negative, broadcast, strided_c, mixed };

const char* name(layout l) {
    switch (l) {
    case layout::row_major:
        return "row-major";
    case layout::transposed:
        return "transposed A,B / col-major C";
    case layout::negative:
        return "negative strides";
    case layout::broadcast:
        return "zero strides";
    case layout::strided_c:
        return "non-unit strides everywhere";
    case layout::mixed:
        return "col-major A, reversed rows of B, strided C";
    }
    return "?";
}

struct strides {
    std::int64_t rs, cs;
};

// Operand strides for a layout (A m x k, B k x n, C m x n).
void strides_for(layout l, std::int64_t m, std::int64_t n, std::int64_t kk, strides& a, strides& b, strides& c) {
    switch (l) {
    case layout::row_major:
        a = {kk, 1};
        b = {n, 1};
        c = {n, 1};
        return;
    case layout::transposed:
        a = {1, m};
        b = {1, kk};
        c = {1, m};
        return;
    case layout::negative:
        a = {-kk, 1};
        b = {n, -1};
        c = {-n, -1};
        return;
    case layout::broadcast:
        a = {0, 1};   // every row of A is the same
        b = {1, 0};   // every column of B is the same
        c = {n + 3, 1};
        return;
    case layout::strided_c:
        a = {2 * kk + 1, 2};
        b = {3, 3 * kk + 2};
        c = {2, 2 * m + 5};
        return;
    case layout::mixed:
        a = {1, m};
        b = {-n, 1};
        c = {2, 2 * m + 5};
        return;
    }
}

template <class T>
struct operands {
    strided<T> a, b, c0;
    operands(std::int64_t m, std::int64_t n, std::int64_t kk, layout l, std::mt19937& rng, bool nan_c)
        : a(0, 0, 0, 0, T(0)), b(0, 0, 0, 0, T(0)), c0(0, 0, 0, 0, T(0)) {
        strides sa{}, sb{}, sc{};
        strides_for(l, m, n, kk, sa, sb, sc);
        a = strided<T>(m, kk, sa.rs, sa.cs, T(0));
        b = strided<T>(kk, n, sb.rs, sb.cs, T(0));
        const T guard = T(-12345);
        c0 = strided<T>(m, n, sc.rs, sc.cs, guard);
        std::uniform_real_distribution<double> u(-1.0, 1.0);
        for (auto& x : a.storage) x = static_cast<T>(u(rng));
        for (auto& x : b.storage) x = static_cast<T>(u(rng));
        for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j)
                c0.at(i, j) = nan_c ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(u(rng));
    }
};

template <class T>
k::gemm_operands make_op(const strided<T>& a, const strided<T>& b, strided<T>& c, double alpha, double beta) {
    k::gemm_operands op;
    op.m = c.rows;
    op.n = c.cols;
    op.k = a.cols;
    op.a = a.ptr();
    op.a_row_stride = a.rs;
    op.a_col_stride = a.cs;
    op.b = b.ptr();
    op.b_row_stride = b.rs;
    op.b_col_stride = b.cs;
    op.c = c.ptr();
    op.c_row_stride = c.rs;
    op.c_col_stride = c.cs;
    op.alpha = alpha;
    op.beta = beta;
    return op;
}

// Runs each task on its own thread (tasks really run concurrently).
const auto threaded_run = [](std::int64_t count, k::gemm_body body) {
    std::vector<std::thread> threads;
    for (std::int64_t t = 1; t < count; ++t) threads.emplace_back([body, t] { body(t, t + 1); });
    body(0, count > 0 ? 1 : 0);
    for (auto& th : threads) th.join();
};

struct failure {
    std::int64_t i = -1, j = -1;
    double got = 0, want = 0, bound = 0;
    std::string what;
};

// Checks C against the reference and the guards; returns the first failure (what empty: none).
template <class T>
failure check(const operands<T>& in, const strided<T>& c, double alpha, double beta) {
    using R = ref_t<T>;
    const std::int64_t m = c.rows, n = c.cols, kk = in.a.cols;
    const k::gemm_plan probe = k::plan_gemm(type_of<T>(), m, n, kk, 1);
    const double eps = std::numeric_limits<T>::epsilon();
    const double blocks = probe.kc > 0 ? std::ceil(static_cast<double>(kk) / probe.kc) : 0.0;
    const double gamma = (static_cast<double>(kk) + 4.0 * blocks + 4.0) * eps;
    failure f;
    for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
            R sum = 0, mag = 0;
            for (std::int64_t p = 0; p < kk; ++p) {
                const R prod = static_cast<R>(in.a.at(i, p)) * static_cast<R>(in.b.at(p, j));
                sum += prod;
                mag += prod < 0 ? -prod : prod;
            }
            const R c0 = static_cast<R>(in.c0.at(i, j));
            R want = static_cast<R>(alpha) * sum;
            R scale = std::abs(static_cast<R>(alpha)) * mag;
            if (beta != 0) {
                want += static_cast<R>(beta) * c0;
                scale += std::abs(static_cast<R>(beta) * c0);
            }
            const double got = static_cast<double>(c.at(i, j));
            const double err = std::abs(static_cast<double>(static_cast<R>(got) - want));
            const double bound = gamma * static_cast<double>(scale);
            if (!(err <= bound)) {
                f.i = i;
                f.j = j;
                f.got = got;
                f.want = static_cast<double>(want);
                f.bound = bound;
                f.what = "value";
                return f;
            }
        }
    }
    // Guards: every storage element that is not part of the view keeps its fill.
    std::vector<char> covered(c.storage.size(), 0);
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) covered[static_cast<std::size_t>(c.origin + i * c.rs + j * c.cs)] = 1;
    for (std::size_t s = 0; s < c.storage.size(); ++s) {
        if (!covered[s] && !(c.storage[s] == T(-12345))) {
            f.what = "guard overwritten at storage index " + std::to_string(s);
            return f;
        }
    }
    return f;
}

template <class T>
bool bitwise_equal(const strided<T>& x, const strided<T>& y) {
    return x.storage.size() == y.storage.size() &&
           std::equal(x.storage.begin(), x.storage.end(), y.storage.begin(),
                      [](T p, T q) { return std::memcmp(&p, &q, sizeof(T)) == 0; });
}

struct shape {
    std::int64_t m, n, k;
};

struct ab {
    double alpha, beta;
    bool nan_c;
};

const ab alpha_betas[] = {{1.0, 0.0, true}, {2.5, 0.0, true}, {1.0, 1.0, false}, {-0.5, 0.75, false}};

template <class T>
void run_case(const shape& s, layout l, const ab& coef, int threads, std::mt19937& rng, const std::string& target) {
    operands<T> in(s.m, s.n, s.k, l, rng, coef.nan_c);
    strided<T> c = in.c0;
    const k::gemm_plan plan = k::plan_gemm(type_of<T>(), s.m, s.n, s.k, threads);
    const k::gemm_operands op = make_op(in.a, in.b, c, coef.alpha, coef.beta);
    if (threads > 1)
        k::gemm(type_of<T>(), op, plan, nullptr, threaded_run);
    else
        k::gemm(type_of<T>(), op, plan);
    const failure f = check(in, c, coef.alpha, coef.beta);
    INFO(target << (std::is_same_v<T, float> ? " f32 " : " f64 ") << s.m << "x" << s.n << "x" << s.k << " " << name(l)
                << " alpha=" << coef.alpha << " beta=" << coef.beta << " threads=" << threads << " small=" << plan.small
                << " swapped=" << plan.swapped << " tasks=" << plan.tasks_m << "x" << plan.tasks_n << " at (" << f.i
                << "," << f.j << ") got " << f.got << " want " << f.want << " bound " << f.bound);
    CHECK(f.what.empty());
    if (!f.what.empty()) FAIL_CHECK(f.what);
}

const shape accuracy_shapes[] = {
    {1, 1, 1},      {1, 1, 7},      {1, 1000, 257}, {1000, 1, 257}, {3, 17, 255},   {17, 3, 257},
    {255, 257, 17}, {257, 255, 3},  {1, 3, 1000},   {3, 1, 1000},   {17, 17, 1000}, {8, 8, 8},
    {6, 300, 1000}, {700, 50, 300}, {16, 4, 31},    {100, 2, 1000}, {1, 16, 5},     {4, 1000, 257},
    {16, 16, 16},   {32, 32, 32},   {64, 64, 64},   {65, 63, 31},   {100, 9, 300},  {9, 100, 300},
};

template <class T>
void accuracy_sweep() {
    for_each_target([&](std::int64_t target) {
        std::mt19937 rng(1234);
        const std::string tname = tenferro::kernels::hwy_control::target_name(target);
        std::size_t n = 0;
        for (const shape& s : accuracy_shapes) {
            for (layout l :
                 {layout::row_major, layout::transposed, layout::negative, layout::broadcast, layout::strided_c}) {
                run_case<T>(s, l, alpha_betas[n++ % std::size(alpha_betas)], 1, rng, tname);
            }
        }
    });
}

}  // namespace

TEST_CASE("gemm matches a higher-precision reference on every target (f32)", "[gemm]") { accuracy_sweep<float>(); }

TEST_CASE("gemm matches a higher-precision reference on every target (f64)", "[gemm]") { accuracy_sweep<double>(); }

TEST_CASE("gemm on large odd shapes (K blocking, edges in M and N)", "[gemm]") {
    for_each_target([&](std::int64_t target) {
        std::mt19937 rng(99);
        const std::string tname = tenferro::kernels::hwy_control::target_name(target);
        run_case<float>({257, 255, 1000}, layout::row_major, {1.0, 0.0, true}, 2, rng, tname);
        run_case<double>({255, 257, 600}, layout::transposed, {-0.5, 0.75, false}, 2, rng, tname);
        run_case<float>({1000, 17, 300}, layout::negative, {2.5, 0.0, true}, 2, rng, tname);
    });
}

TEST_CASE("gemm with beta == 0 never reads C", "[gemm]") {
    for_each_target([&](std::int64_t target) {
        std::mt19937 rng(7);
        for (const shape& s : {shape{5, 37, 11}, shape{64, 64, 64}, shape{300, 200, 700}}) {
            operands<float> in(s.m, s.n, s.k, layout::row_major, rng, true);
            // Infinity too: 0 * inf would be NaN if C were scaled instead of skipped.
            for (std::int64_t i = 0; i < s.m; ++i) in.c0.at(i, 0) = std::numeric_limits<float>::infinity();
            strided<float> c = in.c0;
            const auto plan = k::plan_gemm(k::gemm_type::f32, s.m, s.n, s.k, 1);
            k::gemm(k::gemm_type::f32, make_op(in.a, in.b, c, 1.0, 0.0), plan);
            bool finite = true;
            for (std::int64_t i = 0; i < s.m; ++i)
                for (std::int64_t j = 0; j < s.n; ++j) finite = finite && std::isfinite(c.at(i, j));
            INFO(tenferro::kernels::hwy_control::target_name(target) << " " << s.m << "x" << s.n << "x" << s.k);
            CHECK(finite);
        }
    });
}

TEST_CASE("gemm with k == 0 scales C by beta", "[gemm]") {
    std::mt19937 rng(3);
    operands<double> in(4, 5, 0, layout::row_major, rng, false);
    strided<double> c = in.c0;
    k::gemm(k::gemm_type::f64, make_op(in.a, in.b, c, 2.0, 0.5), k::plan_gemm(k::gemm_type::f64, 4, 5, 0, 2));
    for (std::int64_t i = 0; i < 4; ++i)
        for (std::int64_t j = 0; j < 5; ++j) CHECK(c.at(i, j) == 0.5 * in.c0.at(i, j));
    strided<double> z(4, 5, 5, 1, std::numeric_limits<double>::quiet_NaN());
    k::gemm(k::gemm_type::f64, make_op(in.a, in.b, z, 1.0, 0.0), k::plan_gemm(k::gemm_type::f64, 4, 5, 0, 1));
    for (std::int64_t i = 0; i < 4; ++i)
        for (std::int64_t j = 0; j < 5; ++j) CHECK(z.at(i, j) == 0.0);
    // m == 0: nothing is touched (and nothing is dereferenced).
    k::gemm_operands empty;
    empty.n = 3;
    empty.k = 3;
    k::gemm(k::gemm_type::f32, empty, k::plan_gemm(k::gemm_type::f32, 0, 3, 3, 1));
}

template <class T>
void threads_bitwise() {
    for_each_target([&](std::int64_t target) {
        std::mt19937 rng(42);
        for (const shape& s : {shape{257, 255, 1000}, shape{1000, 3, 300}, shape{64, 700, 64}, shape{96, 96, 96},
                               shape{513, 130, 40}, shape{2, 3000, 300}, shape{7, 2000, 600}, shape{1000, 40, 300},
                               shape{1, 5000, 100}, shape{3000, 2, 100}, shape{2000, 4, 33}}) {
            for (layout l : {layout::row_major, layout::strided_c, layout::mixed, layout::transposed}) {
                operands<T> in(s.m, s.n, s.k, l, rng, false);
                strided<T> c1 = in.c0, c2 = in.c0, c3 = in.c0;
                const auto p1 = k::plan_gemm(type_of<T>(), s.m, s.n, s.k, 1);
                const auto p2 = k::plan_gemm(type_of<T>(), s.m, s.n, s.k, 2);
                const auto p3 = k::plan_gemm(type_of<T>(), s.m, s.n, s.k, 3);
                k::gemm(type_of<T>(), make_op(in.a, in.b, c1, 1.5, 0.5), p1);
                k::gemm(type_of<T>(), make_op(in.a, in.b, c2, 1.5, 0.5), p2, nullptr, threaded_run);
                k::gemm(type_of<T>(), make_op(in.a, in.b, c3, 1.5, 0.5), p3, nullptr, threaded_run);
                INFO(tenferro::kernels::hwy_control::target_name(target)
                     << " " << s.m << "x" << s.n << "x" << s.k << " " << name(l) << " tasks(2)=" << p2.tasks_m << "x"
                     << p2.tasks_n << " tasks(3)=" << p3.tasks_m << "x" << p3.tasks_n);
                CHECK(p2.tasks_m * p2.tasks_n <= 2);
                CHECK(p3.tasks_m * p3.tasks_n <= 3);
                CHECK(bitwise_equal(c1, c2));
                CHECK(bitwise_equal(c1, c3));
                if (!sanitized_build) CHECK(check(in, c2, 1.5, 0.5).what.empty());
            }
        }
    });
}

TEST_CASE("gemm results are bitwise identical for 1, 2 and 3 threads (f32)", "[gemm]") { threads_bitwise<float>(); }
TEST_CASE("gemm results are bitwise identical for 1, 2 and 3 threads (f64)", "[gemm]") { threads_bitwise<double>(); }

TEST_CASE("the large problems are split over the threads", "[gemm]") {
    const auto p = k::plan_gemm(k::gemm_type::f32, 1024, 1024, 1024, 2);
    CHECK(p.tasks_m * p.tasks_n == 2);
    CHECK(p.scratch_bytes > 0);
    const auto small = k::plan_gemm(k::gemm_type::f32, 8, 8, 8, 2);
    CHECK(small.tasks_m * small.tasks_n == 1);
    CHECK(small.small);
}

template <class T>
void prepacked_equal() {
    for_each_target([&](std::int64_t target) {
        std::mt19937 rng(5);
        for (const shape& s : {shape{1, 1, 1}, shape{8, 8, 8}, shape{1, 300, 700}, shape{300, 1, 70},
                               shape{257, 255, 1000}, shape{33, 5, 600}, shape{64, 64, 64}, shape{5, 900, 300},
                               shape{300, 40, 300}, shape{40, 4, 300}, shape{1, 40, 1000}, shape{100, 2, 17}}) {
            for (layout l : {layout::row_major, layout::transposed, layout::negative, layout::mixed}) {
                for (int threads : {1, 2}) {
                    operands<T> in(s.m, s.n, s.k, l, rng, false);
                    strided<T> c1 = in.c0, c2 = in.c0;
                    const auto plan = k::plan_gemm(type_of<T>(), s.m, s.n, s.k, threads);
                    k::gemm(type_of<T>(), make_op(in.a, in.b, c1, 0.5, 2.0), plan, nullptr, threaded_run);
                    std::vector<unsigned char> packed(k::packed_b_bytes(plan));
                    k::pack_b(plan, in.b.ptr(), in.b.rs, in.b.cs, packed.data());
                    k::gemm_operands op = make_op(in.a, in.b, c2, 0.5, 2.0);
                    op.b = nullptr;  // must not be read
                    std::vector<unsigned char> scratch(plan.scratch_bytes + 3);
                    k::gemm_prepacked_b(type_of<T>(), op, plan, packed.data(), scratch.data() + 3, threaded_run);
                    INFO(tenferro::kernels::hwy_control::target_name(target)
                         << " " << s.m << "x" << s.n << "x" << s.k << " " << name(l) << " threads=" << threads
                         << " swapped=" << plan.swapped);
                    CHECK(bitwise_equal(c1, c2));
                    // A plan for another m with the same key uses the same packed B.
                    const auto other = k::plan_gemm(type_of<T>(), s.m + 7, s.n, s.k, threads);
                    if (k::packed_b_key_of(other) == k::packed_b_key_of(plan)) {
                        operands<T> in2(s.m + 7, s.n, s.k, l, rng, false);
                        strided<T> d1 = in2.c0, d2 = in2.c0;
                        k::gemm(type_of<T>(), make_op(in2.a, in.b, d1, 1.0, 0.0), other);
                        k::gemm_prepacked_b(type_of<T>(), make_op(in2.a, in.b, d2, 1.0, 0.0), other, packed.data());
                        CHECK(bitwise_equal(d1, d2));
                    }
                }
            }
        }
    });
}

TEST_CASE("prepacked B gives the same bits as the plain path (f32)", "[gemm]") { prepacked_equal<float>(); }
TEST_CASE("prepacked B gives the same bits as the plain path (f64)", "[gemm]") { prepacked_equal<double>(); }

TEST_CASE("gemm_target names the target plans are made for", "[gemm]") {
    for_each_target([&](std::int64_t target) {
        INFO(tenferro::kernels::hwy_control::target_name(target));
        CHECK(k::gemm_target() == target);
        CHECK(k::plan_gemm(k::gemm_type::f64, 3, 3, 3, 1).target == target);
    });
}

TEST_CASE("a plan made for another target is refused", "[gemm]") {
    const auto targets = tenferro::kernels::hwy_control::supported_and_generated();
    if (targets.size() < 2) return;
    tenferro::kernels::hwy_control::force_target(targets[0]);
    const auto plan = k::plan_gemm(k::gemm_type::f32, 4, 4, 4, 1);
    tenferro::kernels::hwy_control::force_target(targets[1]);
    std::vector<float> a(16, 1.0f), b(16, 1.0f), c(16, 0.0f);
    k::gemm_operands op{4, 4, 4, a.data(), 4, 1, b.data(), 4, 1, c.data(), 4, 1, 1.0, 0.0};
    CHECK_THROWS_AS(k::gemm(k::gemm_type::f32, op, plan), std::logic_error);
    tenferro::kernels::hwy_control::force_target(0);
}
