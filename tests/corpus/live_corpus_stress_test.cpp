// The live corpus (contract section 9) under threads: two writers, searchers that take
// snapshots, search them, hand some to each other to search and release on another thread, a
// compactor calling compact() in a loop (some of its sessions stopped at a random instant, S20),
// all at once. Meaningful under ThreadSanitizer (the published word, the differential counts,
// the erasure stamps, a segment appended to while searched).
//
// Two more threads only take and release snapshots, as fast as they can.
//
// Every write covers whole groups of ids: it upserts all of a group's rows with one marker (the
// rows' first element; a query e0 scores each row at exactly its marker), or erases all of them,
// or both for two groups. So a search restricted to one group (by its ids, or by its label) must
// see all of the group's rows with one marker, or none (L2: never part of a write). Each write's
// sequence number is recorded; after the threads end, the main thread replays the writes in
// sequence order (they must be 1, 2, 3, ... with no gap) and checks every observation against
// the state at its snapshot's sequence (L3): each group's marker, the live row count, and a
// sample of whole searches bit for bit against matmul_top_k over that state (L4, L8).
//
// Catch2 is not thread-safe: the threads record failures, the main thread asserts.
// Length: TENFERRO_STRESS_ITERATIONS writes per writer (default 20000), and at most
// TENFERRO_CORPUS_STRESS_SECONDS (default 4) seconds of writing.

#include "tenferro/live_corpus.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu_session_fixture.hpp"

using namespace tenferro;
using tenferro::test::cpu_session_fixture;

namespace {

constexpr std::int64_t dim = 12;
constexpr std::size_t groups = 16;
constexpr std::size_t group_size = 5;
constexpr std::int64_t no_marker = -1;

long iterations(long fallback) {
    if (const char* env = std::getenv("TENFERRO_STRESS_ITERATIONS")) {
        const long n = std::strtol(env, nullptr, 10);
        if (n > 0) return n;
    }
    return fallback;
}

// Group g's ids: the last group's are the largest ids there are.
row_id id_of(std::size_t g, std::size_t j) {
    if (g == groups - 1) return std::numeric_limits<row_id>::max() - (group_size - 1 - j);
    return static_cast<row_id>(g) * 1000003 + static_cast<row_id>(j) * 7;
}
std::vector<row_id> group_ids(std::size_t g) {
    std::vector<row_id> ids;
    for (std::size_t j = 0; j < group_size; ++j) ids.push_back(id_of(g, j));
    return ids;
}
// Row j of group g written with `marker`: its first element is the marker (exact in f32), the
// others small integers (ties between rows and groups are common).
std::vector<float> row_vector(std::int64_t marker, std::size_t j) {
    std::vector<float> v(static_cast<std::size_t>(dim));
    v[0] = static_cast<float>(marker);
    for (std::size_t p = 1; p < v.size(); ++p)
        v[p] = static_cast<float>(
            static_cast<std::int64_t>((static_cast<std::size_t>(marker) * 31 + j * 17 + p * 7) % 9) - 4);
    return v;
}
std::vector<row_label> row_labels(std::size_t g, std::int64_t marker) {
    return {static_cast<row_label>(g), static_cast<row_label>(100 + marker % 5)};
}

// What one applied write did: per group, the new marker (upserted) or no_marker (erased).
struct write_record {
    std::uint64_t seq = 0;
    std::vector<std::pair<std::size_t, std::int64_t>> groups;
};

// What a searcher saw.
struct group_seen {
    std::uint64_t seq;
    std::size_t group;
    std::int64_t marker;  // no_marker: empty
};
struct rows_seen {
    std::uint64_t seq;
    std::int64_t rows;
};
struct search_seen {  // a whole search, checked against the reference afterwards
    std::uint64_t seq;
    std::vector<float> query;
    std::int64_t k;
    std::optional<std::vector<row_label>> labels;
    std::vector<corpus_hit> hits;
};

struct shared_state {
    live_corpus corpus{{.dim = dim, .segment_rows = 7}};
    std::atomic<bool> writing{true};
    std::atomic<int> writers_left{0};

    std::mutex failures_mutex;
    std::vector<std::string> failures;
    void fail(const std::string& what) {
        const std::lock_guard lock(failures_mutex);
        if (failures.size() < 20) failures.push_back(what);
    }

    std::mutex records_mutex;
    std::vector<write_record> records;
    std::vector<group_seen> groups_seen;
    std::vector<rows_seen> rows_seen_list;
    std::vector<search_seen> searches_seen;

    // Snapshots handed from the thread that took them to another that searches and releases them.
    std::mutex handoff_mutex;
    std::deque<corpus_snapshot> handoff;

    std::atomic<std::uint64_t> searches{0}, compactions{0}, stopped_compactions{0}, handed{0};
};

void writer(shared_state& st, int w, long writes, std::chrono::steady_clock::time_point deadline) {
    std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(w));
    // This writer's groups (g % 2 == w) and their state as it knows it: only it writes them.
    std::vector<std::int64_t> mine(groups, no_marker);
    std::int64_t counter = 0;
    auto owned = [&] { return 2 * static_cast<std::size_t>(rng() % (groups / 2)) + static_cast<std::size_t>(w); };
    for (long i = 0; i < writes && std::chrono::steady_clock::now() < deadline; ++i) {
        corpus_write cw;
        write_record rec;
        std::size_t expect_upserted = 0, expect_erased = 0;
        auto upsert_group = [&](std::size_t g) {
            const std::int64_t marker = 1 + w + 2 * counter++;
            for (std::size_t j = 0; j < group_size; ++j)
                cw.upsert(id_of(g, j), row_vector(marker, j), row_labels(g, marker));
            rec.groups.emplace_back(g, marker);
            expect_upserted += group_size;
        };
        auto erase_group = [&](std::size_t g) {
            for (std::size_t j = group_size; j-- > 0;) cw.erase(id_of(g, j));
            rec.groups.emplace_back(g, no_marker);
            if (mine[g] != no_marker) expect_erased += group_size;
        };
        const std::size_t a = owned();
        const std::uint64_t kind = rng() % 10;
        if (kind < 6) {
            upsert_group(a);
        } else if (kind < 8) {
            erase_group(a);
        } else {
            std::size_t b = owned();
            if (b == a) b = (a + 2) % groups;
            upsert_group(a);
            erase_group(b);
        }
        if (rng() % 20 == 0) {
            // An invalid write (a NaN in its last item): refused, nothing applied.
            corpus_write bad = cw;
            std::vector<float> v = row_vector(1, 0);
            v[3] = std::numeric_limits<float>::quiet_NaN();
            bad.upsert(5, v);  // an id no group has
            const write_result r = st.corpus.apply(bad);
            if (r || r.error != corpus_errc::not_finite || r.item != bad.size() - 1)
                st.fail("writer: an invalid write was not refused as not_finite at its last item");
        }
        const write_result r = st.corpus.apply(cw);
        if (!r) {
            st.fail("writer: a valid write failed: " + r.error.message());
            continue;
        }
        if (r.upserted != expect_upserted || r.erased != expect_erased) {
            std::ostringstream o;
            o << "writer " << w << ": write seq " << r.seq << " upserted " << r.upserted << " (expected "
              << expect_upserted << "), erased " << r.erased << " (expected " << expect_erased << ")";
            st.fail(o.str());
        }
        for (const auto& [g, m] : rec.groups) mine[g] = m;
        rec.seq = r.seq;
        // Read your writes (L2): a snapshot taken now has at least this write.
        if (st.corpus.snapshot().seq() < r.seq) st.fail("writer: a snapshot taken after a write does not have it");
        {
            const std::lock_guard lock(st.records_mutex);
            st.records.push_back(std::move(rec));
        }
        if (rng() % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100));
    }
    if (st.writers_left.fetch_sub(1) == 1) st.writing = false;
}

bool same_hits(std::span<const corpus_hit> a, std::span<const corpus_hit> b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](const corpus_hit& x, const corpus_hit& y) {
               return x.id == y.id && std::bit_cast<std::uint32_t>(x.score) == std::bit_cast<std::uint32_t>(y.score);
           });
}

// Searches `snap` (taken by this thread or handed over) and checks what can be checked now;
// records the rest.
void search_and_check(shared_state& st, backend_session& s, const corpus_snapshot& snap, std::mt19937_64& rng) {
    const std::uint64_t seq = snap.seq();
    // A batch: per group by id allow-list and by label (query e0: each row's score is its
    // marker), with some unfiltered random queries between them.
    const std::size_t g1 = rng() % groups, g2 = rng() % groups;
    std::vector<float> qs;
    std::vector<row_filter> filters;
    std::vector<int> kind;  // 0: group g1 by ids, 1: g2 by label, 2: g1 by ids and label, 3: unfiltered
    auto add_query = [&](int what) {
        std::vector<float> q(static_cast<std::size_t>(dim), 0.0f);
        row_filter f;
        if (what == 3) {
            std::normal_distribution<float> g;
            for (float& x : q) x = g(rng);
        } else {
            q[0] = 1.0f;
            if (what == 0 || what == 2) {
                f.ids = group_ids(g1);
                f.ids->push_back(id_of(g1, 0) + 1);  // an id no row has
            }
            if (what == 1) f.labels = std::vector<row_label>{static_cast<row_label>(g2)};
            if (what == 2) f.labels = std::vector<row_label>{static_cast<row_label>(g1), 999};
        }
        qs.insert(qs.end(), q.begin(), q.end());
        filters.push_back(std::move(f));
        kind.push_back(what);
    };
    for (int i = 0; i < 6; ++i) add_query(static_cast<int>(rng() % 4));
    const auto m = static_cast<std::int64_t>(kind.size());
    const tensor q = tensor::from(std::span<const float>(qs), {m, dim});
    const std::int64_t k = static_cast<std::int64_t>(group_size) + static_cast<std::int64_t>(rng() % 4);
    const corpus_hits hits = search(s, snap, q.view(), k, filters);
    st.searches.fetch_add(1, std::memory_order_relaxed);
    if (hits.seq != seq || hits.queries() != static_cast<std::size_t>(m)) {
        st.fail("search: wrong seq or query count");
        return;
    }
    std::vector<group_seen> seen;
    for (std::int64_t i = 0; i < m; ++i) {
        const auto h = hits[static_cast<std::size_t>(i)];
        const int what = kind[static_cast<std::size_t>(i)];
        if (what == 3) continue;
        const std::size_t g = what == 1 ? g2 : g1;
        if (h.empty()) {
            seen.push_back({seq, g, no_marker});
            continue;
        }
        // All of the group's rows, one marker, in id order (a tie: the lower id first).
        bool whole = h.size() == group_size;
        for (std::size_t j = 0; whole && j < h.size(); ++j) whole = h[j].id == id_of(g, j) && h[j].score == h[0].score;
        if (!whole) {
            std::ostringstream o;
            o << "search at seq " << seq << ": group " << g << " seen in part or mixed (L2):";
            for (const corpus_hit& x : h) o << " " << x.id << ":" << x.score;
            st.fail(o.str());
            continue;
        }
        seen.push_back({seq, g, static_cast<std::int64_t>(h[0].score)});
    }
    // The same snapshot searched again: the same results, bit for bit; and one query alone
    // gives what it gave in the batch (batch-invariant).
    const corpus_hits again = search(s, snap, q.view(), k, filters);
    if (again.hits.size() != hits.hits.size() || !same_hits(again.hits, hits.hits) || again.offsets != hits.offsets)
        st.fail("search: the same snapshot searched twice gave different results");
    const auto one = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(m));
    const tensor q1 = tensor::from(std::span<const float>(qs).subspan(one * dim, dim), {1, dim});
    const corpus_hits alone = search(s, snap, q1.view(), k, std::span<const row_filter>(&filters[one], 1));
    if (!same_hits(alone[0], hits[one])) st.fail("search: a query alone differs from the same query in a batch");

    // Everything: the snapshot's live rows (k above them).
    const tensor qa = tensor::from(std::span<const float>(qs).subspan(0, dim), {1, dim});
    const corpus_hits all = search(s, snap, qa.view(), static_cast<std::int64_t>(groups * group_size) + 3);
    if (static_cast<std::int64_t>(all.hits.size()) != snap.rows())
        st.fail("search: an unfiltered search with k above the rows does not return the snapshot's rows()");

    const std::lock_guard lock(st.records_mutex);
    st.groups_seen.insert(st.groups_seen.end(), seen.begin(), seen.end());
    st.rows_seen_list.push_back({seq, snap.rows()});
    if (rng() % 8 == 0) {
        const std::size_t pick = rng() % static_cast<std::size_t>(m);
        const auto h = hits[pick];
        search_seen rec{seq,
                        std::vector<float>(qs.begin() + static_cast<std::ptrdiff_t>(pick * dim),
                                           qs.begin() + static_cast<std::ptrdiff_t>((pick + 1) * dim)),
                        k, std::nullopt, std::vector<corpus_hit>(h.begin(), h.end())};
        if (kind[pick] == 3 || kind[pick] == 1) {
            if (kind[pick] == 1) rec.labels = filters[pick].labels;
            st.searches_seen.push_back(std::move(rec));
        }
    }
}

void searcher(shared_state& st, int id) {
    cpu_session_fixture f(static_cast<std::size_t>(1 + id % 2));
    std::mt19937_64 rng(2000 + static_cast<std::uint64_t>(id));
    std::vector<corpus_snapshot> held;  // some kept a while, released later in random order
    while (st.writing.load()) {
        corpus_snapshot snap = st.corpus.snapshot();
        search_and_check(st, f.session, snap, rng);
        const std::uint64_t what = rng() % 6;
        if (what == 0) {
            st.handed.fetch_add(1, std::memory_order_relaxed);
            const std::lock_guard lock(st.handoff_mutex);
            st.handoff.push_back(std::move(snap));  // searched and released by another thread
        } else if (what == 1) {
            held.push_back(std::move(snap));
            if (held.size() > 6) held.erase(held.begin() + static_cast<std::ptrdiff_t>(rng() % held.size()));
        }
        // A snapshot another thread took.
        corpus_snapshot other;
        {
            const std::lock_guard lock(st.handoff_mutex);
            if (!st.handoff.empty() && rng() % 2 == 0) {
                other = std::move(st.handoff.front());
                st.handoff.pop_front();
            }
        }
        if (other) search_and_check(st, f.session, other, rng);
        if (!held.empty() && rng() % 3 == 0) search_and_check(st, f.session, held[rng() % held.size()], rng);
    }
    for (corpus_snapshot& s : held) search_and_check(st, f.session, s, rng);
}

// Takes and releases snapshots as fast as it can, keeping some a while (the published word's
// count and the versions' `transferred` under contention with the writers' replacements): a
// thread's snapshots never go back in sequence, and their rows() are the state's at their seq.
void churner(shared_state& st, int id) {
    std::mt19937_64 rng(5000 + static_cast<std::uint64_t>(id));
    std::vector<corpus_snapshot> kept;
    std::vector<rows_seen> seen;
    std::uint64_t last = 0;
    while (st.writing.load(std::memory_order_relaxed)) {
        corpus_snapshot s = st.corpus.snapshot();
        if (s.seq() < last) st.fail("churner: a later snapshot has an earlier seq");
        last = s.seq();
        if (s.dim() != dim) st.fail("churner: a snapshot's dim is wrong");
        if (rng() % 16 == 0) seen.push_back({s.seq(), s.rows()});
        if (rng() % 4 == 0) {
            kept.push_back(std::move(s));
            if (kept.size() > 32) {
                const std::size_t i = rng() % kept.size();
                if (rng() % 2 == 0) {
                    const std::lock_guard lock(st.handoff_mutex);
                    if (st.handoff.size() < 64) st.handoff.push_back(std::move(kept[i]));
                }
                kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(i));
            }
        }
    }
    const std::lock_guard lock(st.records_mutex);
    st.rows_seen_list.insert(st.rows_seen_list.end(), seen.begin(), seen.end());
}

void compactor(shared_state& st) {
    cpu_session_fixture f(1);
    std::mt19937_64 rng(3000);
    while (st.writing.load()) {
        if (rng() % 4 == 0) {
            // A compaction stopped at a random instant (S20): it abandons with nothing changed,
            // or it had finished.
            std::stop_source stop;
            cpu_session_fixture stopped(1, stop.get_token());
            std::thread stopper([&stop, delay = rng() % 4 == 0 ? 0 : rng() % 60] {
                std::this_thread::sleep_for(std::chrono::microseconds(delay));
                stop.request_stop();
            });
            try {
                if (st.corpus.compact(stopped.session)) st.compactions.fetch_add(1, std::memory_order_relaxed);
            } catch (const session_stopped&) {
                st.stopped_compactions.fetch_add(1, std::memory_order_relaxed);
            } catch (const std::exception& e) {
                st.fail(std::string("stopped compaction threw ") + e.what());
            }
            stopper.join();
            continue;
        }
        try {
            if (st.corpus.compact(f.session)) st.compactions.fetch_add(1, std::memory_order_relaxed);
        } catch (const std::exception& e) {
            st.fail(std::string("compaction threw ") + e.what());
        }
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
    }
}

// The state after each write, replayed from the records: per sequence number, each group's
// marker.
std::vector<std::vector<std::int64_t>> replay(std::vector<write_record>& records, std::vector<std::string>& errors) {
    std::sort(records.begin(), records.end(),
              [](const write_record& a, const write_record& b) { return a.seq < b.seq; });
    std::vector<std::vector<std::int64_t>> at(1, std::vector<std::int64_t>(groups, no_marker));
    for (std::size_t i = 0; i < records.size(); ++i) {
        if (records[i].seq != i + 1) {
            errors.push_back("the applied writes' sequence numbers are not 1, 2, 3, ... (L2): " +
                             std::to_string(records[i].seq) + " at " + std::to_string(i + 1));
            break;
        }
        at.push_back(at.back());
        for (const auto& [g, m] : records[i].groups) at.back()[g] = m;
    }
    return at;
}

std::vector<corpus_hit> reference(backend_session& s, const std::vector<std::int64_t>& state, const search_seen& seen) {
    std::vector<float> data;
    std::vector<row_id> ids;
    std::map<row_id, std::vector<float>> rows;
    for (std::size_t g = 0; g < groups; ++g) {
        if (state[g] == no_marker) continue;
        if (seen.labels) {
            const auto l = row_labels(g, state[g]);
            if (std::none_of(l.begin(), l.end(), [&](row_label x) {
                    return std::find(seen.labels->begin(), seen.labels->end(), x) != seen.labels->end();
                }))
                continue;
        }
        for (std::size_t j = 0; j < group_size; ++j) rows[id_of(g, j)] = row_vector(state[g], j);
    }
    for (const auto& [id, v] : rows) {
        data.insert(data.end(), v.begin(), v.end());
        ids.push_back(id);
    }
    const auto n = static_cast<std::int64_t>(ids.size());
    if (n == 0) return {};
    const tensor corpus = tensor::from(std::span<const float>(data), {n, dim});
    const tensor query = tensor::from(std::span<const float>(seen.query), {1, dim});
    auto [values, indices] = s.matmul_top_k(query.view(), corpus.view().transposed(), std::min(seen.k, n));
    std::vector<corpus_hit> out;
    for (std::int64_t j = 0; j < values.shape()[1]; ++j)
        out.push_back(
            corpus_hit{ids[static_cast<std::size_t>(indices.data<std::int64_t>()[j])], values.data<float>()[j]});
    return out;
}

}  // namespace

TEST_CASE("live corpus under threads: writers, searchers, snapshots released elsewhere, compaction",
          "[stress][corpus]") {
    shared_state st;
    const long writes = iterations(20000);
    const char* seconds_env = std::getenv("TENFERRO_CORPUS_STRESS_SECONDS");
    const long seconds = seconds_env != nullptr ? std::max(1L, std::strtol(seconds_env, nullptr, 10)) : 4;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    constexpr int writer_count = 2, searcher_count = 3;
    st.writers_left = writer_count;
    std::vector<std::thread> threads;
    for (int w = 0; w < writer_count; ++w) threads.emplace_back(writer, std::ref(st), w, writes, deadline);
    for (int i = 0; i < searcher_count; ++i) threads.emplace_back(searcher, std::ref(st), i);
    threads.emplace_back(compactor, std::ref(st));
    for (int i = 0; i < 2; ++i) threads.emplace_back(churner, std::ref(st), i);
    for (std::thread& t : threads) t.join();
    {
        // Snapshots still handed over: released here, on yet another thread than the takers'.
        cpu_session_fixture f(1);
        std::mt19937_64 rng(4000);
        for (corpus_snapshot& s : st.handoff) search_and_check(st, f.session, s, rng);
        st.handoff.clear();
    }

    for (const std::string& e : st.failures) FAIL_CHECK(e);
    REQUIRE(st.failures.empty());

    std::vector<std::string> errors;
    const auto at = replay(st.records, errors);
    for (const std::string& e : errors) FAIL_CHECK(e);
    REQUIRE(errors.empty());
    const std::uint64_t last = at.size() - 1;
    INFO(last << " writes, " << st.searches.load() << " searches, " << st.compactions.load() << " compactions, "
              << st.stopped_compactions.load() << " stopped, " << st.handed.load() << " snapshots handed over");
    CHECK(st.corpus.stats().seq == last);
    CHECK(last > 10);
    CHECK(st.searches.load() > 10);

    // Every group a search saw: the group's marker at the snapshot's sequence (L2, L3).
    std::size_t wrong = 0;
    for (const group_seen& g : st.groups_seen) {
        if (g.seq > last) {
            FAIL_CHECK("a snapshot's seq " << g.seq << " past the last write " << last);
            continue;
        }
        if (at[g.seq][g.group] != g.marker && wrong++ < 10)
            FAIL_CHECK("at seq " << g.seq << " group " << g.group << " has marker " << at[g.seq][g.group]
                                 << ", a search saw " << g.marker);
    }
    CHECK(wrong == 0);
    for (const rows_seen& r : st.rows_seen_list) {
        if (r.seq > last) continue;
        const auto live =
            std::count_if(at[r.seq].begin(), at[r.seq].end(), [](std::int64_t m) { return m != no_marker; });
        if (r.rows != live * static_cast<std::int64_t>(group_size) && wrong++ < 10)
            FAIL_CHECK("at seq " << r.seq << " rows() is " << r.rows << ", the state has "
                                 << live * static_cast<std::int64_t>(group_size));
    }
    CHECK(wrong == 0);

    // A sample of whole searches, bit for bit (L4), whatever compaction did meanwhile (L8).
    cpu_session_fixture f(1);
    for (const search_seen& s : st.searches_seen) {
        if (s.seq > last) continue;
        const auto want = reference(f.session, at[s.seq], s);
        if (!same_hits(s.hits, want) && wrong++ < 10)
            FAIL_CHECK("a search at seq " << s.seq << " differs from the reference");
    }
    CHECK(wrong == 0);
    INFO(st.groups_seen.size() << " group observations, " << st.searches_seen.size() << " searches checked");
    CHECK(st.groups_seen.size() > 10);

    // The corpus's final state: compact once more, then every group as replayed.
    CHECK_NOTHROW(st.corpus.compact(f.session));
    for (std::size_t g = 0; g < groups; ++g)
        for (std::size_t j = 0; j < group_size; ++j) {
            const auto row = st.corpus.get(id_of(g, j));
            CHECK(row.has_value() == (at[last][g] != no_marker));
            if (row) CHECK(row->vector == row_vector(at[last][g], j));
        }
}
