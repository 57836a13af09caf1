// Exact search over a live corpus's snapshot (live_corpus.hpp `search`; L4, L5).
//
// Per segment of the snapshot, each query takes one of two ways, both computing a row's score
// with the f32 GEMM kernel's arithmetic (per element it depends only on the depth and the target,
// never on where the row lies or which rows are scored with it: kernels/gemm_top_k.hpp):
//
// - fused: a query that allows a large part of the segment: the fused kernel of matmul_top_k,
//   with its bf16 first pass where the segment has the copy (a compacted one) and the target the
//   instruction, and the query's allowed rows (visible at the snapshot, passing its filter) as the
//   kernel's column mask (gemm_top_k_operands::allowed). Over a segment sorted by id (a compacted
//   one) the kernel's tie to the lower index is the tie to the lower id; over an unsorted one it
//   keeps k + 1, and a query whose (k+1)-th ties with its k-th is scored again the 'together'
//   way, a chunk of rows at a time, which orders ties by id itself.
// - alone: a selective query (below `alone_fraction` of the segment's rows) gathers the rows it
//   allows into dense blocks and scores only those, so that its cost follows the rows that pass
//   (L5).
//
// Each query keeps its best k as a heap over (score, id); the segments' results meet there, so
// a threshold found in one segment already rejects the next segment's rows. The work of the
// 'together' and 'alone' ways is split over the session's workers in tasks, each with heaps of
// its own, merged at the end.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>

#include "corpus/corpus_state.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_top_k.hpp"
#include "kernels/search_bf16.hpp"
#include "kernels/stop_point.hpp"

namespace tenferro {
namespace {

using namespace detail::corpus;

constexpr std::int64_t chunk_rows = 512;  // rows scored per GEMM call ('together', 'alone'); a multiple of 64
constexpr double alone_fraction = 0.25;   // below it a query takes its own way
constexpr std::int64_t alone_rows = 2048;  // rows gathered per GEMM call for such a query

}  // namespace

namespace detail::corpus {
std::atomic<bool> emulate_first_pass{false};
}  // namespace detail::corpus

namespace {

// matmul_top_k's order: NaN above every number, then the larger score, then the lower id.
inline bool ranks_above(float a, row_id ia, float b, row_id ib) noexcept {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na != nb) return na;
    if (!na && a != b) return a > b;
    return ia < ib;
}

// One query's best k: a binary heap whose root is the worst held.
struct best_k {
    float* vals;
    row_id* ids;
    std::int64_t* held;
    std::int64_t k;

    bool below(std::int64_t a, std::int64_t b) const noexcept { return ranks_above(vals[b], ids[b], vals[a], ids[a]); }
    void swap_at(std::int64_t a, std::int64_t b) const noexcept {
        std::swap(vals[a], vals[b]);
        std::swap(ids[a], ids[b]);
    }
    void sift_down(std::int64_t i, std::int64_t n) const noexcept {
        for (;;) {
            const std::int64_t l = 2 * i + 1, r = l + 1;
            std::int64_t low = i;
            if (l < n && below(l, low)) low = l;
            if (r < n && below(r, low)) low = r;
            if (low == i) return;
            swap_at(i, low);
            i = low;
        }
    }
    void offer(float v, row_id id) const noexcept {
        if (*held < k) {
            std::int64_t i = (*held)++;
            vals[i] = v;
            ids[i] = id;
            while (i > 0) {
                const std::int64_t parent = (i - 1) / 2;
                if (!below(i, parent)) break;
                swap_at(i, parent);
                i = parent;
            }
            return;
        }
        if (!ranks_above(v, id, vals[0], ids[0])) return;
        vals[0] = v;
        ids[0] = id;
        sift_down(0, k);
    }
    // A quick test before `offer`: false only for a score that cannot enter whatever its id.
    bool may_enter(float v) const noexcept { return *held < k || !(v < vals[0]) || std::isnan(vals[0]); }
};

// Per task: every query's heap, and the buffers of one GEMM call.
// A buffer grown on demand and never cleared: scratch that is always written before it is read
// (a std::vector would zero megabytes of it on every search).
template <class T>
struct scratch_buffer {
    std::unique_ptr<T[]> p;
    std::size_t size = 0;
    T* get(std::size_t need) {
        if (need > size) {
            p.reset(new T[need]);
            size = need;
        }
        return p.get();
    }
};

struct task_state {
    std::vector<float> vals;
    std::vector<row_id> ids;
    std::vector<std::int64_t> held;
    scratch_buffer<float> block;  // gathered rows
    scratch_buffer<std::int64_t> map;
    scratch_buffer<float> tile;     // queries x columns scores
    scratch_buffer<float> queries;  // a group's query rows
    std::vector<std::byte> scratch;
    std::uint64_t rows_scored = 0;
    // tile (m x cols) = the m queries of `a` (m x dim) against the rows of `b` (cols x dim), both
    // row-major: the GEMM kernel's arithmetic, which gives each (query, row) matmul_top_k's bits.
    void score(const float* a, std::int64_t m, const float* b, std::int64_t cols, std::int64_t dim, float* tile) {
        const kernels::gemm_plan plan = kernels::plan_gemm(kernels::gemm_type::f32, m, cols, dim, 1);
        if (scratch.size() < plan.scratch_bytes) scratch.resize(plan.scratch_bytes);
        kernels::gemm_operands op{};
        op.m = m;
        op.n = cols;
        op.k = dim;
        op.a = a;
        op.a_row_stride = dim;
        op.a_col_stride = 1;
        op.b = b;
        op.b_row_stride = 1;
        op.b_col_stride = dim;
        op.c = tile;
        op.c_row_stride = cols;
        op.c_col_stride = 1;
        kernels::gemm(kernels::gemm_type::f32, op, plan, scratch.data());
        rows_scored += static_cast<std::uint64_t>(cols * m);
    }
    best_k heap(std::size_t q, std::int64_t k) {
        return best_k{vals.data() + q * static_cast<std::size_t>(k), ids.data() + q * static_cast<std::size_t>(k),
                      held.data() + q, k};
    }
};

bool test_bit(const std::uint64_t* w, std::int64_t r) noexcept { return (w[r >> 6] >> (r & 63)) & 1U; }

[[noreturn]] void fail(const std::string& what) { throw tensor_error("tenferro::search: " + what); }

struct query_filter {
    std::vector<row_label> labels;  // sorted
    std::vector<row_id> ids;        // sorted, unique
    bool by_labels = false, by_ids = false;
};

void set_bit(std::uint64_t* w, std::int64_t r) noexcept { w[r >> 6] |= std::uint64_t{1} << (r & 63); }

// The rows [0, n) of `seg` that pass `f` and are visible (`visible`: the snapshot's bitmap, or
// null when it sees every row), as a bitmap in `out`; `scratch` holds `words` words.
void allowed_rows(const segment& seg, std::int64_t n, const std::uint64_t* visible, const query_filter& f,
                  std::uint64_t* out, std::uint64_t* scratch) {
    const std::int64_t words = (n + 63) / 64;
    // Labels any-of: from the postings of a compacted segment (the cost of the rows that carry
    // them), else from each row's short list.
    if (f.by_labels) {
        std::fill(out, out + words, 0);
        if (seg.postings) {
            const auto& p = *seg.postings;
            for (const row_label l : f.labels) {
                const auto at = std::lower_bound(p.labels.begin(), p.labels.end(), l);
                if (at == p.labels.end() || *at != l) continue;
                const auto li = static_cast<std::size_t>(at - p.labels.begin());
                for (std::uint32_t e = p.offsets[li]; e < p.offsets[li + 1]; ++e)
                    if (p.rows[e] < n) set_bit(out, p.rows[e]);
            }
        } else {
            for (std::int64_t r = 0; r < n; ++r)
                for (const row_label l : seg.row_labels(r))
                    if (std::binary_search(f.labels.begin(), f.labels.end(), l)) {
                        set_bit(out, r);
                        break;
                    }
        }
    } else {
        std::fill(out, out + words, ~std::uint64_t{0});
    }
    // The id allow-list: looked up one by one when short, merged with the id column of a sorted
    // segment when long, each row's id searched in it otherwise.
    if (f.by_ids) {
        std::uint64_t* ids = scratch;
        std::fill(ids, ids + words, 0);
        const row_id* col = seg.ids.get();
        const auto ln = static_cast<std::int64_t>(f.ids.size());
        if (seg.sorted && ln * 16 < n) {
            for (const row_id id : f.ids) {
                const row_id* at = std::lower_bound(col, col + n, id);
                if (at != col + n && *at == id) set_bit(ids, at - col);
            }
        } else if (seg.sorted) {
            std::int64_t r = 0, j = 0;
            while (r < n && j < ln) {
                if (col[r] < f.ids[static_cast<std::size_t>(j)]) {
                    ++r;
                } else if (f.ids[static_cast<std::size_t>(j)] < col[r]) {
                    ++j;
                } else {
                    set_bit(ids, r++);
                    ++j;
                }
            }
        } else {
            for (std::int64_t r = 0; r < n; ++r)
                if (std::binary_search(f.ids.begin(), f.ids.end(), col[r])) set_bit(ids, r);
        }
        for (std::int64_t w = 0; w < words; ++w) out[w] &= ids[w];
    }
    if (visible != nullptr)
        for (std::int64_t w = 0; w < words; ++w) out[w] &= visible[w];
    if ((n & 63) != 0) out[words - 1] &= (std::uint64_t{1} << (n & 63)) - 1;
}

std::int64_t popcount(const std::uint64_t* w, std::int64_t first_word, std::int64_t last_word) noexcept {
    std::int64_t c = 0;
    for (std::int64_t i = first_word; i < last_word; ++i) c += std::popcount(w[i]);
    return c;
}

// Scores the rows [r0, r1) of `seg` that `unite` allows (the union of the queries' bitmaps) for
// the block of queries `a` (contiguous rows), whose row i is query qs[i] allowing the rows of
// allowed[i] (null: all), and offers each allowed (query, row) to that query's heap.
void score_chunk(task_state& t, const segment& seg, std::int64_t r0, std::int64_t r1, const std::uint64_t* unite,
                 const float* a, std::span<const std::size_t> qs, std::span<const std::uint64_t* const> allowed,
                 std::int64_t dim, std::int64_t k) {
    const std::int64_t w0 = r0 >> 6, w1 = (r1 + 63) >> 6;
    const std::int64_t count = popcount(unite, w0, w1);
    if (count == 0) return;
    const float* b;
    std::int64_t cols;
    std::int64_t* map = t.map.get(static_cast<std::size_t>(r1 - r0));
    if (count * 2 <= r1 - r0) {
        float* block = t.block.get(static_cast<std::size_t>(count * dim));
        std::int64_t j = 0;
        for (std::int64_t w = w0; w < w1; ++w)
            for (std::uint64_t bits = unite[w]; bits != 0; bits &= bits - 1) {
                const std::int64_t r = (w << 6) + std::countr_zero(bits);
                std::memcpy(block + j * dim, seg.values.get() + r * dim, static_cast<std::size_t>(dim) * 4);
                map[j++] = r;
            }
        b = block;
        cols = count;
    } else {
        for (std::int64_t j = 0; j < r1 - r0; ++j) map[j] = r0 + j;
        b = seg.values.get() + r0 * dim;
        cols = r1 - r0;
    }
    const auto m = static_cast<std::int64_t>(qs.size());
    float* tile = t.tile.get(static_cast<std::size_t>(m * cols));
    t.score(a, m, b, cols, dim, tile);
    for (std::int64_t i = 0; i < m; ++i) {
        const best_k heap = t.heap(qs[static_cast<std::size_t>(i)], k);
        const std::uint64_t* mine = allowed[static_cast<std::size_t>(i)];
        const float* row = tile + i * cols;
        for (std::int64_t j = 0; j < cols; ++j) {
            const float v = row[j];
            if (!heap.may_enter(v)) continue;
            const std::int64_t r = map[j];
            if (mine != nullptr && !test_bit(mine, r)) continue;
            heap.offer(v, seg.ids[r]);
        }
    }
}

// Scores the rows a group of selective queries with one filter allows (`bits`, over the n rows
// of `seg`), gathered into dense blocks of up to `alone_rows`, one GEMM per block for the whole
// group: the cost follows the rows that pass (L5), and a batch's queries sharing a filter share
// the gathering. `qs`: the group's queries, their rows of `qa`.
void score_gathered(task_state& t, const segment& seg, std::int64_t n, const std::uint64_t* bits, const float* qa,
                    std::span<const std::size_t> qs, std::int64_t dim, std::int64_t k) {
    const auto m = static_cast<std::int64_t>(qs.size());
    float* a = t.queries.get(static_cast<std::size_t>(m * dim));
    for (std::int64_t i = 0; i < m; ++i)
        std::copy_n(qa + qs[static_cast<std::size_t>(i)] * static_cast<std::size_t>(dim), dim, a + i * dim);
    float* block = t.block.get(static_cast<std::size_t>(alone_rows * dim));
    std::int64_t* map = t.map.get(static_cast<std::size_t>(alone_rows));
    float* tile = t.tile.get(static_cast<std::size_t>(m * alone_rows));
    std::int64_t cols = 0;
    auto flush = [&] {
        if (cols == 0) return;
        kernels::stop_point();
        t.score(a, m, block, cols, dim, tile);
        for (std::int64_t i = 0; i < m; ++i) {
            const best_k heap = t.heap(qs[static_cast<std::size_t>(i)], k);
            const float* row = tile + i * cols;
            for (std::int64_t j = 0; j < cols; ++j)
                if (heap.may_enter(row[j])) heap.offer(row[j], seg.ids[map[j]]);
        }
        cols = 0;
    };
    const std::int64_t words = (n + 63) / 64;
    for (std::int64_t w = 0; w < words; ++w)
        for (std::uint64_t bw = bits[w]; bw != 0; bw &= bw - 1) {
            const std::int64_t r = (w << 6) + std::countr_zero(bw);
            std::memcpy(block + cols * dim, seg.values.get() + r * dim, static_cast<std::size_t>(dim) * 4);
            map[cols++] = r;
            if (cols == alone_rows) flush();
        }
    flush();
}

}  // namespace

corpus_hits search(backend_session& s, const corpus_snapshot& snapshot, const const_tensor_view& queries,
                   std::int64_t k, std::span<const row_filter> filters) {
    const corpus_version* v = snapshot_access::version(snapshot);
    if (v == nullptr) fail("snapshot is empty");
    if (queries.type() != dtype::f32) fail("queries must be f32");
    if (queries.rank() != 2) fail("queries must be 2-D (queries x dim), got rank " + std::to_string(queries.rank()));
    const std::int64_t m = queries.shape()[0], dim = queries.shape()[1];
    if (dim != v->dim)
        fail("queries have " + std::to_string(dim) + " columns, the corpus's dimension is " + std::to_string(v->dim));
    if (k < 0) fail("k is negative (" + std::to_string(k) + ")");
    if (!filters.empty() && static_cast<std::int64_t>(filters.size()) != m)
        fail("filters has " + std::to_string(filters.size()) + " entries for " + std::to_string(m) + " queries");
    s.throw_if_stop_requested();

    corpus_hits out;
    out.seq = v->seq;
    out.offsets.assign(static_cast<std::size_t>(m) + 1, 0);
    // Fewer rows than k: all of them (L4). The heaps are sized by what can fill them, never by a
    // k the snapshot cannot reach (a k of 2^62 would otherwise overflow queries x k).
    k = std::min(k, v->live_rows);
    if (m == 0 || k == 0) return out;
    const auto um = static_cast<std::size_t>(m);
    const auto uk = static_cast<std::size_t>(k);
    const std::uint64_t seq = v->seq;

    // The queries, dense and contiguous; the filters, sorted.
    std::vector<float> qa(um * static_cast<std::size_t>(dim));
    {
        const auto* base = static_cast<const float*>(queries.data());
        const std::int64_t rs = queries.strides()[0], cs = queries.strides()[1];
        for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t p = 0; p < dim; ++p) qa[static_cast<std::size_t>(i * dim + p)] = base[i * rs + p * cs];
    }
    std::vector<query_filter> qf(filters.empty() ? 0 : um);
    std::uint64_t filtered = 0;
    for (std::size_t i = 0; i < qf.size(); ++i) {
        const row_filter& f = filters[i];
        if (f.labels) {
            qf[i].by_labels = true;
            qf[i].labels = *f.labels;
            if (!std::is_sorted(qf[i].labels.begin(), qf[i].labels.end()))
                std::sort(qf[i].labels.begin(), qf[i].labels.end());
        }
        if (f.ids) {
            qf[i].by_ids = true;
            qf[i].ids = *f.ids;
            // (An allow-list often arrives sorted: checking is linear, sorting is not.)
            if (!std::is_sorted(qf[i].ids.begin(), qf[i].ids.end())) std::sort(qf[i].ids.begin(), qf[i].ids.end());
            qf[i].ids.erase(std::unique(qf[i].ids.begin(), qf[i].ids.end()), qf[i].ids.end());
        }
        filtered += f.filters() ? 1 : 0;
    }
    auto is_filtered = [&](std::size_t i) { return !qf.empty() && (qf[i].by_labels || qf[i].by_ids); };
    // Queries with equal filters (or none) form a group, which a selective way scores together:
    // group_of[i] is the first query of i's group.
    std::vector<std::size_t> group_of(um);
    {
        std::vector<std::size_t> order(um);
        for (std::size_t i = 0; i < um; ++i) order[i] = i;
        auto key = [&](std::size_t i) {
            static const query_filter none;
            const query_filter& f = is_filtered(i) ? qf[i] : none;
            return std::tie(f.by_labels, f.labels, f.by_ids, f.ids);
        };
        std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return key(x) < key(y); });
        for (std::size_t j = 0; j < um; ++j)
            group_of[order[j]] = j > 0 && key(order[j]) == key(order[j - 1]) ? group_of[order[j - 1]] : order[j];
    }

    const std::size_t tasks = std::max<std::size_t>(1, std::min<std::size_t>(s.parallelism(), 64));
    std::vector<task_state> ts(tasks);
    for (task_state& t : ts) {
        t.vals.resize(um * uk);
        t.ids.resize(um * uk);
        t.held.assign(um, 0);
    }
    std::uint64_t first_pass = 0, fallback = 0;
    const auto runner = [&](std::int64_t count, kernels::gemm_body body) { s.parallel_for(count, 1, body); };

    std::vector<std::size_t> fused, together, alone, alone_groups;
    std::vector<std::uint64_t> visible, bitmaps, id_scratch, unite;
    std::vector<const std::uint64_t*> allowed;
    std::vector<float> sub_a, sub_vals;
    std::vector<const std::uint64_t*> together_allowed, fused_allowed;
    std::vector<std::int64_t> sub_idx;
    std::vector<std::size_t> filtered_slot(um, 0);
    std::size_t filtered_queries = 0;
    for (std::size_t i = 0; i < um; ++i)
        if (is_filtered(i)) filtered_slot[i] = filtered_queries++;
    for (const segment_view& sv : v->segments) {
        const segment& seg = *sv.seg;
        const std::int64_t n = sv.rows;
        if (n == 0) continue;
        s.throw_if_stop_requested();
        const std::int64_t words = (n + 63) / 64;
        const bool all_visible = seg.first_erased.load(std::memory_order_relaxed) > seq;
        if (!all_visible) {
            visible.assign(static_cast<std::size_t>(words), 0);
            for (std::int64_t r = 0; r < n; ++r)
                if (seg.visible(r, seq)) set_bit(visible.data(), r);
        }

        // Which way each query takes over this segment, and the rows each allows.
        fused.clear();
        together.clear();
        alone.clear();
        if (filtered_queries != 0) {
            bitmaps.resize(filtered_queries * static_cast<std::size_t>(words));
            id_scratch.resize(static_cast<std::size_t>(words));
        }
        allowed.assign(um, nullptr);
        const std::int64_t visible_rows = all_visible ? n : popcount(visible.data(), 0, words);
        for (std::size_t i = 0; i < um; ++i) {
            std::int64_t pass = visible_rows;
            if (!is_filtered(i)) {
                allowed[i] = all_visible ? nullptr : visible.data();
            } else {
                std::uint64_t* bits = bitmaps.data() + filtered_slot[i] * static_cast<std::size_t>(words);
                allowed_rows(seg, n, all_visible ? nullptr : visible.data(), qf[i], bits, id_scratch.data());
                allowed[i] = bits;
                pass = popcount(bits, 0, words);
            }
            if (pass == 0) continue;
            // A query that allows a large part of the segment takes the fused kernel, its allowed
            // rows as the kernel's mask; a selective one gathers its rows and scores only those.
            if (static_cast<double>(pass) < alone_fraction * static_cast<double>(n))
                alone.push_back(i);
            else
                fused.push_back(i);
        }

        // Fused: the kernel of matmul_top_k over the whole segment, into task 0's heaps. Over a
        // segment sorted by id its tie to the lower index is the tie to the lower id. Over an
        // unsorted one (recent rows, in arrival order) it keeps k + 1: when the (k+1)-th ties
        // with the k-th, a row of equal score and lower id may have been left out, and that query
        // is scored again the 'together' way, which orders by id itself.
        if (!fused.empty()) {
            const auto mf = static_cast<std::int64_t>(fused.size());
            const std::int64_t count = std::min(seg.sorted ? k : k + 1, n);
            sub_a.resize(fused.size() * static_cast<std::size_t>(dim));
            for (std::size_t i = 0; i < fused.size(); ++i)
                std::copy_n(qa.data() + fused[i] * static_cast<std::size_t>(dim), dim,
                            sub_a.data() + i * static_cast<std::size_t>(dim));
            sub_vals.resize(fused.size() * static_cast<std::size_t>(count));
            sub_idx.resize(fused.size() * static_cast<std::size_t>(count));
            kernels::gemm_top_k_operands op{};
            op.m = mf;
            op.n = n;
            op.k = dim;
            op.count = count;
            op.a = sub_a.data();
            op.a_row_stride = dim;
            op.a_col_stride = 1;
            op.b = seg.values.get();
            op.b_row_stride = 1;
            op.b_col_stride = dim;
            op.values = sub_vals.data();
            op.values_row_stride = count;
            op.values_col_stride = 1;
            op.indices = sub_idx.data();
            op.indices_row_stride = count;
            op.indices_col_stride = 1;
            fused_allowed.resize(fused.size());
            bool masked = false;
            for (std::size_t i = 0; i < fused.size(); ++i) {
                fused_allowed[i] = allowed[fused[i]];
                masked = masked || fused_allowed[i] != nullptr;
            }
            op.allowed = masked ? fused_allowed.data() : nullptr;
            const kernels::gemm_top_k_plan plan =
                kernels::plan_gemm_top_k(kernels::gemm_type::f32, mf, n, dim, count, static_cast<int>(s.parallelism()));
            const bool native = kernels::native_first_pass_available();
            if (seg.bf16 && (native || emulate_first_pass.load(std::memory_order_relaxed)) &&
                kernels::first_pass_applies(n, dim, count)) {
                kernels::search_counters c{};
                kernels::gemm_top_k_bf16(op, plan, nullptr, seg.bf16.get(),
                                         native ? kernels::first_pass::native : kernels::first_pass::emulated, &c,
                                         runner);
                first_pass += static_cast<std::uint64_t>(c.first_pass);
                fallback += static_cast<std::uint64_t>(c.fallback);
                ts[0].rows_scored += static_cast<std::uint64_t>(c.reranked);
                ts[0].rows_scored += static_cast<std::uint64_t>(c.fallback) * static_cast<std::uint64_t>(n);
            } else {
                kernels::gemm_top_k(kernels::gemm_type::f32, op, plan, nullptr, nullptr, runner);
                ts[0].rows_scored += static_cast<std::uint64_t>(mf) * static_cast<std::uint64_t>(n);
            }
            for (std::size_t i = 0; i < fused.size(); ++i) {
                const float* vals = sub_vals.data() + i * static_cast<std::size_t>(count);
                const std::int64_t* idx = sub_idx.data() + i * static_cast<std::size_t>(count);
                std::int64_t got = 0;
                while (got < count && idx[got] >= 0) ++got;
                std::int64_t take = got;
                if (!seg.sorted && got == count && count > k) {
                    const float a = vals[k - 1], b = vals[k];
                    if (a == b || (std::isnan(a) && std::isnan(b))) {
                        together.push_back(fused[i]);  // a tie at the boundary: by id, below
                        continue;
                    }
                    take = k;
                }
                const best_k heap = ts[0].heap(fused[i], k);
                for (std::int64_t j = 0; j < take; ++j) heap.offer(vals[j], seg.ids[idx[j]]);
            }
        }

        // Together (ties at an unsorted segment's boundary) and alone, in tasks: task t takes
        // every tasks-th chunk of the 'together' block and every tasks-th 'alone' query.
        if (together.empty() && alone.empty()) continue;
        if (!together.empty()) {
            sub_a.resize(together.size() * static_cast<std::size_t>(dim));
            for (std::size_t i = 0; i < together.size(); ++i)
                std::copy_n(qa.data() + together[i] * static_cast<std::size_t>(dim), dim,
                            sub_a.data() + i * static_cast<std::size_t>(dim));
            unite.assign(static_cast<std::size_t>(words), 0);
            for (const std::size_t i : together) {
                if (allowed[i] == nullptr) {
                    std::fill(unite.begin(), unite.end(), ~std::uint64_t{0});
                    break;
                }
                for (std::int64_t w = 0; w < words; ++w) unite[static_cast<std::size_t>(w)] |= allowed[i][w];
            }
            if ((n & 63) != 0) unite[static_cast<std::size_t>(words - 1)] &= (std::uint64_t{1} << (n & 63)) - 1;
            together_allowed.resize(together.size());
            for (std::size_t i = 0; i < together.size(); ++i) together_allowed[i] = allowed[together[i]];
        }
        // The selective queries by group (equal filters), each group's first query leading it.
        std::sort(alone.begin(), alone.end(), [&](std::size_t x, std::size_t y) {
            return group_of[x] != group_of[y] ? group_of[x] < group_of[y] : x < y;
        });
        alone_groups.clear();
        for (std::size_t j = 0; j < alone.size(); ++j)
            if (j == 0 || group_of[alone[j]] != group_of[alone[j - 1]]) alone_groups.push_back(j);
        alone_groups.push_back(alone.size());
        const std::size_t groups = alone_groups.size() - 1;
        const std::int64_t chunks = (n + chunk_rows - 1) / chunk_rows;
        s.parallel_for(static_cast<std::int64_t>(tasks), 1, [&](std::int64_t tb, std::int64_t te) {
            for (std::int64_t t = tb; t < te; ++t) {
                task_state& st = ts[static_cast<std::size_t>(t)];
                if (!together.empty())
                    for (std::int64_t c = t; c < chunks; c += static_cast<std::int64_t>(tasks)) {
                        kernels::stop_point();
                        const std::int64_t r0 = c * chunk_rows, r1 = std::min(n, r0 + chunk_rows);
                        score_chunk(st, seg, r0, r1, unite.data(), sub_a.data(), together, together_allowed, dim, k);
                    }
                for (std::size_t g = static_cast<std::size_t>(t); g < groups; g += tasks) {
                    const std::span<const std::size_t> qs(alone.data() + alone_groups[g],
                                                          alone_groups[g + 1] - alone_groups[g]);
                    score_gathered(st, seg, n, allowed[qs[0]], qa.data(), qs, dim, k);
                }
            }
        });
    }

    // Every task's heaps into task 0's, then each query's best first.
    for (std::size_t t = 1; t < tasks; ++t)
        for (std::size_t i = 0; i < um; ++i) {
            const best_k into = ts[0].heap(i, k), from = ts[t].heap(i, k);
            for (std::int64_t j = 0; j < *from.held; ++j) into.offer(from.vals[j], from.ids[j]);
        }
    std::uint64_t rows_scored = 0;
    for (const task_state& t : ts) rows_scored += t.rows_scored;
    std::size_t total = 0;
    for (std::size_t i = 0; i < um; ++i) total += static_cast<std::size_t>(ts[0].held[i]);
    out.hits.resize(total);
    for (std::size_t i = 0, at = 0; i < um; ++i) {
        const best_k heap = ts[0].heap(i, k);
        const std::int64_t h = *heap.held;
        for (std::int64_t end = h - 1; end > 0; --end) {  // heap sort: the worst goes last
            heap.swap_at(0, end);
            heap.sift_down(0, end);
        }
        for (std::int64_t j = 0; j < h; ++j) out.hits[at++] = corpus_hit{heap.ids[j], heap.vals[j]};
        out.offsets[i + 1] = at;
    }
    corpus_counters& c = v->cell->counters;
    c.queries.fetch_add(static_cast<std::uint64_t>(m), std::memory_order_relaxed);
    c.filtered.fetch_add(filtered, std::memory_order_relaxed);
    c.first_pass.fetch_add(first_pass, std::memory_order_relaxed);
    c.fallback.fetch_add(fallback, std::memory_order_relaxed);
    c.rows_scored.fetch_add(rows_scored, std::memory_order_relaxed);
    return out;
}

}  // namespace tenferro
