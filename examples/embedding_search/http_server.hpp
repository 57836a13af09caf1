#pragma once
// The HTTP/1.1 front end: keep-alive connections on an Asio io_context run by
// `io_threads` threads, requests parsed strictly (http_request_parser.hpp),
// the routes (search_routes.hpp, docs/embedding_search.md):
//
//   POST /v1/search   {"vector": [D numbers], "k": 10, "filter": {...}}
//                     -> {"results": [{"id": i, "score": s}, ...], "seq": s}
//                     (X-Tenferro-Group: the tenant; "timeout_ms" or X-Tenferro-Timeout-Ms: the deadline)
//   PUT, DELETE /v1/vectors, GET /v1/vectors/{id}: the live corpus's rows
//   GET  /v1/stats    admission, buffer-pool, request and latency counters
//   GET  /healthz     {"status": "ok"}
//
// Bad input never takes the server down: malformed HTTP -> 400 (or 501 for an
// unsupported transfer coding, 505 for another HTTP version) and close; a bad
// search body -> 400 naming the field; a body over the limit -> 413 and close;
// admission refused (the tenferro queue bound) -> 503 with Retry-After; a
// deadline missed or predicted to be -> 503 deadline_exceeded; idle
// and slow clients are timed out; drain() (or SIGINT / SIGTERM) stops
// accepting, lets requests in flight finish, and closes every connection.
//
// The server owns the acceptor, the open connections and the drain; a
// connection (http_connection.hpp) reads and writes one socket, the routes
// (search_routes.hpp) say what each request is answered with.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include "http_connection.hpp"
#include "latency_histogram.hpp"
#include "search_engine.hpp"
#include "search_routes.hpp"

namespace embedding_search {

struct server_options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 8080;  ///< 0: an ephemeral port, see `port()`
    std::size_t io_threads = 1;
    std::size_t max_body_bytes = 1 << 20;  ///< larger request bodies get 413
    std::int64_t max_k = 1000;             ///< capped at the corpus rows
    std::chrono::milliseconds idle_timeout{30'000};     ///< no request started on an open connection
    std::chrono::milliseconds request_timeout{10'000};  ///< a request not fully received, or a response not taken
    std::chrono::milliseconds drain_timeout{10'000};    ///< then connections still open are closed
    int retry_after_seconds = 1;                        ///< sent with 503
    bool handle_signals = false;                        ///< SIGINT / SIGTERM start drain()
    /// Watch each connection while its request is answered: a client that
    /// closes (or resets) its connection while its search waits or runs has
    /// the search cancelled (`terminal`: it leaves the queue, or stops its
    /// batch once the batch's every query is gone, contract B4/B7) and gets
    /// no answer. false: the socket is read only after the answer (the
    /// behaviour before issue 46: a search whose client left is computed).
    bool notice_closed = true;
};

/// The server's own counters, cumulative.
struct server_snapshot {
    std::uint64_t connections_accepted = 0, connections_open = 0;
    std::uint64_t requests = 0, keepalive_reused = 0;
    std::uint64_t idle_timeouts = 0, request_timeouts = 0;
    std::uint64_t abandoned = 0;  ///< requests whose client was found gone before the answer (closed unanswered)
    std::vector<std::pair<int, std::uint64_t>> responses;  ///< (status, count), non-zero only
    histogram_snapshot search_latency;   ///< request received -> response ready, 200s of /v1/search
    histogram_snapshot healthz_latency;  ///< same for /healthz
    std::vector<histogram_snapshot> group_latency;  ///< search_latency by tenant group
    double uptime_seconds = 0.0;
};

class search_server : private connection_owner {
public:
    /// Binds and listens at once. \throws std::system_error when it cannot.
    search_server(search_engine& engine, server_options options);
    /// drain(), then wait().
    ~search_server();

    search_server(const search_server&) = delete;
    search_server& operator=(const search_server&) = delete;

    /// The bound port (the ephemeral one when `options.port` was 0).
    std::uint16_t port() const noexcept { return port_; }
    const server_options& options() const noexcept { return options_; }

    /// Starts `io_threads` threads running the server.
    void start();
    /// Starts a graceful shutdown; any thread, idempotent.
    void drain();
    /// Blocks until the drain has finished and the I/O threads have exited.
    void wait();

    server_snapshot snapshot() const;
    /// The body of `GET /v1/stats`.
    std::string stats_json() const;

private:
    // connection_owner: what the connections call (handle goes to the routes)
    asio::awaitable<http_response> handle(const http_request& request, std::chrono::steady_clock::time_point received,
                                          asio::cancellation_slot gone) override;
    bool draining() const noexcept override;
    void connection_closed(http_connection* c) override;

    asio::awaitable<void> accept_loop();
    void begin_drain();

    server_options options_;
    connection_limits connection_limits_;
    search_routes routes_;
    asio::io_context io_;
    asio::strand<asio::io_context::executor_type> strand_;  // acceptor, signals, drain timer
    asio::ip::tcp::acceptor acceptor_;
    asio::signal_set signals_;
    asio::steady_timer drain_timer_;
    std::uint16_t port_ = 0;
    std::vector<std::thread> threads_;
    const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

    mutable std::mutex connections_mutex_;
    std::unordered_map<http_connection*, std::weak_ptr<http_connection>> connections_;
    bool draining_ = false;  // guarded by connections_mutex_
    std::atomic<bool> draining_flag_{false};

    std::atomic<std::uint64_t> accepted_{0};
    connection_counters counters_;
};

}  // namespace embedding_search
