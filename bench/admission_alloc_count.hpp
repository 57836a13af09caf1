#pragma once
// Heap-allocation counting for tenferro-bench-admission. malloc and friends
// are interposed for the whole process (the library and Asio resolve to
// these): Asio's recycled handler and coroutine-frame memory bypasses
// operator new (it calls aligned_alloc), so counting operator new alone would
// miss exactly what we want to see. The counters move only while `g_counting`
// is set, i.e. in a measured window. The replacements are
// tests/support/malloc_interpose.hpp's, included by bench/admission.cpp alone
// (they are definitions), which defines the hook that calls note_alloc and
// `malloc_interposed`; they are off under sanitizers, whose runtimes own
// malloc themselves, and then nothing is counted.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace admission_bench {

/// TENFERRO_MALLOC_INTERPOSED of bench/admission.cpp: whether the counters count at all.
extern const bool malloc_interposed;

inline constinit std::atomic<bool> g_counting{false};
inline constinit std::atomic<std::uint64_t> g_allocs{0};
inline constinit std::atomic<std::uint64_t> g_alloc_bytes{0};
inline constexpr std::size_t hist_buckets = 128;  // 32-byte buckets; the last one is "4064 and more"
inline constinit std::atomic<std::uint64_t> g_hist[hist_buckets] = {};

[[maybe_unused]] inline void note_alloc(std::size_t n) noexcept {
    if (g_counting.load(std::memory_order_relaxed)) [[unlikely]] {
        g_allocs.fetch_add(1, std::memory_order_relaxed);
        g_alloc_bytes.fetch_add(n, std::memory_order_relaxed);
        g_hist[std::min(n / 32, hist_buckets - 1)].fetch_add(1, std::memory_order_relaxed);
    }
}

/// With TENFERRO_BENCH_ALLOC_HIST set, the sizes counted since the last reset, to stderr.
inline void print_alloc_histogram(const char* what) {
    if (!malloc_interposed || std::getenv("TENFERRO_BENCH_ALLOC_HIST") == nullptr) return;
    std::fprintf(stderr, "allocation sizes (%s):", what);
    for (std::size_t i = 0; i < hist_buckets; ++i)
        if (const auto n = g_hist[i].load())
            std::fprintf(stderr, " [%zu,%zu):%llu", i * 32, i * 32 + 32, static_cast<unsigned long long>(n));
    std::fprintf(stderr, "\n");
}
inline void reset_alloc_histogram() {
    for (auto& h : g_hist) h.store(0);
}

}  // namespace admission_bench
