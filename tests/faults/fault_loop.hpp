#pragma once
// The fault loop (docs/testing.md): runs one scenario once per fault index
// N = 1, 2, ..., each time in a fresh child process forked from this one, so
// that a crash, an abort or a hang of the scenario is a reported failure and
// not the end of the test run. The child injects its fault at the N-th
// countable event after the operation starts (an allocation, for
// alloc_faults_test) and reports back through a pipe: how many events the run
// saw, and whether every check held. The loop ends with the first run that saw
// fewer than N events: that N reached past the operation's last site.
//
// The parent must not have started any thread before it forks (the child of a
// multi-threaded process may only call async-signal-safe functions), so every
// scenario builds its hosts and contexts inside the child.

#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tenferro::test::faults {

/// What a child reports to the loop. Fixed-size: written with one write(2),
/// built without allocating (the child may be out of memory when it fails).
struct child_report {
    std::uint64_t events = 0;    // countable events seen while armed
    std::uint64_t injected = 0;  // of those, how many were failed
    int ok = 0;                  // 1: every check held
    char message[480] = {};
};

/// The child's side: a scenario records its first failed check here.
class verdict {
public:
    /// Records a failed check (printf-style; only the first is kept).
    void fail(const char* format, ...) __attribute__((format(printf, 2, 3))) {
        if (failed_) return;
        failed_ = true;
        std::va_list args;
        va_start(args, format);
        std::vsnprintf(message_, sizeof message_, format, args);
        va_end(args);
    }
    /// `fail` unless `condition`; returns `condition`.
    bool check(bool condition, const char* what) {
        if (!condition) fail("%s", what);
        return condition;
    }
    bool failed() const noexcept { return failed_; }
    const char* message() const noexcept { return message_; }

private:
    bool failed_ = false;
    char message_[480] = {};
};

/// The loop's outcome for one scenario and mode.
struct loop_result {
    std::uint64_t sites = 0;       // events of a run with no fault (the operation's sites)
    std::uint64_t runs = 0;        // fault indices tried
    std::uint64_t mishandled = 0;  // runs that failed a check, crashed or hung
};

/// Runs `child(fail_at, verdict&)` in a fresh process and returns its report;
/// `fail_at` 0 means no fault. `child` arms and disarms the injector itself and
/// returns the events it saw. A child that crashes, exits without a report
/// or outlives `timeout` is reported as such in `message`.
template <class Child>
child_report run_child(Child&& child, std::uint64_t fail_at, std::chrono::seconds timeout) {
    child_report report;
    int fds[2];
    if (pipe(fds) != 0) {
        std::snprintf(report.message, sizeof report.message, "pipe: %s", std::strerror(errno));
        return report;
    }
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
        std::snprintf(report.message, sizeof report.message, "fork: %s", std::strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return report;
    }
    if (pid == 0) {
        close(fds[0]);
        verdict v;
        child_report out;
        out.events = child(fail_at, v, out.injected);
        out.ok = v.failed() ? 0 : 1;
        std::snprintf(out.message, sizeof out.message, "%s", v.message());
        const ssize_t written = write(fds[1], &out, sizeof out);
        close(fds[1]);
        std::fflush(nullptr);
        // exit, not _exit: the sanitizers' leak check runs at exit.
        std::exit(written == static_cast<ssize_t>(sizeof out) ? 0 : 3);
    }
    close(fds[1]);
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(timeout.count() * 1000));
    bool got = false;
    if (ready > 0) got = read(fds[0], &report, sizeof report) == static_cast<ssize_t>(sizeof report);
    close(fds[0]);
    if (ready == 0) {
        kill(pid, SIGKILL);
        report = {};
        std::snprintf(report.message, sizeof report.message, "hang: no report within %lld s (killed)",
                      static_cast<long long>(timeout.count()));
    }
    // The child's exit: after its report it still runs its destructors, and
    // the leak check; give it as long again.
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    pid_t waited = 0;
    while ((waited = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) usleep(1000);
    if (waited == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (report.ok) {
            report.ok = 0;
            std::snprintf(report.message, sizeof report.message, "hang at exit: reported, then did not exit (killed)");
        }
        return report;
    }
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        if (ready != 0) {  // (a hang already said so)
            report.ok = 0;
            std::snprintf(report.message, sizeof report.message, "terminated by signal %d (%s)%s", sig, strsignal(sig),
                          got ? " after its report" : "");
        }
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && report.ok) {
        report.ok = 0;
        std::snprintf(report.message, sizeof report.message,
                      "exited with status %d after its report (a leak the sanitizer found?)", WEXITSTATUS(status));
    } else if (!got && ready != 0) {
        report.ok = 0;
        std::snprintf(report.message, sizeof report.message, "exited without a report");
    }
    return report;
}

/// The loop over N for one scenario in one mode; prints one line per
/// mishandled N (with the command that replays it) and a summary line.
template <class Child>
loop_result run_loop(const char* scenario, const char* mode, Child&& child, const char* replay_prefix,
                     std::chrono::seconds timeout, std::uint64_t max_n = 2000) {
    loop_result result;
    const child_report baseline = run_child(child, 0, timeout);
    result.sites = baseline.events;
    if (!baseline.ok) {
        ++result.mishandled;
        std::printf("  FAIL %s [%s] without a fault: %s\n", scenario, mode, baseline.message);
    }
    // With threads the count varies a little from run to run; a run that hangs
    // or crashes reports none, so the loop is bounded by the baseline's count.
    const std::uint64_t limit = std::min<std::uint64_t>(max_n, baseline.events * 4 + 32);
    for (std::uint64_t n = 1; n <= limit; ++n) {
        const child_report r = run_child(child, n, timeout);
        ++result.runs;
        if (!r.ok) {
            ++result.mishandled;
            std::printf("  FAIL %s [%s] fault at %llu: %s\n    replay: %s --scenario %s --mode %s --fail-at %llu\n",
                        scenario, mode, static_cast<unsigned long long>(n), r.message, replay_prefix, scenario, mode,
                        static_cast<unsigned long long>(n));
        }
        if (r.ok && r.events < n) break;  // the fault fell past the last site
        if (!r.ok && r.events != 0 && r.events < n) break;
    }
    std::printf("%-34s %-10s %4llu sites, %4llu runs, %llu mishandled\n", scenario, mode,
                static_cast<unsigned long long>(result.sites), static_cast<unsigned long long>(result.runs),
                static_cast<unsigned long long>(result.mishandled));
    std::fflush(stdout);
    return result;
}

}  // namespace tenferro::test::faults
