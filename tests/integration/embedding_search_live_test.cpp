// The search server's live corpus (contract section 10), driven over HTTP as a user would:
// writes, reads by id, filtered searches checked against a float64 brute force over a model of
// the rows, every new error naming its field, compaction in its own group never changing an
// answer, and writers and searchers at once (read your writes, no partial write seen).

#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "../support/embedding_search_fixture.hpp"
#include "io/io_testing.hpp"
#include "json_writer.hpp"

using namespace embedding_search;
using namespace embedding_search::testing;

namespace {

constexpr std::int64_t dim = 8;

struct model_row {
    std::vector<float> v;
    std::vector<std::uint32_t> labels;
};
using model = std::map<std::uint64_t, model_row>;

// A server on an empty live corpus, with the host's groups as tenferro-search makes them (the
// compaction group last), compacting early.
struct live_fixture {
    explicit live_fixture(std::int64_t compaction_min_rows = 64)
        : cpu(backend_options_for(mode(), nullptr)),
          corpus(std::make_shared<tf::live_corpus>(
              tf::live_corpus_options{.dim = dim, .directory = {}, .normalize = true})),
          engine(cpu, corpus, with_compaction(engine_options_for(mode()), compaction_min_rows)),
          server(engine, server_fixture::with_port0({})) {
        server.start();
    }
    ~live_fixture() {
        server.drain();
        server.wait();
    }
    static server_mode mode() {
        server_mode m;
        m.permits = 2;
        m.compute_nice = 0;
        return m;
    }
    static engine_options with_compaction(engine_options o, std::int64_t rows) {
        o.compaction_min_rows = rows;
        return o;
    }
    http_reply call(const std::string& request) {
        return run_blocking(server_fixture::roundtrip(server.port(), request));
    }

    tf::cpu_backend cpu;
    std::shared_ptr<tf::live_corpus> corpus;
    search_engine engine;
    search_server server;
};

std::string upsert_body(const std::vector<std::pair<std::uint64_t, model_row>>& rows) {
    json_writer w;
    w.begin_object().key("vectors").begin_array();
    for (const auto& [id, r] : rows) {
        w.begin_object().field("id", id).key("vector").begin_array();
        for (const float x : r.v) w.value(x);
        w.end_array().key("labels").begin_array();
        for (const std::uint32_t l : r.labels) w.value(std::uint64_t{l});
        w.end_array().end_object();
    }
    w.end_array().end_object();
    return w.take();
}

std::string delete_body(const std::vector<std::uint64_t>& ids) {
    json_writer w;
    w.begin_object().key("ids").begin_array();
    for (const std::uint64_t id : ids) w.value(id);
    w.end_array().end_object();
    return w.take();
}

std::uint64_t field_u64(const std::string& body, const char* name) {
    simdjson::dom::parser parser;
    std::uint64_t v = 0;
    if (parser.parse(body)[name].get_uint64().get(v)) return ~std::uint64_t{0};
    return v;
}

std::string search_body(const std::vector<float>& q, std::int64_t k, const std::string& filter = "") {
    return "{\"vector\": " + vector_json(q) + ", \"k\": " + std::to_string(k) +
           (filter.empty() ? "" : ", \"filter\": " + filter) + "}";
}

// The float64 brute force: cosine similarity, best first, ties to the lower id; the rows that
// pass `labels` (any of) and `ids` (when given).
std::vector<search_hit> brute_force(const model& rows, const std::vector<float>& q, std::size_t k,
                                    const std::vector<std::uint32_t>* labels, const std::vector<std::uint64_t>* ids) {
    double qn = 0;
    for (const float x : q) qn += double(x) * x;
    std::vector<std::pair<double, std::uint64_t>> scored;
    for (const auto& [id, r] : rows) {
        if (ids && std::find(ids->begin(), ids->end(), id) == ids->end()) continue;
        if (labels && std::none_of(r.labels.begin(), r.labels.end(), [&](std::uint32_t l) {
                return std::find(labels->begin(), labels->end(), l) != labels->end();
            }))
            continue;
        double dot = 0, rn = 0;
        for (std::size_t j = 0; j < q.size(); ++j) {
            dot += double(q[j]) * r.v[j];
            rn += double(r.v[j]) * r.v[j];
        }
        scored.push_back({dot / std::sqrt(qn * rn), id});
    }
    std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::vector<search_hit> out;
    for (std::size_t i = 0; i < std::min(k, scored.size()); ++i)
        out.push_back({scored[i].second, float(scored[i].first)});
    return out;
}

// The served hits agree with the brute force: the same ids where the scores are apart by more
// than the f32 error, the same scores to 1e-5.
bool agrees(const std::vector<search_hit>& served, const std::vector<search_hit>& exact, std::string& why) {
    if (served.size() != exact.size()) {
        why = "served " + std::to_string(served.size()) + " hits, expected " + std::to_string(exact.size());
        return false;
    }
    for (std::size_t i = 0; i < served.size(); ++i) {
        if (std::abs(double(served[i].score) - double(exact[i].score)) > 1e-5) {
            why = "rank " + std::to_string(i) + ": score " + std::to_string(served[i].score) + " against " +
                  std::to_string(exact[i].score);
            return false;
        }
        const bool near_tie = (i + 1 < exact.size() && exact[i].score - exact[i + 1].score < 1e-5) ||
                              (i > 0 && exact[i - 1].score - exact[i].score < 1e-5);
        if (served[i].id != exact[i].id && !near_tie) {
            why = "rank " + std::to_string(i) + ": id " + std::to_string(served[i].id) + " against " +
                  std::to_string(exact[i].id);
            return false;
        }
    }
    return true;
}

model_row random_row(std::mt19937_64& rng) {
    std::normal_distribution<float> g;
    model_row r;
    for (std::int64_t j = 0; j < dim; ++j) r.v.push_back(g(rng));
    for (std::uint64_t n = rng() % 3; n-- > 0;) r.labels.push_back(static_cast<std::uint32_t>(rng() % 5));
    std::sort(r.labels.begin(), r.labels.end());
    r.labels.erase(std::unique(r.labels.begin(), r.labels.end()), r.labels.end());
    return r;
}

}  // namespace

TEST_CASE("PUT, GET and DELETE /v1/vectors: sequence numbers, rows as written, ids up to 2^64 - 1") {
    live_fixture f;
    const std::uint64_t top = ~std::uint64_t{0};
    http_reply r = f.call(make_request(
        "PUT", "/v1/vectors",
        upsert_body({{17, {{1, 2, 3, 4, 5, 6, 7, 8.125f}, {3, 9}}}, {top, {{0.1f, 0, 0, 0, 0, 0, 0, 1e-30f}, {}}}})));
    REQUIRE(r.status == 200);
    CHECK(field_u64(r.body, "upserted") == 2);
    CHECK(field_u64(r.body, "seq") == 1);

    r = f.call(make_request("GET", "/v1/vectors/18446744073709551615", ""));
    REQUIRE(r.status == 200);
    CHECK(field_u64(r.body, "id") == top);
    simdjson::dom::parser parser;
    simdjson::dom::element row = parser.parse(r.body);
    std::vector<float> got;
    for (const simdjson::dom::element e : row["vector"].get_array()) got.push_back(float(e.get_double().value()));
    CHECK(got == std::vector<float>{0.1f, 0, 0, 0, 0, 0, 0, 1e-30f});  // as written, read back as the same f32

    r = f.call(make_request("GET", "/v1/vectors/17", ""));
    CHECK(r.body.find("\"labels\":[3,9]") != std::string::npos);
    CHECK(f.call(make_request("GET", "/v1/vectors/18", "")).status == 404);
    CHECK(f.call(make_request("GET", "/v1/vectors/18446744073709551616", "")).status == 400);
    CHECK(f.call(make_request("GET", "/v1/vectors/-1", "")).status == 400);
    CHECK(f.call(make_request("POST", "/v1/vectors/17", "")).status == 405);
    CHECK(f.call(make_request("GET", "/v1/vectors", "")).status == 405);

    r = f.call(make_request("DELETE", "/v1/vectors", delete_body({17, 99})));
    REQUIRE(r.status == 200);
    CHECK(field_u64(r.body, "deleted") == 1);
    CHECK(field_u64(r.body, "seq") == 2);
    CHECK(f.call(make_request("GET", "/v1/vectors/17", "")).status == 404);

    // A search reports its snapshot's sequence number.
    r = f.call(make_request("POST", "/v1/search", search_body({1, 0, 0, 0, 0, 0, 0, 0}, 5)));
    REQUIRE(r.status == 200);
    CHECK(field_u64(r.body, "seq") == 2);
    CHECK(hits_of(r.body).size() == 1);
}

TEST_CASE("every new error names its field and applies nothing") {
    live_fixture f;
    REQUIRE(f.call(make_request("PUT", "/v1/vectors", upsert_body({{1, {{1, 0, 0, 0, 0, 0, 0, 0}, {}}}}))).status ==
            200);
    const std::string ok_vector = "[1,2,3,4,5,6,7,8]";
    struct bad_case {
        std::string method, target, body, field;
    };
    const std::vector<bad_case> cases = {
        {"PUT", "/v1/vectors", "{}", "vectors"},
        {"PUT", "/v1/vectors", "{\"vectors\": 3}", "vectors"},
        {"PUT", "/v1/vectors", "{\"vectors\": [{\"vector\": " + ok_vector + "}]}", "vectors[0].id"},
        {"PUT", "/v1/vectors", "{\"vectors\": [{\"id\": -1, \"vector\": " + ok_vector + "}]}", "vectors[0].id"},
        {"PUT", "/v1/vectors", "{\"vectors\": [{\"id\": 1.5, \"vector\": " + ok_vector + "}]}", "vectors[0].id"},
        {"PUT", "/v1/vectors", "{\"vectors\": [{\"id\": 18446744073709551616, \"vector\": " + ok_vector + "}]}",
         "vectors[0].id"},
        {"PUT", "/v1/vectors",
         "{\"vectors\": [{\"id\": 5, \"vector\": " + ok_vector + "}, {\"id\": 5, \"vector\": " + ok_vector + "}]}",
         "vectors[1].id"},
        {"PUT", "/v1/vectors", "{\"vectors\": [{\"id\": 5, \"vector\": [1,2,3]}]}", "vectors[0].vector"},
        {"PUT", "/v1/vectors", "{\"vectors\": [{\"id\": 5, \"vector\": [1,2,3,4,5,6,7,\"x\"]}]}", "vectors[0].vector"},
        {"PUT", "/v1/vectors", "{\"vectors\": [{\"id\": 5, \"vector\": [1,2,3,4,5,6,7,1e39]}]}", "vectors[0].vector"},
        {"PUT", "/v1/vectors", "{\"vectors\": [{\"id\": 5, \"vector\": [0,0,0,0,0,0,0,0]}]}", "vectors[0].vector"},
        {"PUT", "/v1/vectors", "{\"vectors\": [{\"id\": 5, \"vector\": " + ok_vector + ", \"labels\": [4294967296]}]}",
         "vectors[0].labels"},
        {"PUT", "/v1/vectors",
         "{\"vectors\": [{\"id\": 5, \"vector\": " + ok_vector +
             ", \"labels\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}]}",
         "vectors[0].labels"},
        {"DELETE", "/v1/vectors", "{}", "ids"},
        {"DELETE", "/v1/vectors", "{\"ids\": {}}", "ids"},
        {"DELETE", "/v1/vectors", "{\"ids\": [1, \"2\"]}", "ids[1]"},
        {"DELETE", "/v1/vectors", "{\"ids\": [1, 1]}", "ids[1]"},
        {"POST", "/v1/search", search_body({1, 0, 0, 0, 0, 0, 0, 0}, 3, "[1]"), "filter"},
        {"POST", "/v1/search", search_body({1, 0, 0, 0, 0, 0, 0, 0}, 3, "{\"labels\": 3}"), "filter"},
        {"POST", "/v1/search", search_body({1, 0, 0, 0, 0, 0, 0, 0}, 3, "{\"colour\": [3]}"), "filter"},
        {"POST", "/v1/search", search_body({1, 0, 0, 0, 0, 0, 0, 0}, 3, "{\"labels\": [1, -3]}"), "filter.labels[1]"},
        {"POST", "/v1/search", search_body({1, 0, 0, 0, 0, 0, 0, 0}, 3, "{\"ids\": [0.5]}"), "filter.ids[0]"},
    };
    for (const bad_case& c : cases) {
        INFO(c.method << " " << c.body);
        const http_reply r = f.call(make_request(c.method, c.target, c.body));
        CHECK(r.status == 400);
        CHECK(error_field(r.body) == c.field);
    }
    // Nothing was applied: still one row, one write.
    const http_reply r = f.call(make_request("POST", "/v1/search", search_body({1, 0, 0, 0, 0, 0, 0, 0}, 10)));
    CHECK(field_u64(r.body, "seq") == 1);
    CHECK(hits_of(r.body).size() == 1);
}

TEST_CASE("filtered and unfiltered searches agree with a float64 brute force as rows change and compact") {
    live_fixture f(/*compaction_min_rows=*/100);
    std::mt19937_64 rng(11);
    model rows;
    std::uniform_int_distribution<std::uint64_t> pick(0, 600);
    for (int round = 0; round < 30; ++round) {
        std::vector<std::pair<std::uint64_t, model_row>> put;
        std::vector<std::uint64_t> erase;
        for (int i = 0; i < 40; ++i) {
            const std::uint64_t id = pick(rng);
            if (std::any_of(put.begin(), put.end(), [&](const auto& p) { return p.first == id; }) ||
                std::find(erase.begin(), erase.end(), id) != erase.end())
                continue;
            if (rng() % 4 == 0) {
                erase.push_back(id);
            } else {
                put.push_back({id, random_row(rng)});
            }
        }
        REQUIRE(f.call(make_request("PUT", "/v1/vectors", upsert_body(put))).status == 200);
        for (const auto& [id, r] : put) rows[id] = r;
        REQUIRE(f.call(make_request("DELETE", "/v1/vectors", delete_body(erase))).status == 200);
        for (const std::uint64_t id : erase) rows.erase(id);

        const model_row q = random_row(rng);
        const std::vector<std::uint32_t> labels = {static_cast<std::uint32_t>(round % 5)};
        std::vector<std::uint64_t> ids;
        for (const auto& [id, r] : rows)
            if (id % 7 == 0) ids.push_back(id);
        std::string ids_json = "[";
        for (std::size_t i = 0; i < ids.size(); ++i) ids_json += (i ? "," : "") + std::to_string(ids[i]);
        ids_json += "]";
        const struct {
            std::string filter;
            const std::vector<std::uint32_t>* labels;
            const std::vector<std::uint64_t>* ids;
        } searches[] = {
            {"", nullptr, nullptr},
            {"{\"labels\": [" + std::to_string(labels[0]) + "]}", &labels, nullptr},
            {"{\"ids\": " + ids_json + "}", nullptr, &ids},
            {"{\"labels\": [" + std::to_string(labels[0]) + "], \"ids\": " + ids_json + "}", &labels, &ids},
        };
        for (const auto& s : searches) {
            INFO("round " << round << " filter " << s.filter);
            const http_reply r = f.call(make_request("POST", "/v1/search", search_body(q.v, 10, s.filter)));
            REQUIRE(r.status == 200);
            std::string why;
            CHECK(agrees(hits_of(r.body), brute_force(rows, q.v, 10, s.labels, s.ids), why));
            INFO(why);
            CHECK(why.empty());
        }
    }
    // Compaction ran in its own group, as sessions of the host.
    REQUIRE(eventually([&] { return f.engine.snapshot().corpus.compactions > 0; }));
    CHECK(f.cpu.group_stats(f.cpu.groups() - 1).name == std::string_view("compaction"));
    CHECK(f.cpu.group_stats(f.cpu.groups() - 1).completed > 0);
    const http_reply stats = f.call(make_request("GET", "/v1/stats", ""));
    CHECK(stats.body.find("\"corpus\":{\"rows\":" + std::to_string(rows.size())) != std::string::npos);
    const http_reply metrics = f.call(make_request("GET", "/metrics", ""));
    CHECK(metrics.body.find("tenferro_corpus_rows " + std::to_string(rows.size())) != std::string::npos);
}

TEST_CASE("writers and searchers at once: each write whole or absent, read your writes") {
    live_fixture f(/*compaction_min_rows=*/50);
    // Each write upserts a group of four ids with one marker in their first element; a search
    // restricted to the group's ids must see all four with the same marker, never a mix (L2), and
    // a search sent after a write's answer sees that write (read your writes).
    constexpr int writers = 2, writes_each = 60;
    std::atomic<int> partial{0}, stale{0}, failed{0};
    auto writer = [&](int w) {
        for (int i = 1; i <= writes_each; ++i) {
            const std::uint64_t base = static_cast<std::uint64_t>(w) * 1000;
            std::vector<std::pair<std::uint64_t, model_row>> put;
            for (std::uint64_t j = 0; j < 4; ++j)
                put.push_back({base + j, {{float(i), 1, float(j), 0, 0, 0, 0, 0}, {static_cast<std::uint32_t>(w)}}});
            const http_reply r = f.call(make_request("PUT", "/v1/vectors", upsert_body(put)));
            if (r.status != 200) {
                failed.fetch_add(1);
                continue;
            }
            const std::uint64_t seq = field_u64(r.body, "seq");
            const http_reply s = f.call(
                make_request("POST", "/v1/search",
                             search_body({1, 0, 0, 0, 0, 0, 0, 0}, 10,
                                         "{\"ids\": [" + std::to_string(base) + "," + std::to_string(base + 1) + "," +
                                             std::to_string(base + 2) + "," + std::to_string(base + 3) + "]}")));
            if (s.status != 200 || field_u64(s.body, "seq") < seq) stale.fetch_add(1);
            const auto hits = hits_of(s.body);
            if (hits.size() != 4) partial.fetch_add(1);
            // Every hit's row holds this write's marker (the newest, or a later one of this writer:
            // none is later here, this writer is the only one writing these ids).
            for (const search_hit& h : hits) {
                const http_reply g = f.call(make_request("GET", "/v1/vectors/" + std::to_string(h.id), ""));
                simdjson::dom::parser parser;
                double first = 0;
                if (parser.parse(g.body)["vector"].at(0).get_double().get(first) || first != double(i))
                    stale.fetch_add(1);
            }
        }
    };
    auto searcher = [&] {
        std::mt19937_64 rng(5);
        for (int i = 0; i < 150; ++i) {
            const int w = static_cast<int>(rng() % writers);
            const http_reply s = f.call(
                make_request("POST", "/v1/search",
                             search_body({1, 0, 0, 0, 0, 0, 0, 0}, 10, "{\"labels\": [" + std::to_string(w) + "]}")));
            if (s.status != 200) {
                failed.fetch_add(1);
                continue;
            }
            // The four rows of one writer share its latest marker in the snapshot: scores of a
            // group differ only through j, so check through GET-free means: 0 or 4 hits.
            const auto hits = hits_of(s.body);
            if (hits.size() != 0 && hits.size() != 4) partial.fetch_add(1);
        }
    };
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w) threads.emplace_back(writer, w);
    threads.emplace_back(searcher);
    threads.emplace_back(searcher);
    for (std::thread& t : threads) t.join();
    CHECK(failed.load() == 0);
    CHECK(partial.load() == 0);
    CHECK(stale.load() == 0);
}

namespace {

// tenferro-search run as a user would, on an ephemeral port read from its first line.
struct server_process {
    pid_t pid = -1;
    std::uint16_t port = 0;

    server_process(const char* binary, const std::vector<std::string>& args) {
        int fds[2];
        REQUIRE(::pipe(fds) == 0);
        pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            ::dup2(fds[1], 1);
            ::close(fds[0]);
            ::close(fds[1]);
            std::vector<char*> argv{const_cast<char*>(binary)};
            for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            ::execv(binary, argv.data());
            ::_exit(127);
        }
        ::close(fds[1]);
        std::string out;
        char c = 0;
        while (out.find('\n') == std::string::npos && ::read(fds[0], &c, 1) == 1) out += c;
        ::close(fds[0]);
        const std::string marker = "http://127.0.0.1:";
        const std::size_t at = out.find(marker);
        INFO(out);
        REQUIRE(at != std::string::npos);
        port = static_cast<std::uint16_t>(std::stoi(out.substr(at + marker.size())));
    }
    void kill9() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            int status = 0;
            ::waitpid(pid, &status, 0);
            pid = -1;
        }
    }
    ~server_process() {
        if (pid > 0) {
            ::kill(pid, SIGTERM);
            int status = 0;
            ::waitpid(pid, &status, 0);
        }
    }
    http_reply call(const std::string& request) const { return run_blocking(server_fixture::roundtrip(port, request)); }
};

}  // namespace

TEST_CASE("kill -9 during writes: every acknowledged write is there after a restart, every other whole or absent",
          "[embedding_search]") {
    const char* binary = std::getenv("TENFERRO_SEARCH_BINARY");
    if (!binary) {
        WARN("TENFERRO_SEARCH_BINARY is not set; skipping");
        return;
    }
    char tmpl[] = "/tmp/tenferro-live-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    const std::string dir = tmpl;
    const std::vector<std::string> args = {"--dim", std::to_string(dim), "--data-dir", dir, "--port", "0"};
    // Write w upserts ids 3w, 3w + 1, 3w + 2, their vectors marking w.
    auto write_of = [](std::uint64_t w) {
        std::vector<std::pair<std::uint64_t, model_row>> put;
        for (std::uint64_t j = 0; j < 3; ++j) put.push_back({3 * w + j, {{float(w), float(j), 1, 0, 0, 0, 0, 0}, {}}});
        return put;
    };
    std::uint64_t next = 0;
    std::vector<bool> acked;
    std::mt19937_64 rng(3);
    for (int round = 0; round < 3; ++round) {
        server_process server(binary, args);
        std::atomic<std::uint64_t> issued{next};
        std::atomic<int> done_writes{0};
        std::vector<std::vector<std::uint64_t>> acks(3);
        std::vector<std::thread> writers;
        std::atomic<bool> stop{false};
        for (int t = 0; t < 3; ++t)
            writers.emplace_back([&, t] {
                while (!stop.load()) {
                    const std::uint64_t w = issued.fetch_add(1);
                    http_reply r;
                    try {
                        r = server.call(make_request("PUT", "/v1/vectors", upsert_body(write_of(w))));
                    } catch (...) {
                        return;  // the server is gone
                    }
                    if (r.status == 200) acks[static_cast<std::size_t>(t)].push_back(w);
                    done_writes.fetch_add(1);
                }
            });
        const int target = 40 + static_cast<int>(rng() % 80);
        while (done_writes.load() < target) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        server.kill9();
        stop = true;
        for (std::thread& t : writers) t.join();
        next = issued.load();
        acked.resize(next, false);
        for (const auto& list : acks)
            for (const std::uint64_t w : list) acked[w] = true;

        server_process again(binary, args);
        int whole = 0, absent = 0, partial = 0, lost = 0;
        for (std::uint64_t w = 0; w < next; ++w) {
            int present = 0;
            for (std::uint64_t j = 0; j < 3; ++j) {
                const http_reply g = again.call(make_request("GET", "/v1/vectors/" + std::to_string(3 * w + j), ""));
                if (g.status == 200) {
                    ++present;
                    CHECK(g.body.find("\"vector\":[" + std::to_string(w) + "," + std::to_string(j) + ",1,") !=
                          std::string::npos);
                }
            }
            if (present == 3) ++whole;
            if (present == 0) ++absent;
            if (present != 0 && present != 3) ++partial;
            if (acked[w] && present != 3) ++lost;
        }
        INFO("round " << round << ": " << next << " writes issued, " << whole << " whole, " << absent << " absent");
        CHECK(partial == 0);
        CHECK(lost == 0);
        CHECK(whole > 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
}

TEST_CASE("a write the disk fails is answered 507 storage, not applied, and the next one succeeds (L7)",
          "[embedding_search]") {
    char tmpl[] = "/tmp/tenferro-live-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    {
        tf::cpu_backend cpu(backend_options_for(live_fixture::mode(), nullptr));
        auto corpus = std::make_shared<tf::live_corpus>(
            tf::live_corpus_options{.dim = dim, .directory = tmpl, .normalize = true});
        search_engine engine(cpu, corpus, engine_options_for(live_fixture::mode()));
        search_server server(engine, server_fixture::with_port0({}));
        server.start();
        auto call = [&](const std::string& r) { return run_blocking(server_fixture::roundtrip(server.port(), r)); };
        REQUIRE(call(make_request("PUT", "/v1/vectors", upsert_body({{1, {{1, 0, 0, 0, 0, 0, 0, 0}, {}}}}))).status ==
                200);
        // The next write's fdatasync fails (the log's first boundary call after the plan is its
        // write, the second its fdatasync).
        tenferro::detail::io::set_io_fault_plan({tenferro::detail::io::io_fault::eio, 2, 1});
        const http_reply failed =
            call(make_request("PUT", "/v1/vectors", upsert_body({{2, {{0, 1, 0, 0, 0, 0, 0, 0}, {}}}})));
        tenferro::detail::io::clear_io_fault_plan();
        CHECK(failed.status == 507);
        CHECK(failed.body.find("\"code\":\"storage\"") != std::string::npos);
        CHECK(call(make_request("GET", "/v1/vectors/2", "")).status == 404);
        const http_reply next =
            call(make_request("PUT", "/v1/vectors", upsert_body({{3, {{0, 0, 1, 0, 0, 0, 0, 0}, {}}}})));
        CHECK(next.status == 200);
        CHECK(field_u64(next.body, "seq") == 2);
        server.drain();
        server.wait();
    }
    tf::live_corpus again(tf::live_corpus_options{.dim = dim, .directory = tmpl, .normalize = true});
    CHECK(again.get(1));
    CHECK_FALSE(again.get(2));
    CHECK(again.get(3));
    std::error_code ec;
    std::filesystem::remove_all(tmpl, ec);
}
