#include "http_server.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>

using asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace embedding_search {

namespace {

server_options checked(server_options options) {
    // Checked here as well as by tenferro-search's flags, for embedders: a
    // max_k below 1 made every search without "k" fail inside the engine.
    if (options.max_k < 1) {
        throw std::invalid_argument("search_server: max_k must be at least 1, got " + std::to_string(options.max_k));
    }
    if (options.max_body_bytes < 1) throw std::invalid_argument("search_server: max_body_bytes must be at least 1");
    options.io_threads = std::max<std::size_t>(1, options.io_threads);
    return options;
}

search_limits limits_for(const search_engine& engine, const server_options& options) {
    search_limits limits;
    limits.dim = engine.dim();
    // Not capped at the corpus's rows: they change (a search returns fewer than k when fewer
    // rows pass, contract section 10).
    limits.max_k = options.max_k;
    limits.default_k = std::min<std::int64_t>(10, limits.max_k);
    return limits;
}

}  // namespace

search_server::search_server(search_engine& engine, server_options options)
    : options_(checked(std::move(options))),
      connection_limits_{.max_body_bytes = options_.max_body_bytes,
                         .idle_timeout = options_.idle_timeout,
                         .request_timeout = options_.request_timeout,
                         .retry_after_seconds = options_.retry_after_seconds,
                         .notice_closed = options_.notice_closed},
      routes_(engine, limits_for(engine, options_), *this),
      strand_(asio::make_strand(io_)),
      acceptor_(strand_),
      signals_(strand_),
      drain_timer_(strand_) {
    const tcp::endpoint endpoint(asio::ip::make_address(options_.host), options_.port);
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
    port_ = acceptor_.local_endpoint().port();
    if (options_.handle_signals) {
        signals_.add(SIGINT);
        signals_.add(SIGTERM);
    }
}

search_server::~search_server() {
    drain();
    if (threads_.empty()) io_.run();  // never started: let the drain run here
    wait();
}

void search_server::start() {
    asio::co_spawn(strand_, accept_loop(), asio::detached);
    if (options_.handle_signals) {
        signals_.async_wait([this](std::error_code ec, int signal) {
            if (ec) return;
            std::fprintf(stderr, "tenferro-search: %s: draining requests in flight\n",
                         signal == SIGINT ? "SIGINT" : "SIGTERM");
            begin_drain();
        });
    }
    for (std::size_t i = 0; i < options_.io_threads; ++i) threads_.emplace_back([this] { io_.run(); });
}

void search_server::drain() {
    asio::post(strand_, [this] { begin_drain(); });
}

void search_server::wait() {
    for (auto& t : threads_) {
        if (t.joinable()) t.join();
    }
}

asio::awaitable<void> search_server::accept_loop() {
    for (;;) {
        tcp::socket socket(asio::make_strand(io_));
        std::error_code ec;
        co_await acceptor_.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
        if (draining_flag_.load(std::memory_order_acquire) || ec == asio::error::operation_aborted) co_return;
        if (ec) {
            // Out of descriptors and the like: back off instead of spinning.
            asio::steady_timer pause(strand_, std::chrono::milliseconds(50));
            co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            continue;
        }
        socket.set_option(tcp::no_delay(true), ec);
        auto c = std::make_shared<http_connection>(static_cast<connection_owner&>(*this), connection_limits_, counters_,
                                                   std::move(socket));
        {
            std::lock_guard lock(connections_mutex_);
            connections_.emplace(c.get(), c);
        }
        accepted_.fetch_add(1, std::memory_order_relaxed);
        asio::co_spawn(c->executor(), http_connection::run(c), asio::detached);
    }
}

void search_server::begin_drain() {
    std::vector<std::shared_ptr<http_connection>> open;
    {
        std::lock_guard lock(connections_mutex_);
        if (draining_) return;
        draining_ = true;
        draining_flag_.store(true, std::memory_order_release);
        for (auto& [raw, weak] : connections_) {
            if (auto c = weak.lock()) open.push_back(std::move(c));
        }
    }
    std::error_code ignored;
    acceptor_.close(ignored);
    signals_.cancel(ignored);
    signals_.clear(ignored);  // a second Ctrl-C now ends the process at once
    if (open.empty()) return;
    drain_timer_.expires_after(options_.drain_timeout);
    drain_timer_.async_wait([this](std::error_code ec) {
        if (ec) return;
        std::lock_guard lock(connections_mutex_);
        for (auto& [raw, weak] : connections_) {
            if (auto c = weak.lock()) asio::post(c->executor(), [c] { c->force_close(); });
        }
    });
    for (auto& c : open) asio::post(c->executor(), [c] { c->drain_notice(); });
}

void search_server::connection_closed(http_connection* c) {
    std::lock_guard lock(connections_mutex_);
    connections_.erase(c);
    if (draining_ && connections_.empty()) {
        asio::post(strand_, [this] { drain_timer_.cancel(); });
    }
}

asio::awaitable<http_response> search_server::handle(const http_request& request, clock_type::time_point received,
                                                     asio::cancellation_slot gone) {
    return routes_.handle(request, received, gone);
}

bool search_server::draining() const noexcept { return draining_flag_.load(std::memory_order_acquire); }

server_snapshot search_server::snapshot() const {
    server_snapshot s;
    s.connections_accepted = accepted_.load(std::memory_order_relaxed);
    {
        std::lock_guard lock(connections_mutex_);
        s.connections_open = connections_.size();
    }
    s.requests = counters_.requests.load(std::memory_order_relaxed);
    s.keepalive_reused = counters_.keepalive_reused.load(std::memory_order_relaxed);
    s.idle_timeouts = counters_.idle_timeouts.load(std::memory_order_relaxed);
    s.request_timeouts = counters_.request_timeouts.load(std::memory_order_relaxed);
    s.abandoned = counters_.abandoned.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < counters_.responses.size(); ++i) {
        if (const auto n = counters_.responses[i].load(std::memory_order_relaxed)) s.responses.emplace_back(int(i), n);
    }
    s.search_latency = routes_.search_latency();
    s.healthz_latency = routes_.healthz_latency();
    for (std::size_t g = 0; g < routes_.groups(); ++g) s.group_latency.push_back(routes_.group_latency(g));
    s.uptime_seconds = std::chrono::duration<double>(clock_type::now() - started_).count();
    return s;
}

std::string search_server::stats_json() const { return routes_.stats_json(); }

}  // namespace embedding_search
