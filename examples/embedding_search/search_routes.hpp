#pragma once
// What the server answers, request by request: POST /v1/search (through the
// engine), GET /v1/stats (the body built here), GET /metrics (Prometheus,
// metrics_page.hpp), GET /healthz, 404 and 405
// otherwise. No sockets: the connection (http_connection.hpp) reads the request
// and writes the `http_response` returned here.

#include <chrono>
#include <string>
#include <string_view>

#include <asio/awaitable.hpp>

#include "http_connection.hpp"
#include "latency_histogram.hpp"
#include "search_engine.hpp"
#include "search_request.hpp"

namespace embedding_search {

class search_server;

class search_routes {
public:
    /// `server` is the one whose counters /v1/stats reports; it outlives the routes' use.
    search_routes(search_engine& engine, search_limits limits, const search_server& server);

    search_routes(const search_routes&) = delete;
    search_routes& operator=(const search_routes&) = delete;

    asio::awaitable<http_response> handle(std::string_view method, std::string_view target, std::string_view body,
                                          std::chrono::steady_clock::time_point received);

    /// The body of `GET /v1/stats`.
    std::string stats_json() const;

    /// Request received -> response ready, 200s of /v1/search.
    histogram_snapshot search_latency() const { return search_latency_.snapshot(); }
    /// Same for /healthz.
    histogram_snapshot healthz_latency() const { return healthz_latency_.snapshot(); }

private:
    asio::awaitable<http_response> handle_search(std::string_view body);

    search_engine& engine_;
    search_limits limits_;
    const search_server& server_;
    latency_histogram search_latency_, healthz_latency_;
};

}  // namespace embedding_search
