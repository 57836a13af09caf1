// Segments, versions and the published cell (corpus_state.hpp), and corpus_snapshot.

#include "corpus/corpus_state.hpp"

#include <cstdlib>

namespace tenferro::detail::corpus {

segment::segment(std::int64_t d, std::int64_t row_capacity, std::int64_t label_cap, bool keep_raw)
    : dim(d),
      capacity(row_capacity),
      label_capacity(label_cap),
      values(make_aligned<float>(static_cast<std::size_t>(row_capacity * d))),
      raw(keep_raw ? make_aligned<float>(static_cast<std::size_t>(row_capacity * d)) : nullptr),
      ids(make_aligned<row_id>(static_cast<std::size_t>(row_capacity))),
      label_end(make_aligned<std::uint32_t>(static_cast<std::size_t>(row_capacity))),
      labels(make_aligned<row_label>(static_cast<std::size_t>(label_cap))),
      erased_at(new std::atomic<std::uint64_t>[static_cast<std::size_t>(row_capacity)]) {}

std::size_t segment::bytes() const noexcept {
    const auto rows = static_cast<std::size_t>(capacity);
    std::size_t b = rows * static_cast<std::size_t>(dim) * sizeof(float) + rows * (sizeof(row_id) + 4 + 8) +
                    static_cast<std::size_t>(label_capacity) * sizeof(row_label);
    if (raw) b += rows * static_cast<std::size_t>(dim) * sizeof(float);
    if (bf16) b += rows * static_cast<std::size_t>(dim) * 2 + rows * 8;
    return b;
}

namespace {

void retire(corpus_version* v, std::int64_t delta) noexcept {
    if (v->transferred.fetch_add(delta, std::memory_order_acq_rel) + delta == 0) delete v;
}

}  // namespace

void published_cell::replace(corpus_version* next) noexcept {
    const std::uintptr_t old = word.exchange(reinterpret_cast<std::uintptr_t>(next), std::memory_order_acq_rel);
    corpus_version* prev = pointer(old);
    if (prev == nullptr) return;
    // The snapshots counted in the word now count in `transferred`, and the publication's bias
    // goes: the version is freed when the last of them is released (or now, if none is held).
    const auto held = static_cast<std::int64_t>(old >> count_shift);
    retire(prev, held - published_bias);
}

corpus_version* published_cell::acquire(bool& slow) noexcept {
    const std::uintptr_t w = word.fetch_add(one, std::memory_order_acquire);
    corpus_version* v = pointer(w);
    slow = false;  // (v is never null: a corpus publishes its first version as it is made)
    if ((w >> count_shift) >= fast_limit) {
        // Near the count's limit: hold the version through `transferred` instead (this thread's
        // word count keeps it alive meanwhile), then give the word count back.
        v->transferred.fetch_add(1, std::memory_order_relaxed);
        slow = true;
        std::uintptr_t cur = word.load(std::memory_order_relaxed);
        while (pointer(cur) == v)
            if (word.compare_exchange_weak(cur, cur - one, std::memory_order_release, std::memory_order_relaxed))
                return v;
        retire(v, -1);  // replaced meanwhile: our word count was moved into transferred
    }
    return v;
}

void published_cell::release(corpus_version* v, bool slow) noexcept {
    if (v == nullptr) return;
    if (!slow) {
        published_cell& cell = *v->cell;
        std::uintptr_t cur = cell.word.load(std::memory_order_relaxed);
        while (pointer(cur) == v)
            if (cell.word.compare_exchange_weak(cur, cur - one, std::memory_order_release, std::memory_order_relaxed))
                return;
    }
    // Replaced (or held through transferred): the writer moved the word's count here.
    retire(v, -1);
}

}  // namespace tenferro::detail::corpus

namespace tenferro {

void corpus_snapshot::reset() noexcept {
    detail::corpus::published_cell::release(version_, slow_);
    version_ = nullptr;
}

std::uint64_t corpus_snapshot::seq() const noexcept { return version_ == nullptr ? 0 : version_->seq; }
std::int64_t corpus_snapshot::rows() const noexcept { return version_ == nullptr ? 0 : version_->live_rows; }
std::int64_t corpus_snapshot::dim() const noexcept { return version_ == nullptr ? 0 : version_->dim; }

}  // namespace tenferro
