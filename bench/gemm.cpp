// GEMM benchmark: tenferro's kernel (src/kernels/gemm) vs OpenBLAS (cblas_sgemm / cblas_dgemm) and
// Eigen, side by side in one run (docs/bench-protocol.md, docs/gemm.md).
//
// Square C = A·B, row-major, f32 and f64, n = 256 .. 2048, 1 and 2 threads. Each round times every
// system once (a batch of calls lasting at least --min-ms) in turn, A B C A B C ...; the figure per
// system is its best round, so a burst of load from another process on this shared machine costs
// one round, not one system. Ratios are of GFLOP/s measured in the same run.
//
// tenferro runs through its kernel API with a plan made once and scratch allocated once (what the
// ops layer's cached path does); with 2 threads its tasks run on a tenferro compute_pool (the
// pool sessions use) plus the calling thread. OpenBLAS gets openblas_set_num_threads(threads).
// Eigen is single-threaded (no OpenMP) with its cache sizes set (its CPUID probe sees the whole
// socket in these VMs and picks absurd blocks).
//
// Run it through bench/run_gemm, which unsets OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for this
// command only so that OpenBLAS picks its own kernels for this CPU. Flags:
//   --sizes 256,512,...   --threads 1,2   --types f32,f64   --rounds R (5)   --min-ms M (150)
//   --json                print one JSON object per measurement as well
//   --small-sizes 8,16,..  the small-shape section (per-call ns); an empty list skips it
//   --session-sizes 8,..  small squares through a whole session entry (s.matmul), per-call ns
//   --shapes MxNxK,...    rectangular (skinny / GEMV-like) shapes, 1 thread, GFLOP/s vs cblas
//   --cpu-clock           1-thread figures from process CPU time instead of wall time (a loaded
//                         machine: time spent waiting for a core is not counted)
//   --target NAME         force our dispatch to that Highway target (AVX3, AVX2, SSE4, ...): with
//                         OPENBLAS_CORETYPE=Haswell both run their AVX2 kernels on an AVX-512 machine

#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <Eigen/Core>
#include <asio/use_future.hpp>

#include "hwy_target_select.hpp"
#include "kernels/gemm.hpp"
#include "tenferro/detail/admission/compute_pool.hpp"
#include "tenferro/tenferro.hpp"

namespace {

namespace k = tenferro::kernels;
using clock_type = std::chrono::steady_clock;

struct options {
    std::vector<std::int64_t> sizes{256, 512, 1024, 2048};
    std::vector<int> threads{1, 2};
    std::vector<std::string> types{"f32", "f64"};
    int rounds = 5;
    double min_ms = 150;
    bool json = false;
    bool cpu_clock = false;
    std::string target;  // Highway target to force ("" = dispatch's own choice)
    std::vector<std::int64_t> small_sizes{8, 16, 32, 64};
    std::vector<std::int64_t> session_sizes{8, 16, 32, 64};
    std::vector<std::string> shapes{"1x1024x1024",  "1x4096x4096", "1x5000x128",  "16x1024x1024",
                                    "1024x16x1024", "1024x1x1024", "4096x4x4096", "1000x3x300"};
};

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= s.size()) {
        const std::size_t comma = s.find(',', start);
        const std::size_t end = comma == std::string::npos ? s.size() : comma;
        if (end > start) out.push_back(s.substr(start, end - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "missing value for %s\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--sizes") {
            o.sizes.clear();
            for (const auto& s : split(value())) o.sizes.push_back(std::stoll(s));
        } else if (a == "--threads") {
            o.threads.clear();
            for (const auto& s : split(value())) o.threads.push_back(std::stoi(s));
        } else if (a == "--types") {
            o.types = split(value());
        } else if (a == "--rounds") {
            o.rounds = std::stoi(value());
        } else if (a == "--min-ms") {
            o.min_ms = std::stod(value());
        } else if (a == "--small-sizes") {
            o.small_sizes.clear();
            for (const auto& s : split(value())) o.small_sizes.push_back(std::stoll(s));
        } else if (a == "--session-sizes") {
            o.session_sizes.clear();
            for (const auto& s : split(value())) o.session_sizes.push_back(std::stoll(s));
        } else if (a == "--shapes") {
            o.shapes = split(value());
        } else if (a == "--cpu-clock") {
            o.cpu_clock = true;
        } else if (a == "--json") {
            o.json = true;
        } else if (a == "--target") {
            o.target = value();
        } else {
            std::fprintf(stderr, "unknown flag %s\n", a.c_str());
            std::exit(2);
        }
    }
    return o;
}

double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Seconds per call: calls f until min_ms have passed (at least once) and returns the mean. With
// `cpu`, the seconds are the process's CPU time (single-threaded runs only): on a loaded machine
// that excludes the time the thread waited for a core.
template <class F>
double time_batch(F&& f, double min_ms, bool cpu, double* cpu_per_wall = nullptr) {
    int calls = 0;
    const auto start = clock_type::now();
    const double cpu_start = process_cpu_seconds();
    double elapsed = 0;
    do {
        f();
        ++calls;
        elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
    } while (elapsed * 1e3 < min_ms);
    const double cpu_used = process_cpu_seconds() - cpu_start;
    if (cpu_per_wall != nullptr) *cpu_per_wall = cpu_used / elapsed;
    if (cpu) elapsed = cpu_used;
    return elapsed / calls;
}

template <class T>
struct matrices {
    std::int64_t n;
    std::vector<T> a, b, c;
    explicit matrices(std::int64_t size) : n(size) {
        const std::size_t count = static_cast<std::size_t>(n * n);
        a.resize(count);
        b.resize(count);
        c.assign(count, T(0));
        std::mt19937 rng(17);
        std::uniform_real_distribution<double> u(-1.0, 1.0);
        for (auto& x : a) x = static_cast<T>(u(rng));
        for (auto& x : b) x = static_cast<T>(u(rng));
    }
};

void blas_gemm(std::int64_t n, const float* a, const float* b, float* c) {
    const int ni = static_cast<int>(n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a, ni, b, ni, 0.0f, c, ni);
}
void blas_gemm(std::int64_t n, const double* a, const double* b, double* c) {
    const int ni = static_cast<int>(n);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0, a, ni, b, ni, 0.0, c, ni);
}

template <class T>
void eigen_gemm(std::int64_t n, const T* a, const T* b, T* c) {
    using mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<const mat> ma(a, n, n), mb(b, n, n);
    Eigen::Map<mat> mc(c, n, n);
    mc.noalias() = ma * mb;
}

template <class T>
double max_rel_diff(const std::vector<T>& x, const std::vector<T>& y) {
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(x[i]) - static_cast<double>(y[i])));
        scale = std::max(scale, std::abs(static_cast<double>(y[i])));
    }
    return scale > 0 ? worst / scale : worst;
}

struct row {
    std::string type;
    std::int64_t n;
    int threads;
    double ours, blas, eigen;  // GFLOP/s (eigen: 0 when not run)
    double diff;
    double cpu_per_wall = 0;  // tenferro, threads > 1: process CPU seconds per wall second
};

template <class T>
row bench_one(const char* type, std::int64_t n, int threads, const options& o, tenferro::detail::compute_pool& pool) {
    matrices<T> m(n);
    std::vector<T> c_blas(m.c.size()), c_eigen(m.c.size());
    const k::gemm_type gt = sizeof(T) == 4 ? k::gemm_type::f32 : k::gemm_type::f64;
    const k::gemm_plan plan = k::plan_gemm(gt, n, n, n, threads);
    std::vector<unsigned char> scratch(plan.scratch_bytes);
    const k::gemm_operands op{n, n, n, m.a.data(), n, 1, m.b.data(), n, 1, m.c.data(), n, 1, 1.0, 0.0};
    auto runner = [&](std::int64_t count, k::gemm_body body) {
        pool.parallel_for(static_cast<std::size_t>(threads), count, 1, body);
    };
    auto ours = [&] { k::gemm(gt, op, plan, scratch.data(), runner); };
    auto blas = [&] { blas_gemm(n, m.a.data(), m.b.data(), c_blas.data()); };
    auto eigen = [&] { eigen_gemm<T>(n, m.a.data(), m.b.data(), c_eigen.data()); };
    const bool run_eigen = threads == 1;

    openblas_set_num_threads(threads);
    // OpenBLAS's threads busy-wait for a while after a call; let them park before timing others.
    auto settle = [&] {
        if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    };
    ours();
    blas();
    if (run_eigen) eigen();
    settle();
    const bool cpu = o.cpu_clock && threads == 1;
    double best_ours = 1e30, best_blas = 1e30, best_eigen = 1e30, cpu_share = 0;
    for (int r = 0; r < o.rounds; ++r) {
        double share = 0;
        const double t_ours = time_batch(ours, o.min_ms, cpu, &share);
        if (t_ours < best_ours) {
            best_ours = t_ours;
            // How many cores the tenferro run actually had: fewer than its threads when other
            // processes hold the CPUs, and then wall-clock scaling says nothing about the kernel.
            cpu_share = share;
        }
        best_blas = std::min(best_blas, time_batch(blas, o.min_ms, cpu));
        settle();
        if (run_eigen) best_eigen = std::min(best_eigen, time_batch(eigen, o.min_ms, cpu));
    }
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    row out{type,
            n,
            threads,
            flops / best_ours * 1e-9,
            flops / best_blas * 1e-9,
            run_eigen ? flops / best_eigen * 1e-9 : 0.0,
            max_rel_diff(m.c, c_blas),
            cpu_share};
    return out;
}

// Small square shapes, one thread: the per-call cost of the kernel API (plan and scratch made
// once, as the cached ops path does) vs cblas called directly and Eigen.
template <class T>
void bench_small(const char* type, std::int64_t n, const options& o) {
    matrices<T> m(n);
    std::vector<T> c_blas(m.c.size()), c_eigen(m.c.size());
    const k::gemm_type gt = sizeof(T) == 4 ? k::gemm_type::f32 : k::gemm_type::f64;
    const k::gemm_plan plan = k::plan_gemm(gt, n, n, n, 1);
    std::vector<unsigned char> scratch(plan.scratch_bytes);
    const k::gemm_operands op{n, n, n, m.a.data(), n, 1, m.b.data(), n, 1, m.c.data(), n, 1, 1.0, 0.0};
    auto ours = [&] { k::gemm(gt, op, plan, scratch.data()); };
    auto plan_and_run = [&] {
        const k::gemm_plan p = k::plan_gemm(gt, n, n, n, 1);
        k::gemm(gt, op, p, scratch.data());
    };
    auto blas = [&] { blas_gemm(n, m.a.data(), m.b.data(), c_blas.data()); };
    auto eigen = [&] { eigen_gemm<T>(n, m.a.data(), m.b.data(), c_eigen.data()); };
    openblas_set_num_threads(1);
    double t_ours = 1e30, t_plan = 1e30, t_blas = 1e30, t_eigen = 1e30;
    const double ms = std::min(o.min_ms, 50.0);
    for (int r = 0; r < o.rounds; ++r) {
        t_ours = std::min(t_ours, time_batch(ours, ms, o.cpu_clock));
        t_plan = std::min(t_plan, time_batch(plan_and_run, ms, o.cpu_clock));
        t_blas = std::min(t_blas, time_batch(blas, ms, o.cpu_clock));
        t_eigen = std::min(t_eigen, time_batch(eigen, ms, o.cpu_clock));
    }
    std::printf("%-4s %5lld %10.0f %10.0f %10.0f %10.0f %9.2f %9.2f   small=%d\n", type, static_cast<long long>(n),
                t_ours * 1e9, t_plan * 1e9, t_blas * 1e9, t_eigen * 1e9, t_blas / t_ours, t_eigen / t_ours, plan.small);
    if (o.json)
        std::printf(
            "{\"bench\":\"gemm_small\",\"type\":\"%s\",\"n\":%lld,\"tenferro_ns\":%.1f,\"tenferro_plan_ns\":%.1f,"
            "\"openblas_ns\":%.1f,\"eigen_ns\":%.1f}\n",
            type, static_cast<long long>(n), t_ours * 1e9, t_plan * 1e9, t_blas * 1e9, t_eigen * 1e9);
    std::fflush(stdout);
}

// A rectangular row-major GEMM, one thread: GFLOP/s of the kernel API and of cblas.
template <class T>
void bench_shape(const char* type, std::int64_t m, std::int64_t n, std::int64_t kk, const options& o) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<T> a(static_cast<std::size_t>(m * kk)), b(static_cast<std::size_t>(kk * n)),
        c(static_cast<std::size_t>(m * n)), c_blas(c.size());
    for (auto& x : a) x = static_cast<T>(u(rng));
    for (auto& x : b) x = static_cast<T>(u(rng));
    const k::gemm_type gt = sizeof(T) == 4 ? k::gemm_type::f32 : k::gemm_type::f64;
    const k::gemm_plan plan = k::plan_gemm(gt, m, n, kk, 1);
    std::vector<unsigned char> scratch(plan.scratch_bytes);
    const k::gemm_operands op{m, n, kk, a.data(), kk, 1, b.data(), n, 1, c.data(), n, 1, 1.0, 0.0};
    auto ours = [&] { k::gemm(gt, op, plan, scratch.data()); };
    auto blas = [&] {
        const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(kk);
        if constexpr (sizeof(T) == 4)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mi, ni, ki, 1.0f, a.data(), ki, b.data(), ni, 0.0f,
                        c_blas.data(), ni);
        else
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mi, ni, ki, 1.0, a.data(), ki, b.data(), ni, 0.0,
                        c_blas.data(), ni);
    };
    openblas_set_num_threads(1);
    double t_ours = 1e30, t_blas = 1e30;
    const double ms = std::min(o.min_ms, 100.0);
    for (int r = 0; r < o.rounds; ++r) {
        t_ours = std::min(t_ours, time_batch(ours, ms, o.cpu_clock));
        t_blas = std::min(t_blas, time_batch(blas, ms, o.cpu_clock));
    }
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(kk);
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", static_cast<long long>(m), static_cast<long long>(n),
                  static_cast<long long>(kk));
    std::printf("%-4s %16s %10.1f %10.1f %9.2f   small=%d swapped=%d\n", type, shape, flops / t_ours * 1e-9,
                flops / t_blas * 1e-9, t_blas / t_ours, plan.small, plan.swapped);
    if (o.json)
        std::printf(
            "{\"bench\":\"gemm_shape\",\"type\":\"%s\",\"shape\":\"%s\",\"tenferro_gflops\":%.2f,"
            "\"openblas_gflops\":%.2f}\n",
            type, shape, flops / t_ours * 1e-9, flops / t_blas * 1e-9);
    std::fflush(stdout);
}

// Small squares through the public API, one permit: what a request pays per matmul.
//   entry      cpu.with_backend_session([&](s) { return s.matmul(a, b); }) per call: admission,
//              the hop to a compute worker and back, planning (from the backend's default
//              cache after the first call), the output's allocation from the buffer pool
//   cached     the same through with_backend_session_cached(cache, ...) with B marked constant
//              (the cache keeps B's packed panels: no packing per call)
//   in-session s.matmul(a, b) called in a loop inside one session (no admission per call)
//   openblas   cblas_?gemm called directly on the same data
template <class T>
void bench_session(const char* type, std::int64_t n, const options& o, tenferro::cpu_backend& cpu) {
    namespace tf = tenferro;
    const tf::dtype dt = sizeof(T) == 4 ? tf::dtype::f32 : tf::dtype::f64;
    matrices<T> m(n);
    std::vector<T> c_blas(m.c.size());
    const std::int64_t shape[2] = {n, n};
    tf::tensor a = tf::tensor::empty(dt, shape), b = tf::tensor::empty(dt, shape);
    std::memcpy(a.view().data(), m.a.data(), m.a.size() * sizeof(T));
    std::memcpy(b.view().data(), m.b.data(), m.b.size() * sizeof(T));
    tf::cpu_runtime_cache cache;
    cache.mark_constant(b);
    const tf::const_tensor_view av = a.view(), bv = b.view();
    bool ok = true;
    auto entry = [&] {
        auto r =
            cpu.with_backend_session([&](tf::backend_session& s) { return s.matmul(av, bv); }, asio::use_future).get();
        ok = ok && r.has_value();
    };
    auto cached = [&] {
        auto r = cpu.with_backend_session_cached(
                        cache, [&](tf::backend_session& s) { return s.matmul(av, bv); }, asio::use_future)
                     .get();
        ok = ok && r.has_value();
    };
    auto blas = [&] { blas_gemm(n, m.a.data(), m.b.data(), c_blas.data()); };
    const double ms = std::min(o.min_ms, 50.0);
    openblas_set_num_threads(1);
    double t_entry = 1e30, t_cached = 1e30, t_in = 1e30, t_blas = 1e30;
    for (int r = 0; r < o.rounds; ++r) {
        t_entry = std::min(t_entry, time_batch(entry, ms, false));
        t_cached = std::min(t_cached, time_batch(cached, ms, false));
        auto in = cpu.with_backend_session(
                         [&](tf::backend_session& s) { return time_batch([&] { (void)s.matmul(av, bv); }, ms, false); },
                         asio::use_future)
                      .get();
        if (in) t_in = std::min(t_in, *in);
        t_blas = std::min(t_blas, time_batch(blas, ms, false));
    }
    const tf::cache_stats st = cache.stats();
    std::printf("%-4s %5lld %10.0f %10.0f %10.0f %10.0f %9.2f %9.2f %9.2f %9.0f  hits=%llu misses=%llu%s\n", type,
                static_cast<long long>(n), t_entry * 1e9, t_cached * 1e9, t_in * 1e9, t_blas * 1e9, t_entry / t_blas,
                t_cached / t_blas, t_in / t_blas, (t_entry - t_cached) * 1e9, static_cast<unsigned long long>(st.hits),
                static_cast<unsigned long long>(st.misses), ok ? "" : "  (an entry failed)");
    if (o.json)
        std::printf(
            "{\"bench\":\"gemm_session\",\"type\":\"%s\",\"n\":%lld,\"entry_ns\":%.1f,\"cached_entry_ns\":%.1f,"
            "\"in_session_ns\":%.1f,\"openblas_ns\":%.1f}\n",
            type, static_cast<long long>(n), t_entry * 1e9, t_cached * 1e9, t_in * 1e9, t_blas * 1e9);
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    const options o = parse(argc, argv);
    // Before any plan: a plan is tied to the target dispatched when it was made.
    if (!o.target.empty() && !tenferro::bench::force_highway_target(o.target.c_str())) {
        std::fprintf(stderr, "--target %s: not a Highway target compiled in and supported here\n", o.target.c_str());
        return 2;
    }
    std::printf("# highway target: %s\n", tenferro::bench::dispatched_highway_target());
    // L1d 48 KiB / L2 1 MiB / L3 32 MiB (a current server core; any sane values avoid the collapse that
    // the VM's CPUID-reported 508 MiB L3 causes).
    Eigen::setCpuCacheSizes(48 * 1024, 1024 * 1024, 32 * 1024 * 1024);
    std::printf("# openblas: %s\n", openblas_get_config());
    std::printf("# OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s\n",
                std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "(unset)",
                std::getenv("OPENBLAS_L2_SIZE") ? std::getenv("OPENBLAS_L2_SIZE") : "(unset)");
    {
        const auto p32 = k::plan_gemm(k::gemm_type::f32, 1024, 1024, 1024, 2);
        const auto p64 = k::plan_gemm(k::gemm_type::f64, 1024, 1024, 1024, 2);
        std::printf("# tenferro: f32 mr x nr = %d x %d, kc %d mc %d nc %d; f64 %d x %d, kc %d mc %d nc %d\n", p32.mr,
                    p32.nr, p32.kc, p32.mc, p32.nc, p64.mr, p64.nr, p64.kc, p64.mc, p64.nc);
    }
    int max_threads = 1;
    for (int t : o.threads) max_threads = std::max(max_threads, t);
    tenferro::detail::compute_pool pool(static_cast<std::size_t>(max_threads > 1 ? max_threads - 1 : 1),
                                        std::span<const unsigned>{});

    if (!o.small_sizes.empty()) {
        std::printf("# small shapes, 1 thread, ns per call (kernel API; '+plan' makes the plan each call)\n");
        std::printf("%-4s %5s %10s %10s %10s %10s %9s %9s\n", "type", "n", "tenferro", "+plan", "openblas", "eigen",
                    "blas/ours", "eigen/ours");
        for (const auto& type : o.types)
            for (const std::int64_t n : o.small_sizes) {
                if (type == "f32")
                    bench_small<float>("f32", n, o);
                else
                    bench_small<double>("f64", n, o);
            }
    }
    if (!o.session_sizes.empty()) {
        tenferro::cpu_backend cpu(tenferro::cpu_backend_options{.permits = 1});
        std::printf("# small squares through a session entry (1 permit), ns per call; ratios to openblas\n");
        std::printf("%-4s %5s %10s %10s %10s %10s %9s %9s %9s %9s\n", "type", "n", "entry", "cached", "in-session",
                    "openblas", "entry/", "cached/", "in-sess/", "saved");
        for (const auto& type : o.types)
            for (const std::int64_t n : o.session_sizes) {
                if (type == "f32")
                    bench_session<float>("f32", n, o, cpu);
                else
                    bench_session<double>("f64", n, o, cpu);
            }
    }
    if (!o.shapes.empty()) {
        std::printf("# rectangular shapes (m x n x k), 1 thread, GFLOP/s\n");
        std::printf("%-4s %16s %10s %10s %9s\n", "type", "shape", "tenferro", "openblas", "/openblas");
        for (const auto& type : o.types)
            for (const auto& sh : o.shapes) {
                long long m = 0, n = 0, kk = 0;
                if (std::sscanf(sh.c_str(), "%lldx%lldx%lld", &m, &n, &kk) != 3) {
                    std::fprintf(stderr, "bad shape %s\n", sh.c_str());
                    return 2;
                }
                if (type == "f32")
                    bench_shape<float>("f32", m, n, kk, o);
                else
                    bench_shape<double>("f64", m, n, kk, o);
            }
    }
    if (o.sizes.empty()) return 0;
    std::printf("# square GEMM, GFLOP/s\n");
    std::printf("# cores: CPU seconds per wall second of the tenferro run (2 threads on two free cores: ~2)\n");
    std::printf("%-4s %5s %3s %10s %10s %10s %9s %9s %9s %9s %8s\n", "type", "n", "thr", "tenferro", "openblas",
                "eigen", "/openblas", "/eigen", "/own-1thr", "max-diff", "cores");
    std::vector<row> rows;
    for (const auto& type : o.types) {
        for (const std::int64_t n : o.sizes) {
            double own1 = 0;
            for (const int t : o.threads) {
                const row r =
                    type == "f32" ? bench_one<float>("f32", n, t, o, pool) : bench_one<double>("f64", n, t, o, pool);
                if (t == 1) own1 = r.ours;
                char eig[32] = "-", reig[32] = "-", rown[32] = "-";
                if (r.eigen > 0) {
                    std::snprintf(eig, sizeof eig, "%.1f", r.eigen);
                    std::snprintf(reig, sizeof reig, "%.2f", r.ours / r.eigen);
                }
                if (t > 1 && own1 > 0) std::snprintf(rown, sizeof rown, "%.2f", r.ours / own1);
                std::printf("%-4s %5lld %3d %10.1f %10.1f %10s %9.2f %9s %9s %9.1e %8.2f\n", r.type.c_str(),
                            static_cast<long long>(r.n), r.threads, r.ours, r.blas, eig, r.ours / r.blas, reig, rown,
                            r.diff, r.cpu_per_wall);
                if (o.json)
                    std::printf(
                        "{\"bench\":\"gemm\",\"type\":\"%s\",\"n\":%lld,\"threads\":%d,\"tenferro_gflops\":%.2f,"
                        "\"openblas_gflops\":%.2f,\"eigen_gflops\":%.2f,\"vs_openblas\":%.3f,\"vs_eigen\":%.3f,"
                        "\"vs_own_1thread\":%.3f,\"cores\":%.2f}\n",
                        r.type.c_str(), static_cast<long long>(r.n), r.threads, r.ours, r.blas, r.eigen,
                        r.ours / r.blas, r.eigen > 0 ? r.ours / r.eigen : 0.0, t > 1 && own1 > 0 ? r.ours / own1 : 0.0,
                        r.cpu_per_wall);
                std::fflush(stdout);
                rows.push_back(r);
            }
        }
    }
    return 0;
}
