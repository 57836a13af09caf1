// S20: how soon an operation that is running sees a stop, and what being
// stoppable costs it. For each operation, on a CPU session of 1 and of 2
// permits built on its own compute pool (as a host builds it from a grant):
//  - latency: a second thread asks for the stop at a random moment inside the
//    operation (between 10 % and 60 % of its measured duration) and stamps the
//    time; the operation's thread stamps the time it catches session_stopped.
//    The figure is the difference: median and maximum over the rounds.
//  - overhead: the operation's time in a session that can be stopped (and is
//    not) against one whose token has no stop state, measured side by side,
//    alternating, best of the rounds each: the ratio.
// Prints one table and, with --json FILE, one JSON line per row.
//
//   tenferro-bench-stop-latency [--rounds N] [--json FILE]
#include <tenferro/detail/admission/compute_pool.hpp>
#include <tenferro/detail/cpu/cpu_session.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "cpu_model.hpp"
#include "cpu_session_fixture.hpp"
#include "hwy_target_select.hpp"

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

namespace {

double ms(clock_type::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

using tf::test::filled;

/// A session on its own pool, with the larger buffer pool and cache the
/// benchmark's shapes want.
struct session_fixture : tf::test::cpu_session_fixture {
    session_fixture(std::size_t permits, std::stop_token stop)
        : cpu_session_fixture(permits, std::move(stop), std::size_t{256} << 20, std::size_t{512} << 20) {}
};

struct workload {
    const char* name;
    std::function<void(tf::backend_session&)> run;
};

}  // namespace

int main(int argc, char** argv) {
    int rounds = 15;
    const char* json = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json = argv[++i];
    }
    std::FILE* out = json != nullptr ? std::fopen(json, "w") : nullptr;

    const std::int64_t n = 1024, big = std::int64_t{1} << 24;
    const tf::tensor a = filled(n, n, 0.5f);
    tf::tensor c = filled(n, n, 0.0f);
    const tf::tensor x = filled(1, big, 0.5f);
    tf::tensor y = filled(1, big, 0.0f);
    const tf::tensor rows = filled(4096, 4096, 0.25f);
    tf::tensor rows_out = filled(4096, 4096, 0.0f);
    const tf::tensor q = filled(256, 256, 0.5f);
    const tf::tensor corpus_t = filled(256, 100000, 0.25f);
    const std::int64_t all[] = {0, 1};
    const std::int64_t swap[] = {1, 0};
    std::vector<workload> workloads = {
        {"matmul 1024^3", [&](tf::backend_session& s) { s.matmul_into(a, a, c); }},
        {"exp 16M", [&](tf::backend_session& s) { s.exp_into(x, y); }},
        {"add 16M", [&](tf::backend_session& s) { s.add_into(x, x, y); }},
        {"reduce_sum 16M", [&](tf::backend_session& s) { (void)s.reduce_sum(x, all); }},
        {"softmax 4096x4096", [&](tf::backend_session& s) { s.softmax_into(rows, -1, rows_out); }},
        {"top_k 4096x4096 k=10", [&](tf::backend_session& s) { (void)s.top_k(rows, 10, -1); }},
        {"transpose 4096x4096", [&](tf::backend_session& s) { s.transpose_into(rows, swap, rows_out); }},
        {"matmul_top_k 256 x 100k d=256", [&](tf::backend_session& s) { (void)s.matmul_top_k(q, corpus_t, 10); }},
    };

    std::printf("stop latency (S20); CPU %s; Highway target %s; %d rounds\n", tenferro::bench::cpu_model_name().c_str(),
                tf::bench::dispatched_highway_target(), rounds);
    std::printf("%-32s %7s %10s %10s %10s %10s %9s\n", "operation", "permits", "op ms", "lat med", "lat max",
                "stoppable", "ratio");
    std::mt19937 rng(12345);
    for (const std::size_t permits : {std::size_t{1}, std::size_t{2}}) {
        for (const workload& w : workloads) {
            // Overhead: stoppable (never asked) against no stop state, alternating.
            std::stop_source never;
            session_fixture plain(permits, std::stop_token{});
            session_fixture stoppable(permits, never.get_token());
            double best_plain = 1e300, best_stoppable = 1e300;
            w.run(plain.session);  // warm-up (plans, pages)
            w.run(stoppable.session);
            for (int r = 0; r < rounds; ++r) {
                auto t0 = clock_type::now();
                w.run(plain.session);
                best_plain = std::min(best_plain, ms(clock_type::now() - t0));
                t0 = clock_type::now();
                w.run(stoppable.session);
                best_stoppable = std::min(best_stoppable, ms(clock_type::now() - t0));
            }
            // Latency: a stop asked at a random moment inside the operation.
            std::vector<double> lat;
            std::uniform_real_distribution<double> when(0.1, 0.6);
            for (int r = 0; r < rounds; ++r) {
                std::stop_source source;
                session_fixture f(permits, source.get_token());
                const auto delay = std::chrono::duration<double, std::milli>(when(rng) * best_plain);
                clock_type::time_point asked{};
                std::jthread stopper;
                const auto start = clock_type::now();
                stopper = std::jthread([&] {
                    std::this_thread::sleep_until(start + std::chrono::duration_cast<clock_type::duration>(delay));
                    asked = clock_type::now();
                    source.request_stop();
                });
                bool stopped = false;
                try {
                    w.run(f.session);
                } catch (const tf::session_stopped&) {
                    stopped = true;
                }
                const auto caught = clock_type::now();
                stopper.join();
                if (stopped && asked != clock_type::time_point{}) lat.push_back(ms(caught - asked));
            }
            std::sort(lat.begin(), lat.end());
            const double med = lat.empty() ? -1 : lat[lat.size() / 2];
            const double max = lat.empty() ? -1 : lat.back();
            std::printf("%-32s %7zu %10.2f %10.3f %10.3f %10.2f %9.3f  (%zu/%d stopped)\n", w.name, permits, best_plain,
                        med, max, best_stoppable, best_stoppable / best_plain, lat.size(), rounds);
            if (out != nullptr)
                std::fprintf(out,
                             "{\"bench\": \"stop_latency\", \"cpu\": \"%s\", \"target\": \"%s\", \"operation\": "
                             "\"%s\", \"permits\": %zu, \"op_ms\": %.4f, \"latency_median_ms\": %.4f, "
                             "\"latency_max_ms\": %.4f, \"stopped\": %zu, \"rounds\": %d, \"stoppable_op_ms\": %.4f, "
                             "\"overhead_ratio\": %.4f}\n",
                             tenferro::bench::cpu_model_name().c_str(), tf::bench::dispatched_highway_target(), w.name,
                             permits, best_plain, med, max, lat.size(), rounds, best_stoppable,
                             best_stoppable / best_plain);
        }
    }
    if (out != nullptr) std::fclose(out);
    return 0;
}
