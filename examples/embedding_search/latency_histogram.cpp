#include "latency_histogram.hpp"

#include <algorithm>
#include <cmath>

namespace embedding_search {

histogram_snapshot latency_histogram::snapshot() const {
    histogram_snapshot s;
    s.counts.resize(bucket_count);
    for (int i = 0; i < bucket_count; ++i) {
        s.counts[i] = buckets_[i].load(std::memory_order_relaxed);
        s.total += s.counts[i];
    }
    s.max_ns = max_ns_.load(std::memory_order_relaxed);
    s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
    return s;
}

double histogram_snapshot::percentile_ns(double q) const {
    if (total == 0) return 0.0;
    const auto rank = std::max<std::uint64_t>(1, std::uint64_t(std::ceil(q * double(total))));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        seen += counts[i];
        if (seen >= rank) {
            // The bucket edge can exceed the largest sample; the maximum is exact.
            return double(std::min<std::uint64_t>(latency_histogram::upper_edge(int(i)), max_ns ? max_ns : ~0ull));
        }
    }
    return double(max_ns);
}

histogram_snapshot histogram_snapshot::since(const histogram_snapshot& earlier) const {
    histogram_snapshot d;
    d.counts.resize(counts.size());
    for (std::size_t i = 0; i < counts.size(); ++i) {
        d.counts[i] = counts[i] - (i < earlier.counts.size() ? earlier.counts[i] : 0);
        d.total += d.counts[i];
    }
    d.sum_ns = sum_ns - earlier.sum_ns;
    // The window's maximum is not recoverable from two snapshots; the largest
    // non-empty bucket's edge bounds it.
    for (std::size_t i = d.counts.size(); i-- > 0;) {
        if (d.counts[i] != 0) {
            d.max_ns = std::min<std::uint64_t>(latency_histogram::upper_edge(int(i)), max_ns);
            break;
        }
    }
    return d;
}

}  // namespace embedding_search
