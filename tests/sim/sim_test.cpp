// Deterministic simulation of the admission core and the batcher
// (docs/testing.md, "Deterministic simulation").
//
// One seeded, single-threaded scheduler (sim_executor.hpp) owns every hop the
// host makes: compute-placed bodies reach it through the public seam
// host_options::compute_executor, caller-placed bodies and completions through
// the callers' executors (sim executors bound to the handlers). The library
// runs its production paths unchanged. A seed picks a scenario (entries of
// random permits, placement, wait policy and body kind; cancellations;
// throwing observer hooks; shutdown; re-entry; scopes; callers whose context
// dies right after their upcall; batcher submits and cancels) and every
// scheduling choice; the invariants below are checked after every step.
//
//   sim_test --seeds N [--first S]   N seeds from S (default: TENFERRO_SIM_SEEDS or 2000, from 1)
//   sim_test --seed S [--verbose]    one seed (the replay of a failure)
//   sim_test --seed S --keep-ops i,j --schedule T
//                                    the seed's scenario with only those operations,
//                                    scheduled by chooser seed T (a shrunk failure)
//   sim_test --exhaustive [--config C] [--choices a,b,..]
//                                    every schedule of the small configurations
//                                    (or one configuration, or one schedule)
//
// Not covered: the inline fast paths (try_run_inline, awaitable_entry) need
// an io_context executor and take the general path here. The batcher's
// max_delay (B6) runs on the simulated clock through batch_options::timer;
// its default timer thread is not simulated.

#include "sim_executor.hpp"

#include "scenario.hpp"
#include "sim_executor.hpp"
#include "world.hpp"

#include <tenferro/batcher.hpp>
#include <tenferro/session_host.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tenferro::sim {
namespace {

std::string join(const std::vector<std::uint32_t>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s.empty() ? "-" : s;
}

std::vector<std::uint32_t> parse_choices(const char* s) {
    std::vector<std::uint32_t> v;
    if (std::strcmp(s, "-") == 0) return v;
    while (*s != 0) {
        v.push_back(static_cast<std::uint32_t>(std::strtoul(s, const_cast<char**>(&s), 10)));
        if (*s == ',') ++s;
    }
    return v;
}

std::string rule_of(const std::string& failure) { return failure.substr(0, failure.find(':')); }

/// Shrinks a failing seed's operation list: drops one operation at a time
/// while some schedule (chooser seeds seed .. seed + 99) still breaks the same
/// rule. Prints the smallest list found and its replay command.
void shrink(std::uint64_t seed, const scenario& sc, const std::string& failure) {
    std::vector<std::uint32_t> keep;
    for (std::uint32_t k = 0; k < sc.ops.size(); ++k) keep.push_back(k);
    std::uint64_t schedule = seed;
    std::string last = failure;
    const std::string rule = rule_of(failure);
    for (bool progress = true; progress;) {
        progress = false;
        for (std::size_t k = 0; k < keep.size(); ++k) {
            std::vector<std::uint32_t> candidate = keep;
            candidate.erase(candidate.begin() + static_cast<std::ptrdiff_t>(k));
            const scenario smaller = restrict_ops(sc, candidate);
            for (std::uint64_t t = seed; t < seed + 100; ++t) {
                chooser choose(t);
                const run_outcome r = run_scenario(smaller, choose, false);
                if (!r.ok && rule_of(r.failure) == rule) {
                    keep = std::move(candidate);
                    schedule = t;
                    last = r.failure;
                    progress = true;
                    break;
                }
            }
            if (progress) break;
        }
    }
    std::printf(
        "shrunk: %zu of %zu operations still fail (%s)\nscenario: %s\nreplay: ./dev sim --seed %llu --keep-ops %s "
        "--schedule %llu --verbose\n",
        keep.size(), sc.ops.size(), last.c_str(), describe(restrict_ops(sc, keep)).c_str(),
        static_cast<unsigned long long>(seed), join(keep).c_str(), static_cast<unsigned long long>(schedule));
}

int run_seeds(std::uint64_t first, std::uint64_t count, bool verbose, const char* keep_ops,
              const std::uint64_t* schedule, bool do_shrink) {
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t steps = 0;
    for (std::uint64_t s = first; s < first + count; ++s) {
        scenario sc = generate(s);
        if (keep_ops != nullptr) sc = restrict_ops(sc, parse_choices(keep_ops));
        if (verbose) std::printf("seed %llu:\n%s\n", static_cast<unsigned long long>(s), describe(sc).c_str());
        chooser choose(schedule != nullptr ? *schedule : s);
        const run_outcome r = run_scenario(sc, choose, verbose);
        steps += r.steps;
        if (!r.ok) {
            std::printf(
                "sim: FAILED at seed %llu (after %llu seeds): %s\nscenario: %s\nchoices: %s\nreplay: ./dev sim --seed "
                "%llu --verbose\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s - first + 1), r.failure.c_str(),
                describe(sc).c_str(), join(choose.taken()).c_str(), static_cast<unsigned long long>(s));
            std::fflush(stdout);
            if (do_shrink && keep_ops == nullptr) shrink(s, sc, r.failure);
            std::fflush(stdout);
            std::_Exit(1);
        }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("sim: %llu seeds from %llu passed, %llu steps, %.2f s (%.0f seeds/s)\n",
                static_cast<unsigned long long>(count), static_cast<unsigned long long>(first),
                static_cast<unsigned long long>(steps), secs, count / (secs > 0 ? secs : 1e-9));
    const policy_coverage& p = coverage();
    std::printf(
        "sim: policies exercised: %llu waiters expired, %llu expired at their start, %llu rejected at initiation "
        "(late), %llu excluded by a resize (%llu resizes), %llu steps with a head held by bytes, %llu grants in "
        "groups > 0\n",
        static_cast<unsigned long long>(p.expired_waiting), static_cast<unsigned long long>(p.expired_at_start),
        static_cast<unsigned long long>(p.rejected_late), static_cast<unsigned long long>(p.shrunk_out),
        static_cast<unsigned long long>(p.resizes), static_cast<unsigned long long>(p.held_by_bytes),
        static_cast<unsigned long long>(p.other_group_grants));
    std::printf(
        "sim: stops exercised (S20): %llu bodies stopped by a cancellation, %llu by their deadline, %llu batches by "
        "B7; %llu stops caught, %llu turned into the body's own exception, %llu unasked session_stopped, %llu total "
        "cancellations of running bodies, %llu "
        "emitted from inside the body, %llu cancelled between grant and start; at most %llu scheduler steps from a "
        "stop's request to its entry's completion\n",
        static_cast<unsigned long long>(p.stopped_by_cancel), static_cast<unsigned long long>(p.stopped_by_deadline),
        static_cast<unsigned long long>(p.stopped_b7), static_cast<unsigned long long>(p.caught),
        static_cast<unsigned long long>(p.rethrown), static_cast<unsigned long long>(p.rogue),
        static_cast<unsigned long long>(p.total_running), static_cast<unsigned long long>(p.self_emits),
        static_cast<unsigned long long>(p.cancelled_before_start),
        static_cast<unsigned long long>(p.max_steps_to_completion));
    return 0;
}

int run_exhaustive(int only, const char* choices, bool verbose, std::uint64_t cap) {
    const std::vector<scenario> configs = exhaustive_configs();
    std::uint64_t total = 0, configs_run = 0, capped = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < static_cast<int>(configs.size()); ++c) {
        if (only >= 0 && c != only) continue;
        const scenario& sc = configs[c];
        chooser choose(choices != nullptr ? parse_choices(choices) : std::vector<std::uint32_t>{});
        std::uint64_t n = 0;
        bool complete = true;
        do {
            ++n;
            const run_outcome r = run_scenario(sc, choose, verbose);
            if (!r.ok) {
                std::printf(
                    "sim: FAILED exhaustive config %d (%s), schedule %llu (%llu schedules in all): %s\nscenario: "
                    "%s\nreplay: ./dev sim --exhaustive --config %d --choices %s --verbose\n",
                    c, sc.name.c_str(), static_cast<unsigned long long>(n), static_cast<unsigned long long>(total + n),
                    r.failure.c_str(), describe(sc).c_str(), c, join(choose.taken()).c_str());
                std::fflush(stdout);
                std::_Exit(1);
            }
            if (choices != nullptr) break;
            if (n >= cap) {
                complete = false;
                break;
            }
        } while (choose.advance());
        total += n;
        ++configs_run;
        if (!complete) ++capped;
        if (verbose || only >= 0 || sc.name.rfind("grid", 0) != 0)
            std::printf("sim: exhaustive config %d (%s): %llu schedules explored%s\n", c, sc.name.c_str(),
                        static_cast<unsigned long long>(n), complete ? " (all)" : " (capped)");
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "sim: exhaustive: %llu configurations, %llu schedules explored (%llu configurations capped) in %.2f s\n",
        static_cast<unsigned long long>(configs_run), static_cast<unsigned long long>(total),
        static_cast<unsigned long long>(capped), secs);
    return 0;
}

}  // namespace
}  // namespace tenferro::sim

int main(int argc, char** argv) {
    using namespace tenferro::sim;
    std::uint64_t first = 1, count = 2000;
    if (const char* env = std::getenv("TENFERRO_SIM_SEEDS")) count = std::strtoull(env, nullptr, 10);
    bool exhaustive = false, verbose = false, one = false;
    int config = -1;
    const char* choices = nullptr;
    const char* keep_ops = nullptr;
    std::uint64_t schedule = 0;
    bool has_schedule = false, do_shrink = true;
    std::uint64_t cap = 2'000'000;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "sim_test: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--seed") {
            first = std::strtoull(next(), nullptr, 10);
            one = true;
        } else if (a == "--seeds") {
            count = std::strtoull(next(), nullptr, 10);
        } else if (a == "--first") {
            first = std::strtoull(next(), nullptr, 10);
        } else if (a == "--exhaustive") {
            exhaustive = true;
        } else if (a == "--config") {
            config = std::atoi(next());
        } else if (a == "--choices") {
            choices = next();
        } else if (a == "--keep-ops") {
            keep_ops = next();
        } else if (a == "--schedule") {
            schedule = std::strtoull(next(), nullptr, 10);
            has_schedule = true;
        } else if (a == "--no-shrink") {
            do_shrink = false;
        } else if (a == "--cap") {
            cap = std::strtoull(next(), nullptr, 10);
        } else if (a == "--verbose") {
            verbose = true;
        } else {
            std::fprintf(
                stderr,
                "usage: sim_test [--seeds N] [--first S] [--no-shrink] | --seed S [--keep-ops i,j,..] [--schedule T] "
                "[--verbose] | --exhaustive [--config C] [--choices a,b,..] [--cap N]\n");
            return 2;
        }
    }
    if (exhaustive) return run_exhaustive(config, choices, verbose, cap);
    return run_seeds(first, one ? 1 : count, verbose, keep_ops, has_schedule ? &schedule : nullptr, do_shrink);
}
