// The embedding-search server on loopback: exact top-k, every bad-input case
// with its status code, load shedding, timeouts, graceful drain, keep-alive.
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

namespace tf = tenferro;
using namespace embedding_search;
using namespace std::chrono_literals;

namespace {

constexpr std::int64_t test_rows = 3000, test_dim = 24;

const tf::tensor& test_corpus() {
    static const tf::tensor corpus = [] {
        tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 2});
        return run_blocking(generate_corpus(cpu, test_rows, test_dim, 7));
    }();
    return corpus;
}

std::string vector_json(const std::vector<float>& v) {
    json_writer w;
    w.begin_array();
    for (const float x : v) w.value(x);
    w.end_array();
    return w.take();
}

std::string search_request(const std::vector<float>& v, std::int64_t k) {
    return make_request("POST", "/v1/search", "{\"vector\": " + vector_json(v) + ", \"k\": " + std::to_string(k) + "}");
}

std::vector<search_hit> hits_of(const std::string& body) {
    simdjson::dom::parser parser;
    simdjson::dom::array results;
    std::vector<search_hit> hits;
    if (parser.parse(body)["results"].get_array().get(results)) return hits;
    for (const simdjson::dom::element e : results) {
        hits.push_back({e["index"].get_int64().value(), float(e["score"].get_double().value())});
    }
    return hits;
}

/// `v` as a JSON array, with element `at` written as `replacement`.
std::string array_with(const std::vector<float>& v, std::size_t at, const std::string& replacement) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += ',';
        out += i == at ? replacement : std::to_string(v[i]);
    }
    return out + "]";
}

/// The "field" of a 400 body, or "" when there is none.
std::string error_field(const std::string& body) {
    simdjson::dom::parser parser;
    std::string_view field;
    if (parser.parse(body)["error"]["field"].get_string().get(field)) return "";
    return std::string(field);
}

struct server_fixture {
    explicit server_fixture(server_options so = {}, std::size_t permits = 2, std::size_t max_waiters = 1000,
                            std::size_t max_batch = 8, bool inline_compute = false)
        : cpu(tf::cpu_backend_options{.permits = permits, .max_waiters = max_waiters}),
          engine(cpu, test_corpus(),
                 engine_options{.inline_compute = inline_compute, .max_batch = max_batch, .max_waiting = max_waiters}),
          server(engine, with_port0(std::move(so))) {
        server.start();
    }
    ~server_fixture() {
        server.drain();
        server.wait();
    }

    static server_options with_port0(server_options so) {
        so.port = 0;
        return so;
    }

    http_reply call(const std::string& request) { return run_blocking(roundtrip(server.port(), request)); }

    static asio::awaitable<http_reply> roundtrip(std::uint16_t port, std::string request) {
        http_client c(co_await asio::this_coro::executor);
        co_await c.connect("127.0.0.1", port);
        co_return co_await c.roundtrip(request);
    }

    tf::cpu_backend cpu;
    search_engine engine;
    search_server server;
};

/// Holds every permit of `cpu` until release(): requests queue behind it.
class permit_holder {
public:
    explicit permit_holder(tf::cpu_backend& cpu) {
        tf::session_options options;
        options.permits = cpu.permits();
        std::shared_future<void> gate = gate_.get_future().share();
        auto body = [gate](tf::backend_session&) { gate.wait(); };
        done_ = cpu.with_backend_session(options, std::move(body), asio::use_future);
        while (cpu.stats().available != 0) std::this_thread::sleep_for(1ms);
    }
    void release() {
        if (released_) return;
        released_ = true;
        gate_.set_value();
        done_.get();
    }
    ~permit_holder() { release(); }

private:
    std::promise<void> gate_;
    std::future<tf::session_result<void>> done_;
    bool released_ = false;
};

template <class Predicate>
bool eventually(Predicate p, std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!p()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

}  // namespace

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
    CHECK(hits_of(reply.body)[0].index == 5);
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
    // The second search reuses the first one's plan from the backend's runtime cache.
    CHECK(doc["runtime_cache"]["entries"].get_uint64().value() >= 1);
    CHECK(doc["runtime_cache"]["hits"].get_uint64().value() >= 1);
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
            CHECK(hits_of(r.body).at(0).index == 10 * i);
        }
        // Three requests in one write; the answers come back in request order.
        co_await client.send(search_request(query_near_row(corpus, 77, 0.2, 5), 1) + make_request("GET", "/healthz") +
                             search_request(query_near_row(corpus, 88, 0.2, 5), 1));
        const http_reply a = co_await client.receive();
        const http_reply b = co_await client.receive();
        const http_reply c = co_await client.receive();
        CHECK(hits_of(a.body).at(0).index == 77);
        CHECK(b.body == "{\"status\":\"ok\"}\n");
        CHECK(hits_of(c.body).at(0).index == 88);
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
            CHECK(hits_of(r.body).at(0).index == 500 + i);
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
        CHECK(hits_of(r.body).at(0).index == 1000 + i);
    }
    CHECK(drained);
}

namespace {

/// A fresh directory under the system's temporary directory, removed at scope exit.
struct temp_dir {
    temp_dir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "tenferro-search-test-XXXXXX").string();
        if (!mkdtemp(pattern.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp");
        path = pattern;
    }
    ~temp_dir() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    std::filesystem::path path;
};

}  // namespace

TEST_CASE("a generated corpus saved as .npy reads back bit for bit and serves the same results", "[embedding_search]") {
    temp_dir dir;
    const std::string file = (dir.path / "corpus.npy").string();
    tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 2});

    corpus_source generate;
    generate.generate = true;
    generate.rows = 1500;
    generate.dim = 20;
    generate.seed = 99;
    generate.path = file;
    corpus_origin made;
    const tf::tensor generated = run_blocking(obtain_corpus(cpu, generate, &made));
    CHECK(made.generated);
    CHECK(made.written);
    CHECK(made.note.empty());
    REQUIRE(std::filesystem::exists(file));

    corpus_source read;
    read.path = file;
    corpus_origin loaded;
    const tf::tensor back = run_blocking(obtain_corpus(cpu, read, &loaded));
    CHECK_FALSE(loaded.generated);
    REQUIRE(back.type() == tf::dtype::f32);
    REQUIRE(back.shape()[0] == 1500);
    REQUIRE(back.shape()[1] == 20);
    CHECK(std::memcmp(back.data<float>(), generated.data<float>(), 1500 * 20 * sizeof(float)) == 0);

    // The same seed gives the same bytes, file or not.
    const tf::tensor again = run_blocking(generate_corpus(cpu, 1500, 20, 99));
    CHECK(std::memcmp(again.data<float>(), generated.data<float>(), 1500 * 20 * sizeof(float)) == 0);
}

TEST_CASE("a corpus file is normalised on load; bad files are refused naming the file", "[embedding_search]") {
    temp_dir dir;
    tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 2});
    const auto write = [&](const std::string& name, const tf::tensor& t) {
        const std::string path = (dir.path / name).string();
        const auto save = [&]() -> asio::awaitable<void> {
            const auto executor = co_await asio::this_coro::executor;
            co_await tf::async_write_npy(executor, path, t);
        };
        run_blocking(save());
        return path;
    };

    SECTION("rows of any length become unit rows") {
        corpus_source read;
        read.path = write("raw.npy", tf::tensor::from<float>({3, 4, 0, 0, 0, 0, 0, 2}, {4, 2}));
        const tf::tensor c = run_blocking(obtain_corpus(cpu, read));
        const float* d = c.data<float>();
        CHECK(d[0] == Approx(0.6f));
        CHECK(d[1] == Approx(0.8f));
        CHECK(d[2] == 0.0f);  // a zero row stays zero
        CHECK(d[3] == 0.0f);
        CHECK(d[6] == 0.0f);
        CHECK(d[7] == 1.0f);
    }
    SECTION("wrong dtype or rank") {
        for (const std::string& path : {write("f64.npy", tf::tensor::zeros(tf::dtype::f64, {3, 2})),
                                        write("rank1.npy", tf::tensor::zeros(tf::dtype::f32, {6}))}) {
            corpus_source read;
            read.path = path;
            try {
                run_blocking(obtain_corpus(cpu, read));
                FAIL("accepted " << path);
            } catch (const std::runtime_error& e) {
                CHECK_THAT(e.what(), Catch::Contains(path));
            }
        }
    }
    SECTION("missing or not .npy") {
        corpus_source missing;
        missing.path = (dir.path / "nope.npy").string();
        CHECK_THROWS_WITH(run_blocking(obtain_corpus(cpu, missing)), Catch::Contains("nope.npy"));
        const std::string junk = (dir.path / "junk.npy").string();
        std::FILE* f = std::fopen(junk.c_str(), "wb");
        REQUIRE(f);
        std::fputs("this is not a numpy file", f);
        std::fclose(f);
        corpus_source bad;
        bad.path = junk;
        CHECK_THROWS_WITH(run_blocking(obtain_corpus(cpu, bad)), Catch::Contains("junk.npy"));
    }
}

TEST_CASE("the tenferro-search binary serves, then exits 0 on SIGTERM", "[embedding_search]") {
    const char* binary = std::getenv("TENFERRO_SEARCH_BINARY");
    if (!binary) {
        WARN("TENFERRO_SEARCH_BINARY is not set; skipping");
        return;
    }
    temp_dir dir;
    const std::string corpus_file = (dir.path / "served.npy").string();
    int out[2];
    REQUIRE(pipe(out) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        close(out[0]);
        close(out[1]);
        execl(binary, binary, "--generate", "2000", "16", "--corpus", corpus_file.c_str(), "--port", "0", "--permits",
              "1", static_cast<char*>(nullptr));
        _exit(127);
    }
    close(out[1]);
    // "tenferro-search: listening on http://127.0.0.1:PORT (...)"
    std::string line;
    char ch;
    while (line.find('\n') == std::string::npos && read(out[0], &ch, 1) == 1) line += ch;
    close(out[0]);
    const auto at = line.find("127.0.0.1:");
    REQUIRE(at != std::string::npos);
    const auto port = static_cast<std::uint16_t>(std::stoi(line.substr(at + 10)));

    std::vector<float> q(16, 0.25f);
    const http_reply r = run_blocking(server_fixture::roundtrip(port, search_request(q, 4)));
    CHECK(r.status == 200);
    CHECK(hits_of(r.body).size() == 4);

    REQUIRE(kill(pid, SIGTERM) == 0);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    if (done == 0) kill(pid, SIGKILL), waitpid(pid, &status, 0);
    REQUIRE(done == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    // --generate with --corpus saved the corpus: 2000 x 16 f32 after numpy's 128-byte header.
    CHECK(std::filesystem::file_size(corpus_file) == 128 + 2000 * 16 * 4);
}

// ---------------------------------------------------------------------------
// Hostile clients and bad configuration (issue 11, item 5).

namespace {

/// A raw request with a Host header and the given extra header lines
/// (each ending in CRLF) and raw body bytes.
std::string raw_post(const std::string& headers, const std::string& body) {
    return "POST /v1/search HTTP/1.1\r\nHost: t\r\n" + headers + "\r\n" + body;
}

/// `body` as chunked framing: one chunk (with `extension` after its size and
/// `after_data` in place of the CRLF after its data), then the last chunk
/// with `trailer` fields.
std::string one_chunk(const std::string& body, const std::string& extension = "",
                      const std::string& after_data = "\r\n", const std::string& trailer = "") {
    char size[32];
    std::snprintf(size, sizeof size, "%zx", body.size());
    return size + extension + "\r\n" + body + after_data + "0\r\n" + trailer + "\r\n";
}

struct framing_case {
    const char* name;
    std::string raw;
    int status;
};

}  // namespace

TEST_CASE("framing that RFC 9112 rejects is refused and the connection closed", "[embedding_search]") {
    server_fixture f;
    const std::vector<float> good = query_near_row(test_corpus(), 9, 0.5, 1);
    // A search body that the server would answer with 200 if it took the framing.
    const std::string body = "{\"vector\": " + vector_json(good) + ", \"k\": 2}";
    const std::string cl = std::to_string(body.size());
    const std::vector<framing_case> cases = {
        // §5.1: whitespace between the field name and the colon -> 400.
        {"space before the colon", raw_post("Content-Length : " + cl + "\r\n", body), 400},
        {"tab before the colon", raw_post("Content-Length\t: " + cl + "\r\n", body), 400},
        // §7.1: chunk-data is followed by CRLF, nothing else.
        {"two other bytes after chunk data", raw_post("Transfer-Encoding: chunked\r\n", one_chunk(body, "", "XX")),
         400},
        {"LF alone after chunk data", raw_post("Transfer-Encoding: chunked\r\n", one_chunk(body, "", "\n")), 400},
        // §6.1: a transfer coding the server does not implement -> 501.
        {"identity, then chunked",
         raw_post("Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n", one_chunk(body)), 501},
        {"gzip, chunked", raw_post("Transfer-Encoding: gzip, chunked\r\n", one_chunk(body)), 501},
        // §6.3: chunked not final, or twice -> 400.
        {"chunked, then gzip", raw_post("Transfer-Encoding: chunked, gzip\r\n", one_chunk(body)), 400},
        {"chunked twice", raw_post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", one_chunk(body)),
         400},
        {"Content-Length and Transfer-Encoding",
         raw_post("Content-Length: " + cl + "\r\nTransfer-Encoding: chunked\r\n", one_chunk(body)), 400},
        {"Content-Length fields that disagree", raw_post("Content-Length: " + cl + "\r\nContent-Length: 1\r\n", body),
         400},
        {"Content-Length with a sign", raw_post("Content-Length: +" + cl + "\r\n", body), 400},
        // §2.2 and §5.2: CRLF line ends, no obsolete folding.
        {"CR without LF in a field line", raw_post("Content-Length: " + cl + "\r\nX-A: b\rX-C: d\r\n", body), 400},
        {"obsolete line folding", raw_post("X-A: b\r\n c\r\nContent-Length: " + cl + "\r\n", body), 400},
        {"bare LF line ends", "POST /v1/search HTTP/1.1\nHost: t\nContent-Length: " + cl + "\n\n" + body, 400},
        {"chunk size that is not hex", raw_post("Transfer-Encoding: chunked\r\n", "zz\r\n" + body + "\r\n0\r\n\r\n"),
         400},
        {"malformed chunk extension", raw_post("Transfer-Encoding: chunked\r\n", one_chunk(body, ";=")), 400},
        // §3.2: exactly one Host in HTTP/1.1.
        {"no Host", "POST /v1/search HTTP/1.1\r\nContent-Length: " + cl + "\r\n\r\n" + body, 400},
        {"two Hosts", raw_post("Host: u\r\nContent-Length: " + cl + "\r\n", body), 400},
        // §6.1: Transfer-Encoding in HTTP/1.0 is faulty framing.
        {"Transfer-Encoding in HTTP/1.0",
         "POST /v1/search HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + one_chunk(body), 400},
        {"HTTP/2.0 on HTTP/1 framing", "GET /healthz HTTP/2.0\r\nHost: t\r\n\r\n", 505},
        {"HXXP instead of HTTP", "GET /healthz HXXP/1.1\r\nHost: t\r\n\r\n", 400},
        {"two spaces in the request line", "GET  /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 400},
    };
    for (const framing_case& c : cases) {
        INFO(c.name);
        const auto check = [&]() -> asio::awaitable<void> {
            http_client client(co_await asio::this_coro::executor);
            co_await client.connect("127.0.0.1", f.server.port());
            const http_reply r = co_await client.roundtrip(c.raw);
            CHECK(r.status == c.status);
            CHECK(error_field(r.body) == "http");
            CHECK_FALSE(r.keep_alive);
            const bool closed = co_await client.closed_by_peer();
            CHECK(closed);
        };
        run_blocking(check());
    }
    // The same body framed correctly is served, both ways, and so are the
    // forms RFC 9112 allows: chunk extensions, trailers, empty lines before
    // the request line, OWS around values, HTTP/1.0 without Host.
    const std::vector<std::string> fine = {
        raw_post("Content-Length: " + cl + "\r\n", body),
        raw_post("Transfer-Encoding: chunked\r\n", one_chunk(body)),
        raw_post("Transfer-Encoding:\tChunked \r\n", one_chunk(body, " ; name=\"quoted \\\" value\";x")),
        raw_post("Transfer-Encoding: chunked\r\n", one_chunk(body, "", "\r\n", "X-T: 1\r\n")),
        "\r\n" + raw_post("Content-Length:  " + cl + " \r\nContent-Length: " + cl + "\r\n", body),
        "POST /v1/search HTTP/1.0\r\nContent-Length: " + cl + "\r\n\r\n" + body,
    };
    for (const std::string& raw : fine) {
        INFO(raw);
        const http_reply r = f.call(raw);
        CHECK(r.status == 200);
        CHECK(hits_of(r.body).size() == 2);
    }
}

TEST_CASE("a chunk larger than --max-body gets 413 at once, not after the request timeout", "[embedding_search]") {
    server_options so;
    so.max_body_bytes = 4096;
    so.request_timeout = 3s;
    server_fixture f(so);
    for (const std::string& size : {std::string("1001"), std::string("ffffffffffffffffffff")}) {
        INFO(size);
        const auto start = std::chrono::steady_clock::now();
        const auto check = [&]() -> asio::awaitable<void> {
            http_client client(co_await asio::this_coro::executor);
            co_await client.connect("127.0.0.1", f.server.port());
            // The chunk header alone: the data never comes.
            const http_reply r =
                co_await client.roundtrip(raw_post("Transfer-Encoding: chunked\r\n", size + "\r\n{\"vector\""));
            CHECK(r.status == 413);
            CHECK(error_field(r.body) == "body");
            CHECK_FALSE(r.keep_alive);
        };
        run_blocking(check());
        CHECK(std::chrono::steady_clock::now() - start < 2s);
    }
    // Chunks that are each small but together too large: 413 at the chunk that crosses the limit.
    const std::string chunk(3000, ' ');
    const http_reply r = f.call(raw_post("Transfer-Encoding: chunked\r\n", "bb8\r\n" + chunk + "\r\nbb8\r\n"));
    CHECK(r.status == 413);
    CHECK(f.server.snapshot().request_timeouts == 0);
}

TEST_CASE("vector elements are judged one by one: large finite numbers pass, overflow names the element",
          "[embedding_search]") {
    server_fixture f;
    const std::vector<float> good = query_near_row(test_corpus(), 9, 0.5, 1);
    const auto post = [&](const std::string& vector, const std::string& k = "3") {
        return f.call(make_request("POST", "/v1/search", "{\"vector\": " + vector + ", \"k\": " + k + "}"));
    };
    // 1e20 and 3e38 are finite f32 values; integers beyond 64 bits are numbers too.
    for (const std::string& big : {std::string("1e20"), std::string("-3e38"), std::string("1E+20"),
                                   std::string("100000000000000000000"), std::string("1e-400")}) {
        INFO(big);
        const http_reply r = post(array_with(good, 4, big));
        CHECK(r.status == 200);
        CHECK(hits_of(r.body).size() == 3);
    }
    // Not a finite f32: named by index, whatever the JSON parser thinks of it.
    for (const std::string& bad : {std::string("1e400"), std::string("-1e400"), std::string("1e39"),
                                   std::string("1000000000000000000000000000000000000000")}) {
        INFO(bad);
        const http_reply r = post(array_with(good, 5, bad));
        CHECK(r.status == 400);
        CHECK(error_field(r.body) == "vector[5]");
    }
    // A k out of any range is a "k" error; truly malformed JSON stays a "body" error.
    CHECK(error_field(post(vector_json(good), "1e400").body) == "k");
    CHECK(error_field(post(vector_json(good), "100000000000000000000").body) == "k");
    CHECK(error_field(post(array_with(good, 5, "1e400") + ", \"x\": [1,").body) == "body");
    CHECK(error_field(post(array_with(good, 5, "1e400") + "} trailing").body) == "body");
}

TEST_CASE("no response carries an internal exception's text, and a max_k below 1 is refused", "[embedding_search]") {
    tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 1});
    search_engine engine(cpu, test_corpus(), engine_options{});
    for (const std::int64_t max_k : {std::int64_t(0), std::int64_t(-5)}) {
        server_options so;
        so.port = 0;
        so.max_k = max_k;
        // Before: accepted; a search without "k" then failed with 500 and the
        // text of std::vector's length_error.
        CHECK_THROWS_AS(search_server(engine, so), std::invalid_argument);
    }
}

TEST_CASE("a corpus with inf or NaN is refused at load, naming the first bad row and column", "[embedding_search]") {
    temp_dir dir;
    tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 2});
    struct bad_corpus {
        const char* name;
        std::int64_t row, column;
        float value;
        const char* shown;
    };
    const float inf = std::numeric_limits<float>::infinity();
    for (const bad_corpus& c :
         {bad_corpus{"nan.npy", 1500, 3, std::numeric_limits<float>::quiet_NaN(), "NaN"},
          bad_corpus{"inf.npy", 2, 0, inf, "inf"}, bad_corpus{"ninf.npy", 4999, 7, -inf, "-inf"}}) {
        INFO(c.name);
        // 5000 rows: more than one parallel_for block, with a second bad value
        // later in the file that must not be the one reported.
        std::vector<float> values(5000 * 8, 0.5f);
        values[std::size_t(c.row * 8 + c.column)] = c.value;
        if (c.row < 4000) values[4000 * 8 + 1] = std::numeric_limits<float>::quiet_NaN();
        const std::string path = (dir.path / c.name).string();
        const tf::tensor t = tf::tensor::from<float>(values, {5000, 8});
        const auto save = [&]() -> asio::awaitable<void> {
            const auto executor = co_await asio::this_coro::executor;
            co_await tf::async_write_npy(executor, path, t);
        };
        run_blocking(save());
        corpus_source read;
        read.path = path;
        try {
            run_blocking(obtain_corpus(cpu, read));
            FAIL("accepted " << c.name);
        } catch (const std::runtime_error& e) {
            const std::string what = e.what();
            CHECK_THAT(what, Catch::Contains(path));
            CHECK_THAT(what, Catch::Contains("row " + std::to_string(c.row) + ", column " + std::to_string(c.column) +
                                             " is " + c.shown + ";"));
        }
    }
}

namespace {

struct process_result {
    int exit_code = -1;  ///< -1: did not exit in time (killed)
    std::string err;     ///< what it wrote to stderr
};

/// Runs the tenferro-search binary with `args`, for at most `limit`.
process_result run_search_binary(const char* binary, const std::vector<std::string>& args,
                                 std::chrono::milliseconds limit = 10s) {
    temp_dir dir;
    const std::string err_file = (dir.path / "stderr").string();
    const pid_t pid = fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) {
        std::FILE* err = std::freopen(err_file.c_str(), "w", stderr);
        std::FILE* out = std::freopen("/dev/null", "w", stdout);
        if (!err || !out) _exit(126);
        std::vector<char*> argv{const_cast<char*>(binary)};
        for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        execv(binary, argv.data());
        _exit(127);
    }
    process_result result;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    } else if (WIFEXITED(status)) {
        result.exit_code = WEXITSTATUS(status);
    }
    if (std::FILE* f = std::fopen(err_file.c_str(), "r")) {
        char buf[4096];
        std::size_t n = 0;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) result.err.append(buf, n);
        std::fclose(f);
    }
    return result;
}

}  // namespace

TEST_CASE("the tenferro-search binary refuses bad flags at start-up, saying what is accepted", "[embedding_search]") {
    const char* binary = std::getenv("TENFERRO_SEARCH_BINARY");
    if (!binary) {
        WARN("TENFERRO_SEARCH_BINARY is not set; skipping");
        return;
    }
    struct flag_case {
        std::vector<std::string> args;
        std::string expected;  // in the message on stderr
    };
    // Each would otherwise start a server (bounded by the 10 s limit below):
    // a small generated corpus on an ephemeral port.
    const std::vector<std::string> base = {"--generate", "50", "4", "--port", "0"};
    const std::vector<flag_case> cases = {
        {{"--max-k", "-5"}, "--max-k: Value -5 not in range 1 to"},
        {{"--max-k", "0"}, "--max-k: Value 0 not in range 1 to"},
        {{"--host", "not-an-ip"}, "'not-an-ip' is not an IP address; give an IPv4 or IPv6 address"},
        {{"--port", "70000"}, "--port"},
        {{"--batch", "0"}, "--batch: Value 0 not in range 1 to 4096"},
        {{"--batch-delay-us", "-1"}, "--batch-delay-us: Value -1 not in range 0 to 10000000"},
        {{"--io-threads", "0"}, "--io-threads: Value 0 not in range 1 to 1024"},
        {{"--max-body", "0"}, "--max-body: Value 0 not in range 1 to"},
        {{"--compute-nice", "40"}, "--compute-nice: Value 40 not in range 0 to 19"},
        {{"--request-timeout", "nan"}, "'nan' is not a number of seconds from 0.001 to 86400"},
        {{"--idle-timeout", "-1"}, "'-1' is not a number of seconds"},
        {{"--drain-timeout", "1e300"}, "'1e300' is not a number of seconds"},
    };
    for (const flag_case& c : cases) {
        std::vector<std::string> args = base;
        args.insert(args.end(), c.args.begin(), c.args.end());
        INFO(c.args[0] << " " << c.args[1]);
        const process_result r = run_search_binary(binary, args);
        INFO(r.err);
        CHECK(r.exit_code > 0);
        CHECK_THAT(r.err, Catch::Contains(c.expected));
    }
    // A corpus that cannot fit: said in those words, not "std::bad_alloc".
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--generate", "100000000000", "128", "--port", "0"},
          std::vector<std::string>{"--generate", "9223372036854775807", "9223372036854775807", "--port", "0"}}) {
        INFO(args[1]);
        const process_result r = run_search_binary(binary, args);
        INFO(r.err);
        CHECK(r.exit_code > 0);
        CHECK_THAT(r.err, Catch::Contains("--generate " + args[1] + " x " + args[2] + ": the corpus"));
        CHECK_THAT(r.err, !Catch::Contains("bad_alloc"));
    }
    {
        const process_result r = run_search_binary(binary, {"--generate", "0", "4", "--port", "0"});
        CHECK(r.exit_code > 0);
        CHECK_THAT(r.err, Catch::Contains("--generate: Value 0 not in range 1 to"));
    }
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
