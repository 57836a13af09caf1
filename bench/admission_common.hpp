#pragma once
// What the runs of tenferro-bench-admission share: a run's configuration, the
// per-entry records and the statistics computed from them (latency
// percentiles, the FIFO check), the watchdog, the admission-stats checks and
// the common head of every JSON line. The workloads themselves are in
// admission_throughput.cpp (roundtrip, fanin, dot) and admission_waiters.cpp.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <tenferro/tenferro.hpp>

namespace admission_bench {

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------
struct config {
    std::string workload;
    tf::placement where = tf::placement::compute;
    bool floor = false;
    std::size_t permits = 2, clients = 1, ops = 1, io_threads = 1, vec = 0;
};

/// The "system" field of a run's JSON line: ours, a floor, or the timer park.
const char* system_name(const config& c);

inline std::uint64_t ns_between(clock_type::time_point a, clock_type::time_point b) {
    auto d = std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
    return d < 0 ? 0 : static_cast<std::uint64_t>(d);
}

// ---------------------------------------------------------------------------
// Per-entry records and the statistics computed from them
// ---------------------------------------------------------------------------
struct record {
    std::uint64_t admit = 0;    // admission sequence number, taken when the body starts
    std::uint64_t wait_ns = 0;  // initiation -> body start
    std::uint64_t body_end_ns = 0;  // body end, since the run's epoch (throughput workloads)
    std::uint64_t return_ns = 0;    // body end -> the client coroutine resumed
    std::uint32_t thread = 0;   // I/O thread that took the ticket and initiated the entry
    std::uint32_t done = 0;     // the body ran
};

struct fifo_result {
    std::uint64_t violations = 0;              // global ticket order, slack P+T
    std::uint64_t violations_same_thread = 0;  // per initiating thread, slack P+T
    std::uint64_t max_inversion = 0;           // largest (running max - admit) seen, global order
};

// Sorted by ticket (the vector is indexed by ticket): an entry is a violation
// when an entry initiated before it was admitted more than `slack` positions
// after it (running max of admit over earlier tickets - its admit > slack).
fifo_result count_fifo(const std::vector<record>& recs, std::size_t slack, std::size_t io_threads);

struct percentiles {
    double p50_us = 0, p99_us = 0;
};

percentiles wait_percentiles(const std::vector<record>& recs, std::uint64_t record::*field = &record::wait_ns);

// ---------------------------------------------------------------------------
// A watchdog: a run that takes absurdly long is reported as a hang.
// ---------------------------------------------------------------------------
class watchdog {
public:
    watchdog(std::string what, std::chrono::seconds limit, std::function<std::string()> diag)
        : what_(std::move(what)), diag_(std::move(diag)), thread_([this, limit] {
              std::unique_lock lock(m_);
              if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
                  std::fprintf(stderr, "tenferro-bench-admission: HANG: %s still running after %llds; %s\n",
                               what_.c_str(), static_cast<long long>(limit.count()), diag_ ? diag_().c_str() : "");
                  std::fflush(stderr);
                  std::_Exit(3);
              }
          }) {}
    ~watchdog() {
        {
            std::lock_guard lock(m_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

private:
    std::string what_;
    std::function<std::string()> diag_;
    std::mutex m_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

std::string stats_string(const tf::cpu_backend& cpu);
bool stats_balanced(const tf::cpu_backend& cpu);

/// The head of a run's JSON line, up to wait_p99_us; the caller adds its fields and the closing brace.
void print_common(const config& c, double seconds, std::uint64_t total, const percentiles& p);

// ---------------------------------------------------------------------------
// The workloads: each prints its JSON line and returns the exit status.
// ---------------------------------------------------------------------------
/// roundtrip, fanin, dot: C clients each doing M entries (admission_throughput.cpp).
int run_throughput(const config& cfg);
/// waiters: both phases, each in a fresh process, then one JSON line (admission_waiters.cpp).
int run_waiters(const config& cfg);
/// One waiters phase, run as `--waiters-phase baseline|admission`: prints a line of numbers for run_waiters.
int waiters_phase(bool baseline, tf::placement where, std::size_t n);

}  // namespace admission_bench
