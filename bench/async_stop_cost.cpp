// S20: what it costs an asynchronous body that its entry can be stopped.
//
// An entry awaited with plain `use_awaitable` has the coroutine's cancellation
// slot connected, so it gets a stop state, and its body runs in turns
// (session_context: each hop of the body counted, so that the stop's emit
// into the body's slot never races it). The same entry awaited with
// `bind_cancellation_slot(cancellation_slot(), use_awaitable)` has no slot:
// no stop state, no turns. Everything else is the same code.
//
// Each entry's body hops once inside (a post to its own executor) and
// returns. Rounds alternate between the two, `--entries` each; the figure is
// the best round of each (ns per entry), and the ratio stoppable / plain.
//
//   tenferro-bench-async-stop-cost [--rounds N] [--entries N] [--json FILE]
#include <tenferro/cpu_backend.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "cpu_model.hpp"

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

namespace {

asio::awaitable<int> one_hop_body(tf::backend_session&) {
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    co_return 1;
}

/// ns per entry for `entries` entries awaited one after another.
double round_ns(tf::cpu_backend& cpu, bool stoppable, long entries, tf::placement where) {
    asio::io_context io(1);
    long sum = 0;
    clock_type::time_point start, end;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            const tf::session_options o{.where = where};
            start = clock_type::now();
            for (long i = 0; i < entries; ++i) {
                tf::session_result<int> r;
                if (stoppable)
                    r = co_await cpu.with_backend_session(o, one_hop_body, asio::use_awaitable);
                else
                    r = co_await cpu.with_backend_session(
                        o, one_hop_body, asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable));
                sum += r ? *r : 0;
            }
            end = clock_type::now();
        },
        [](std::exception_ptr e) {
            if (e) std::rethrow_exception(e);
        });
    io.run();
    if (sum != entries) {
        std::fprintf(stderr, "wrong results: %ld of %ld\n", sum, entries);
        std::exit(1);
    }
    return std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(entries);
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 15;
    long entries = 20000;
    const char* json = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--entries") == 0 && i + 1 < argc)
            entries = std::atol(argv[++i]);
        else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json = argv[++i];
        else {
            std::fprintf(stderr, "usage: %s [--rounds N] [--entries N] [--json FILE]\n", argv[0]);
            return 2;
        }
    }
    tf::cpu_backend cpu({.permits = 2});
    const std::string cpu_model = tenferro::bench::cpu_model_name();
    std::printf("CPU: %s; %d rounds of %ld entries, best round each\n", cpu_model.c_str(), rounds, entries);
    std::printf("%-10s %14s %14s %10s\n", "placement", "plain ns", "stoppable ns", "ratio");
    std::FILE* out = json != nullptr ? std::fopen(json, "w") : nullptr;
    for (const tf::placement where : {tf::placement::compute, tf::placement::caller}) {
        const char* name = where == tf::placement::compute ? "compute" : "caller";
        (void)round_ns(cpu, true, entries / 10, where);  // warm-up: caches, pool threads
        (void)round_ns(cpu, false, entries / 10, where);
        double plain = 1e300, stoppable = 1e300;
        for (int r = 0; r < rounds; ++r) {
            stoppable = std::min(stoppable, round_ns(cpu, true, entries, where));
            plain = std::min(plain, round_ns(cpu, false, entries, where));
        }
        std::printf("%-10s %14.0f %14.0f %10.3f\n", name, plain, stoppable, stoppable / plain);
        if (out != nullptr)
            std::fprintf(out,
                         "{\"bench\":\"async_stop_cost\",\"cpu\":\"%s\",\"placement\":\"%s\",\"rounds\":%d,"
                         "\"entries\":%ld,\"plain_ns\":%.1f,\"stoppable_ns\":%.1f,\"ratio\":%.4f}\n",
                         cpu_model.c_str(), name, rounds, entries, plain, stoppable, stoppable / plain);
    }
    if (out != nullptr) std::fclose(out);
    return 0;
}
