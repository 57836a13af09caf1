// The embedding-search server on loopback: exact top-k, every bad-input case
// with its status code, load shedding, timeouts, graceful drain, keep-alive,
// and its /metrics page.
#include "http_server.hpp"

#include <signal.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <simdjson.h>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <tenferro/io.hpp>
#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "http_client.hpp"
#include "json_writer.hpp"
#include "run_blocking.hpp"
#include "search_engine.hpp"

#include "../support/embedding_search_fixture.hpp"

namespace tf = tenferro;
using namespace embedding_search;
using namespace std::chrono_literals;
using namespace embedding_search::testing;

TEST_CASE("search returns the exact top-k of the brute-force reference", "[embedding_search]") {
    server_fixture f;
    const tf::tensor& corpus = test_corpus();
    for (std::int64_t i = 0; i < 12; ++i) {
        const std::int64_t k = std::array<std::int64_t, 4>{1, 5, 10, 50}[std::size_t(i % 4)];
        // Near a corpus row (a clear winner) or far from all (close scores).
        const std::vector<float> q = query_near_row(corpus, (i * 397) % test_rows, i % 2 ? 0.3 : 3.0, 100 + i);
        const http_reply reply = f.call(search_request(q, k));
        REQUIRE(reply.status == 200);
        const reference_check check =
            compare_with_reference(corpus, q, hits_of(reply.body), brute_force_top_k(corpus, q, k));
        INFO(check.detail);
        CHECK(check.ok);
    }
    // Default k is 10.
    const std::vector<float> q = query_near_row(corpus, 5, 0.1, 1);
    const http_reply reply = f.call(make_request("POST", "/v1/search", "{\"vector\": " + vector_json(q) + "}"));
    REQUIRE(reply.status == 200);
    CHECK(hits_of(reply.body).size() == 10);
    CHECK(hits_of(reply.body)[0].id == 5);
}

TEST_CASE("queued queries are scored together in one batch, each exactly", "[embedding_search]") {
    server_fixture f({}, 1, 1000, 8);
    const tf::tensor& corpus = test_corpus();
    permit_holder hold(f.cpu);

    constexpr int n = 8;
    std::vector<std::vector<float>> queries;
    for (int i = 0; i < n; ++i) queries.push_back(query_near_row(corpus, 100 + 31 * i, 1.0, 7 + i));
    asio::io_context io(1);
    std::vector<std::future<http_reply>> replies;
    for (int i = 0; i < n; ++i) {
        replies.push_back(asio::co_spawn(io, server_fixture::roundtrip(f.server.port(), search_request(queries[i], 7)),
                                         asio::use_future));
    }
    std::thread client([&io] { io.run(); });
    // All eight wait in the batcher behind its one session (B5: the host has one permit).
    const bool queued = eventually([&] { return f.engine.snapshot().batcher.waiting == n; });
    const std::size_t host_waiting = f.cpu.stats().waiting;
    hold.release();
    client.join();
    REQUIRE(queued);
    CHECK(host_waiting == 1);
    for (int i = 0; i < n; ++i) {
        const http_reply reply = replies[std::size_t(i)].get();
        REQUIRE(reply.status == 200);
        const reference_check check = compare_with_reference(corpus, queries[std::size_t(i)], hits_of(reply.body),
                                                             brute_force_top_k(corpus, queries[std::size_t(i)], 7));
        INFO(check.detail);
        CHECK(check.ok);
    }
    const engine_snapshot s = f.engine.snapshot();
    CHECK(s.largest_batch == n);  // the first admitted session took all eight
    CHECK(s.batched_queries == n);
    CHECK(s.handed_over == n - 1);
    // One session, no entry wasted on a query another session took.
    CHECK(s.sessions == 1);
    CHECK(s.batcher.batches == 1);
    CHECK(f.cpu.stats().cancelled == 0);
    CHECK(s.batcher.submitted == s.batcher.completed);
}

TEST_CASE("inline mode computes on the I/O thread and returns the same results", "[embedding_search]") {
    server_fixture f({}, 1, 1000, 1, true);
    const tf::tensor& corpus = test_corpus();
    const std::vector<float> q = query_near_row(corpus, 42, 0.5, 3);
    const http_reply reply = f.call(search_request(q, 10));
    REQUIRE(reply.status == 200);
    CHECK(compare_with_reference(corpus, q, hits_of(reply.body), brute_force_top_k(corpus, q, 10)).ok);
}

TEST_CASE("healthz and stats", "[embedding_search]") {
    server_fixture f;
    const http_reply health = f.call(make_request("GET", "/healthz"));
    CHECK(health.status == 200);
    CHECK(health.body == "{\"status\":\"ok\"}\n");

    f.call(search_request(query_near_row(test_corpus(), 1, 0.5, 1), 3));
    f.call(search_request(query_near_row(test_corpus(), 2, 0.5, 1), 3));
    const http_reply stats = f.call(make_request("GET", "/v1/stats"));
    REQUIRE(stats.status == 200);
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    REQUIRE_FALSE(parser.parse(stats.body).get(doc));
    CHECK(doc["admission"]["permits"].get_uint64().value() == 2);
    CHECK(doc["admission"]["completed"].get_uint64().value() >= 1);
    CHECK(doc["requests"]["responses"]["200"].get_uint64().value() >= 3);
    CHECK(doc["corpus"]["rows"].get_int64().value() == test_rows);
    CHECK(doc["latency_ms"]["search"]["count"].get_uint64().value() == 2);
    // The live corpus's search counters: two queries over the compacted corpus (one segment
    // sorted by id: the fused kernel), each answered by the first pass or its f32 fallback where
    // the CPU has a bf16 dot product.
    const simdjson::dom::element search = doc["corpus"]["search"];
    CHECK(search["queries"].get_uint64().value() == 2);
    CHECK(search["filtered"].get_uint64().value() == 0);
    CHECK(doc["corpus"]["segments"].get_int64().value() == 1);
    CHECK(doc["corpus"]["seq"].get_uint64().value() >= 1);
    // The batcher's own counters (two searches, each a batch of one on an idle server: B1).
    CHECK(doc["batching"]["batcher"]["submitted"].get_uint64().value() == 2);
    CHECK(doc["batching"]["batcher"]["completed"].get_uint64().value() == 2);
    CHECK(doc["batching"]["batcher"]["batches"].get_uint64().value() == 2);
    CHECK(doc["batching"]["batcher"]["waiting"].get_uint64().value() == 0);
    CHECK(doc["batching"]["max_delay_us"].get_int64().value() == 0);
}

TEST_CASE("every bad input gets its status code and names the field", "[embedding_search]") {
    server_options so;
    so.max_body_bytes = 4096;
    server_fixture f(so);
    const std::vector<float> good = query_near_row(test_corpus(), 9, 0.5, 1);
    const std::string wrong_dim = vector_json(std::vector<float>(test_dim - 1, 0.5f));
    const std::string not_a_number = array_with(good, 1, "\"x\"");
    const std::string overflow = array_with(good, 7, "1e39");  // a double, but not a finite f32
    const std::string v = vector_json(good);

    struct bad_case {
        const char* name;
        std::string body;
        int status;
        std::string field;
    };
    const std::vector<bad_case> cases = {
        {"malformed JSON", "{\"vector\": [1, 2", 400, "body"},
        {"NaN literal", "{\"vector\": [NaN], \"k\": 3}", 400, "body"},
        {"not an object", "[1, 2, 3]", 400, "body"},
        {"empty body", "", 400, "body"},
        {"missing vector", "{\"k\": 3}", 400, "vector"},
        {"vector not an array", "{\"vector\": \"abc\"}", 400, "vector"},
        {"wrong dimension", "{\"vector\": " + wrong_dim + "}", 400, "vector"},
        {"element not a number", "{\"vector\": " + not_a_number + "}", 400, "vector[1]"},
        {"element not a finite f32", "{\"vector\": " + overflow + "}", 400, "vector[7]"},
        {"zero vector", "{\"vector\": " + vector_json(std::vector<float>(test_dim, 0.0f)) + "}", 400, "vector"},
        {"k zero", "{\"vector\": " + v + ", \"k\": 0}", 400, "k"},
        {"k negative", "{\"vector\": " + v + ", \"k\": -3}", 400, "k"},
        {"k above the limit", "{\"vector\": " + v + ", \"k\": 1001}", 400, "k"},
        {"k not an integer", "{\"vector\": " + v + ", \"k\": 2.5}", 400, "k"},
        {"k a string", "{\"vector\": " + v + ", \"k\": \"3\"}", 400, "k"},
    };
    for (const bad_case& c : cases) {
        INFO(c.name);
        // A bad body is answered on a connection that stays usable.
        const auto check = [&]() -> asio::awaitable<void> {
            http_client client(co_await asio::this_coro::executor);
            co_await client.connect("127.0.0.1", f.server.port());
            const http_reply r = co_await client.roundtrip(make_request("POST", "/v1/search", c.body));
            CHECK(r.status == c.status);
            CHECK(error_field(r.body) == c.field);
            CHECK(r.keep_alive);
            const http_reply after = co_await client.roundtrip(make_request("GET", "/healthz"));
            CHECK(after.status == 200);
        };
        run_blocking(check());
    }

    SECTION("unknown path and wrong method") {
        CHECK(f.call(make_request("GET", "/nope")).status == 404);
        const http_reply r = f.call(make_request("GET", "/v1/search"));
        CHECK(r.status == 405);
        CHECK(error_field(r.body) == "method");
        CHECK(f.call(make_request("POST", "/healthz", "{}")).status == 405);
    }

    SECTION("malformed HTTP: 400, then the connection closes") {
        for (const std::string& raw :
             {std::string("GARBAGE\r\n\r\n"), std::string("GET /healthz HTTP/1.1\r\nBad Header Line\r\n\r\n"),
              std::string("POST /v1/search HTTP/1.1\r\nContent-Length: abc\r\n\r\n")}) {
            INFO(raw);
            const auto check = [&]() -> asio::awaitable<void> {
                http_client client(co_await asio::this_coro::executor);
                co_await client.connect("127.0.0.1", f.server.port());
                const http_reply r = co_await client.roundtrip(raw);
                CHECK(r.status == 400);
                CHECK(error_field(r.body) == "http");
                CHECK_FALSE(r.keep_alive);
                // (GCC 12: no co_await inside an assertion macro's expression.)
                const bool closed = co_await client.closed_by_peer();
                CHECK(closed);
            };
            run_blocking(check());
        }
    }

    SECTION("a body over the limit: 413, then the connection closes") {
        const std::string big(5000, ' ');
        for (const std::string& raw :
             {make_request("POST", "/v1/search", big),
              std::string("POST /v1/search HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n") + big +
                  "\r\n0\r\n\r\n"}) {
            const auto check = [&]() -> asio::awaitable<void> {
                http_client client(co_await asio::this_coro::executor);
                co_await client.connect("127.0.0.1", f.server.port());
                const http_reply r = co_await client.roundtrip(raw);
                CHECK(r.status == 413);
                CHECK(error_field(r.body) == "body");
                CHECK_FALSE(r.keep_alive);
            };
            run_blocking(check());
        }
    }
    // The server is still serving.
    CHECK(f.call(search_request(good, 3)).status == 200);
}

TEST_CASE("keep-alive: many requests on one connection, pipelined ones answered in order", "[embedding_search]") {
    server_fixture f;
    const server_snapshot before = f.server.snapshot();
    const tf::tensor& corpus = test_corpus();
    const auto session = [&]() -> asio::awaitable<void> {
        http_client client(co_await asio::this_coro::executor);
        co_await client.connect("127.0.0.1", f.server.port());
        for (int i = 0; i < 5; ++i) {
            const http_reply r = co_await client.roundtrip(search_request(query_near_row(corpus, 10 * i, 0.2, 5), 1));
            CHECK(r.status == 200);
            CHECK(r.keep_alive);
            CHECK(hits_of(r.body).at(0).id == std::uint64_t(10 * i));
        }
        // Three requests in one write; the answers come back in request order.
        co_await client.send(search_request(query_near_row(corpus, 77, 0.2, 5), 1) + make_request("GET", "/healthz") +
                             search_request(query_near_row(corpus, 88, 0.2, 5), 1));
        const http_reply a = co_await client.receive();
        const http_reply b = co_await client.receive();
        const http_reply c = co_await client.receive();
        CHECK(hits_of(a.body).at(0).id == 77);
        CHECK(b.body == "{\"status\":\"ok\"}\n");
        CHECK(hits_of(c.body).at(0).id == 88);
    };
    run_blocking(session());
    const server_snapshot after = f.server.snapshot();
    CHECK(after.connections_accepted - before.connections_accepted == 1);
    CHECK(after.requests - before.requests == 8);
    CHECK(after.keepalive_reused - before.keepalive_reused == 7);
}

TEST_CASE("overload: beyond the queue bound requests get 503 with Retry-After, the rest succeed",
          "[embedding_search]") {
    server_fixture f({}, 1, 2, 1);  // one permit, at most two waiting
    const tf::tensor& corpus = test_corpus();
    permit_holder hold(f.cpu);

    constexpr int n = 6;
    asio::io_context io(1);
    std::vector<std::future<http_reply>> replies;
    std::vector<std::vector<float>> queries;
    for (int i = 0; i < n; ++i) queries.push_back(query_near_row(corpus, 500 + i, 0.3, 11));
    std::atomic<int> answered{0};
    for (int i = 0; i < n; ++i) {
        auto one = [](std::uint16_t port, std::string request, std::atomic<int>& done) -> asio::awaitable<http_reply> {
            http_reply r = co_await server_fixture::roundtrip(port, std::move(request));
            ++done;
            co_return r;
        };
        replies.push_back(
            asio::co_spawn(io, one(f.server.port(), search_request(queries[i], 5), answered), asio::use_future));
    }
    std::thread client([&io] { io.run(); });
    // Two wait in the batcher (one session for them in the host's queue); the
    // other four are shed at once.
    const bool shed = eventually([&] {
        return answered.load() == n - 2 && f.engine.snapshot().batcher.waiting == 2 && f.cpu.stats().waiting == 1;
    });
    // The I/O thread is free meanwhile: health checks are answered.
    const http_reply health = f.call(make_request("GET", "/healthz"));
    hold.release();
    client.join();
    REQUIRE(shed);
    CHECK(health.status == 200);

    int ok = 0, unavailable = 0;
    for (int i = 0; i < n; ++i) {
        const http_reply r = replies[std::size_t(i)].get();
        if (r.status == 200) {
            ++ok;
            CHECK(hits_of(r.body).at(0).id == std::uint64_t(500 + i));
        } else {
            CHECK(r.status == 503);
            CHECK(r.retry_after == "1");
            CHECK(r.keep_alive);
            ++unavailable;
        }
    }
    CHECK(ok == 2);
    CHECK(unavailable == n - 2);
    // Shed by the engine's bound on the batcher's waiting items, before the host.
    CHECK(f.engine.snapshot().shed == std::uint64_t(n - 2));
    CHECK(f.cpu.stats().rejected == 0);
}

TEST_CASE("idle and slow clients time out", "[embedding_search]") {
    server_options so;
    so.idle_timeout = 200ms;
    so.request_timeout = 300ms;
    server_fixture f(so);

    SECTION("an idle connection is closed") {
        const auto start = std::chrono::steady_clock::now();
        const auto idle = [&]() -> asio::awaitable<bool> {
            http_client client(co_await asio::this_coro::executor);
            co_await client.connect("127.0.0.1", f.server.port());
            co_return co_await client.closed_by_peer();
        };
        CHECK(run_blocking(idle()));
        const auto waited = std::chrono::steady_clock::now() - start;
        CHECK(waited >= 150ms);
        CHECK(waited < 5s);
        CHECK(eventually([&] { return f.server.snapshot().idle_timeouts == 1; }));
    }
    SECTION("a request that does not arrive in time gets 408") {
        const auto slow = [&]() -> asio::awaitable<http_reply> {
            http_client client(co_await asio::this_coro::executor);
            co_await client.connect("127.0.0.1", f.server.port());
            co_await client.send("POST /v1/search HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"vec");
            co_return co_await client.receive();
        };
        const http_reply r = run_blocking(slow());
        CHECK(r.status == 408);
        CHECK_FALSE(r.keep_alive);
        CHECK(f.server.snapshot().request_timeouts == 1);
    }
}

TEST_CASE("SIGTERM drains: requests in flight finish, idle connections close, new ones are refused",
          "[embedding_search]") {
    server_options so;
    so.handle_signals = true;
    server_fixture f(so, 1, 100, 1);
    const tf::tensor& corpus = test_corpus();
    const std::uint16_t port = f.server.port();

    asio::io_context io(1);
    // An idle keep-alive connection (it has served one request).
    std::promise<void> idle_ready;
    auto idle = [](std::uint16_t p, std::promise<void>& ready) -> asio::awaitable<bool> {
        http_client client(co_await asio::this_coro::executor);
        co_await client.connect("127.0.0.1", p);
        const http_reply r = co_await client.roundtrip(make_request("GET", "/healthz"));
        ready.set_value();
        const bool closed = co_await client.closed_by_peer();
        co_return r.status == 200 && closed;
    };
    std::future<bool> idle_closed = asio::co_spawn(io, idle(port, idle_ready), asio::use_future);

    permit_holder hold(f.cpu);
    std::vector<std::future<http_reply>> in_flight;
    for (int i = 0; i < 2; ++i) {
        in_flight.push_back(asio::co_spawn(
            io, server_fixture::roundtrip(port, search_request(query_near_row(corpus, 1000 + i, 0.3, 2), 3)),
            asio::use_future));
    }
    std::thread client([&io] { io.run(); });
    idle_ready.get_future().wait();
    const bool queued = eventually([&] { return f.engine.snapshot().batcher.waiting == 2; });

    std::raise(SIGTERM);
    const bool refusing = eventually([&] {
        try {
            f.call(make_request("GET", "/healthz"));
            return false;
        } catch (const std::system_error&) {
            return true;  // connection refused: the listener is closed
        }
    });
    hold.release();
    client.join();
    auto waited = std::async(std::launch::async, [&f] { f.server.wait(); });
    const bool drained = waited.wait_for(10s) == std::future_status::ready;

    REQUIRE(queued);
    CHECK(refusing);
    CHECK(idle_closed.get());
    for (int i = 0; i < 2; ++i) {
        const http_reply r = in_flight[std::size_t(i)].get();
        CHECK(r.status == 200);
        CHECK_FALSE(r.keep_alive);  // Connection: close while draining
        CHECK(hits_of(r.body).at(0).id == std::uint64_t(1000 + i));
    }
    CHECK(drained);
}

namespace {

/// Parses a /metrics page with the Prometheus project's own Python client
/// (Debian's python3-prometheus-client, installed by ./dev) and returns every
/// sample as `name{label="value",...}` (labels sorted) -> value, as JSON.
std::string parse_with_prometheus_client(const std::string& page) {
    temp_dir dir;
    const std::filesystem::path in = dir.path / "metrics.txt";
    const std::filesystem::path out = dir.path / "samples.json";
    {
        std::FILE* f = std::fopen(in.c_str(), "wb");
        REQUIRE(f != nullptr);
        std::fwrite(page.data(), 1, page.size(), f);
        std::fclose(f);
    }
    const std::string script =
        "import json, sys\n"
        "from prometheus_client.parser import text_string_to_metric_families\n"
        "samples = {}\n"
        "for family in text_string_to_metric_families(open(sys.argv[1]).read()):\n"
        "    for s in family.samples:\n"
        "        labels = ','.join('%s=\"%s\"' % (k, v) for k, v in sorted(s.labels.items()))\n"
        "        samples[s.name + ('{' + labels + '}' if labels else '')] = s.value\n"
        "json.dump(samples, open(sys.argv[2], 'w'))\n";
    const std::filesystem::path py = dir.path / "parse.py";
    {
        std::FILE* f = std::fopen(py.c_str(), "wb");
        REQUIRE(f != nullptr);
        std::fwrite(script.data(), 1, script.size(), f);
        std::fclose(f);
    }
    const std::string command = "/usr/bin/python3 " + py.string() + " " + in.string() + " " + out.string();
    const int rc = std::system(command.c_str());
    INFO("python3-prometheus-client must be installed (./dev installs it): " << command);
    REQUIRE(rc == 0);
    std::FILE* f = std::fopen(out.c_str(), "rb");
    REQUIRE(f != nullptr);
    std::string json;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) json.append(buf, n);
    std::fclose(f);
    return json;
}

double sample_of(simdjson::dom::element samples, const std::string& key) {
    simdjson::dom::element v;
    INFO("sample " << key);
    REQUIRE_FALSE(samples[key].get(v));
    return v.get_double().value();
}

}  // namespace

TEST_CASE("GET /metrics is Prometheus text format, parsed by the real client; counters move", "[embedding_search]") {
    server_fixture f;
    const http_reply first = f.call(make_request("GET", "/metrics"));
    REQUIRE(first.status == 200);
    CHECK(first.content_type == "text/plain; version=0.0.4; charset=utf-8");
    for (int i = 0; i < 3; ++i)
        REQUIRE(f.call(search_request(query_near_row(test_corpus(), 10 + i, 0.5, 1), 3)).status == 200);
    f.call(make_request("GET", "/healthz"));
    const http_reply second = f.call(make_request("GET", "/metrics"));
    REQUIRE(second.status == 200);
    CHECK(f.call(make_request("POST", "/metrics", "{}")).status == 405);

    const std::string before_json = parse_with_prometheus_client(first.body);
    const std::string after_json = parse_with_prometheus_client(second.body);
    simdjson::dom::parser p1, p2;
    simdjson::dom::element before, after;
    REQUIRE_FALSE(p1.parse(before_json).get(before));
    REQUIRE_FALSE(p2.parse(after_json).get(after));

    // (A labelled sample appears with its first occurrence: absent before means 0.)
    auto moved = [&](const std::string& key) {
        simdjson::dom::element v;
        const double was = before[key].get(v) ? 0.0 : v.get_double().value();
        return sample_of(after, key) - was;
    };
    CHECK(sample_of(after, "tenferro_admission_permits{host=\"cpu\"}") == 2);
    CHECK(moved("tenferro_admission_admitted_total{host=\"cpu\"}") == 3);
    CHECK(moved("tenferro_admission_completed_total{host=\"cpu\"}") == 3);
    CHECK(moved("tenferro_batcher_submitted_total") == 3);
    CHECK(moved("tenferro_batcher_completed_total") == 3);
    CHECK(moved("tenferro_batcher_batches_total") == 3);  // an idle server: batches of one (B1)
    CHECK(sample_of(after, "tenferro_batcher_waiting") == 0);
    CHECK(moved("tenferro_http_request_duration_seconds_count{route=\"/v1/search\"}") == 3);
    CHECK(moved("tenferro_http_request_duration_seconds_count{route=\"/healthz\"}") == 1);
    // Responses are counted once written: the first scrape's own 200 is in the second.
    CHECK(moved("tenferro_http_requests_total{code=\"200\"}") >= 5);
    // A histogram's +Inf bucket is its count, and its buckets never decrease.
    CHECK(sample_of(after, "tenferro_http_request_duration_seconds_bucket{le=\"+Inf\",route=\"/v1/search\"}") ==
          sample_of(after, "tenferro_http_request_duration_seconds_count{route=\"/v1/search\"}"));
    CHECK(sample_of(after, "tenferro_http_request_duration_seconds_bucket{le=\"0.001\",route=\"/v1/search\"}") <=
          sample_of(after, "tenferro_http_request_duration_seconds_bucket{le=\"10\",route=\"/v1/search\"}"));
    CHECK(sample_of(after, "tenferro_search_rejected_total{reason=\"contended\"}") == 0);
    CHECK(sample_of(after, "process_resident_memory_bytes") > 0);
    CHECK(sample_of(after, "process_open_fds") > 0);
    CHECK(sample_of(after, "process_start_time_seconds") > 1.6e9);
}
