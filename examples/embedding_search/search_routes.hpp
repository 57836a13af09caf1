#pragma once
// What the server answers, request by request: POST /v1/search (through the
// engine, in the tenant group its X-Tenferro-Group header names, by the
// deadline its timeout gives), GET /v1/stats (the body built here), GET
// /metrics (Prometheus, metrics_page.hpp), GET /healthz, 404 and 405
// otherwise. No sockets: the connection (http_connection.hpp) reads the request
// and writes the `http_response` returned here.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>

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

    /// `gone`: emitted when the client leaves first (connection_owner::handle).
    asio::awaitable<http_response> handle(const http_request& request, std::chrono::steady_clock::time_point received,
                                          asio::cancellation_slot gone = {});

    /// The body of `GET /v1/stats`.
    std::string stats_json() const;

    /// Request received -> response ready, 200s of /v1/search.
    histogram_snapshot search_latency() const { return search_latency_.snapshot(); }
    /// Same for /healthz.
    histogram_snapshot healthz_latency() const { return healthz_latency_.snapshot(); }
    std::size_t groups() const noexcept { return group_latency_.size(); }
    /// Same as search_latency, for one tenant group.
    histogram_snapshot group_latency(std::size_t group) const { return group_latency_.at(group)->snapshot(); }

private:
    /// PUT or DELETE /v1/vectors.
    asio::awaitable<http_response> handle_write(const http_request& request);
    asio::awaitable<http_response> handle_search(const http_request& request,
                                                 std::chrono::steady_clock::time_point received,
                                                 asio::cancellation_slot gone);

    search_engine& engine_;
    search_limits limits_;
    const search_server& server_;
    latency_histogram search_latency_, healthz_latency_;
    std::vector<std::unique_ptr<latency_histogram>> group_latency_;  // by group
};

}  // namespace embedding_search
