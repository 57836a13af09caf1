#pragma once
/// \file
/// `cpu_runtime_cache`: what contractions remember between calls — their plans
/// and packed copies of operands the caller marks constant.
///
/// A contraction (`dot_general`, `matmul`) first works out a *plan* from its
/// operands' shapes, strides, dtype and axis configuration: the output shape,
/// which axes merge into the GEMM's rows / columns / depth, which operand (if
/// any) must be permuted into a scratch buffer, the kernel's blocking and the
/// scratch sizes. The plan depends on no element value, so it is reused by
/// every later call with the same layout. When an operand lies inside a tensor
/// marked constant (`mark_constant`, e.g. a weight matrix or a search corpus
/// that every request multiplies), the kernel's packed form of that operand is
/// kept too, and later calls skip the packing.
///
/// Both kinds of entry share one LRU list and one byte cap
/// (`capacity_bytes()`): inserting past the cap evicts the least recently used
/// entries; an entry larger than the whole cap is used once and not kept.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tenferro/backend_session_host.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro {

namespace detail {
class entry_base;
class runtime_cache_state;
struct cache_access;
}  // namespace detail

/// What `matmul_top_k` did with the corpora of a cache (`cpu_runtime_cache::search_stats`).
///
/// Over a constant corpus the search may run a bf16 first pass that only discards rows provably
/// outside the top k, then scores the rest again in f32 (docs/design/exact-search-first-pass.md):
/// the result is bit for bit the f32 one either way. Counted since construction:
struct search_stats {
    /// Queries of f32 searches over a constant corpus (`matmul_top_k` rows whose `b` lies inside a
    /// marked tensor and has no batch axes).
    std::uint64_t queries = 0;
    /// Of them, answered through the first pass.
    std::uint64_t first_pass = 0;
    /// Of them, answered by the f32 path: the CPU's target has no bf16 dot product, the query
    /// holds NaN, an infinity or a huge norm, its bound kept too many rows, or the low-precision
    /// copy did not fit the cache (below).
    std::uint64_t fallback = 0;
    /// Corpus rows scored again in f32, over the first-pass queries (`reranked / first_pass`
    /// is the mean per query; k of them are the answer).
    std::uint64_t reranked = 0;
    /// Calls whose corpus's bf16 copy (half the packed f32 copy's bytes) was not made because the
    /// packed f32 copy and it together exceed the cache's capacity.
    std::uint64_t copy_too_large = 0;
};

/// A runtime cache for the CPU backend. Models `runtime_cache_control`.
///
/// Two ways to use one: every `cpu_backend` owns a cache that its plain
/// `with_backend_session` entries share (`cpu_backend::default_cache()`), and
/// a caller may own one and pass it to `with_backend_session_cached`, which
/// gives that session the cache alone: an entry naming a cache that a running
/// session holds completes with `contended` before its body runs.
///
/// Thread-safety: every member may be called from any thread at any time
/// (an internal mutex guards the entries).
class cpu_runtime_cache {
public:
    /// The byte cap of a default-constructed cache: 64 MiB.
    static constexpr std::size_t default_capacity_bytes = std::size_t{64} << 20;

    /// An empty cache with `default_capacity_bytes`.
    cpu_runtime_cache();
    /// An empty cache that retains at most `capacity_bytes` (0: retains nothing,
    /// every lookup misses).
    explicit cpu_runtime_cache(std::size_t capacity_bytes);
    ~cpu_runtime_cache();
    cpu_runtime_cache(const cpu_runtime_cache&) = delete;
    cpu_runtime_cache& operator=(const cpu_runtime_cache&) = delete;

    /// Drops every retained plan and packed operand (counted in
    /// `stats().clears`). Marks made with `mark_constant` stay.
    void clear();
    /// Current counters: `entries` and `retained_bytes` now; `hits`, `misses`
    /// (one per lookup of a plan or of a packed operand), `evictions` (entries
    /// dropped for the byte cap or by `unmark_constant`) and `clears` since
    /// construction.
    cache_stats stats() const;
    /// The exact search's counters (`search_stats`); not reset by `clear()`.
    tenferro::search_stats search_stats() const;
    /// The byte cap.
    std::size_t capacity_bytes() const noexcept;

    /// Promises that `t`'s elements do not change until `unmark_constant(t)`
    /// (or the cache's destruction): contractions whose operand lies inside
    /// `t`'s storage may keep and reuse a packed copy of it. The cache holds a
    /// reference to `t`'s storage meanwhile, so the memory cannot be freed and
    /// reused under a stale copy. Marking twice is harmless.
    void mark_constant(const tensor& t);
    /// Withdraws the promise and drops the packed copies made from `t`.
    void unmark_constant(const tensor& t);

    /// True while a `with_backend_session_cached` session holds the cache.
    bool in_use() const noexcept { return in_use_.load(std::memory_order_acquire); }

private:
    // The library's session entries claim the cache; its contractions (and the
    // tests) reach the entries through detail::cache_access (src/).
    friend class detail::entry_base;
    friend struct detail::cache_access;

    /// Claims the cache for one session; false if a session holds it.
    bool try_claim() noexcept { return !in_use_.exchange(true, std::memory_order_acquire); }
    /// Gives the cache back.
    void release_claim() noexcept { in_use_.store(false, std::memory_order_release); }
    /// The entries themselves (defined in src/).
    detail::runtime_cache_state& state() const noexcept { return *state_; }

    std::unique_ptr<detail::runtime_cache_state> state_;
    std::atomic<bool> in_use_{false};
};

}  // namespace tenferro
