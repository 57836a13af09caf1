// live_corpus: the writer (apply), snapshots, lookups and compaction (corpus_state.hpp).

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "corpus/corpus_files.hpp"
#include "corpus/corpus_state.hpp"
#include "corpus/write_log.hpp"
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
    std::unordered_map<row_id, location> fresh;  // apply's side map of new ids (see apply_locked)
    std::uint64_t writes = 0, compactions = 0;
    bool compacting = false;

    // A durable corpus's log (null in memory).
    std::unique_ptr<live_corpus::log_state> log;

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

// A durable corpus's log (docs/design/live-corpus.md, "Durability"). Lock order: `append`, then
// the corpus's writer mutex; the log's callbacks take only the writer mutex and `idle_mutex`.
struct live_corpus::log_state {
    std::string dir;
    std::mutex append;  // sequence numbers, appends and log switches
    std::unique_ptr<detail::corpus::write_log> log;
    std::uint64_t log_first = 0;  // the first seq the current log's file may hold
    bool fresh = true;            // the current log has taken no record yet

    std::mutex idle_mutex;
    std::condition_variable idle;
    std::size_t outstanding = 0;  // appended, not yet completed

    // A durable write that could not be applied in memory (std::bad_alloc in its callback): the
    // corpus refuses writes from then on (recovery applies it).
    std::atomic<bool> poisoned{false};
    std::mutex checkpointing;

    // The current group's durable writes, in sequence order (touched only by the log's
    // callbacks, which run one at a time).
    logged_write* group_head = nullptr;
    logged_write* group_tail = nullptr;
};

// A write on its way through the log.
struct live_corpus::logged_write {
    live_corpus* corpus;
    corpus_write w;
    std::unique_ptr<write_completion> done;
    std::uint64_t seq;
    logged_write* next;
    write_result result{};
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
    // A repeated id: the offending item is its second occurrence. A short write is checked pair
    // by pair (no allocation: most writes of a busy server are a row or a few).
    if (w.size() <= 16) {
        for (std::size_t i = 1; i < w.size(); ++i)
            for (std::size_t j = 0; j < i; ++j)
                if (w[i].id == w[j].id) {
                    refuse(i, corpus_errc::duplicate_id);
                    break;
                }
        return r;
    }
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
    if (options.directory.empty()) return;
    try {
        recover();
    } catch (...) {
        // No destructor runs for a constructor that throws: retire the published version here
        // (it and the cell hold each other until then).
        if (state_->log) state_->log->log.reset();
        state_->cell->replace(nullptr);
        throw;
    }
}

live_corpus::~live_corpus() {
    // The log first: its destructor waits for the writes in flight, whose callbacks apply them.
    if (state_->log) state_->log->log.reset();
    // Snapshots still held keep their version (and through it the cell and the segments).
    state_->cell->replace(nullptr);
}

void live_corpus::recover() {
    namespace dc = detail::corpus;
    state& st = *state_;
    const std::string& dir = st.options.directory;
    auto fail = [&](std::error_code ec, const std::string& what) {
        throw std::system_error(ec, "tenferro::live_corpus: " + what + " (" + dir + ")");
    };
    bool created = false;
    if (std::error_code ec = dc::open_identity(dir, {st.options.dim, st.options.normalize}, created))
        fail(ec, "cannot open the corpus directory");

    // The last checkpoint: its rows become one segment at once, straight from the files' tensors
    // (no write to build, nothing copied in between); sorted by id as checkpoints write them.
    dc::checkpoint_info info;
    if (std::error_code ec = dc::read_checkpoint_info(dir, info)) fail(ec, "cannot read CHECKPOINT");
    {
        dc::checkpoint_tensors ck;
        if (std::error_code ec = dc::read_checkpoint(dir, info, st.options.dim, ck))
            fail(ec, "cannot read checkpoint " + std::to_string(info.seq));
        const std::int64_t n = info.rows, dim = st.options.dim;
        const std::lock_guard lock(st.writer);
        if (n > 0) {
            const float* values = ck.values.data<float>();
            const std::int64_t* ids = ck.ids.data<std::int64_t>();
            const std::int64_t* ends = ck.label_ends.data<std::int64_t>();
            const std::int64_t* labels = ck.labels.data<std::int64_t>();
            auto seg = std::make_shared<segment>(dim, n, std::max<std::int64_t>(ck.labels.shape()[0], 1),
                                                 st.options.normalize);
            st.index.reserve(static_cast<std::size_t>(n));
            st.segments.reserve(st.segments.size() + 1);
            bool sorted = true;
            row_label row_labels[max_row_labels];
            for (std::int64_t r = 0; r < n; ++r) {
                const std::span<const float> v(values + r * dim, static_cast<std::size_t>(dim));
                const bool finite = std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
                const bool zero = std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
                if (!finite || (st.options.normalize && zero))
                    fail(make_error_code(corpus_errc::corrupt), "checkpoint row " + std::to_string(r));
                const std::int64_t b = r == 0 ? 0 : ends[r - 1];
                for (std::int64_t i = b; i < ends[r]; ++i) row_labels[i - b] = static_cast<row_label>(labels[i]);
                const auto id = static_cast<row_id>(ids[r]);
                append_written(*seg, id, v,
                               std::span<const row_label>(row_labels, static_cast<std::size_t>(ends[r] - b)));
                if (!st.index.emplace(id, state::location{seg.get(), r}).second)
                    fail(make_error_code(corpus_errc::corrupt), "checkpoint id " + std::to_string(id) + " twice");
                sorted = sorted && (r == 0 || id > static_cast<row_id>(ids[r - 1]));
            }
            seg->sorted = sorted;  // (no bf16 copy yet: the first compaction makes it)
            st.live_rows = n;
            st.segments.push_back(segment_view{std::move(seg), n});
            st.tail = nullptr;  // sealed: later writes start a segment of their own
        }
        st.seq = info.seq;
        st.publish(st.prepare_version(st.segments.size()));
    }

    // Every log in order, the records the checkpoint holds skipped; a gap is corruption (a log is
    // switched only while no write is in flight, so one log ends where the next begins).
    std::vector<dc::log_file> logs;
    if (std::error_code ec = dc::list_logs(dir, logs)) fail(ec, "cannot list the logs");
    auto lg = std::make_unique<log_state>();
    lg->dir = dir;
    std::error_code replay_error;
    corpus_write w;
    for (std::size_t i = 0; i < logs.size(); ++i) {
        std::error_code ec;
        auto log = dc::write_log::open(
            logs[i].path,
            [&](const dc::log_record& rec) {
                if (replay_error || rec.seq <= st.seq) return;
                if (rec.seq != st.seq + 1) {
                    replay_error = make_error_code(corpus_errc::corrupt);
                    return;
                }
                if ((replay_error = dc::decode_write(rec.payload, st.options.dim, w))) return;
                // A logged write was validated before it was logged; replayed, it is applied with
                // no version of its own (one is published when every log has been replayed).
                const std::lock_guard lock(st.writer);
                if (const write_result r = apply_locked(w, false); !r || r.seq != rec.seq)
                    replay_error = make_error_code(corpus_errc::corrupt);
            },
            ec);
        if (ec) fail(ec, "cannot open the log " + logs[i].path);
        if (replay_error) fail(replay_error, "log " + logs[i].path + " does not follow the corpus");
        if (i + 1 == logs.size() && (log->bytes() == 0 || log->next_seq() == st.seq + 1)) {
            lg->log = std::move(log);
            lg->log_first = logs[i].first_seq;
            lg->fresh = lg->log->bytes() == 0;
        }
    }
    {
        const std::lock_guard lock(st.writer);
        st.publish(st.prepare_version(st.segments.size()));
    }
    if (!lg->log) {
        std::error_code ec;
        lg->log = dc::write_log::open(
            dc::log_path(dir, st.seq + 1), [](const dc::log_record&) {}, ec);
        if (ec) fail(ec, "cannot create a log");
        lg->log_first = st.seq + 1;
        lg->fresh = true;
    }
    lg->log->set_group_end(&live_corpus::group_end, this);
    st.log = std::move(lg);
}

std::error_code live_corpus::checkpoint() {
    namespace dc = detail::corpus;
    state& st = *state_;
    if (!st.log) return {};
    log_state& lg = *st.log;
    const std::lock_guard only(lg.checkpointing);

    // Switch to a new log while none is in flight, so that the old one ends where the new one
    // begins and every record of the old one is applied.
    std::uint64_t first = 0;
    {
        const std::lock_guard lock(lg.append);
        {
            std::unique_lock count(lg.idle_mutex);
            lg.idle.wait(count, [&] { return lg.outstanding == 0; });
        }
        {
            const std::lock_guard writer(st.writer);
            first = st.seq + 1;
        }
        if (first != lg.log_first || !lg.fresh) {
            std::error_code ec;
            auto next = dc::write_log::open(
                dc::log_path(lg.dir, first), [](const dc::log_record&) {}, ec);
            if (ec) return ec;
            next->set_group_end(&live_corpus::group_end, this);
            std::unique_ptr<dc::write_log> old;
            {
                const std::lock_guard writer(st.writer);  // stats() reads the log's size under it
                old = std::exchange(lg.log, std::move(next));
            }
            old.reset();  // idle: its destructor returns at once
            lg.log_first = first;
            lg.fresh = true;
        }
    }

    // The rows of a snapshot at or after the switch, as written.
    const corpus_snapshot snap = snapshot();
    const corpus_version& v = *detail::corpus::snapshot_access::version(snap);
    // In id order, so that recovery loads them as a segment sorted by id.
    struct source {
        row_id id;
        const segment* seg;
        std::int64_t row;
    };
    std::vector<source> order;
    order.reserve(static_cast<std::size_t>(v.live_rows));
    for (const segment_view& sv : v.segments)
        for (std::int64_t r = 0; r < sv.rows; ++r)
            if (sv.seg->visible(r, v.seq)) order.push_back(source{sv.seg->ids[r], sv.seg.get(), r});
    std::sort(order.begin(), order.end(), [](const source& a, const source& b) { return a.id < b.id; });
    dc::checkpoint_rows rows;
    rows.ids.reserve(order.size());
    rows.values.reserve(order.size() * static_cast<std::size_t>(v.dim));
    rows.label_ends.reserve(order.size());
    for (const source& src : order) {
        const auto raw = src.seg->raw_row(src.row);
        const auto labels = src.seg->row_labels(src.row);
        rows.values.insert(rows.values.end(), raw.begin(), raw.end());
        rows.ids.push_back(src.id);
        rows.labels.insert(rows.labels.end(), labels.begin(), labels.end());
        rows.label_ends.push_back(static_cast<std::uint32_t>(rows.labels.size()));
    }
    if (std::error_code ec = dc::write_checkpoint(lg.dir, v.seq, v.dim, rows)) return ec;
    dc::remove_stale_files(lg.dir, v.seq, first);
    return {};
}

std::int64_t live_corpus::dim() const noexcept { return state_->options.dim; }

write_result live_corpus::apply_in_memory(const corpus_write& w) {
    state& st = *state_;
    write_result r = validate(w, st.options.dim, st.options.normalize);
    if (r.error) return r;
    const std::lock_guard lock(st.writer);
    return apply_locked(w, true);
}

// Applies a validated write under the writer's mutex; publishes a version of its own unless the
// caller publishes one for several writes (`publish` false: a log group, apply_group).
write_result live_corpus::apply_locked(const corpus_write& w, bool publish) {
    state& st = *state_;
    write_result r;
    // Everything that can fail is allocated before anything changes (S19): the index nodes of
    // new ids, the index's buckets, the segment the rows that do not fit the tail go to, and
    // the next version.
    // (The side map is the state's, emptied: its buckets stay from write to write.)
    std::unordered_map<row_id, state::location>& fresh = st.fresh;
    fresh.clear();
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
    std::unique_ptr<corpus_version> version;
    if (publish) version = st.prepare_version(st.segments.size() + 1);

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
    if (publish) st.publish(std::move(version));
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
    {
        // The label postings: (label, row) pairs in label order, rows ascending within each.
        auto p = std::make_unique<segment::label_postings>();
        std::vector<std::pair<row_label, std::uint32_t>> pairs;
        pairs.reserve(static_cast<std::size_t>(label_count));
        for (std::int64_t i = 0; i < n; ++i)
            for (const row_label l : merged->row_labels(i)) pairs.push_back({l, static_cast<std::uint32_t>(i)});
        std::sort(pairs.begin(), pairs.end());
        p->rows.reserve(pairs.size());
        for (std::size_t i = 0; i < pairs.size(); ++i) {
            if (i == 0 || pairs[i].first != pairs[i - 1].first) {
                p->labels.push_back(pairs[i].first);
                p->offsets.push_back(static_cast<std::uint32_t>(i));
            }
            p->rows.push_back(pairs[i].second);
        }
        p->offsets.push_back(static_cast<std::uint32_t>(pairs.size()));
        merged->postings = std::move(p);
    }
    check_stop();
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

bool live_corpus::durable() const noexcept { return state_->log != nullptr; }

write_result live_corpus::apply(const corpus_write& w) {
    if (!durable()) return apply_in_memory(w);
    struct waiter final : write_completion {
        std::mutex m;
        std::condition_variable cv;
        std::optional<write_result> result;
        void complete(std::unique_ptr<write_completion> self, write_result r) noexcept override {
            (void)self.release();  // lives on apply's stack
            const std::lock_guard lock(m);
            result = std::move(r);
            cv.notify_all();
        }
    };
    // Owned here, handed to submit as a non-owning completion (it outlives the wait).
    struct forward final : write_completion {
        waiter* to;
        explicit forward(waiter* t) : to(t) {}
        void complete(std::unique_ptr<write_completion> self, write_result r) noexcept override {
            waiter* target = to;
            self.reset();  // this forward goes; the waiter lives on apply's stack
            target->complete(nullptr, std::move(r));
        }
    };
    waiter wait;
    submit(w, std::make_unique<forward>(&wait));
    std::unique_lock lock(wait.m);
    wait.cv.wait(lock, [&] { return wait.result.has_value(); });
    return std::move(*wait.result);
}

void live_corpus::submit(corpus_write w, std::unique_ptr<write_completion> done) {
    state& st = *state_;
    if (!st.log) {
        write_result r = apply_in_memory(w);  // (a bad_alloc leaves with nothing done)
        write_completion::finish(std::move(done), std::move(r));
        return;
    }
    log_state& lg = *st.log;
    write_result refused = validate(w, st.options.dim, st.options.normalize);
    if (!refused.error && lg.poisoned.load(std::memory_order_acquire))
        refused.error = std::make_error_code(std::errc::not_enough_memory);
    if (refused.error) {
        write_completion::finish(std::move(done), std::move(refused));
        return;
    }
    // Everything that can fail is allocated before the record is queued: its bytes, the
    // completion that owns the write.
    const std::vector<std::byte> payload = detail::corpus::encode_write(w);
    // `rec` is ours until the log accepts the record; from then on the callback owns it.
    auto rec = std::make_unique<logged_write>(logged_write{this, std::move(w), std::move(done), 0, nullptr});
    logged_write* raw = rec.get();
    detail::corpus::write_log::done_fn on_durable([raw](std::error_code ec) { raw->corpus->on_logged(raw, ec); });
    const std::lock_guard lock(lg.append);
    {
        const std::lock_guard count(lg.idle_mutex);
        ++lg.outstanding;
    }
    if (lg.fresh) {
        const std::lock_guard writer(st.writer);
        raw->seq = st.seq + 1;
    } else {
        raw->seq = lg.log->next_seq();
    }
    const std::error_code ec = lg.log->append(raw->seq, payload, std::move(on_durable));
    if (!ec) {
        (void)rec.release();  // the callback's now (it may already have run: `raw` is not touched again)
        lg.fresh = false;
        return;
    }
    // Refused before anything was queued (a log broken by a disk failure, memory): the write
    // completes with that error, nothing applied.
    {
        const std::lock_guard count(lg.idle_mutex);
        --lg.outstanding;
        lg.idle.notify_all();
    }
    write_result r;
    r.error = ec;
    write_completion::finish(std::move(rec->done), std::move(r));
}

void live_corpus::on_logged(logged_write* rec, std::error_code ec) noexcept {
    log_state& lg = *state_->log;
    if (ec || lg.poisoned.load(std::memory_order_acquire)) {
        // Not applied: a failed group is never recovered (write_log, "Failed groups"); a poisoned
        // corpus refuses writes until it is reopened.
        const std::unique_ptr<logged_write> own(rec);
        write_result r;
        r.error = ec ? ec : std::make_error_code(std::errc::not_enough_memory);
        write_completion::finish(std::move(own->done), std::move(r));
        const std::lock_guard count(lg.idle_mutex);
        --lg.outstanding;
        lg.idle.notify_all();
        return;
    }
    // Durable: applied with the rest of its group when the group's callbacks are done.
    if (lg.group_tail != nullptr)
        lg.group_tail->next = rec;
    else
        lg.group_head = rec;
    lg.group_tail = rec;
}

void live_corpus::group_end(void* self) noexcept { static_cast<live_corpus*>(self)->apply_group(); }

// A log group's durable writes, applied in sequence order under one lock and published as one
// version (each keeps its own sequence number; no snapshot can fall between them, and none was
// answered yet), then answered.
void live_corpus::apply_group() noexcept {
    state& st = *state_;
    log_state& lg = *st.log;
    logged_write* head = std::exchange(lg.group_head, nullptr);
    lg.group_tail = nullptr;
    if (head == nullptr) return;
    std::size_t count = 0;
    {
        const std::lock_guard lock(st.writer);
        std::size_t writes = 0;
        for (logged_write* r = head; r != nullptr; r = r->next) ++writes;
        std::unique_ptr<corpus_version> version;
        try {
            version = st.prepare_version(st.segments.size() + writes);
        } catch (const std::bad_alloc&) {
            lg.poisoned.store(true, std::memory_order_release);
        }
        bool applied = false;
        for (logged_write* r = head; r != nullptr; r = r->next) {
            if (lg.poisoned.load(std::memory_order_relaxed)) {
                r->result.error = std::make_error_code(std::errc::not_enough_memory);
                continue;
            }
            try {
                r->result = apply_locked(r->w, false);
                if (r->result.seq != r->seq) std::terminate();  // the log and the corpus count writes alike
                applied = true;
            } catch (const std::bad_alloc&) {
                // Durable but not applied: refuse every later write rather than let the corpus and
                // its log disagree; reopening the directory applies it.
                lg.poisoned.store(true, std::memory_order_release);
                r->result = write_result{};
                r->result.error = std::make_error_code(std::errc::not_enough_memory);
            }
        }
        if (applied) {
            if (version) {
                st.publish(std::move(version));
            } else {
                std::terminate();  // unreachable: without a version nothing was applied
            }
        }
    }
    while (head != nullptr) {
        const std::unique_ptr<logged_write> own(head);
        head = head->next;
        write_completion::finish(std::move(own->done), std::move(own->result));
        ++count;
    }
    const std::lock_guard lock(lg.idle_mutex);
    lg.outstanding -= count;
    lg.idle.notify_all();
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
        if (st.log && st.log->log) out.log_bytes = st.log->log->bytes();
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
