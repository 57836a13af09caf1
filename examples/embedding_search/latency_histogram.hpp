#pragma once
// A lock-free log-linear histogram of durations in nanoseconds: 16 linear
// sub-buckets per power of two, so a reported percentile is within 6.25 % of the
// true value, in fixed memory (976 counters), with concurrent `record()` from any
// thread. Snapshots subtract, so a caller can measure a window of time exactly.

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <vector>

namespace embedding_search {

/// A copy of a histogram's counters at one moment.
struct histogram_snapshot {
    std::vector<std::uint64_t> counts;
    std::uint64_t total = 0;
    std::uint64_t max_ns = 0;
    std::uint64_t sum_ns = 0;  ///< of every sample (exact; for the Prometheus `_sum`)

    /// The smallest bucket upper edge below which a fraction `q` of the samples
    /// lie (nanoseconds; 0 when empty). Conservative: never below the true value.
    double percentile_ns(double q) const;
    double percentile_ms(double q) const { return percentile_ns(q) / 1e6; }
    /// The samples recorded between `earlier` and this snapshot.
    histogram_snapshot since(const histogram_snapshot& earlier) const;
};

class latency_histogram {
public:
    static constexpr int sub_bits = 4;
    static constexpr int sub_count = 1 << sub_bits;
    static constexpr int bucket_count = (64 - sub_bits) * sub_count + sub_count;

    void record(std::uint64_t ns) noexcept {
        buckets_[index_of(ns)].fetch_add(1, std::memory_order_relaxed);
        sum_ns_.fetch_add(ns, std::memory_order_relaxed);
        std::uint64_t seen = max_ns_.load(std::memory_order_relaxed);
        while (ns > seen && !max_ns_.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
        }
    }
    void record(std::chrono::nanoseconds d) noexcept { record(d.count() < 0 ? 0 : std::uint64_t(d.count())); }

    histogram_snapshot snapshot() const;

    static int index_of(std::uint64_t v) noexcept {
        if (v < sub_count) return int(v);
        const int msb = 63 - std::countl_zero(v);
        const int shift = msb - sub_bits;
        return (shift + 1) * sub_count + int((v >> shift) & (sub_count - 1));
    }
    /// The largest value that falls in bucket `i`.
    static std::uint64_t upper_edge(int i) noexcept {
        if (i < sub_count) return std::uint64_t(i);
        const int shift = i / sub_count - 1;
        const std::uint64_t lower = std::uint64_t(sub_count + i % sub_count) << shift;
        return lower + ((std::uint64_t{1} << shift) - 1);
    }

private:
    std::array<std::atomic<std::uint64_t>, bucket_count> buckets_{};
    std::atomic<std::uint64_t> max_ns_{0};
    std::atomic<std::uint64_t> sum_ns_{0};
};

}  // namespace embedding_search
