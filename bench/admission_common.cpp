// The shared parts of tenferro-bench-admission: see admission_common.hpp.

#include "admission_common.hpp"

#include <algorithm>

namespace admission_bench {

const char* system_name(const config& c) {
    if (c.workload == "waiters" && c.floor) return "asio-timer-park";
    if (c.floor) return c.where == tf::placement::compute ? "asio-post-roundtrip" : "asio-post-self";
    return c.where == tf::placement::compute ? "tenferro-compute" : "tenferro-caller";
}

fifo_result count_fifo(const std::vector<record>& recs, std::size_t slack, std::size_t io_threads) {
    fifo_result out;
    std::uint64_t gmax = 0;
    bool gany = false;
    std::vector<std::uint64_t> tmax(io_threads + 1, 0);
    std::vector<bool> tany(io_threads + 1, false);
    for (const record& r : recs) {
        if (!r.done) continue;
        if (gany && gmax > r.admit) {
            out.max_inversion = std::max(out.max_inversion, gmax - r.admit);
            if (gmax - r.admit > slack) ++out.violations;
        }
        gmax = gany ? std::max(gmax, r.admit) : r.admit;
        gany = true;
        const std::size_t t = std::min<std::size_t>(r.thread, io_threads);
        if (tany[t] && tmax[t] > r.admit && tmax[t] - r.admit > slack) ++out.violations_same_thread;
        tmax[t] = tany[t] ? std::max(tmax[t], r.admit) : r.admit;
        tany[t] = true;
    }
    return out;
}

percentiles wait_percentiles(const std::vector<record>& recs, std::uint64_t record::*field) {
    std::vector<std::uint64_t> w;
    w.reserve(recs.size());
    for (const record& r : recs)
        if (r.done) w.push_back(r.*field);
    percentiles p;
    if (w.empty()) return p;
    std::sort(w.begin(), w.end());
    auto at = [&](double q) { return static_cast<double>(w[static_cast<std::size_t>((w.size() - 1) * q)]) / 1000.0; };
    p.p50_us = at(0.5);
    p.p99_us = at(0.99);
    return p;
}

std::string stats_string(const tf::cpu_backend& cpu) {
    const tf::admission_stats s = cpu.stats();
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "stats: permits=%zu available=%zu waiting=%zu admitted=%llu completed=%llu rejected=%llu "
                  "cancelled=%llu",
                  s.permits, s.available, s.waiting, static_cast<unsigned long long>(s.admitted),
                  static_cast<unsigned long long>(s.completed), static_cast<unsigned long long>(s.rejected),
                  static_cast<unsigned long long>(s.cancelled));
    return buf;
}

bool stats_balanced(const tf::cpu_backend& cpu) {
    const tf::admission_stats s = cpu.stats();
    return s.available == s.permits && s.admitted == s.completed && s.waiting == 0;
}

void print_common(const config& c, double seconds, std::uint64_t total, const percentiles& p) {
    std::printf(
        "{\"system\":\"%s\",\"workload\":\"%s\",\"permits\":%zu,\"clients\":%zu,\"ops\":%zu,\"io_threads\":%zu,"
        "\"seconds\":%.6f,\"ns_per_op\":%.1f,\"sessions_per_s\":%.0f,\"wait_p50_us\":%.2f,\"wait_p99_us\":%.2f",
        system_name(c), c.workload.c_str(), c.permits, c.clients, c.ops, c.io_threads, seconds,
        total ? seconds * 1e9 / static_cast<double>(total) : 0.0,
        seconds > 0 ? static_cast<double>(total) / seconds : 0.0, p.p50_us, p.p99_us);
}

}  // namespace admission_bench
