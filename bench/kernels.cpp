// Kernel benchmark (`tenferro-bench-kernels`): tenferro's session operations against STREAM-style
// floors, plain scalar loops, Eigen and OpenBLAS, side by side in one Google Benchmark run (see
// docs/bench-protocol.md, "Kernels", and docs/benchmarks.md).
//
// Every tenferro figure goes through a real session: a `cpu_backend` with 1 permit (or 2 for the
// `tenferro_p2` rows), `with_backend_session`, and the op called on the `backend_session&`. The
// benchmark's timing loop runs *inside* one session body, so each timed iteration is the op itself
// (validation, loop planning, dispatch, kernel) and not the admission of a session; the
// `tenferro_entry` row of `add` at 4 Ki shows what one admission adds on top.
//
// Names are `op/system/n`. Floors and peers (kernels_native.cpp, compiled -O3 -march=native):
// `stream_copy`, `stream_triad`, `stream_read`, `stream_read2`, `scalar` (the plain loop), `eigen`;
// OpenBLAS (`openblas_sdot`, `openblas_sasum`, `openblas_saxpby`) is forced to one thread.
// bench/kernel_ratios turns the JSON into the ratios; bench/run_kernels runs both.

#include <cblas.h>
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <asio/use_future.hpp>
#include "kernels/hwy_control.hpp"

#include "kernels/elementwise.hpp"
#include "kernels_native.hpp"
#include "tenferro/tenferro.hpp"

namespace {

namespace tf = tenferro;
namespace tb = tenferro::bench;

// 16 elements: the fixed cost of an op call (the kernel itself is a few nanoseconds).
constexpr std::int64_t sizes[] = {16, std::int64_t{4} << 10, std::int64_t{256} << 10, std::int64_t{64} << 20};
constexpr std::int64_t entry_size = std::int64_t{4} << 10;  // where `tenferro_entry` is measured
constexpr std::int64_t rows = 1'000'000;
constexpr std::int64_t cols = 256;
constexpr std::int64_t top_k = 10;
constexpr float alpha = 0.5f;
constexpr float beta = 0.5f;  // in-place axpby with alpha + beta = 1 keeps y bounded over millions of calls

struct free_deleter {
    void operator()(void* p) const noexcept { std::free(p); }
};

// 64-byte aligned, first-touched storage.
template <class T>
std::unique_ptr<T[], free_deleter> alloc(std::int64_t n) {
    const std::size_t bytes = ((static_cast<std::size_t>(n) * sizeof(T) + 63) / 64) * 64;
    T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) {
        std::fprintf(stderr, "tenferro-bench-kernels: out of memory (%zu bytes)\n", bytes);
        std::exit(1);
    }
    std::memset(p, 0, bytes);
    return std::unique_ptr<T[], free_deleter>(p);
}

// Uniform in [-10, 10) (the transcendentals' interesting range); a cheap generator, since the softmax
// input has 256 M elements.
void fill(float* p, std::int64_t n, std::uint64_t seed) {
    std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (std::int64_t i = 0; i < n; ++i) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        p[i] = static_cast<float>(s >> 40) * (20.0f / 16777216.0f) - 10.0f;
    }
}

// Three arrays of n floats per size, made on first use and shared by every system (each system finds
// them equally warm, or equally cold at 64 Mi).
struct arrays {
    explicit arrays(std::int64_t n) : n(n), a(alloc<float>(n)), b(alloc<float>(n)), c(alloc<float>(n)) {
        fill(a.get(), n, 1);
        fill(b.get(), n, 2);
    }
    std::int64_t n;
    std::unique_ptr<float[], free_deleter> a, b, c;
};

arrays& data(std::int64_t n) {
    static std::map<std::int64_t, std::unique_ptr<arrays>> by_size;
    auto& slot = by_size[n];
    if (!slot) slot = std::make_unique<arrays>(n);
    return *slot;
}

// The [rows, cols] matrix of the row-wise ops and their outputs.
struct matrix {
    matrix()
        : x(alloc<float>(rows * cols)),
          y(alloc<float>(rows * cols)),
          values(alloc<float>(rows * top_k)),
          indices(alloc<std::int64_t>(rows * top_k)) {
        fill(x.get(), rows * cols, 3);
    }
    std::unique_ptr<float[], free_deleter> x, y, values;
    std::unique_ptr<std::int64_t[], free_deleter> indices;
};

matrix& rowwise_data() {
    static matrix m;
    return m;
}

tf::cpu_backend& backend(std::size_t permits) {
    static tf::cpu_backend one({.permits = 1});
    static tf::cpu_backend two({.permits = 2});
    return permits == 1 ? one : two;
}

// Runs the whole timing loop inside one session of `permits` permits: `op(s)` per iteration.
template <class Op>
void in_session(benchmark::State& state, std::size_t permits, const Op& op) {
    tf::session_options options;
    options.permits = permits;
    try {
        auto result = backend(permits)
                          .with_backend_session(
                              options,
                              [&](tf::backend_session& s) {
                                  for (auto _ : state) {
                                      op(s);
                                      benchmark::ClobberMemory();
                                  }
                              },
                              asio::use_future)
                          .get();
        if (!result) state.SkipWithError(result.error().message().c_str());
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
}

template <class Op>
void timed(benchmark::State& state, const Op& op) {
    for (auto _ : state) {
        op();
        benchmark::ClobberMemory();
    }
}

tf::const_tensor_view cview(const float* p, std::int64_t n) {
    return tf::const_tensor_view(p, tf::dtype::f32, std::span<const std::int64_t>(&n, 1));
}
tf::tensor_view view(float* p, std::int64_t n) {
    return tf::tensor_view(p, tf::dtype::f32, std::span<const std::int64_t>(&n, 1));
}
tf::tensor_view scalar_view(float* p) { return tf::tensor_view(p, tf::dtype::f32, std::span<const std::int64_t>{}); }

const std::vector<std::int64_t> all_axes;  // reduce over every axis

// One registered figure: `op/system/n`, `bytes` moved and `items` (elements) per iteration.
template <class Fn>
void add(const std::string& op, const std::string& system, std::int64_t n, double bytes, double items, Fn fn,
         double min_time = 0.2) {
    const std::string name = op + "/" + system + "/" + std::to_string(n);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [=](benchmark::State& state) {
                                     fn(state);
                                     const auto it = static_cast<double>(state.iterations());
                                     state.SetBytesProcessed(static_cast<std::int64_t>(bytes * it));
                                     state.SetItemsProcessed(static_cast<std::int64_t>(items * it));
                                     state.counters["n"] = static_cast<double>(n);
                                 })
        ->UseRealTime()
        ->MinTime(min_time);
}

void register_streaming(std::int64_t n) {
    const double f = sizeof(float);
    const double nd = static_cast<double>(n);

    // add: 2 reads + 1 write.
    for (const std::size_t p : {std::size_t{1}, std::size_t{2}}) {
        add("add", p == 1 ? "tenferro" : "tenferro_p2", n, 3 * f * nd, nd, [n, p](benchmark::State& st) {
            arrays& d = data(n);
            const auto a = cview(d.a.get(), n), b = cview(d.b.get(), n);
            const auto c = view(d.c.get(), n);
            in_session(st, p, [&](tf::backend_session& s) { s.add_into(a, b, c); });
        });
    }
    if (n == sizes[3]) {
        // The same op with the non-temporal stores of large outputs turned off (regular stores, as
        // before they came in): the A/B of that choice in one run.
        add("add", "tenferro_nostream", n, 3 * f * nd, nd, [n](benchmark::State& st) {
            arrays& d = data(n);
            const auto a = cview(d.a.get(), n), b = cview(d.b.get(), n);
            const auto c = view(d.c.get(), n);
            tf::kernels::set_stream_threshold_bytes(SIZE_MAX);
            in_session(st, 1, [&](tf::backend_session& s) { s.add_into(a, b, c); });
            tf::kernels::set_stream_threshold_bytes(0);
        });
    }
    if (n == entry_size) {
        add("add", "tenferro_entry", n, 3 * f * nd, nd, [n](benchmark::State& st) {
            arrays& d = data(n);
            const auto a = cview(d.a.get(), n), b = cview(d.b.get(), n);
            const auto c = view(d.c.get(), n);
            timed(st, [&] {
                auto r =
                    backend(1)
                        .with_backend_session([&](tf::backend_session& s) { s.add_into(a, b, c); }, asio::use_future)
                        .get();
                benchmark::DoNotOptimize(r);
            });
        });
    }
    add("add", "stream_triad", n, 3 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { tb::stream_triad(d.a.get(), d.b.get(), d.c.get(), 3.0f, n); });
    });
    add("add", "eigen", n, 3 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { tb::eigen_add(d.a.get(), d.b.get(), d.c.get(), n); });
    });
    add("add", "scalar", n, 3 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { tb::scalar_add(d.a.get(), d.b.get(), d.c.get(), n); });
    });

    // axpby_into: out = alpha x + beta y, 2 reads + 1 write (a triad).
    for (const std::size_t p : {std::size_t{1}, std::size_t{2}}) {
        add("axpby", p == 1 ? "tenferro" : "tenferro_p2", n, 3 * f * nd, nd, [n, p](benchmark::State& st) {
            arrays& d = data(n);
            const auto x = cview(d.a.get(), n), y = cview(d.b.get(), n);
            const auto out = view(d.c.get(), n);
            in_session(st, p, [&](tf::backend_session& s) { s.axpby_into(alpha, x, beta, y, out); });
        });
    }
    add("axpby", "eigen", n, 3 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { tb::eigen_axpby(alpha, d.a.get(), beta, d.b.get(), d.c.get(), n); });
    });
    add("axpby", "scalar", n, 3 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { tb::scalar_axpby(alpha, d.a.get(), beta, d.b.get(), d.c.get(), n); });
    });

    // In-place axpby (y = alpha x + beta y), the BLAS form: against OpenBLAS's saxpby.
    add("axpby_inplace", "tenferro", n, 3 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        const auto x = cview(d.a.get(), n);
        const auto y = view(d.c.get(), n);
        in_session(st, 1, [&](tf::backend_session& s) { s.axpby(alpha, x, beta, y); });
    });
    add("axpby_inplace", "openblas_saxpby", n, 3 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { cblas_saxpby(static_cast<blasint>(n), alpha, d.a.get(), 1, beta, d.c.get(), 1); });
    });

    // copy: 1 read + 1 write.
    add("copy", "tenferro", n, 2 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        const auto a = cview(d.a.get(), n);
        const auto c = view(d.c.get(), n);
        in_session(st, 1, [&](tf::backend_session& s) { s.copy_into(a, c); });
    });
    add("copy", "stream_copy", n, 2 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { tb::stream_copy(d.a.get(), d.c.get(), n); });
    });
    add("copy", "eigen", n, 2 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { tb::eigen_copy(d.a.get(), d.c.get(), n); });
    });

    // reduce_sum: 1 read.
    for (const std::size_t p : {std::size_t{1}, std::size_t{2}}) {
        add("reduce_sum", p == 1 ? "tenferro" : "tenferro_p2", n, f * nd, nd, [n, p](benchmark::State& st) {
            arrays& d = data(n);
            const auto x = cview(d.a.get(), n);
            float result = 0.0f;
            const auto out = scalar_view(&result);
            in_session(st, p, [&](tf::backend_session& s) { s.reduce_sum_into(x, all_axes, out); });
            benchmark::DoNotOptimize(result);
        });
    }
    add("reduce_sum", "stream_read", n, f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { benchmark::DoNotOptimize(tb::stream_read(d.a.get(), n)); });
    });
    add("reduce_sum", "eigen", n, f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { benchmark::DoNotOptimize(tb::eigen_sum(d.a.get(), n)); });
    });
    add("reduce_sum", "openblas_sasum", n, f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { benchmark::DoNotOptimize(cblas_sasum(static_cast<blasint>(n), d.a.get(), 1)); });
    });
    add("reduce_sum", "scalar", n, f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { benchmark::DoNotOptimize(tb::scalar_sum(d.a.get(), n)); });
    });

    // vdot: 2 reads.
    add("vdot", "tenferro", n, 2 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        const auto a = cview(d.a.get(), n), b = cview(d.b.get(), n);
        float result = 0.0f;
        const auto out = scalar_view(&result);
        in_session(st, 1, [&](tf::backend_session& s) { s.vdot_into(a, b, out); });
        benchmark::DoNotOptimize(result);
    });
    add("vdot", "stream_read2", n, 2 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { benchmark::DoNotOptimize(tb::stream_read2(d.a.get(), d.b.get(), n)); });
    });
    add("vdot", "eigen", n, 2 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { benchmark::DoNotOptimize(tb::eigen_dot(d.a.get(), d.b.get(), n)); });
    });
    add("vdot", "openblas_sdot", n, 2 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { benchmark::DoNotOptimize(cblas_sdot(static_cast<blasint>(n), d.a.get(), 1, d.b.get(), 1)); });
    });
    add("vdot", "scalar", n, 2 * f * nd, nd, [n](benchmark::State& st) {
        arrays& d = data(n);
        timed(st, [&] { benchmark::DoNotOptimize(tb::scalar_dot(d.a.get(), d.b.get(), n)); });
    });
}

using native_unary = void (*)(const float*, float*, std::int64_t);
using session_unary = void (tf::backend_session::*)(const tf::const_tensor_view&, const tf::tensor_view&);

void register_transcendental(std::int64_t n) {
    const double nd = static_cast<double>(n);
    const double bytes = 2 * sizeof(float) * nd;
    struct entry {
        const char* op;
        session_unary ours;
        native_unary eigen;
        native_unary scalar;
    };
    const entry entries[] = {
        {"exp", &tf::backend_session::exp_into, tb::eigen_exp, tb::scalar_exp},
        {"tanh", &tf::backend_session::tanh_into, tb::eigen_tanh, tb::scalar_tanh},
        {"sigmoid", &tf::backend_session::sigmoid_into, tb::eigen_sigmoid, tb::scalar_sigmoid},
    };
    for (const entry& e : entries) {
        for (const std::size_t p : {std::size_t{1}, std::size_t{2}}) {
            if (p == 2 && std::strcmp(e.op, "exp") != 0) continue;
            add(e.op, p == 1 ? "tenferro" : "tenferro_p2", n, bytes, nd, [n, p, ours = e.ours](benchmark::State& st) {
                arrays& d = data(n);
                const auto x = cview(d.a.get(), n);
                const auto out = view(d.c.get(), n);
                in_session(st, p, [&](tf::backend_session& s) { (s.*ours)(x, out); });
            });
        }
        add(e.op, "eigen", n, bytes, nd, [n, fn = e.eigen](benchmark::State& st) {
            arrays& d = data(n);
            timed(st, [&] { fn(d.a.get(), d.c.get(), n); });
        });
        add(e.op, "scalar", n, bytes, nd, [n, fn = e.scalar](benchmark::State& st) {
            arrays& d = data(n);
            timed(st, [&] { fn(d.a.get(), d.c.get(), n); });
        });
    }
}

void register_rowwise() {
    const std::int64_t n = rows * cols;
    const double nd = static_cast<double>(n);
    const std::int64_t shape[] = {rows, cols};
    const std::int64_t out_shape[] = {rows, top_k};
    for (const std::size_t p : {std::size_t{1}, std::size_t{2}}) {
        add(
            "softmax", p == 1 ? "tenferro" : "tenferro_p2", n, 2 * sizeof(float) * nd, nd,
            [=](benchmark::State& st) {
                matrix& m = rowwise_data();
                const tf::const_tensor_view x(m.x.get(), tf::dtype::f32, shape);
                const tf::tensor_view y(m.y.get(), tf::dtype::f32, shape);
                in_session(st, p, [&](tf::backend_session& s) { s.softmax_into(x, -1, y); });
            },
            1.0);
        add(
            "top_k", p == 1 ? "tenferro" : "tenferro_p2", n, sizeof(float) * nd, nd,
            [=](benchmark::State& st) {
                matrix& m = rowwise_data();
                const tf::const_tensor_view x(m.x.get(), tf::dtype::f32, shape);
                const tf::tensor_view values(m.values.get(), tf::dtype::f32, out_shape);
                const tf::tensor_view indices(m.indices.get(), tf::dtype::i64, out_shape);
                in_session(st, p, [&](tf::backend_session& s) { s.top_k_into(x, top_k, -1, values, indices); });
            },
            1.0);
    }
    add(
        "softmax", "scalar", n, 2 * sizeof(float) * nd, nd,
        [](benchmark::State& st) {
            matrix& m = rowwise_data();
            timed(st, [&] { tb::scalar_softmax(m.x.get(), m.y.get(), rows, cols); });
        },
        1.0);
    add(
        "top_k", "scalar", n, sizeof(float) * nd, nd,
        [](benchmark::State& st) {
            matrix& m = rowwise_data();
            timed(st, [&] { tb::scalar_top_k(m.x.get(), m.values.get(), m.indices.get(), rows, cols, top_k); });
        },
        1.0);
}

const char* best_highway_target() {
    // Highway's dynamic dispatch picks the best target that is both compiled and supported; better
    // targets have lower bits.
    return tenferro::kernels::hwy_control::target_name(tenferro::kernels::hwy_control::dispatched_target());
}

std::string env_or_unset(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string("(unset)");
}

}  // namespace

int main(int argc, char** argv) {
    openblas_set_num_threads(1);
    const std::string openblas = openblas_get_config();
    std::fprintf(stderr, "openblas_get_config(): %s (threads forced to 1; OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s)\n",
                 openblas.c_str(), env_or_unset("OPENBLAS_CORETYPE").c_str(), env_or_unset("OPENBLAS_L2_SIZE").c_str());
    benchmark::AddCustomContext("openblas_config", openblas);
    benchmark::AddCustomContext("openblas_coretype_env", env_or_unset("OPENBLAS_CORETYPE"));
    benchmark::AddCustomContext("openblas_l2_size_env", env_or_unset("OPENBLAS_L2_SIZE"));
    benchmark::AddCustomContext("highway_target", best_highway_target());
    benchmark::AddCustomContext("native_isa", tb::native_isa());

    for (const std::int64_t n : sizes) register_streaming(n);
    for (const std::int64_t n : sizes) register_transcendental(n);
    register_rowwise();

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
