// S20, at the entry: how soon a running session's entry completes once it is
// asked to stop. Through the public API only: a cpu_backend host of 2
// permits, one caller thread (an io_context), and for each operation family a
// body that runs the family's operation (repeated where one operation of the
// family cannot take 0.1 s in this machine's memory) for 0.1 to 2 s.
//  - compute placement: the caller binds a cancellation_signal's slot to the
//    entry; at a random moment inside the body (10 % to 60 % of its measured
//    duration), a timer on the caller's thread stamps the time and emits
//    `terminal` on it; the completion handler stamps the time it runs. The
//    figure is the difference: request to the entry's completion (the kernel's
//    throw, the session's end, the permits' release and the hand-off to the
//    caller's thread included).
//  - caller placement: the body runs on the caller's thread, so nothing can
//    emit on its slot while it runs; the request can only come from a
//    deadline (session_options::deadline, stop_at_deadline). The figure is
//    the deadline's instant to the entry's completion.
// Each round's entry must complete with `cancelled` (compute) or
// `deadline_exceeded` (caller); a round whose body ended first is not counted
// (the count is printed). p50 and p99 over the counted rounds, and the max;
// beside them, how they split: "req" from the emit or the deadline to the
// moment the session's stop was requested (a stop_callback on the session's
// token stamps it: for a deadline, the host timer's lateness), "throw" from
// there to the operation's throw (the body stamps the session_stopped it lets
// through); the rest is the entry's: the session's end, the permits' release
// and the completion's hand-off to the caller's thread.
// Prints one table and, with --json FILE, one JSON line per row.
//
//   tenferro-bench-stop-latency-entry [--rounds N] [--json FILE] [--only NAME]

#include <tenferro/cpu_backend.hpp>
#include <tenferro/session_entry_error.hpp>
#include <tenferro/tensor.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "cpu_model.hpp"
#include "hwy_target_select.hpp"

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

namespace {

double ms(clock_type::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

tf::tensor filled(std::int64_t rows, std::int64_t cols, float value) {
    const std::vector<float> v(static_cast<std::size_t>(rows * cols), value);
    return tf::tensor::from(std::span<const float>(v), {rows, cols});
}

struct workload {
    const char* family;
    const char* name;
    int reps;  // operations per body
    std::function<void(tf::backend_session&)> run;
};

/// One round's outcome: the completion's stamp and code.
struct round_result {
    clock_type::time_point asked{}, done{};
    bool value = false;  // the body ended before the request
    std::optional<tf::session_entry_errc> code;
    bool exception = false;
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return -1;
    std::sort(v.begin(), v.end());
    const std::size_t k =
        std::min(v.size() - 1, static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size()))) - 1);
    return v[p <= 0 ? 0 : k];
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 20;
    const char* json = nullptr;
    const char* only = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json = argv[++i];
        else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            std::fprintf(stderr, "usage: tenferro-bench-stop-latency-entry [--rounds N] [--json FILE] [--only NAME]\n");
            return 2;
        }
    }
    std::FILE* out = json != nullptr ? std::fopen(json, "w") : nullptr;
    constexpr std::size_t permits = 2;

    // Operands: one operation of matmul and matmul_top_k takes 0.1 s or more
    // alone; the memory-bound families run their largest operation of a few
    // hundred MiB several times in one body.
    const std::int64_t n = 4096, big = std::int64_t{1} << 26, side = 8192;
    const tf::tensor a = filled(n, n, 0.5f);
    tf::tensor c = filled(n, n, 0.0f);
    const tf::tensor x = filled(1, big, 0.5f);
    tf::tensor y = filled(1, big, 0.0f);
    const tf::tensor rows = filled(side, side, 0.25f);
    tf::tensor rows_out = filled(side, side, 0.0f);
    const tf::tensor q = filled(2048, 128, 0.5f);
    const tf::tensor corpus_t = filled(128, 200000, 0.25f);
    const std::int64_t all[] = {0, 1};
    const std::int64_t swap[] = {1, 0};
    std::vector<workload> workloads = {
        {"matmul", "matmul 4096^3", 1, [&](tf::backend_session& s) { s.matmul_into(a, a, c); }},
        {"matmul_top_k", "matmul_top_k 2048 x 200k d=128 k=10", 1,
         [&](tf::backend_session& s) { (void)s.matmul_top_k(q, corpus_t, 10); }},
        {"elementwise", "exp 64M", 16, [&](tf::backend_session& s) { s.exp_into(x, y); }},
        {"reduction", "reduce_sum 64M", 32, [&](tf::backend_session& s) { (void)s.reduce_sum(x, all); }},
        {"rows", "softmax 8192x8192", 8, [&](tf::backend_session& s) { s.softmax_into(rows, -1, rows_out); }},
        {"rows", "top_k 8192x8192 k=10", 4, [&](tf::backend_session& s) { (void)s.top_k(rows, 10, -1); }},
        {"structural", "transpose 8192x8192", 4,
         [&](tf::backend_session& s) { s.transpose_into(rows, swap, rows_out); }},
    };

    tf::cpu_backend cpu({.permits = permits, .buffer_pool_bytes = std::size_t{1} << 30});
    asio::io_context io;  // the caller's thread
    auto guard = asio::make_work_guard(io);
    std::thread caller([&] { io.run(); });

    std::printf(
        "entry stop latency (S20): request to the entry's completion; CPU %s; Highway target %s; %zu permits; "
        "%d rounds\n",
        tenferro::bench::cpu_model_name().c_str(), tf::bench::dispatched_highway_target(), permits, rounds);
    std::printf("%-38s %-8s %5s %9s %9s %9s %9s %9s %9s %9s %9s %9s  %s\n", "operation", "place", "reps", "op ms",
                "body ms", "p50 ms", "p99 ms", "max ms", "req p50", "req p99", "throw p50", "throw p99", "counted");
    std::mt19937 rng(12345);
    std::uniform_real_distribution<double> when(0.1, 0.6);

    for (const workload& w : workloads) {
        if (only != nullptr && std::strstr(w.name, only) == nullptr) continue;
        // The body stamps the moment its operation threw session_stopped, so
        // that the figure splits into the operation's part and the entry's.
        std::atomic<clock_type::rep> thrown{0}, requested{0};
        auto body = [&w, &thrown, &requested](tf::backend_session& s) {
            // Stamps the request where it is made (the emit, or the host's
            // deadline timer): the deadline's own lateness shows apart.
            std::stop_callback on_stop(s.stop_token(), [&requested] {
                requested.store(clock_type::now().time_since_epoch().count(), std::memory_order_relaxed);
            });
            try {
                for (int r = 0; r < w.reps; ++r) w.run(s);
            } catch (const tf::session_stopped&) {
                thrown.store(clock_type::now().time_since_epoch().count(), std::memory_order_relaxed);
                throw;
            }
            return 0;
        };
        // The body's duration, unstopped: a warm-up (plans, pages), then the
        // best of three.
        double body_ms = 1e300;
        for (int k = 0; k < 4; ++k) {
            std::promise<void> done;
            const auto t0 = clock_type::now();
            asio::post(io, [&] {
                cpu.with_backend_session(tf::session_options{permits}, body,
                                         asio::bind_executor(io, [&](std::exception_ptr e, tf::session_result<int> r) {
                                             if (e || !r) std::fprintf(stderr, "warm-up failed\n");
                                             done.set_value();
                                         }));
            });
            done.get_future().wait();
            if (k > 0) body_ms = std::min(body_ms, ms(clock_type::now() - t0));
        }
        for (const tf::placement where : {tf::placement::compute, tf::placement::caller}) {
            std::vector<double> lat, kernel, late;
            int counted = 0, ended_first = 0, wrong = 0, value_after_request = 0;
            double value_after_request_ms = 0;
            for (int r = 0; r < rounds; ++r) {
                const auto delay = std::chrono::duration_cast<clock_type::duration>(
                    std::chrono::duration<double, std::milli>(when(rng) * body_ms));
                round_result res;
                thrown.store(0, std::memory_order_relaxed);
                requested.store(0, std::memory_order_relaxed);
                std::promise<void> done;
                asio::cancellation_signal signal;
                asio::steady_timer timer(io);
                asio::post(io, [&] {
                    tf::session_options o{permits, tf::wait_policy::fifo, where};
                    // Completes on the caller's thread (and, with caller
                    // placement, the body runs there: the handler's executor).
                    auto handler = asio::bind_executor(io, [&](std::exception_ptr e, tf::session_result<int> v) {
                        res.done = clock_type::now();
                        res.exception = e != nullptr;
                        if (!e && v) res.value = true;
                        if (!e && !v) res.code = v.error().code();
                        timer.cancel();
                        done.set_value();
                    });
                    const auto start = clock_type::now();
                    if (where == tf::placement::compute) {
                        timer.expires_at(start + delay);
                        timer.async_wait([&](std::error_code ec) {
                            if (ec) return;
                            res.asked = clock_type::now();  // just before the emit
                            signal.emit(asio::cancellation_type::terminal);
                        });
                        cpu.with_backend_session(o, body, asio::bind_cancellation_slot(signal.slot(), handler));
                    } else {
                        // The deadline, measured from the posted body's start
                        // as well as can be: the body runs next on this thread.
                        o.deadline = start + delay;
                        res.asked = o.deadline;
                        cpu.with_backend_session(o, body, handler);
                    }
                });
                done.get_future().wait();
                {
                    // The timer's cancelled wait runs on the caller's thread
                    // before the timer and the signal go.
                    std::promise<void> drained;
                    asio::post(io, [&] { drained.set_value(); });
                    drained.get_future().wait();
                }
                const tf::session_entry_errc expect = where == tf::placement::compute
                                                          ? tf::session_entry_errc::cancelled
                                                          : tf::session_entry_errc::deadline_exceeded;
                if (res.value) {
                    ++ended_first;
                    // A value although the stop was requested: by how long
                    // the request preceded the completion (the body's last
                    // check may have come just before it).
                    const clock_type::time_point q{clock_type::duration(requested.load(std::memory_order_relaxed))};
                    if (q != clock_type::time_point{}) {
                        ++value_after_request;
                        value_after_request_ms = std::max(value_after_request_ms, ms(res.done - q));
                    }
                } else if (res.exception || !res.code || *res.code != expect || res.asked == clock_type::time_point{}) {
                    ++wrong;
                } else {
                    ++counted;
                    lat.push_back(ms(res.done - res.asked));
                    const clock_type::time_point t{clock_type::duration(thrown.load(std::memory_order_relaxed))};
                    const clock_type::time_point q{clock_type::duration(requested.load(std::memory_order_relaxed))};
                    if (t != clock_type::time_point{} && q != clock_type::time_point{}) {
                        late.push_back(ms(q - res.asked));
                        kernel.push_back(ms(t - q));
                    }
                }
            }
            const char* place = where == tf::placement::compute ? "compute" : "caller";
            const double p50 = percentile(lat, 50), p99 = percentile(lat, 99), mx = percentile(lat, 100);
            const double k50 = percentile(kernel, 50), k99 = percentile(kernel, 99);
            const double l50 = percentile(late, 50), l99 = percentile(late, 99);
            std::printf("%-38s %-8s %5d %9.2f %9.2f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f  %d/%d%s%s\n", w.name,
                        place, w.reps, body_ms / w.reps, body_ms, p50, p99, mx, l50, l99, k50, k99, counted, rounds,
                        ended_first > 0
                            ? (" (" + std::to_string(ended_first) + " ended first" +
                               (value_after_request > 0 ? ", " + std::to_string(value_after_request) +
                                                              " of them with a value after the request, by up to " +
                                                              std::to_string(value_after_request_ms) + " ms"
                                                        : std::string()) +
                               ")")
                                  .c_str()
                            : "",
                        wrong > 0 ? (" (" + std::to_string(wrong) + " WRONG OUTCOME)").c_str() : "");
            std::fflush(stdout);
            if (out != nullptr) {
                std::fprintf(
                    out,
                    "{\"bench\": \"stop_latency_entry\", \"cpu\": \"%s\", \"target\": \"%s\", \"family\": "
                    "\"%s\", \"operation\": \"%s\", \"placement\": \"%s\", \"request\": \"%s\", \"permits\": "
                    "%zu, \"reps\": %d, \"op_ms\": %.4f, \"body_ms\": %.4f, \"latency_p50_ms\": %.4f, "
                    "\"latency_p99_ms\": %.4f, \"latency_max_ms\": %.4f, \"request_p50_ms\": %.4f, \"request_p99_ms\": "
                    "%.4f, \"throw_p50_ms\": %.4f, \"throw_p99_ms\": %.4f, \"counted\": %d, \"ended_first\": "
                    "%d, \"wrong_outcome\": %d, \"rounds\": %d}\n",
                    tenferro::bench::cpu_model_name().c_str(), tf::bench::dispatched_highway_target(), w.family, w.name,
                    place, where == tf::placement::compute ? "emit terminal" : "deadline", permits, w.reps,
                    body_ms / w.reps, body_ms, p50, p99, mx, l50, l99, k50, k99, counted, ended_first, wrong, rounds);
                std::fflush(out);
            }
        }
    }
    guard.reset();
    caller.join();
    if (out != nullptr) std::fclose(out);
    return 0;
}
