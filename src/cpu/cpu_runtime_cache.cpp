#include "tenferro/cpu_runtime_cache.hpp"

#include <algorithm>
#include <utility>

#include "cpu/runtime_cache_state.hpp"

namespace tenferro {

cpu_runtime_cache::cpu_runtime_cache() : cpu_runtime_cache(default_capacity_bytes) {}
cpu_runtime_cache::cpu_runtime_cache(std::size_t capacity_bytes)
    : state_(std::make_unique<detail::runtime_cache_state>(capacity_bytes)) {}
cpu_runtime_cache::~cpu_runtime_cache() = default;

void cpu_runtime_cache::clear() { state_->clear(); }
cache_stats cpu_runtime_cache::stats() const { return state_->stats(); }
search_stats cpu_runtime_cache::search_stats() const { return state_->searches(); }
std::size_t cpu_runtime_cache::capacity_bytes() const noexcept { return state_->capacity(); }
void cpu_runtime_cache::mark_constant(const tensor& t) { state_->mark(t); }
void cpu_runtime_cache::unmark_constant(const tensor& t) { state_->unmark(t); }

namespace detail {

std::shared_ptr<const void> runtime_cache_state::find(std::string_view key) {
    std::lock_guard lock(mutex_);
    const auto it = index_.find(key);
    if (it == index_.end()) {
        ++misses_;
        return nullptr;
    }
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->value;
}

void runtime_cache_state::insert(std::string key, std::shared_ptr<const void> value, std::size_t bytes,
                                 const void* source) {
    bytes += key.size() + sizeof(entry);  // the bookkeeping counts too
    std::lock_guard lock(mutex_);
    if (const auto it = index_.find(key); it != index_.end()) erase_locked(it->second, false);
    if (bytes > capacity_) return;
    lru_.push_front(entry{std::move(key), std::move(value), bytes, source});
    index_.emplace(lru_.front().key, lru_.begin());
    retained_ += bytes;
    evict_to_fit_locked();
}

void runtime_cache_state::erase_locked(lru_list::iterator it, bool eviction) {
    retained_ -= it->bytes;
    index_.erase(it->key);
    lru_.erase(it);
    if (eviction) ++evictions_;
}

void runtime_cache_state::evict_to_fit_locked() {
    while (retained_ > capacity_ && !lru_.empty()) erase_locked(std::prev(lru_.end()), true);
}

const void* runtime_cache_state::constant_containing(const void* lo, const void* hi) const {
    std::lock_guard lock(mutex_);
    const auto* l = static_cast<const std::byte*>(lo);
    const auto* h = static_cast<const std::byte*>(hi);
    for (const tensor& t : constants_) {
        const auto* b = static_cast<const std::byte*>(t.view().data());
        if (l >= b && h <= b + t.nbytes()) return b;
    }
    return nullptr;
}

void runtime_cache_state::mark(const tensor& t) {
    if (t.size() == 0) return;
    std::lock_guard lock(mutex_);
    for (const tensor& c : constants_)
        if (c.view().data() == t.view().data() && c.nbytes() == t.nbytes()) return;
    constants_.push_back(t);
}

void runtime_cache_state::unmark(const tensor& t) {
    const void* p = t.view().data();
    std::lock_guard lock(mutex_);
    std::erase_if(constants_, [&](const tensor& c) { return c.view().data() == p; });
    for (auto it = lru_.begin(); it != lru_.end();) {
        const auto next = std::next(it);
        if (it->source == p) erase_locked(it, true);
        it = next;
    }
}

void runtime_cache_state::clear() {
    std::lock_guard lock(mutex_);
    index_.clear();
    lru_.clear();
    retained_ = 0;
    ++clears_;
}

cache_stats runtime_cache_state::stats() const {
    std::lock_guard lock(mutex_);
    return cache_stats{lru_.size(), retained_, hits_, misses_, evictions_, clears_};
}

void runtime_cache_state::add_search(const search_stats& s) {
    std::lock_guard lock(mutex_);
    searches_.queries += s.queries;
    searches_.first_pass += s.first_pass;
    searches_.fallback += s.fallback;
    searches_.reranked += s.reranked;
    searches_.copy_too_large += s.copy_too_large;
}

search_stats runtime_cache_state::searches() const {
    std::lock_guard lock(mutex_);
    return searches_;
}

}  // namespace detail
}  // namespace tenferro
