// The embedding-search server's tenants and deadlines: X-Tenferro-Group routes
// a search to its group's batcher and host group (unknown: 400 naming the
// groups), a timeout (body `timeout_ms` or X-Tenferro-Timeout-Ms) becomes a
// deadline missed at arrival, in the queue or at batch start (503
// deadline_exceeded + Retry-After), malformed timeouts get 400 naming the
// field, and /v1/stats and /metrics break everything down per group.
#include "tenant_groups.hpp"

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <simdjson.h>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <tenferro/tenferro.hpp>

#include "http_client.hpp"
#include "http_server.hpp"
#include "run_blocking.hpp"
#include "search_engine.hpp"

#include "../support/embedding_search_fixture.hpp"

namespace tf = tenferro;
using namespace embedding_search;
using namespace std::chrono_literals;
using namespace embedding_search::testing;

namespace {

/// A server whose host has the groups bulk:1 and interactive:2.
struct tenants_fixture {
    explicit tenants_fixture(std::size_t permits = 2, std::size_t max_batch = 8)
        : cpu(tf::cpu_backend_options{.permits = permits,
                                      .groups = {{.name = "bulk", .weight = 1}, {.name = "interactive", .weight = 2}}}),
          engine(cpu, test_corpus(), engine_options{.max_batch = max_batch}),
          server(engine, server_fixture::with_port0({})) {
        server.start();
    }
    ~tenants_fixture() {
        server.drain();
        server.wait();
    }
    http_reply call(const std::string& request) {
        return run_blocking(server_fixture::roundtrip(server.port(), request));
    }

    tf::cpu_backend cpu;
    search_engine engine;
    search_server server;
};

std::string body_of(const std::vector<float>& v, const std::string& extra = "") {
    return "{\"vector\": " + vector_json(v) + ", \"k\": 3" + extra + "}";
}

std::string search_in(const std::string& header_lines, const std::string& extra = "") {
    return make_request("POST", "/v1/search", body_of(query_near_row(test_corpus(), 17, 0.3, 4), extra), header_lines);
}

std::string json_string(const std::string& body, const char* a, const char* b) {
    simdjson::dom::parser parser;
    std::string_view s;
    if (parser.parse(body)[a][b].get_string().get(s)) return "";
    return std::string(s);
}

}  // namespace

TEST_CASE("--group specs, the timeout header and the wait prediction", "[embedding_search][tenants]") {
    const auto g = parse_group_spec("interactive:4");
    REQUIRE(g);
    CHECK(g->name == "interactive");
    CHECK(g->weight == 4);
    CHECK_THAT(parse_group_spec("bulk:0").error(), Catch::Contains("weight must be a whole number from 1 to 10000"));
    CHECK_THAT(parse_group_spec("bulk:-1").error(), Catch::Contains("weight"));
    CHECK_THAT(parse_group_spec("bulk:1.5").error(), Catch::Contains("weight"));
    CHECK_THAT(parse_group_spec("bulk:99999999999").error(), Catch::Contains("weight"));
    CHECK_THAT(parse_group_spec("bulk").error(), Catch::Contains("is not NAME:WEIGHT (no colon)"));
    CHECK_THAT(parse_group_spec(":1").error(), Catch::Contains("group name must be 1 to 64"));
    CHECK_THAT(parse_group_spec("a b:1").error(), Catch::Contains("group name"));
    CHECK_THAT(parse_group_spec(std::string(65, 'x') + ":1").error(), Catch::Contains("group name"));
    CHECK(check_groups({{.name = "a"}, {.name = "b"}}).empty());
    CHECK(check_groups({{.name = "a"}, {.name = "b"}, {.name = "a"}}) == "the group 'a' is given twice");

    CHECK(parse_timeout_header("250").value() == 250);
    CHECK(parse_timeout_header("0").value() == 0);
    CHECK(parse_timeout_header("86400000").value() == 86'400'000);
    for (const char* bad : {"", "-5", "abc", "1e3", "2.5", " 5", "86400001", "99999999999999999999999"}) {
        INFO(bad);
        CHECK_FALSE(parse_timeout_header(bad));
    }

    // n / B batches ahead, each D long, stretched by backlogged weight / weight.
    wait_inputs in{
        .waiting_ahead = 64, .max_batch = 32, .mean_batch_seconds = 0.010, .weight = 1, .backlogged_weight = 1};
    CHECK(predicted_wait_seconds(in) == Approx(0.020));
    in.backlogged_weight = 3;  // another group of weight 2 is backlogged
    CHECK(predicted_wait_seconds(in) == Approx(0.060));
    in.mean_batch_seconds = 0.0;  // no batch finished yet: no prediction
    CHECK(predicted_wait_seconds(in) == 0.0);
    in.mean_batch_seconds = 0.010;
    in.waiting_ahead = 0;
    CHECK(predicted_wait_seconds(in) == 0.0);

    CHECK(retry_after_for(0.0) == 1);
    CHECK(retry_after_for(0.2) == 1);
    CHECK(retry_after_for(1.01) == 2);
    CHECK(retry_after_for(7.0) == 7);
    CHECK(retry_after_for(1e12) == 86'400);
}

TEST_CASE("X-Tenferro-Group routes a search to its group; unknown groups get 400 naming the groups",
          "[embedding_search][tenants]") {
    tenants_fixture f;
    REQUIRE(f.engine.groups() == 2);
    // Header names are case-insensitive; no header: the first group.
    CHECK(f.call(search_in("x-tenferro-group: interactive\r\n")).status == 200);
    CHECK(f.call(search_in("X-TENFERRO-GROUP:interactive  \r\n")).status == 200);
    CHECK(f.call(search_in("X-Tenferro-Group: bulk\r\n")).status == 200);
    CHECK(f.call(search_in("")).status == 200);
    // Idle server: each search is a batch session of its own, in its group.
    CHECK(f.cpu.group_stats(0).admitted == 2);
    CHECK(f.cpu.group_stats(1).admitted == 2);
    CHECK(f.cpu.group_stats(0).completed == 2);
    CHECK(f.cpu.group_stats(1).completed == 2);

    const auto check_400 = [&](const std::string& value, bool echoed) {
        INFO(value.substr(0, 80));
        const auto check = [&]() -> asio::awaitable<void> {
            http_client client(co_await asio::this_coro::executor);
            co_await client.connect("127.0.0.1", f.server.port());
            const http_reply r = co_await client.roundtrip(search_in("X-Tenferro-Group: " + value + "\r\n"));
            CHECK(r.status == 400);
            CHECK(error_field(r.body) == "X-Tenferro-Group");
            CHECK(r.keep_alive);
            CHECK_THAT(r.body, Catch::Contains("the groups are: bulk, interactive"));
            CHECK_THAT(r.body, Catch::Contains("\"groups\":[\"bulk\",\"interactive\"]"));
            CHECK(r.body.size() < 400);  // a hostile value is not echoed
            if (echoed) CHECK_THAT(r.body, Catch::Contains("unknown group '" + value + "'"));
            const http_reply after = co_await client.roundtrip(search_in("X-Tenferro-Group: bulk\r\n"));
            CHECK(after.status == 200);
        };
        run_blocking(check());
    };
    check_400("nope", true);
    check_400("Bulk", true);  // names match exactly
    check_400(std::string(10'000, 'b'), false);
    check_400("\"}</script>", false);
    CHECK(f.cpu.group_stats(0).admitted == 6);  // each connection's good search after its 400

    // Two group fields: which one counts would depend on the reader, so 400 and close.
    const http_reply two = f.call(search_in("X-Tenferro-Group: bulk\r\nX-Tenferro-Group: interactive\r\n"));
    CHECK(two.status == 400);
    CHECK(error_field(two.body) == "http");
    CHECK_FALSE(two.keep_alive);
}

TEST_CASE("a FIFO server has one group, \"default\"", "[embedding_search][tenants]") {
    server_fixture f;
    CHECK(f.call(search_in("X-Tenferro-Group: default\r\n")).status == 200);
    const http_reply r = f.call(search_in("X-Tenferro-Group: bulk\r\n"));
    CHECK(r.status == 400);
    CHECK_THAT(r.body, Catch::Contains("\"groups\":[\"default\"]"));
}

TEST_CASE("a timeout with no time left is 503 deadline_exceeded with Retry-After, counted per group",
          "[embedding_search][tenants]") {
    tenants_fixture f;
    for (const std::string& request :
         {search_in("X-Tenferro-Group: interactive\r\n", ", \"timeout_ms\": 0"),
          search_in("X-Tenferro-Group: interactive\r\nX-Tenferro-Timeout-Ms: 0\r\n"),
          // Both given: the shorter one applies.
          search_in("X-Tenferro-Group: interactive\r\nX-Tenferro-Timeout-Ms: 60000\r\n", ", \"timeout_ms\": 0")}) {
        const http_reply r = f.call(request);
        CHECK(r.status == 503);
        CHECK(json_string(r.body, "error", "code") == "deadline_exceeded");
        CHECK(json_string(r.body, "error", "stage") == "arrival");
        CHECK(json_string(r.body, "error", "group") == "interactive");
        CHECK(std::stoi(r.retry_after) >= 1);
        CHECK(r.keep_alive);
    }
    // A generous timeout is no obstacle.
    CHECK(f.call(search_in("X-Tenferro-Timeout-Ms: 60000\r\n", ", \"timeout_ms\": 60000")).status == 200);
    const engine_snapshot e = f.engine.snapshot();
    CHECK(e.groups[1].expired[std::size_t(expiry_stage::arrival)] == 3);
    CHECK(e.groups[0].expired[std::size_t(expiry_stage::arrival)] == 0);
    CHECK(e.groups[1].requests == 3);
    CHECK(f.cpu.group_stats(1).admitted == 0);  // never reached the host
}

TEST_CASE("a deadline that passes in the queue is answered at once, without computing", "[embedding_search][tenants]") {
    tenants_fixture f;
    permit_holder hold(f.cpu);
    const auto start = std::chrono::steady_clock::now();
    const http_reply r = f.call(search_in("X-Tenferro-Group: bulk\r\n", ", \"timeout_ms\": 100"));
    const auto waited = std::chrono::steady_clock::now() - start;
    // Still held: the answer came from the deadline's timer, not from a batch.
    CHECK(f.cpu.stats().available == 0);
    hold.release();
    CHECK(r.status == 503);
    CHECK(json_string(r.body, "error", "code") == "deadline_exceeded");
    CHECK(json_string(r.body, "error", "stage") == "queue");
    CHECK(r.retry_after == "1");
    CHECK(waited >= 90ms);
    CHECK(waited < 5s);
    CHECK(eventually([&] { return f.engine.snapshot().batcher.waiting == 0; }));
    const engine_snapshot e = f.engine.snapshot();
    CHECK(e.groups[0].expired[std::size_t(expiry_stage::queue)] == 1);
    CHECK(e.batched_queries == 0);
    CHECK(f.call(search_in("X-Tenferro-Group: bulk\r\n")).status == 200);
}

TEST_CASE("an item whose deadline passed before its batch started is not computed", "[embedding_search][tenants]") {
    tenants_fixture f;
    // A search on an io_context that this thread steps: the deadline's timer
    // cannot run while it is not stepped, so the item is still in the batcher
    // when the permits come back after its deadline.
    asio::io_context io(1);
    permit_holder hold(f.cpu);
    const auto deadline = std::chrono::steady_clock::now() + 50ms;
    search_query q{query_near_row(test_corpus(), 3, 0.2, 1), 3};
    std::future<search_outcome> done = asio::co_spawn(io, f.engine.search(std::move(q), 1, deadline), asio::use_future);
    const bool queued = eventually([&] {
        io.poll();
        return f.engine.snapshot().groups[1].waiting == 1;
    });
    std::this_thread::sleep_until(deadline + 50ms);
    hold.release();
    io.run();
    REQUIRE(queued);
    const search_outcome out = done.get();
    CHECK(out.status == search_status::expired);
    CHECK(out.stage == expiry_stage::batch_start);
    const engine_snapshot e = f.engine.snapshot();
    CHECK(e.groups[1].expired[std::size_t(expiry_stage::batch_start)] == 1);
    CHECK(e.sessions == 1);         // the batch body ran ...
    CHECK(e.batched_queries == 0);  // ... and computed nothing
}

TEST_CASE("malformed timeouts get 400 naming the field", "[embedding_search][tenants]") {
    tenants_fixture f;
    struct bad_case {
        std::string headers, extra, field;
    };
    const std::vector<bad_case> cases = {
        {"", ", \"timeout_ms\": -5", "timeout_ms"},
        {"", ", \"timeout_ms\": \"100\"", "timeout_ms"},
        {"", ", \"timeout_ms\": 2.5", "timeout_ms"},
        {"", ", \"timeout_ms\": 1e3", "timeout_ms"},
        {"", ", \"timeout_ms\": true", "timeout_ms"},
        {"", ", \"timeout_ms\": 86400001", "timeout_ms"},
        {"", ", \"timeout_ms\": 100000000000000000000000", "timeout_ms"},
        {"X-Tenferro-Timeout-Ms: -5\r\n", "", "X-Tenferro-Timeout-Ms"},
        {"X-Tenferro-Timeout-Ms: soon\r\n", "", "X-Tenferro-Timeout-Ms"},
        {"X-Tenferro-Timeout-Ms: 99999999999\r\n", "", "X-Tenferro-Timeout-Ms"},
        {"X-Tenferro-Timeout-Ms:\r\n", "", "X-Tenferro-Timeout-Ms"},
    };
    for (const bad_case& c : cases) {
        INFO(c.headers << c.extra);
        const http_reply r = f.call(search_in(c.headers, c.extra));
        CHECK(r.status == 400);
        CHECK(error_field(r.body) == c.field);
        CHECK_THAT(r.body, Catch::Contains("milliseconds from 0 to 86400000"));
    }
}

TEST_CASE("/v1/stats and /metrics break admission down per group", "[embedding_search][tenants]") {
    tenants_fixture f;
    REQUIRE(f.call(search_in("X-Tenferro-Group: interactive\r\n")).status == 200);
    REQUIRE(f.call(search_in("X-Tenferro-Group: interactive\r\n")).status == 200);
    REQUIRE(f.call(search_in("X-Tenferro-Group: bulk\r\n")).status == 200);
    REQUIRE(f.call(search_in("X-Tenferro-Group: bulk\r\n", ", \"timeout_ms\": 0")).status == 503);

    const http_reply stats = f.call(make_request("GET", "/v1/stats"));
    REQUIRE(stats.status == 200);
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    REQUIRE_FALSE(parser.parse(stats.body).get(doc));
    simdjson::dom::array groups;
    REQUIRE_FALSE(doc["groups"].get_array().get(groups));
    REQUIRE(groups.size() == 2);
    const auto group = [&](std::size_t i) { return groups.at(i).value(); };
    CHECK(group(0)["name"].get_string().value() == "bulk");
    CHECK(group(1)["name"].get_string().value() == "interactive");
    CHECK(group(1)["weight"].get_uint64().value() == 2);
    CHECK(group(0)["admission"]["admitted"].get_uint64().value() == 1);
    CHECK(group(1)["admission"]["admitted"].get_uint64().value() == 2);
    CHECK(group(1)["admission"]["completed"].get_uint64().value() == 2);
    CHECK(group(1)["admission"]["busy_permit_seconds"].get_double().value() > 0.0);
    for (const char* key : {"waiting", "rejected", "cancelled", "expired"})
        CHECK(group(0)["admission"][key].get_uint64().value() == 0);
    CHECK(group(0)["requests"].get_uint64().value() == 2);
    CHECK(group(0)["deadline_exceeded"]["arrival"].get_uint64().value() == 1);
    CHECK(group(0)["deadline_exceeded"]["queue"].get_uint64().value() == 0);
    CHECK(group(0)["deadline_exceeded"]["batch_start"].get_uint64().value() == 0);
    CHECK(group(1)["latency_ms"]["count"].get_uint64().value() == 2);
    CHECK(group(1)["latency_ms"]["p99"].get_double().value() > 0.0);
    CHECK(group(1)["mean_batch_ms"].get_double().value() > 0.0);
    CHECK(doc["admission"]["expired"].get_uint64().value() == 0);  // refused before the host

    const http_reply metrics = f.call(make_request("GET", "/metrics"));
    REQUIRE(metrics.status == 200);
    for (const char* line : {
             "tenferro_admission_group_weight{host=\"cpu\",group=\"interactive\"} 2\n",
             "tenferro_admission_group_admitted_total{host=\"cpu\",group=\"bulk\"} 1\n",
             "tenferro_admission_group_admitted_total{host=\"cpu\",group=\"interactive\"} 2\n",
             "tenferro_admission_group_completed_total{host=\"cpu\",group=\"interactive\"} 2\n",
             "tenferro_admission_group_expired_total{host=\"cpu\",group=\"bulk\"} 0\n",
             "tenferro_admission_group_waiting{host=\"cpu\",group=\"bulk\"} 0\n",
             "tenferro_search_group_requests_total{group=\"bulk\"} 2\n",
             "tenferro_search_deadline_exceeded_total{group=\"bulk\",stage=\"arrival\"} 1\n",
             "tenferro_search_deadline_exceeded_total{group=\"interactive\",stage=\"queue\"} 0\n",
             "tenferro_search_group_request_duration_seconds_count{group=\"interactive\"} 2\n",
             // The host-wide names are still there.
             "tenferro_admission_admitted_total{host=\"cpu\"} 3\n",
             "tenferro_batcher_submitted_total 3\n",
         }) {
        CHECK_THAT(metrics.body, Catch::Contains(line));
    }
    CHECK_THAT(metrics.body,
               Catch::Contains("tenferro_admission_group_busy_permit_seconds_total{host=\"cpu\",group=\"bulk\"} "));
}
