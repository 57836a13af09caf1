#pragma once
// The live corpus's storage (include/tenferro/live_corpus.hpp; design in
// docs/design/live-corpus.md):
//
//   published_cell ──word──> corpus_version (seq, [segment_view...]) ──shared_ptr──> segment
//        ^                         │                                                  ^
//        └────────── cell ─────────┘                          older versions share ───┘
//
// - A `segment` is a block of rows: f32 values, ids, label lists, and per row the sequence
//   number of the write that erased or replaced it (`erased_at`, "never" until then). Rows are
//   only ever appended (by the writer, past every published count) and stamped; nothing a
//   published version covers is moved or freed while a version refers to the segment.
// - A `corpus_version` is the list of segments with the row count of each that it covers, and
//   the sequence number of the last write in it. Every write publishes a new one; a snapshot
//   holds one. A row of it is visible at sequence s iff erased_at > s: rows inserted after s
//   lie past the version's counts.
// - The `published_cell` holds the current version in one word, with the number of snapshots
//   taken of it in the top 16 bits (differential reference counting): taking a snapshot is
//   one fetch_add, releasing it one CAS while the version is still current. When the writer
//   replaces the version it moves the count it read into the old version's `transferred`,
//   which the snapshots released afterwards count down; the version is freed at zero.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "tenferro/live_corpus.hpp"

namespace tenferro::detail::corpus {

inline constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();

/// Memory aligned for the kernels (64 bytes), freed with its size-agnostic deleter.
struct aligned_free {
    void operator()(void* p) const noexcept { ::operator delete(p, std::align_val_t{64}); }
};
template <class T>
using aligned_array = std::unique_ptr<T[], aligned_free>;
template <class T>
aligned_array<T> make_aligned(std::size_t count) {
    void* p = ::operator new(count * sizeof(T) + (count == 0 ? 64 : 0), std::align_val_t{64});
    return aligned_array<T>(static_cast<T*>(p));
}

/// The counters a corpus keeps (cumulative); in the cell, so that searches over a snapshot of a
/// corpus destroyed meanwhile still have somewhere to count.
struct corpus_counters {
    std::atomic<std::uint64_t> queries{0}, filtered{0}, first_pass{0}, fallback{0}, rows_scored{0};
};

struct segment {
    segment(std::int64_t dim, std::int64_t row_capacity, std::int64_t label_capacity, bool keep_raw);

    const std::int64_t dim;
    const std::int64_t capacity;
    const std::int64_t label_capacity;
    aligned_array<float> values;  // capacity x dim, row-major: the rows searched
    aligned_array<float> raw;  // the rows as written, where `values` holds them normalised; else null
    aligned_array<row_id> ids;
    // label_end[r]: one past row r's last label in `labels` (its first is label_end[r - 1], or 0).
    aligned_array<std::uint32_t> label_end;
    aligned_array<row_label> labels;
    std::unique_ptr<std::atomic<std::uint64_t>[]> erased_at;
    // The smallest erased_at stamped so far: a snapshot at s < first_erased sees every row.
    std::atomic<std::uint64_t> first_erased{never};
    // Rows sorted by id (compaction's output): the fused kernel's tie to the lower index is then
    // the tie to the lower id, and an id allow-list is found by binary search.
    bool sorted = false;
    // The first pass's bf16 copy (kernels/search_bf16.hpp), made by compaction; null otherwise.
    aligned_array<std::byte> bf16;
    // Made by compaction: for each label present (sorted), the rows that carry it, so that a
    // label filter costs the rows that pass, not a scan of every row's labels.
    struct label_postings {
        std::vector<row_label> labels;  // sorted, distinct
        std::vector<std::uint32_t> offsets;  // labels.size() + 1
        std::vector<std::uint32_t> rows;  // each label's rows, ascending
    };
    std::unique_ptr<label_postings> postings;

    // Writer side (under the corpus's mutex): rows and labels used.
    std::int64_t used = 0;
    std::int64_t labels_used = 0;

    std::span<const float> row(std::int64_t r) const noexcept {
        return {values.get() + r * dim, static_cast<std::size_t>(dim)};
    }
    std::span<const float> raw_row(std::int64_t r) const noexcept {
        return {(raw ? raw.get() : values.get()) + r * dim, static_cast<std::size_t>(dim)};
    }
    std::span<const row_label> row_labels(std::int64_t r) const noexcept {
        const std::uint32_t b = r == 0 ? 0 : label_end[r - 1];
        return {labels.get() + b, label_end[r] - b};
    }
    bool visible(std::int64_t r, std::uint64_t seq) const noexcept {
        return erased_at[r].load(std::memory_order_relaxed) > seq;
    }
    /// Stamps row r erased at `seq` (writer).
    void stamp(std::int64_t r, std::uint64_t seq) noexcept {
        erased_at[r].store(seq, std::memory_order_relaxed);
        if (seq < first_erased.load(std::memory_order_relaxed)) first_erased.store(seq, std::memory_order_relaxed);
    }
    std::size_t bytes() const noexcept;
};

struct segment_view {
    std::shared_ptr<segment> seg;
    std::int64_t rows = 0;  // the rows [0, rows) this version covers
};

struct published_cell;
inline constexpr std::int64_t published_cell_bias = std::int64_t{1} << 40;

struct corpus_version {
    // Snapshots released after the version stopped being current, less those the writer moved
    // here as it replaced it; freed when that sum reaches zero (see published_cell).
    std::atomic<std::int64_t> transferred{published_cell_bias};
    std::shared_ptr<published_cell> cell;
    std::uint64_t seq = 0;
    std::int64_t live_rows = 0;
    std::int64_t dim = 0;
    std::vector<segment_view> segments;
};

struct published_cell {
    static constexpr int count_shift = 48;
    static constexpr std::uintptr_t one = std::uintptr_t{1} << count_shift;
    static constexpr std::uintptr_t pointer_mask = one - 1;
    // Past this many snapshots of one version in the word, a new one moves its count into the
    // version's `transferred` at once (acquire): the 16-bit count never overflows as long as
    // fewer than 256 threads take a snapshot at the same instant.
    static constexpr std::uintptr_t fast_limit = (std::uintptr_t{1} << 16) - 256;
    // What `transferred` holds while the version is current, so that it reaches zero only after
    // `replace` has moved the word's count into it.
    static constexpr std::int64_t published_bias = published_cell_bias;

    std::atomic<std::uintptr_t> word{0};
    corpus_counters counters;

    static corpus_version* pointer(std::uintptr_t w) noexcept {
        return reinterpret_cast<corpus_version*>(w & pointer_mask);
    }

    /// Publishes `next` (owned by the cell from now on) and retires the current version.
    void replace(corpus_version* next) noexcept;
    /// Takes a counted reference to the current version; `slow` says how (see corpus_state.cpp).
    corpus_version* acquire(bool& slow) noexcept;
    /// Releases one.
    static void release(corpus_version* v, bool slow) noexcept;
};

/// Test seam: the fused path runs the bf16 first pass through its bit-exact emulation where the
/// target has no native instruction (tests/corpus/: exactness of the pass on every target).
extern std::atomic<bool> emulate_first_pass;

struct snapshot_access {
    static corpus_version* version(const corpus_snapshot& s) noexcept { return s.version_; }
};

}  // namespace tenferro::detail::corpus
