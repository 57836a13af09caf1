// tenferro-bench-admission: the session-entry benchmark of
// docs/bench-protocol.md ("Admission").
//
//   tenferro-bench-admission [--workload roundtrip|fanin|dot|waiters]
//                            [--placement compute|caller] [--floor] [--with-floors]
//                            [--permits P] [--clients C] [--ops M] [--io-threads T] [--vec N]
//
// Without any flag it runs every workload in both placements plus the matching
// floors. With flags it runs the selected workload(s)/placement(s) (all of
// them where a flag is absent): ours, or the floor only with --floor, or both
// with --with-floors. Each run prints one JSON object on its own line.
// See docs/benchmarks.md for every field and for the FIFO-violation rule.
//
// This file: the flags, each workload's default shape, and the heap-counting
// hook. The workloads: admission_throughput.cpp (roundtrip, fanin, dot) and
// admission_waiters.cpp; what they share: admission_common.hpp; the counters:
// admission_alloc_count.hpp.

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <tenferro/tenferro.hpp>

#include "admission_alloc_count.hpp"
#include "admission_common.hpp"
#include "malloc_interpose.hpp"

// The process-wide replacements of malloc and its kin (malloc_interpose.hpp,
// included in this translation unit only) report here.
void tenferro::malloc_interpose::on_block(std::size_t n) noexcept { admission_bench::note_alloc(n); }

namespace admission_bench {
extern const bool malloc_interposed = TENFERRO_MALLOC_INTERPOSED;
}  // namespace admission_bench

using namespace admission_bench;

namespace {

struct overrides {
    std::optional<std::size_t> permits, clients, ops, io_threads, vec;
};

config defaults_for(const std::string& workload) {
    config c;
    c.workload = workload;
    if (workload == "roundtrip") {
        c.permits = 2, c.clients = 1, c.ops = 50000, c.io_threads = 1, c.vec = 0;
    } else if (workload == "fanin") {
        c.permits = 2, c.clients = 10000, c.ops = 10, c.io_threads = 2, c.vec = 0;
    } else if (workload == "dot") {
        c.permits = 2, c.clients = 1000, c.ops = 20, c.io_threads = 2, c.vec = 16384;
    } else {  // waiters
        c.permits = 1, c.clients = 100000, c.ops = 1, c.io_threads = 1, c.vec = 0;
    }
    return c;
}

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "tenferro-bench-admission: %s\n"
                 "usage: tenferro-bench-admission [--workload roundtrip|fanin|dot|waiters] "
                 "[--placement compute|caller]\n"
                 "         [--floor | --with-floors] [--permits P] [--clients C] [--ops M] "
                 "[--io-threads T] [--vec N]\n",
                 why);
    std::exit(2);
}

int run_one(const config& cfg) {
    if (cfg.workload == "waiters") return run_waiters(cfg);
    return run_throughput(cfg);
}

std::size_t parse_size(const char* flag, const char* v) {
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || x == 0) usage((std::string("bad value for ") + flag + ": " + v).c_str());
    return static_cast<std::size_t>(x);
}

}  // namespace

int main(int argc, char** argv) {
    std::optional<std::string> workload, phase;
    std::optional<tf::placement> where;
    bool floor_only = false, with_floors = false;
    overrides ov;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        if (k == "--floor") {
            floor_only = true;
            continue;
        }
        if (k == "--with-floors") {
            with_floors = true;
            continue;
        }
        if (k == "--help" || k == "-h") usage("help");
        if (i + 1 >= argc) usage(("missing value for " + k).c_str());
        const char* v = argv[++i];
        if (k == "--workload") {
            const std::string w = v;
            if (w != "roundtrip" && w != "fanin" && w != "dot" && w != "waiters")
                usage(("unknown workload " + w).c_str());
            workload = w;
        } else if (k == "--placement" || k == "--mode") {
            const std::string p = v;
            if (p == "compute" || p == "spawn_blocking")
                where = tf::placement::compute;
            else if (p == "caller" || p == "inline")
                where = tf::placement::caller;
            else
                usage(("unknown placement " + p).c_str());
        } else if (k == "--permits") {
            ov.permits = parse_size("--permits", v);
        } else if (k == "--clients") {
            ov.clients = parse_size("--clients", v);
        } else if (k == "--ops") {
            ov.ops = parse_size("--ops", v);
        } else if (k == "--io-threads") {
            ov.io_threads = parse_size("--io-threads", v);
        } else if (k == "--vec") {
            ov.vec = static_cast<std::size_t>(std::strtoull(v, nullptr, 10));
        } else if (k == "--waiters-phase") {
            phase = v;
        } else {
            usage(("unknown flag " + k).c_str());
        }
    }

    if (phase) {
        return waiters_phase(*phase == "baseline", where.value_or(tf::placement::compute), ov.clients.value_or(100000));
    }

    const bool no_flags = argc == 1;
    std::vector<std::string> workloads = workload ? std::vector<std::string>{*workload}
                                                  : std::vector<std::string>{"roundtrip", "fanin", "dot", "waiters"};
    std::vector<tf::placement> placements =
        where ? std::vector<tf::placement>{*where}
              : std::vector<tf::placement>{tf::placement::compute, tf::placement::caller};
    int rc = 0;
    for (const std::string& w : workloads) {
        for (tf::placement p : placements) {
            config c = defaults_for(w);
            c.where = p;
            if (ov.permits) c.permits = *ov.permits;
            if (ov.clients) c.clients = *ov.clients;
            if (ov.ops) c.ops = *ov.ops;
            if (ov.io_threads) c.io_threads = *ov.io_threads;
            if (ov.vec) c.vec = *ov.vec;
            if (!floor_only) rc |= run_one(c);
            // The waiters line already carries its baseline (the timer park).
            if (floor_only || ((no_flags || with_floors) && w != "waiters")) {
                config f = c;
                f.floor = true;
                rc |= run_one(f);
            }
        }
    }
    return rc;
}
