// The allocation-failure loop (rule S19, docs/testing.md): every
// public asynchronous operation of the library, run once per allocation site
// with that allocation failed, each run in a fresh child process
// (fault_loop.hpp). Two modes:
//
//   transient   the N-th allocation after the operation starts fails, once;
//   persistent  every allocation from the N-th on fails for 50 ms, then
//               memory is back.
//
// After each run the child checks S19: the operation completed exactly once
// (or its initiating function threw std::bad_alloc with nothing queued; never
// under use_awaitable, whose failure arrives at the co_await), every permit
// came back and the counters balance (S14), the host is not poisoned and
// serves a new entry, a file an atomic write replaced is whole. A crash, an
// abort (std::terminate) or a hang of the child is a failure of the run; under
// ASan the leak check runs at the child's exit.
//
//   alloc_faults_test                       every scenario, both modes
//   alloc_faults_test --list                the scenarios' names
//   alloc_faults_test --strict              the same (every scenario counts; kept
//                                           for the scripts that still pass it)
//   alloc_faults_test --scenario S [--mode transient|persistent] [--fail-at N]
//                                           one scenario, one mode, one N (replay;
//                                           TENFERRO_FAULTS_NO_FORK=1 runs it in
//                                           this process, for a debugger)

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <tenferro/tenferro.hpp>

#include "fault_loop.hpp"
#include "fault_scenario.hpp"
#include "test_asio.hpp"

using namespace tenferro;
using namespace tenferro::test::faults;

namespace {

std::vector<scenario> all_scenarios() {
    std::vector<scenario> s = admission_scenarios();
    for (scenario& sc : npy_scenarios()) s.push_back(std::move(sc));
    for (scenario& sc : corpus_scenarios()) s.push_back(std::move(sc));
    return s;
}

bool matches(const std::string& name, const std::string& filter) {
    return filter.empty() || name == filter ||
           (filter.back() == '*' && name.rfind(filter.substr(0, filter.size() - 1), 0) == 0);
}

/// On SIGABRT (std::terminate, a glibc fatal error) a child prints its stack
/// to stderr before it dies, so that a failed run says where: backtrace() is
/// called once at start-up, where it may still load what it needs, and
/// backtrace_symbols_fd allocates nothing.
void print_stack_on_abort() {
    void* warm[4];
    (void)backtrace(warm, 4);
    struct sigaction sa {};
    sa.sa_handler = [](int) {
        void* frames[48];
        const int n = backtrace(frames, 48);
        static const char head[] = "alloc_faults_test: aborted; the stack:\n";
        (void)!write(2, head, sizeof head - 1);
        backtrace_symbols_fd(frames, n, 2);
        signal(SIGABRT, SIG_DFL);
        raise(SIGABRT);
    };
    sigaction(SIGABRT, &sa, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
    print_stack_on_abort();
    std::string only, mode_filter;
    std::uint64_t fail_at = 0;
    bool list = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--scenario" && i + 1 < argc) {
            only = argv[++i];
        } else if (a == "--mode" && i + 1 < argc) {
            mode_filter = argv[++i];
        } else if (a == "--fail-at" && i + 1 < argc) {
            fail_at = std::strtoull(argv[++i], nullptr, 10);
        } else if (a == "--list") {
            list = true;
        } else if (a == "--strict") {
            // Every scenario counts by default (issue 45): accepted, changes nothing.
        } else {
            std::fprintf(stderr,
                         "usage: %s [--list] [--strict] [--scenario NAME|PREFIX*] [--mode transient|persistent] "
                         "[--fail-at N]\n",
                         argv[0]);
            return 2;
        }
    }
    const std::vector<scenario> scenarios = all_scenarios();
    const auto timeout = std::chrono::seconds(
        std::getenv("TENFERRO_FAULTS_TIMEOUT") != nullptr ? std::atoi(std::getenv("TENFERRO_FAULTS_TIMEOUT")) : 20);
    std::uint64_t mishandled = 0, sites = 0, runs = 0, matched = 0;
    std::printf("allocation-failure loop (%s)\n", TENFERRO_ALLOC_FAULT_MALLOC
                                                      ? "operator new and the malloc family"
                                                      : "operator new only: a sanitizer owns malloc");
    for (const scenario& s : scenarios) {
        if (!matches(s.name, only)) continue;
        ++matched;
        if (list) {
            std::printf("%s\n", s.name.c_str());
            continue;
        }
        for (const bool persistent : {false, true}) {
            const char* mode = persistent ? "persistent" : "transient";
            if (!mode_filter.empty() && mode_filter != mode) continue;
            auto child = [&](std::uint64_t n, verdict& v, std::uint64_t& injected) {
                return s.run(run_config{n, persistent}, v, injected);
            };
            if (fail_at != 0 && std::getenv("TENFERRO_FAULTS_NO_FORK") != nullptr) {
                // In this process, for a debugger: `gdb --args ... --fail-at N`.
                verdict v;
                std::uint64_t injected = 0;
                const std::uint64_t events = child(fail_at, v, injected);
                std::printf("%s [%s] fault at %llu (no fork): %llu allocations: %s%s\n", s.name.c_str(), mode,
                            static_cast<unsigned long long>(fail_at), static_cast<unsigned long long>(events),
                            v.failed() ? "FAIL " : "ok", v.message());
                mishandled += v.failed() ? 1 : 0;
                continue;
            }
            if (fail_at != 0) {
                const auto r = tenferro::test::faults::run_child(child, fail_at, timeout);
                std::printf("%s [%s] fault at %llu: %llu allocations, %llu failed: %s%s\n", s.name.c_str(), mode,
                            static_cast<unsigned long long>(fail_at), static_cast<unsigned long long>(r.events),
                            static_cast<unsigned long long>(r.injected), r.ok ? "ok" : "FAIL ", r.message);
                mishandled += r.ok ? 0 : 1;
                continue;
            }
            const auto r = tenferro::test::faults::run_loop(s.name.c_str(), mode, child, argv[0], timeout);
            mishandled += r.mishandled;
            runs += r.runs;
            if (!persistent) sites += r.sites;
        }
    }
    if (matched == 0) {
        std::fprintf(stderr, "no scenario matches '%s' (--list)\n", only.c_str());
        return 2;
    }
    if (list) return 0;
    std::printf("%llu allocation sites in all, %llu runs, %llu mishandled", static_cast<unsigned long long>(sites),
                static_cast<unsigned long long>(runs), static_cast<unsigned long long>(mishandled));
    std::printf("\n");
    return mishandled == 0 ? 0 : 1;
}
