// live_corpus: the writer (apply), snapshots, lookups and compaction (corpus_state.hpp).

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "corpus/corpus_state.hpp"
#include "kernels/search_bf16.hpp"

namespace tenferro {

using detail::corpus::corpus_version;
using detail::corpus::never;
using detail::corpus::published_cell;
using detail::corpus::segment;
using detail::corpus::segment_view;

struct live_corpus::state {
    explicit state(live_corpus_options o) : options(o), cell(std::make_shared<published_cell>()) {}

    struct location {
        segment* seg = nullptr;
        std::int64_t row = 0;
    };

    const live_corpus_options options;
    const std::shared_ptr<published_cell> cell;

    // Everything below is the writer's, under `writer`.
    mutable std::mutex writer;
    std::uint64_t seq = 0;
    std::int64_t live_rows = 0;
    std::vector<segment_view> segments;  // as published
    segment* tail = nullptr;             // the segment writes append to (the last one), or none
    std::unordered_map<row_id, location> index;
    std::uint64_t writes = 0, compactions = 0;
    bool compacting = false;

    /// A new version of the current state, allocated (and its list reserved) before a change.
    std::unique_ptr<corpus_version> prepare_version(std::size_t segment_count) const {
        auto v = std::make_unique<corpus_version>();
        v->cell = cell;
        v->dim = options.dim;
        v->segments.reserve(segment_count);
        return v;
    }
    /// Fills `v` from the current state and publishes it (no allocation: reserved).
    void publish(std::unique_ptr<corpus_version> v) noexcept {
        v->seq = seq;
        v->live_rows = live_rows;
        v->segments.assign(segments.begin(), segments.end());
        cell->replace(v.release());
    }
};

namespace {

/// The first item of `w` that the corpus must refuse (L7), or none.
write_result validate(const corpus_write& w, std::int64_t dim, bool normalize) {
    write_result r;
    auto refuse = [&](std::size_t i, corpus_errc e) {
        if (!r.error || i < r.item) {
            r.error = e;
            r.item = i;
        }
    };
    for (std::size_t i = 0; i < w.size() && !r.error; ++i) {
        const corpus_write::item it = w[i];
        if (it.erase) continue;
        if (static_cast<std::int64_t>(it.vector.size()) != dim)
            refuse(i, corpus_errc::wrong_dimension);
        else if (!std::all_of(it.vector.begin(), it.vector.end(), [](float x) { return std::isfinite(x); }))
            refuse(i, corpus_errc::not_finite);
        else if (it.labels.size() > max_row_labels)
            refuse(i, corpus_errc::too_many_labels);
        else if (normalize && std::all_of(it.vector.begin(), it.vector.end(), [](float x) { return x == 0.0f; }))
            refuse(i, corpus_errc::zero_vector);
    }
    // A repeated id: the offending item is its second occurrence. Items before a refused one
    // are all that matter, so the search covers the whole write only when nothing was refused.
    std::vector<std::pair<row_id, std::size_t>> ids(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) ids[i] = {w[i].id, i};
    std::sort(ids.begin(), ids.end());
    for (std::size_t i = 1; i < ids.size(); ++i)
        if (ids[i].first == ids[i - 1].first) refuse(ids[i].second, corpus_errc::duplicate_id);
    return r;
}

// Appends a row: `v` is what is searched, `raw` (for a corpus that normalises) the row as written.
void append_row(segment& seg, row_id id, std::span<const float> v, std::span<const float> raw,
                std::span<const row_label> labels) noexcept {
    const std::int64_t r = seg.used++;
    std::copy(v.begin(), v.end(), seg.values.get() + r * seg.dim);
    if (seg.raw) std::copy(raw.begin(), raw.end(), seg.raw.get() + r * seg.dim);
    seg.ids[r] = id;
    std::copy(labels.begin(), labels.end(), seg.labels.get() + seg.labels_used);
    seg.labels_used += static_cast<std::int64_t>(labels.size());
    seg.label_end[r] = static_cast<std::uint32_t>(seg.labels_used);
    seg.erased_at[r].store(never, std::memory_order_relaxed);
}

// Appends a written row, scaled to unit length where the corpus normalises (the same
// arithmetic as the search server's queries: double norm, double product, rounded to f32).
void append_written(segment& seg, row_id id, std::span<const float> v, std::span<const row_label> labels) noexcept {
    if (!seg.raw) {
        append_row(seg, id, v, {}, labels);
        return;
    }
    double norm_squared = 0.0;
    for (const float x : v) norm_squared += double(x) * double(x);
    const double inverse = 1.0 / std::sqrt(norm_squared);
    float* out = seg.values.get() + seg.used * seg.dim;
    for (std::size_t p = 0; p < v.size(); ++p) out[p] = static_cast<float>(double(v[p]) * inverse);
    append_row(seg, id, std::span<const float>(out, v.size()), v, labels);
}

}  // namespace

live_corpus::live_corpus(live_corpus_options options) {
    if (options.dim <= 0) throw std::invalid_argument("tenferro::live_corpus: dim must be positive");
    if (options.segment_rows <= 0) throw std::invalid_argument("tenferro::live_corpus: segment_rows must be positive");
    state_ = std::make_unique<state>(options);
    state_->publish(state_->prepare_version(0));
}

live_corpus::~live_corpus() {
    // Snapshots still held keep their version (and through it the cell and the segments).
    state_->cell->replace(nullptr);
}

std::int64_t live_corpus::dim() const noexcept { return state_->options.dim; }

write_result live_corpus::apply(const corpus_write& w) {
    state& st = *state_;
    write_result r = validate(w, st.options.dim, st.options.normalize);
    if (r.error) return r;

    const std::lock_guard lock(st.writer);
    // Everything that can fail is allocated before anything changes (S19): the index nodes of
    // new ids, the index's buckets, the segment the rows that do not fit the tail go to, and
    // the next version.
    std::unordered_map<row_id, state::location> fresh;
    std::int64_t rows_free = st.tail ? st.tail->capacity - st.tail->used : 0;
    std::int64_t labels_free = st.tail ? st.tail->label_capacity - st.tail->labels_used : 0;
    std::size_t fit = 0;  // upserts (in order) that go to the current tail
    bool spilled = false;
    std::int64_t rest_rows = 0, rest_labels = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
        const corpus_write::item it = w[i];
        if (it.erase) continue;
        if (!st.index.contains(it.id)) fresh.emplace(it.id, state::location{});
        const auto nl = static_cast<std::int64_t>(it.labels.size());
        if (!spilled && rows_free > 0 && labels_free >= nl) {
            --rows_free;
            labels_free -= nl;
            ++fit;
        } else {
            spilled = true;
            ++rest_rows;
            rest_labels += nl;
        }
    }
    st.index.reserve(st.index.size() + fresh.size());
    std::shared_ptr<segment> next_tail;
    if (rest_rows > 0) {
        const std::int64_t rows = std::max(st.options.segment_rows, rest_rows);
        next_tail =
            std::make_shared<segment>(st.options.dim, rows, std::max(rest_labels, 4 * rows), st.options.normalize);
    }
    st.segments.reserve(st.segments.size() + 1);
    auto version = st.prepare_version(st.segments.size() + 1);

    // From here on nothing throws.
    const std::uint64_t seq = ++st.seq;
    std::size_t upserts = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
        const corpus_write::item it = w[i];
        auto at = st.index.find(it.id);
        if (at != st.index.end()) at->second.seg->stamp(at->second.row, seq);
        if (it.erase) {
            if (at != st.index.end()) {
                st.index.erase(at);
                --st.live_rows;
                ++r.erased;
            }
            continue;
        }
        segment* dst = upserts++ < fit ? st.tail : next_tail.get();
        append_written(*dst, it.id, it.vector, it.labels);
        const state::location loc{dst, dst->used - 1};
        if (at != st.index.end()) {
            at->second = loc;
        } else {
            auto node = fresh.extract(it.id);
            node.mapped() = loc;
            st.index.insert(std::move(node));
            ++st.live_rows;
        }
        ++r.upserted;
    }
    if (st.tail != nullptr) st.segments.back().rows = st.tail->used;
    if (next_tail) {
        st.tail = next_tail.get();
        st.segments.push_back(segment_view{std::move(next_tail), st.tail->used});
    }
    ++st.writes;
    r.seq = seq;
    st.publish(std::move(version));
    return r;
}

corpus_snapshot live_corpus::snapshot() const noexcept {
    corpus_snapshot s;
    s.version_ = state_->cell->acquire(s.slow_);
    return s;
}

std::optional<stored_row> live_corpus::get(row_id id) const {
    const std::lock_guard lock(state_->writer);
    const auto at = state_->index.find(id);
    if (at == state_->index.end()) return std::nullopt;
    const segment& seg = *at->second.seg;
    const auto v = seg.raw_row(at->second.row);
    const auto l = seg.row_labels(at->second.row);
    return stored_row{id, std::vector<float>(v.begin(), v.end()), std::vector<row_label>(l.begin(), l.end())};
}

bool live_corpus::needs_compaction() const noexcept {
    const std::lock_guard lock(state_->writer);
    const state& st = *state_;
    if (st.segments.size() > 1) return true;
    if (st.segments.empty()) return false;
    const segment_view& only = st.segments.front();
    return !only.seg->sorted || only.rows > st.live_rows;
}

bool live_corpus::compact(backend_session& s) {
    return compact_with([&s] { s.throw_if_stop_requested(); });
}

bool live_corpus::compact() {
    return compact_with([] {});
}

bool live_corpus::compact_with(detail::function_ref<void()> check_stop) {
    state& st = *state_;
    corpus_snapshot snap;
    {
        const std::lock_guard lock(st.writer);
        if (st.compacting || st.segments.empty()) return false;
        const segment_view& first = st.segments.front();
        if (st.segments.size() == 1 && first.seg->sorted && first.rows == st.live_rows) return false;
        st.compacting = true;
        st.tail = nullptr;  // sealed: later writes start a segment of their own
        snap.version_ = st.cell->acquire(snap.slow_);
    }
    struct done_flag {
        state& st;
        ~done_flag() {
            const std::lock_guard lock(st.writer);
            st.compacting = false;
        }
    } done{st};

    // The rows visible at the snapshot, by id (each id has at most one).
    const corpus_version& v = *detail::corpus::snapshot_access::version(snap);
    struct source {
        row_id id;
        segment* seg;
        std::int64_t row;
    };
    std::vector<source> rows;
    rows.reserve(static_cast<std::size_t>(v.live_rows));
    std::int64_t label_count = 0;
    for (const segment_view& sv : v.segments)
        for (std::int64_t r = 0; r < sv.rows; ++r)
            if (sv.seg->visible(r, v.seq)) {
                rows.push_back(source{sv.seg->ids[r], sv.seg.get(), r});
                label_count += static_cast<std::int64_t>(sv.seg->row_labels(r).size());
            }
    std::sort(rows.begin(), rows.end(), [](const source& a, const source& b) { return a.id < b.id; });
    check_stop();

    const auto n = static_cast<std::int64_t>(rows.size());
    auto merged = std::make_shared<segment>(v.dim, n, label_count, st.options.normalize);
    for (std::int64_t i = 0; i < n; ++i) {
        if ((i & 4095) == 0) check_stop();  // S20: nothing is installed yet
        const source& src = rows[static_cast<std::size_t>(i)];
        append_row(*merged, src.id, src.seg->row(src.row), src.seg->raw_row(src.row), src.seg->row_labels(src.row));
    }
    merged->sorted = true;
    if (n > 0) {
        merged->bf16 = detail::corpus::make_aligned<std::byte>(kernels::bf16_corpus_bytes(v.dim, n));
        kernels::make_bf16_corpus(merged->values.get(), 1, v.dim, v.dim, n, merged->bf16.get());
    }
    check_stop();

    const std::lock_guard lock(st.writer);
    auto version = st.prepare_version(st.segments.size() - v.segments.size() + 1);
    std::vector<segment_view> list;
    list.reserve(st.segments.size() - v.segments.size() + 1);
    // From here on nothing throws. Erasures stamped since the snapshot, and the index's
    // locations of the rows not replaced since, move to the merged copies.
    for (std::int64_t i = 0; i < n; ++i) {
        const source& src = rows[static_cast<std::size_t>(i)];
        const std::uint64_t e = src.seg->erased_at[src.row].load(std::memory_order_relaxed);
        if (e != never) merged->stamp(i, e);
        const auto at = st.index.find(src.id);
        if (at != st.index.end() && at->second.seg == src.seg && at->second.row == src.row)
            at->second = state::location{merged.get(), i};
    }
    list.push_back(segment_view{std::move(merged), n});
    // The segments appended since the snapshot follow (the snapshot's are a prefix: writes only
    // append segments, and only one compaction runs at a time).
    for (std::size_t i = v.segments.size(); i < st.segments.size(); ++i) list.push_back(st.segments[i]);
    st.segments.swap(list);
    ++st.compactions;
    st.publish(std::move(version));
    return true;
}

corpus_stats live_corpus::stats() const {
    const state& st = *state_;
    corpus_stats out;
    {
        const std::lock_guard lock(st.writer);
        out.seq = st.seq;
        out.rows = st.live_rows;
        out.segments = static_cast<std::int64_t>(st.segments.size());
        std::int64_t largest = 0;
        for (const segment_view& sv : st.segments) {
            out.stored_rows += sv.rows;
            out.bytes += sv.seg->bytes();
            if (sv.seg->sorted) largest = std::max(largest, sv.rows);
        }
        out.uncompacted_rows = out.stored_rows - largest;
        out.writes = st.writes;
        out.compactions = st.compactions;
    }
    const auto& c = st.cell->counters;
    out.queries = c.queries.load(std::memory_order_relaxed);
    out.filtered_queries = c.filtered.load(std::memory_order_relaxed);
    out.first_pass = c.first_pass.load(std::memory_order_relaxed);
    out.fallback = c.fallback.load(std::memory_order_relaxed);
    out.rows_scored = c.rows_scored.load(std::memory_order_relaxed);
    return out;
}

}  // namespace tenferro
