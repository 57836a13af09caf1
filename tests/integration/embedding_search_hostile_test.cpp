// The embedding-search server against hostile clients: request framing that
// RFC 9112 rejects, oversized chunks, vector elements at the limits of float,
// and responses that never carry an internal exception's text.
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
