// The demo's live phase (demo_live.hpp).

#include "demo_live.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include <simdjson.h>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "demo_trial.hpp"
#include "http_client.hpp"
#include "http_server.hpp"
#include "permit_usage.hpp"
#include "run_blocking.hpp"
#include "search_engine.hpp"

namespace tf = tenferro;

namespace embedding_search {

namespace {

// The shape of the load (the flags set only its duration).
constexpr std::size_t max_searchers = 32;  // fewer than the main trial's: p99 is then not all queueing
constexpr std::size_t writers = 4;
constexpr double put_interval_ms = 20.0;  // per writer: 4 x 50 PUTs/s
constexpr std::size_t ids_per_delete = 16;
constexpr std::size_t deletes_every = 4;  // PUTs per DELETE, per writer
constexpr std::uint32_t label_count = 8;  // written rows carry 1 to 3 labels of 0..7
constexpr std::size_t check_queries = 48;
constexpr double tie_tolerance = 1e-5;

struct model_row {
    std::vector<float> v;
    std::vector<std::uint32_t> labels;
};

/// What the server should hold: the corpus rows not deleted, and the written rows, by every
/// write answered 200. Each id is written by one writer only (new rows: ids n + w + writers * j;
/// deletions: the writer's own rows, and the corpus rows whose id is w modulo writers), and each
/// writer waits for an answer before its next write, so the final state does not depend on how
/// the writers' requests interleave.
struct live_model {
    std::int64_t n = 0, dim = 0;
    const float* corpus = nullptr;
    std::vector<double> corpus_norms;
    std::vector<char> corpus_deleted;
    std::int64_t corpus_alive = 0;
    std::unordered_map<std::uint64_t, model_row> written;
    std::uint64_t max_write_seq = 0;
    /// Ids of writes that got no answer (a broken connection): the row the write would leave
    /// present (an upsert's row, or the row a deletion would have removed; nullopt for a corpus
    /// row). Read back with GET at the end.
    std::unordered_map<std::uint64_t, std::optional<model_row>> uncertain;

    std::int64_t rows() const { return corpus_alive + std::int64_t(written.size()); }
    void erase(std::uint64_t id) {
        if (id < std::uint64_t(n)) {
            if (!corpus_deleted[id]) --corpus_alive;
            corpus_deleted[id] = 1;
        } else {
            written.erase(id);
        }
    }
    void restore_corpus_row(std::uint64_t id) {
        if (corpus_deleted[id]) ++corpus_alive;
        corpus_deleted[id] = 0;
    }
};

/// What the clients share (one thread: every coroutine runs on the run's io_context).
struct live_context {
    std::uint16_t port = 0;
    std::int64_t k = 10;
    std::uint64_t seed = 42;
    std::size_t searchers = 0, rows_per_put = 0;
    std::vector<std::string> search_requests;
    live_model model;
    std::vector<std::vector<std::uint64_t>> own_rows;  // by writer: its written rows still present
    std::vector<std::uint64_t> next_row;               // by writer: its next new row's index
    std::uint64_t read_your_writes = 0, read_your_writes_ok = 0;
    std::vector<std::string> mismatches;
    std::vector<std::string> error_samples;

    void mismatch(std::string what) {
        if (mismatches.size() < 5) mismatches.push_back(std::move(what));
    }
    void error(std::string what) {
        if (error_samples.size() < 5) error_samples.push_back(std::move(what));
    }
};

struct run_state {
    bool stop = false;
    live_run out;
    latency_histogram search, filtered, write;
    clock_type::time_point last_answer;
};

/// `{"results": [...], "seq": s}` with at most `k` hits, scores non-increasing.
bool parse_search_reply(std::string_view body, std::int64_t k, std::vector<search_hit>& hits, std::uint64_t& seq) {
    thread_local simdjson::dom::parser parser;
    hits.clear();
    simdjson::dom::element doc;
    simdjson::dom::array results;
    if (parser.parse(body.data(), body.size()).get(doc) || doc["results"].get_array().get(results) ||
        doc["seq"].get_uint64().get(seq))
        return false;
    double previous = 2.0;
    for (const simdjson::dom::element e : results) {
        std::uint64_t id = 0;
        double score = 0.0;
        if (e["id"].get_uint64().get(id) || e["score"].get_double().get(score) || score > previous) return false;
        previous = score;
        hits.push_back({id, float(score)});
    }
    return std::int64_t(hits.size()) <= k;
}

std::uint64_t reply_u64(std::string_view body, const char* name) {
    thread_local simdjson::dom::parser parser;
    std::uint64_t v = 0;
    if (parser.parse(body.data(), body.size())[name].get_uint64().get(v)) return ~std::uint64_t{0};
    return v;
}

std::string search_body(std::span<const float> q, std::int64_t k, const tf::row_filter* filter) {
    json_writer w;
    w.begin_object().key("vector").begin_array();
    for (const float x : q) w.value(x);
    w.end_array().field("k", k);
    if (filter && filter->filters()) {
        w.key("filter").begin_object();
        if (filter->labels) {
            w.key("labels").begin_array();
            for (const std::uint32_t l : *filter->labels) w.value(std::uint64_t{l});
            w.end_array();
        }
        if (filter->ids) {
            w.key("ids").begin_array();
            for (const std::uint64_t id : *filter->ids) w.value(id);
            w.end_array();
        }
        w.end_object();
    }
    w.end_object();
    return w.take();
}

std::string short_body(const std::string& body) { return body.substr(0, 200); }

asio::awaitable<void> searcher(run_state& st, live_context& cx, std::size_t index) {
    http_client client(co_await asio::this_coro::executor);
    std::size_t next = index * 13;
    std::vector<search_hit> hits;
    while (!st.stop) {
        try {
            if (!client.is_open()) co_await client.connect("127.0.0.1", cx.port);
            const std::string& request = cx.search_requests[next++ % cx.search_requests.size()];
            const auto sent = clock_type::now();
            const http_reply reply = co_await client.roundtrip(request);
            st.last_answer = clock_type::now();
            std::uint64_t seq = 0;
            if (reply.status == 200 && parse_search_reply(reply.body, cx.k, hits, seq) && !hits.empty()) {
                ++st.out.searches;
                st.search.record(st.last_answer - sent);
            } else if (reply.status == 503) {
                ++st.out.shed;
            } else {
                ++st.out.errors;
                cx.error("search: status " + std::to_string(reply.status) + ": " + short_body(reply.body));
            }
            if (!reply.keep_alive) client.close();
        } catch (const std::exception& e) {
            ++st.out.errors;
            cx.error(std::string("search connection: ") + e.what());
            client.close();
        }
    }
}

model_row random_row(std::mt19937_64& rng, std::int64_t dim) {
    std::normal_distribution<float> g;
    model_row r;
    r.v.resize(std::size_t(dim));
    for (float& x : r.v) x = g(rng);
    for (std::uint64_t n = 1 + rng() % 3; n-- > 0;) r.labels.push_back(std::uint32_t(rng() % label_count));
    std::sort(r.labels.begin(), r.labels.end());
    r.labels.erase(std::unique(r.labels.begin(), r.labels.end()), r.labels.end());
    return r;
}

/// A writer on its own schedule (one PUT every put_interval_ms, at once when behind): a PUT of
/// new rows, then a search filtered by a label of its first row that must find that row (read
/// your writes), and every `deletes_every` PUTs a DELETE of some of its rows and corpus rows.
asio::awaitable<void> writer(run_state& st, live_context& cx, std::size_t w, clock_type::time_point start) {
    const auto ex = co_await asio::this_coro::executor;
    http_client client(ex);
    asio::steady_timer pace(ex);
    std::mt19937_64 rng(cx.seed * 0x9E3779B97F4A7C15ull + 7919 * (w + 1));
    live_model& m = cx.model;
    const auto interval =
        std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double, std::milli>(put_interval_ms));
    auto next = start + interval * std::int64_t(w) / std::int64_t(writers);
    std::vector<search_hit> hits;
    for (std::uint64_t round = 1; !st.stop; ++round) {
        pace.expires_at(next);
        std::error_code ignored;
        co_await pace.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
        if (st.stop) break;
        next = std::max(next + interval, clock_type::now());

        // PUT new rows.
        std::vector<std::pair<std::uint64_t, model_row>> rows;
        json_writer body;
        body.begin_object().key("vectors").begin_array();
        for (std::size_t i = 0; i < cx.rows_per_put; ++i) {
            const std::uint64_t id = std::uint64_t(m.n) + w + writers * cx.next_row[w]++;
            model_row r = random_row(rng, m.dim);
            body.begin_object().field("id", id).key("vector").begin_array();
            for (const float x : r.v) body.value(x);
            body.end_array().key("labels").begin_array();
            for (const std::uint32_t l : r.labels) body.value(std::uint64_t{l});
            body.end_array().end_object();
            rows.emplace_back(id, std::move(r));
        }
        body.end_array().end_object();
        std::uint64_t put_seq = 0;
        try {
            if (!client.is_open()) co_await client.connect("127.0.0.1", cx.port);
            const auto sent = clock_type::now();
            const http_reply reply = co_await client.roundtrip(make_request("PUT", "/v1/vectors", body.str()));
            st.last_answer = clock_type::now();
            if (reply.status == 200) {
                st.write.record(st.last_answer - sent);
                ++st.out.puts;
                st.out.rows_upserted += reply_u64(reply.body, "upserted");
                put_seq = reply_u64(reply.body, "seq");
                m.max_write_seq = std::max(m.max_write_seq, put_seq);
                for (auto& [id, r] : rows) {
                    m.written[id] = std::move(r);
                    cx.own_rows[w].push_back(id);
                }
            } else {
                ++st.out.write_errors;  // nothing applied (contract section 10)
                cx.error("PUT: status " + std::to_string(reply.status) + ": " + short_body(reply.body));
            }
            if (!reply.keep_alive) client.close();
        } catch (const std::exception& e) {
            ++st.out.write_errors;
            cx.error(std::string("PUT connection: ") + e.what());
            for (auto& [id, r] : rows) m.uncertain[id] = std::move(r);
            client.close();
        }

        // Read your writes: a search filtered by a label of the first row written, near it.
        if (put_seq != 0) {
            const std::uint64_t id = rows.front().first;
            const model_row& r = m.written.at(id);
            tf::row_filter filter;
            filter.labels = std::vector<std::uint32_t>{r.labels.front()};
            try {
                if (!client.is_open()) co_await client.connect("127.0.0.1", cx.port);
                const auto sent = clock_type::now();
                const http_reply reply =
                    co_await client.roundtrip(make_request("POST", "/v1/search", search_body(r.v, cx.k, &filter)));
                st.last_answer = clock_type::now();
                std::uint64_t seq = 0;
                if (reply.status == 200 && parse_search_reply(reply.body, cx.k, hits, seq)) {
                    ++st.out.filtered;
                    st.filtered.record(st.last_answer - sent);
                    ++cx.read_your_writes;
                    if (!hits.empty() && hits.front().id == id && seq >= put_seq) {
                        ++cx.read_your_writes_ok;
                    } else {
                        cx.mismatch("read your writes: row " + std::to_string(id) + " written at seq " +
                                    std::to_string(put_seq) + ", a search filtered by label " +
                                    std::to_string(r.labels.front()) + " near it answered seq " + std::to_string(seq) +
                                    (hits.empty() ? std::string(" with no hits")
                                                  : ", best " + std::to_string(hits.front().id)));
                    }
                } else if (reply.status == 503) {
                    ++st.out.shed;
                } else {
                    ++st.out.errors;
                    cx.error("filtered search: status " + std::to_string(reply.status) + ": " + short_body(reply.body));
                }
                if (!reply.keep_alive) client.close();
            } catch (const std::exception& e) {
                ++st.out.errors;
                cx.error(std::string("filtered search connection: ") + e.what());
                client.close();
            }
        }

        if (round % deletes_every != 0) continue;
        // DELETE some of its own rows and some corpus rows of its share (while more than half
        // of the corpus is left).
        std::vector<std::uint64_t> ids;
        std::vector<std::uint64_t>& own = cx.own_rows[w];
        for (std::size_t i = 0; i < ids_per_delete / 2 && !own.empty(); ++i) {
            const std::size_t at = std::size_t(rng() % own.size());
            ids.push_back(own[at]);
            own[at] = own.back();
            own.pop_back();
        }
        for (std::size_t tries = 0; ids.size() < ids_per_delete && tries < 4 * ids_per_delete; ++tries) {
            if (m.corpus_alive <= m.n / 2) break;
            const std::uint64_t id = (rng() % std::uint64_t(m.n)) / writers * writers + w;
            if (id >= std::uint64_t(m.n) || m.corpus_deleted[id] || std::find(ids.begin(), ids.end(), id) != ids.end())
                continue;
            ids.push_back(id);
        }
        if (ids.empty()) continue;
        json_writer del;
        del.begin_object().key("ids").begin_array();
        for (const std::uint64_t id : ids) del.value(id);
        del.end_array().end_object();
        try {
            if (!client.is_open()) co_await client.connect("127.0.0.1", cx.port);
            const auto sent = clock_type::now();
            const http_reply reply = co_await client.roundtrip(make_request("DELETE", "/v1/vectors", del.str()));
            st.last_answer = clock_type::now();
            if (reply.status == 200) {
                st.write.record(st.last_answer - sent);
                ++st.out.deletes;
                st.out.ids_deleted += reply_u64(reply.body, "deleted");
                m.max_write_seq = std::max(m.max_write_seq, reply_u64(reply.body, "seq"));
                for (const std::uint64_t id : ids) m.erase(id);
            } else {
                ++st.out.write_errors;
                cx.error("DELETE: status " + std::to_string(reply.status) + ": " + short_body(reply.body));
                for (const std::uint64_t id : ids)
                    if (id >= std::uint64_t(m.n)) own.push_back(id);  // still there
            }
            if (!reply.keep_alive) client.close();
        } catch (const std::exception& e) {
            ++st.out.write_errors;
            cx.error(std::string("DELETE connection: ") + e.what());
            for (const std::uint64_t id : ids) {
                if (id < std::uint64_t(m.n)) {
                    m.uncertain[id] = std::nullopt;
                } else if (const auto it = m.written.find(id); it != m.written.end()) {
                    m.uncertain[id] = it->second;
                }
            }
            client.close();
        }
    }
}

asio::awaitable<void> conductor(run_state& st, clock_type::time_point deadline) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_at(deadline);
    std::error_code ignored;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    st.stop = true;
}

/// One closed-loop run: the searchers, and the writers when `writes`.
live_run run_clients(live_context& cx, double seconds, bool writes) {
    asio::io_context io(1);
    run_state st;
    const auto start = clock_type::now();
    st.last_answer = start;
    const auto rethrow = [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    };
    for (std::size_t i = 0; i < cx.searchers; ++i) asio::co_spawn(io, searcher(st, cx, i), rethrow);
    if (writes) {
        for (std::size_t w = 0; w < writers; ++w) asio::co_spawn(io, writer(st, cx, w, start), rethrow);
    }
    asio::co_spawn(
        io,
        conductor(st, start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds))),
        rethrow);
    io.run();
    st.out.seconds = std::chrono::duration<double>(st.last_answer - start).count();
    st.out.search_latency = st.search.snapshot();
    st.out.filtered_latency = st.filtered.snapshot();
    st.out.write_latency = st.write.snapshot();
    return st.out;
}

/// The rows with no known outcome, read back: GET says whether each is there.
std::size_t resolve_uncertain(live_context& cx) {
    live_model& m = cx.model;
    if (m.uncertain.empty()) return 0;
    const auto read_back = [&]() -> asio::awaitable<void> {
        http_client client(co_await asio::this_coro::executor);
        for (auto& [id, row] : m.uncertain) {
            if (!client.is_open()) co_await client.connect("127.0.0.1", cx.port);
            const http_reply reply =
                co_await client.roundtrip(make_request("GET", "/v1/vectors/" + std::to_string(id)));
            if (reply.status == 200) {
                if (id < std::uint64_t(m.n)) {
                    m.restore_corpus_row(id);
                } else if (row) {
                    m.written[id] = *row;
                }
            } else if (reply.status == 404) {
                m.erase(id);
            } else {
                cx.mismatch("GET /v1/vectors/" + std::to_string(id) + ": status " + std::to_string(reply.status));
            }
            if (!reply.keep_alive) client.close();
        }
    };
    run_blocking(read_back());
    return m.uncertain.size();
}

// ---- the check -----------------------------------------------------------------------------

struct sample_query {
    std::string what;  // for a mismatch's description
    std::vector<float> q;
    tf::row_filter filter;
};

struct exact_hit {
    std::uint64_t id;
    double score;
};

bool passes(const tf::row_filter& f, std::uint64_t id, std::span<const std::uint32_t> labels) {
    if (f.ids && std::find(f.ids->begin(), f.ids->end(), id) == f.ids->end()) return false;
    if (f.labels && std::none_of(labels.begin(), labels.end(), [&](std::uint32_t l) {
            return std::find(f.labels->begin(), f.labels->end(), l) != f.labels->end();
        }))
        return false;
    return true;
}

/// The cosine of `q` (norm `qn`) with live row `id` when it passes `f`; nullopt otherwise.
std::optional<double> exact_score(const live_model& m, std::span<const float> q, double qn, std::uint64_t id,
                                  const tf::row_filter& f) {
    const float* v = nullptr;
    double norm = 0.0;
    std::span<const std::uint32_t> labels;
    if (id < std::uint64_t(m.n)) {
        if (m.corpus_deleted[id]) return std::nullopt;
        v = m.corpus + std::int64_t(id) * m.dim;
        norm = m.corpus_norms[id];
    } else {
        const auto it = m.written.find(id);
        if (it == m.written.end()) return std::nullopt;
        v = it->second.v.data();
        labels = it->second.labels;
        for (const float x : it->second.v) norm += double(x) * double(x);
        norm = std::sqrt(norm);
    }
    if (!passes(f, id, labels)) return std::nullopt;
    double dot = 0.0;
    for (std::int64_t j = 0; j < m.dim; ++j) dot += double(q[std::size_t(j)]) * double(v[j]);
    return dot / (qn * norm);
}

double norm_of(std::span<const float> q) {
    double s = 0.0;
    for (const float x : q) s += double(x) * double(x);
    return std::sqrt(s);
}

/// The float64 brute force: the `k` best live rows passing the filter, best first, ties to the
/// lower id.
std::vector<exact_hit> brute_force(const live_model& m, const sample_query& s, std::int64_t k) {
    const double qn = norm_of(s.q);
    std::vector<exact_hit> scored;
    const auto consider = [&](std::uint64_t id) {
        if (const auto score = exact_score(m, s.q, qn, id, s.filter)) scored.push_back({id, *score});
    };
    if (s.filter.ids) {
        std::vector<std::uint64_t> ids = *s.filter.ids;
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        for (const std::uint64_t id : ids) consider(id);
    } else {
        if (!s.filter.labels) {  // corpus rows carry no labels
            for (std::int64_t r = 0; r < m.n; ++r) consider(std::uint64_t(r));
        }
        for (const auto& [id, row] : m.written) consider(id);
    }
    const auto better = [](const exact_hit& a, const exact_hit& b) {
        return a.score != b.score ? a.score > b.score : a.id < b.id;
    };
    const std::size_t keep = std::min(scored.size(), std::size_t(k));
    std::partial_sort(scored.begin(), scored.begin() + std::ptrdiff_t(keep), scored.end(), better);
    scored.resize(keep);
    return scored;
}

/// The served hits against the exact ones: as many; each served row live, passing the filter,
/// once, with its score within the tolerance of its exact score, and that exact score within
/// the tolerance of the exact one at its rank (near-ties may trade places).
std::string compare(const live_model& m, const sample_query& s, const std::vector<search_hit>& served,
                    const std::vector<exact_hit>& exact) {
    if (served.size() != exact.size())
        return std::to_string(served.size()) + " hits, the brute force has " + std::to_string(exact.size());
    const double qn = norm_of(s.q);
    for (std::size_t i = 0; i < served.size(); ++i) {
        const std::string at = "rank " + std::to_string(i + 1) + ": ";
        for (std::size_t j = 0; j < i; ++j)
            if (served[j].id == served[i].id) return at + "row " + std::to_string(served[i].id) + " twice";
        const std::optional<double> own = exact_score(m, s.q, qn, served[i].id, s.filter);
        if (!own) return at + "row " + std::to_string(served[i].id) + " is deleted, unknown or filtered out";
        char text[256];
        if (std::abs(double(served[i].score) - *own) > tie_tolerance) {
            std::snprintf(text, sizeof text, "row %llu scored %.7f, its exact score is %.7f",
                          static_cast<unsigned long long>(served[i].id), double(served[i].score), *own);
            return at + text;
        }
        if (std::abs(*own - exact[i].score) > tie_tolerance) {
            std::snprintf(text, sizeof text, "row %llu (exact %.7f) where the brute force has row %llu (%.7f)",
                          static_cast<unsigned long long>(served[i].id), *own,
                          static_cast<unsigned long long>(exact[i].id), exact[i].score);
            return at + text;
        }
    }
    return {};
}

std::vector<float> near(std::span<const float> row, double noise, std::mt19937_64& rng) {
    std::normal_distribution<double> g;
    const double scale = noise * norm_of(row) / std::sqrt(double(row.size()));
    std::vector<float> q(row.size());
    for (std::size_t j = 0; j < row.size(); ++j) q[j] = float(double(row[j]) + scale * g(rng));
    return q;
}

/// The check's queries: near live corpus rows, near written rows, near deleted corpus rows
/// (unfiltered); near written rows filtered by one or two labels; near rows of an id allow-list
/// (live, deleted and written ids, and ids never written), some with a label filter too.
std::vector<sample_query> make_samples(const live_context& cx, std::size_t count, std::size_t& by_label,
                                       std::size_t& by_id) {
    const live_model& m = cx.model;
    std::mt19937_64 rng(cx.seed ^ 0x11FE11FEull);
    std::vector<std::uint64_t> written, deleted;
    for (const auto& [id, row] : m.written) written.push_back(id);
    std::sort(written.begin(), written.end());
    for (std::int64_t r = 0; r < m.n; ++r)
        if (m.corpus_deleted[std::size_t(r)]) deleted.push_back(std::uint64_t(r));
    const auto row_of = [&](std::uint64_t id) -> std::span<const float> {
        if (id < std::uint64_t(m.n)) return {m.corpus + std::int64_t(id) * m.dim, std::size_t(m.dim)};
        return m.written.at(id).v;
    };
    const auto pick = [&](const std::vector<std::uint64_t>& from) { return from[rng() % from.size()]; };
    const auto live_corpus_row = [&]() {
        for (;;) {
            const std::uint64_t id = rng() % std::uint64_t(m.n);
            if (!m.corpus_deleted[id]) return id;
        }
    };
    std::vector<sample_query> out;
    by_label = by_id = 0;
    for (std::size_t i = 0; i < count; ++i) {
        sample_query s;
        const std::size_t kind = i % 6;
        if (kind == 0 || kind == 1 || written.empty()) {
            const std::uint64_t id = live_corpus_row();
            s.what = "near corpus row " + std::to_string(id);
            s.q = near(row_of(id), 0.5, rng);
        } else if (kind == 2) {
            const std::uint64_t id = pick(written);
            s.what = "near written row " + std::to_string(id);
            s.q = near(row_of(id), 0.3, rng);
        } else if (kind == 3) {
            const std::uint64_t id = deleted.empty() ? live_corpus_row() : pick(deleted);
            s.what = "near deleted corpus row " + std::to_string(id);
            s.q = near(row_of(id), 0.1, rng);
        } else if (kind == 4) {
            const std::uint64_t id = pick(written);
            std::vector<std::uint32_t> labels{std::uint32_t(rng() % label_count)};
            if (rng() % 2) labels.push_back(std::uint32_t(rng() % label_count));
            s.what = "near written row " + std::to_string(id) + ", filtered by labels";
            for (const std::uint32_t l : labels) s.what += " " + std::to_string(l);
            s.q = near(row_of(id), 0.5, rng);
            s.filter.labels = std::move(labels);
            ++by_label;
        } else {
            std::vector<std::uint64_t> ids;
            for (int j = 0; j < 12; ++j) ids.push_back(live_corpus_row());
            for (int j = 0; j < 12; ++j) ids.push_back(pick(written));
            for (int j = 0; j < 4 && !deleted.empty(); ++j) ids.push_back(pick(deleted));
            for (int j = 0; j < 4; ++j) ids.push_back((std::uint64_t{1} << 62) + rng() % 1000);  // never written
            const std::uint64_t id = ids[rng() % ids.size()];
            s.what = "near row " + std::to_string(id) + ", filtered by 32 ids";
            s.q = id < std::uint64_t(m.n) || m.written.count(id) ? near(row_of(id), 0.5, rng)
                                                                 : near(row_of(live_corpus_row()), 0.5, rng);
            if (i % 12 == 11) {
                s.filter.labels = std::vector<std::uint32_t>{std::uint32_t(rng() % label_count)};
                s.what += " and label " + std::to_string(s.filter.labels->front());
            }
            s.filter.ids = std::move(ids);
            ++by_id;
        }
        out.push_back(std::move(s));
    }
    return out;
}

void check(live_context& cx, live_result& r) {
    std::vector<sample_query> samples = make_samples(cx, check_queries, r.filtered_by_label, r.filtered_by_id);
    r.queries = samples.size();
    // The server's answers, one at a time.
    std::vector<std::vector<search_hit>> served(samples.size());
    std::vector<std::string> problems(samples.size());
    const auto ask = [&]() -> asio::awaitable<void> {
        http_client client(co_await asio::this_coro::executor);
        for (std::size_t i = 0; i < samples.size(); ++i) {
            if (!client.is_open()) co_await client.connect("127.0.0.1", cx.port);
            const http_reply reply = co_await client.roundtrip(
                make_request("POST", "/v1/search", search_body(samples[i].q, cx.k, &samples[i].filter)));
            std::uint64_t seq = 0;
            if (reply.status != 200 || !parse_search_reply(reply.body, cx.k, served[i], seq)) {
                problems[i] = "status " + std::to_string(reply.status) + ": " + short_body(reply.body);
            } else if (seq < cx.model.max_write_seq) {
                problems[i] = "answered at seq " + std::to_string(seq) + ", before the last write's " +
                              std::to_string(cx.model.max_write_seq);
            }
            if (!reply.keep_alive) client.close();
        }
    };
    run_blocking(ask());
    // The brute force, the queries spread over the cores.
    std::atomic<std::size_t> next{0};
    const auto work = [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < samples.size();) {
            if (!problems[i].empty()) continue;
            problems[i] = compare(cx.model, samples[i], served[i], brute_force(cx.model, samples[i], cx.k));
        }
    };
    std::vector<std::thread> threads;
    const std::size_t n = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, samples.size());
    for (std::size_t t = 1; t < n; ++t) threads.emplace_back(work);
    work();
    for (std::thread& t : threads) t.join();
    for (std::size_t i = 0; i < samples.size(); ++i) {
        if (problems[i].empty()) {
            ++r.matched;
        } else {
            cx.mismatch("query " + std::to_string(i) + " (" + samples[i].what + "): " + problems[i]);
        }
    }
}

void print_latency(const histogram_snapshot& h) {
    std::printf("p50 %7.2f ms   p99 %7.2f ms   max %7.2f ms", h.percentile_ms(0.5), h.percentile_ms(0.99),
                double(h.max_ns) / 1e6);
}

void write_latency(json_writer& w, const char* key, const histogram_snapshot& h) {
    w.key(key).begin_object();
    w.field("count", h.total).field("p50", h.percentile_ms(0.5)).field("p90", h.percentile_ms(0.9));
    w.field("p99", h.percentile_ms(0.99)).field("max", double(h.max_ns) / 1e6);
    w.end_object();
}

/// `rows` as ids 0..n-1, in writes of a few thousand rows built in one reused corpus_write: it
/// keeps its capacity across clear(), whereas a fresh one grows its buffers an upsert at a time
/// (exactly what each needs), which makes one large write's building quadratic in its rows.
void load_corpus(tf::live_corpus& live, const tf::tensor& rows) {
    const std::int64_t n = rows.shape()[0], dim = rows.shape()[1];
    const float* data = rows.data<float>();
    constexpr std::int64_t chunk = 2048;
    tf::corpus_write w;
    for (std::int64_t r0 = 0; r0 < n; r0 += chunk) {
        w.clear();
        for (std::int64_t r = r0; r < std::min(n, r0 + chunk); ++r)
            w.upsert(std::uint64_t(r), std::span<const float>(data + r * dim, std::size_t(dim)));
        const tf::write_result res = live.apply(w);
        if (!res)
            throw std::runtime_error("live phase: row " + std::to_string(r0 + std::int64_t(res.item)) +
                                     " of the corpus: " + res.error.message());
    }
}

}  // namespace

live_result run_live_phase(const demo_options& o, const tf::tensor& corpus) {
    live_result r;
    r.corpus_rows = corpus.shape()[0];
    r.dim = corpus.shape()[1];
    r.k = o.k;
    r.writers = writers;
    r.searchers = std::clamp<std::size_t>(o.connections, 1, max_searchers);
    // PUT bodies of at most about 256 KiB (a number takes up to 16 bytes): well under --max-body.
    r.rows_per_put = std::clamp<std::size_t>(std::size_t(256 * 1024 / (16 * r.dim)), 1, 32);
    r.ids_per_delete = ids_per_delete;
    r.deletes_every = deletes_every;
    r.put_interval_ms = put_interval_ms;
    r.seconds_per_run = o.live_seconds / 2;

    std::printf("\nlive phase: the corpus as ids 0..%lld of a live corpus, %zu search connections (k = %lld)\n",
                static_cast<long long>(r.corpus_rows - 1), r.searchers, static_cast<long long>(r.k));
    std::printf(
        "  writers    %zu, each a PUT of %zu new rows (1-3 labels of 0..%u) every %.0f ms, a search filtered by a "
        "label it wrote after each, a DELETE of %zu rows every %zu PUTs\n",
        writers, r.rows_per_put, label_count - 1, put_interval_ms, ids_per_delete, deletes_every);
    std::fflush(stdout);

    auto usage = std::make_shared<permit_usage_observer>();
    tf::cpu_backend cpu(backend_options_for(o.mode, usage, std::size_t(corpus.size()) * sizeof(float)));
    const auto loading = clock_type::now();
    tf::live_corpus_options lo;  // in memory
    lo.dim = r.dim;
    lo.normalize = true;
    auto live = std::make_shared<tf::live_corpus>(lo);
    load_corpus(*live, corpus);
    live->compact();
    r.load_seconds = std::chrono::duration<double>(clock_type::now() - loading).count();
    search_engine engine(cpu, live, engine_options_for(o.mode), usage);
    server_options so;
    so.port = 0;
    so.io_threads = std::max<std::size_t>(1, o.mode.io_threads);
    // Room for a PUT of one row however long (a number takes up to 16 bytes).
    so.max_body_bytes = std::max(so.max_body_bytes, r.rows_per_put * std::size_t(r.dim) * 20 + 4096);
    search_server server(engine, so);
    server.start();

    live_context cx;
    cx.port = server.port();
    cx.k = o.k;
    cx.seed = o.seed;
    cx.searchers = r.searchers;
    cx.rows_per_put = r.rows_per_put;
    cx.search_requests = make_requests(corpus, 512, o.k, o.seed + 1);
    cx.model.n = r.corpus_rows;
    cx.model.dim = r.dim;
    cx.model.corpus = corpus.data<float>();
    cx.model.corpus_deleted.assign(std::size_t(r.corpus_rows), 0);
    cx.model.corpus_alive = r.corpus_rows;
    cx.model.corpus_norms.resize(std::size_t(r.corpus_rows));
    for (std::int64_t i = 0; i < r.corpus_rows; ++i)
        cx.model.corpus_norms[std::size_t(i)] =
            norm_of(std::span<const float>(cx.model.corpus + i * r.dim, std::size_t(r.dim)));
    cx.own_rows.resize(writers);
    cx.next_row.assign(writers, 0);

    std::printf(
        "  server     127.0.0.1:%u, the corpus loaded and compacted in %.2f s; %.1f s of searches alone, "
        "then %.1f s with the writers\n",
        unsigned(cx.port), r.load_seconds, r.seconds_per_run, r.seconds_per_run);
    std::fflush(stdout);
    run_clients(cx, std::min(0.5, r.seconds_per_run / 4), false);  // warm-up, not reported
    r.alone = run_clients(cx, r.seconds_per_run, false);
    r.with_writes = run_clients(cx, r.seconds_per_run, true);

    r.resolved_by_get = resolve_uncertain(cx);
    check(cx, r);
    const engine_snapshot e = engine.snapshot();
    r.final_seq = e.corpus.seq;
    r.final_rows = e.corpus.rows;
    r.segments = e.corpus.segments;
    r.compactions = e.corpus.compactions;
    r.model_rows = cx.model.rows();
    if (r.final_rows != r.model_rows)
        cx.mismatch("the corpus holds " + std::to_string(r.final_rows) + " rows, the writes answered 200 leave " +
                    std::to_string(r.model_rows));
    r.read_your_writes = cx.read_your_writes;
    r.read_your_writes_ok = cx.read_your_writes_ok;
    r.mismatches = std::move(cx.mismatches);
    r.error_samples = std::move(cx.error_samples);
    r.ok = r.matched == r.queries && r.read_your_writes_ok == r.read_your_writes && r.final_rows == r.model_rows &&
           r.mismatches.empty();

    server.drain();
    server.wait();
    return r;
}

void print_live_results(const live_result& r) {
    const live_run& a = r.alone;
    const live_run& b = r.with_writes;
    std::printf("\nlive results\n");
    std::printf("  %-22s %8llu in %5.2f s = %7.0f req/s   ", "searches alone",
                static_cast<unsigned long long>(a.searches), a.seconds, a.searches_per_second());
    print_latency(a.search_latency);
    std::printf("\n  %-22s %8llu in %5.2f s = %7.0f req/s   ", "searches with writes",
                static_cast<unsigned long long>(b.searches), b.seconds, b.searches_per_second());
    print_latency(b.search_latency);
    std::printf("\n  %-22s %8llu                             ", "filtered searches",
                static_cast<unsigned long long>(b.filtered));
    print_latency(b.filtered_latency);
    std::printf("\n  %-22s %8llu = %.0f writes/s (%llu PUT, %llu DELETE), %.0f rows/s upserted, %llu deleted\n",
                "writes", static_cast<unsigned long long>(b.puts + b.deletes), b.writes_per_second(),
                static_cast<unsigned long long>(b.puts), static_cast<unsigned long long>(b.deletes),
                b.rows_per_second(), static_cast<unsigned long long>(b.ids_deleted));
    std::printf("  %-22s p50 %7.2f ms   p99 %7.2f ms   max %7.2f ms\n", "write latency",
                b.write_latency.percentile_ms(0.5), b.write_latency.percentile_ms(0.99),
                double(b.write_latency.max_ns) / 1e6);
    std::printf("  %-22s search throughput x%.2f, search p99 x%.2f\n", "with writes / without", r.throughput_ratio(),
                r.p99_ratio());
    const std::uint64_t errors = a.errors + b.errors + b.write_errors, shed = a.shed + b.shed;
    std::printf("  %-22s %llu (503: %llu)\n", "errors", static_cast<unsigned long long>(errors),
                static_cast<unsigned long long>(shed));
    for (const std::string& e : r.error_samples) std::printf("      %s\n", e.c_str());
    std::printf("  %-22s %lld rows, seq %llu, %lld segment%s, %llu compaction%s\n", "corpus after",
                static_cast<long long>(r.final_rows), static_cast<unsigned long long>(r.final_seq),
                static_cast<long long>(r.segments), r.segments == 1 ? "" : "s",
                static_cast<unsigned long long>(r.compactions), r.compactions == 1 ? "" : "s");
    std::printf("  %-22s %zu of %zu queries match the float64 brute force (%zu filtered by labels, %zu by ids)\n",
                "check", r.matched, r.queries, r.filtered_by_label, r.filtered_by_id);
    std::printf("  %-22s %llu of %llu filtered searches found the row just written\n", "read your writes",
                static_cast<unsigned long long>(r.read_your_writes_ok),
                static_cast<unsigned long long>(r.read_your_writes));
    if (r.resolved_by_get)
        std::printf("  (%zu ids of writes without an answer were read back with GET)\n", r.resolved_by_get);
    for (const std::string& m : r.mismatches) std::printf("  MISMATCH: %s\n", m.c_str());
}

void write_live_results(json_writer& w, const live_result& r) {
    const auto run = [&w](const char* key, const live_run& x, bool writes) {
        w.key(key).begin_object();
        w.field("seconds", x.seconds).field("searches", x.searches).field("searches_per_s", x.searches_per_second());
        write_latency(w, "search_latency_ms", x.search_latency);
        w.field("shed_503", x.shed).field("errors", x.errors);
        if (writes) {
            w.field("filtered_searches", x.filtered);
            write_latency(w, "filtered_latency_ms", x.filtered_latency);
            w.field("puts", x.puts).field("deletes", x.deletes);
            w.field("rows_upserted", x.rows_upserted).field("ids_deleted", x.ids_deleted);
            w.field("writes_per_s", x.writes_per_second()).field("rows_per_s", x.rows_per_second());
            write_latency(w, "write_latency_ms", x.write_latency);
            w.field("write_errors", x.write_errors);
        }
        w.end_object();
    };
    w.begin_object();
    w.field("corpus_rows", r.corpus_rows).field("dim", r.dim).field("k", r.k).field("load_s", r.load_seconds);
    w.field("seconds_per_run", r.seconds_per_run).field("searchers", r.searchers).field("writers", r.writers);
    w.field("rows_per_put", r.rows_per_put).field("put_interval_ms", r.put_interval_ms);
    w.field("ids_per_delete", r.ids_per_delete).field("deletes_every", r.deletes_every);
    run("without_writes", r.alone, false);
    run("with_writes", r.with_writes, true);
    w.field("throughput_ratio", r.throughput_ratio()).field("p99_ratio", r.p99_ratio());
    w.key("corpus_after").begin_object();
    w.field("rows", r.final_rows).field("seq", r.final_seq).field("segments", r.segments);
    w.field("compactions", r.compactions);
    w.end_object();
    w.key("check").begin_object();
    w.field("queries", r.queries).field("matched", r.matched);
    w.field("filtered_by_labels", r.filtered_by_label).field("filtered_by_ids", r.filtered_by_id);
    w.field("read_your_writes", r.read_your_writes).field("read_your_writes_ok", r.read_your_writes_ok);
    w.field("rows", r.final_rows).field("model_rows", r.model_rows);
    w.field("resolved_by_get", r.resolved_by_get);
    w.key("mismatches").begin_array();
    for (const std::string& m : r.mismatches) w.value(m);
    w.end_array();
    w.field("ok", r.ok);
    w.end_object();
    w.key("error_samples").begin_array();
    for (const std::string& e : r.error_samples) w.value(e);
    w.end_array();
    w.end_object();
}

}  // namespace embedding_search
