#pragma once
// What the embedding-search integration tests share: a small generated corpus,
// request bodies and their parsing, a server on a loopback port with its own
// cpu_backend, a holder of every permit, polling with a deadline, and a
// temporary directory.

#include <errno.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <simdjson.h>
#include <asio/this_coro.hpp>
#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "http_client.hpp"
#include "http_server.hpp"
#include "json_writer.hpp"
#include "run_blocking.hpp"
#include "search_engine.hpp"

namespace tf = tenferro;

namespace embedding_search::testing {

using namespace std::chrono_literals;

constexpr std::int64_t test_rows = 3000, test_dim = 24;

inline const tf::tensor& test_corpus() {
    static const tf::tensor corpus = [] {
        tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 2});
        return run_blocking(generate_corpus(cpu, test_rows, test_dim, 7));
    }();
    return corpus;
}

inline std::string vector_json(const std::vector<float>& v) {
    json_writer w;
    w.begin_array();
    for (const float x : v) w.value(x);
    w.end_array();
    return w.take();
}

inline std::string search_request(const std::vector<float>& v, std::int64_t k) {
    return make_request("POST", "/v1/search", "{\"vector\": " + vector_json(v) + ", \"k\": " + std::to_string(k) + "}");
}

inline std::vector<search_hit> hits_of(const std::string& body) {
    simdjson::dom::parser parser;
    simdjson::dom::array results;
    std::vector<search_hit> hits;
    if (parser.parse(body)["results"].get_array().get(results)) return hits;
    for (const simdjson::dom::element e : results) {
        hits.push_back({e["id"].get_uint64().value(), float(e["score"].get_double().value())});
    }
    return hits;
}

/// `v` as a JSON array, with element `at` written as `replacement`.
inline std::string array_with(const std::vector<float>& v, std::size_t at, const std::string& replacement) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += ',';
        out += i == at ? replacement : std::to_string(v[i]);
    }
    return out + "]";
}

/// The "field" of a 400 body, or "" when there is none.
inline std::string error_field(const std::string& body) {
    simdjson::dom::parser parser;
    std::string_view field;
    if (parser.parse(body)["error"]["field"].get_string().get(field)) return "";
    return std::string(field);
}

struct server_fixture {
    explicit server_fixture(server_options so = {}, std::size_t permits = 2, std::size_t max_waiters = 1000,
                            std::size_t max_batch = 8, bool inline_compute = false,
                            std::function<void(tf::backend_session&)> on_batch_start = {})
        : cpu(tf::cpu_backend_options{.permits = permits, .max_waiters = max_waiters}),
          engine(cpu, test_corpus(),
                 engine_options{.inline_compute = inline_compute,
                                .max_batch = max_batch,
                                .max_waiting = max_waiters,
                                .on_batch_start = std::move(on_batch_start)}),
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

}  // namespace embedding_search::testing
