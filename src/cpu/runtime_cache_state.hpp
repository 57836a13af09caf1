#pragma once
// The inside of cpu_runtime_cache: one LRU list of opaque entries under a
// byte cap, keyed by byte strings that the contraction code builds from the
// layouts it plans for (src/cpu/ops/contraction.cpp), plus the tensors marked
// constant. Entries are handed out as shared_ptr, so a session may keep using
// an entry that a concurrent session evicts.

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tenferro/backend_session_host.hpp"
#include "tenferro/cpu_runtime_cache.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro::detail {

class runtime_cache_state {
public:
    explicit runtime_cache_state(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}

    std::size_t capacity() const noexcept { return capacity_; }

    /// The entry under `key`, made most recently used; null on a miss.
    /// Counts a hit or a miss.
    std::shared_ptr<const void> find(std::string_view key);

    /// Retains `value` (of `bytes`) under `key`, replacing an entry with the same
    /// key, then evicts least recently used entries until the retained bytes fit
    /// the cap. A value larger than the cap is not retained. `source` is the
    /// data pointer of the constant tensor a packed entry was made from (null
    /// for plans), so `unmark` can drop it.
    void insert(std::string key, std::shared_ptr<const void> value, std::size_t bytes, const void* source = nullptr);

    /// The data pointer of the marked tensor whose elements contain the byte
    /// range [lo, hi), or null.
    const void* constant_containing(const void* lo, const void* hi) const;

    void mark(const tensor& t);
    void unmark(const tensor& t);
    void clear();
    cache_stats stats() const;

    /// The exact search's counters (cpu_runtime_cache::search_stats), added to by each call.
    void add_search(const search_stats& s);
    search_stats searches() const;

private:
    struct entry {
        std::string key;
        std::shared_ptr<const void> value;
        std::size_t bytes;
        const void* source;
    };
    using lru_list = std::list<entry>;

    void erase_locked(lru_list::iterator it, bool eviction);
    void evict_to_fit_locked();

    const std::size_t capacity_;
    mutable std::mutex mutex_;
    lru_list lru_;  // front = most recently used
    std::unordered_map<std::string_view, lru_list::iterator> index_;  // views into entry::key
    std::vector<tensor> constants_;
    std::size_t retained_ = 0;
    std::uint64_t hits_ = 0, misses_ = 0, evictions_ = 0, clears_ = 0;
    search_stats searches_{};
};

/// The library's (and the tests') way into the private side of
/// `cpu_runtime_cache`, which users do not see.
struct cache_access {
    static runtime_cache_state& state(const cpu_runtime_cache& cache) noexcept { return cache.state(); }
    static bool try_claim(cpu_runtime_cache& cache) noexcept { return cache.try_claim(); }
    static void release_claim(cpu_runtime_cache& cache) noexcept { cache.release_claim(); }
};

}  // namespace tenferro::detail
