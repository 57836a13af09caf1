#include "http_server.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string_view>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "http_request_parser.hpp"
#include "json_writer.hpp"

namespace tf = tenferro;
using asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace embedding_search {

namespace {

constexpr std::size_t read_buffer_bytes = 16 * 1024;
// After an error response the server stops reading; closing a socket with
// unread input makes the kernel send a reset that can destroy the response
// before the client reads it. So it first half-closes and discards input for
// at most this long.
constexpr auto linger_limit = std::chrono::milliseconds(500);

std::string_view reason_phrase(int status) {
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}

std::string error_body(std::string_view field, std::string_view message) {
    return render_field_error({std::string(field), std::string(message)}) + '\n';
}

void write_histogram(json_writer& w, std::string_view name, const histogram_snapshot& h) {
    w.key(name).begin_object();
    w.field("count", h.total);
    w.field("p50", h.percentile_ms(0.50)).field("p90", h.percentile_ms(0.90));
    w.field("p99", h.percentile_ms(0.99)).field("p999", h.percentile_ms(0.999));
    w.field("max", double(h.max_ns) / 1e6);
    w.end_object();
}

}  // namespace

struct search_server::http_response {
    int status = 200;
    std::string body;
    bool close = false;        // close the connection after this response
    bool retry_after = false;  // 503: tell the client when to come back
    std::string_view allow;    // 405: the allowed method
};

// One client connection. Its socket's executor is a strand: the request loop
// (`serve`), the deadline watchdog and the drain notices all run on it.
class connection : public std::enable_shared_from_this<connection> {
public:
    connection(search_server& server, tcp::socket socket)
        : server_(server),
          socket_(std::move(socket)),
          timer_(socket_.get_executor()),
          parser_(http_parse_limits{.max_body_bytes = server.options_.max_body_bytes}),
          buffer_(read_buffer_bytes) {}

    asio::any_io_executor executor() { return socket_.get_executor(); }

    static asio::awaitable<void> run(std::shared_ptr<connection> self) {
        asio::co_spawn(self->executor(), watchdog(self), asio::detached);
        try {
            co_await self->serve();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "tenferro-search: connection failed: %s\n", e.what());
        }
        self->closed_ = true;
        std::error_code ignored;
        self->socket_.close(ignored);
        self->timer_.cancel();
        self->server_.connection_closed(self.get());
    }

    /// The server is draining: an idle connection closes now, a busy one after
    /// its response (which then says `Connection: close`).
    void drain_notice() {
        if (idle_) {
            std::error_code ignored;
            socket_.cancel(ignored);
        }
    }

    void force_close() {
        std::error_code ignored;
        socket_.close(ignored);
    }

private:
    static asio::awaitable<void> watchdog(std::shared_ptr<connection> self) {
        while (!self->closed_) {
            self->timer_.expires_at(self->deadline_);
            std::error_code ec;
            co_await self->timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            if (self->closed_) break;
            if (clock_type::now() >= self->deadline_) {
                self->timed_out_ = true;
                self->deadline_ = clock_type::time_point::max();
                std::error_code ignored;
                self->socket_.cancel(ignored);
            }
        }
    }

    void set_deadline(clock_type::time_point t) {
        deadline_ = t;
        if (t < timer_.expiry()) timer_.cancel();  // the watchdog re-arms with the earlier deadline
    }

    asio::awaitable<void> serve() {
        std::size_t begin = 0, end = 0;
        for (;;) {
            if (begin == end) {
                begin = end = 0;
                if (!in_request_ && server_.draining_flag_.load(std::memory_order_acquire)) co_return;
                idle_ = !in_request_;
                set_deadline(in_request_ ? request_deadline_ : clock_type::now() + server_.options_.idle_timeout);
                std::error_code ec;
                const std::size_t n = co_await socket_.async_read_some(asio::buffer(buffer_),
                                                                       asio::redirect_error(asio::use_awaitable, ec));
                idle_ = false;
                if (ec) {
                    if (timed_out_ && in_request_) {
                        server_.request_timeouts_.fetch_add(1, std::memory_order_relaxed);
                        co_await send_error(408, "request", "the request was not received in time");
                    } else if (timed_out_) {
                        server_.idle_timeouts_.fetch_add(1, std::memory_order_relaxed);
                    }
                    co_return;
                }
                end = n;
            }
            // The parser stops after a complete request, so pipelined requests
            // are answered one at a time, in order.
            begin += parser_.parse(buffer_.data() + begin, end - begin);
            if (parser_.started() && !in_request_) {
                in_request_ = true;
                request_deadline_ = clock_type::now() + server_.options_.request_timeout;
                set_deadline(request_deadline_);
            }
            if (parser_.complete()) {
                if (!co_await respond()) co_return;
                continue;
            }
            if (parser_.failed()) {
                // Every framing error is final: after it, where the next request
                // would begin is unknown, so the connection closes.
                // (Named locals, not a conditional's temporaries, as co_await
                // arguments: GCC 12 destroys such temporaries twice.)
                const http_parse_error& e = parser_.error();
                const std::string_view field = e.status == 413 ? "body" : "http";
                std::string message = e.message;
                if (e.status != 413) message.insert(0, "malformed HTTP request: ");
                co_await send_error(e.status, field, message);
                co_return;
            }
            if (parser_.headers_complete() && parser_.request().expect_continue && !continue_sent_) {
                continue_sent_ = true;
                static constexpr std::string_view interim = "HTTP/1.1 100 Continue\r\n\r\n";
                if (!co_await write_buffers({asio::buffer(interim.data(), interim.size()), asio::const_buffer()})) {
                    co_return;
                }
            }
        }
    }

    /// Answers the complete request; false when the connection must close.
    asio::awaitable<bool> respond() {
        const auto received = clock_type::now();
        // (An Upgrade header is ignored, as RFC 9110 §7.8 allows: the answer is plain HTTP/1.1.)
        const http_request& request = parser_.request();
        const bool keep_alive_requested = request.keep_alive;
        in_request_ = false;
        server_.requests_.fetch_add(1, std::memory_order_relaxed);
        if (served_ > 0) server_.keepalive_reused_.fetch_add(1, std::memory_order_relaxed);

        set_deadline(clock_type::time_point::max());  // the server's own work has no deadline
        search_server::http_response r =
            co_await server_.handle(request.method, request.target, request.body, received);
        const bool keep_alive =
            keep_alive_requested && !r.close && !server_.draining_flag_.load(std::memory_order_acquire);
        const bool written = co_await write_response(r, keep_alive);
        ++served_;
        reset_request();
        co_return written&& keep_alive;
    }

    asio::awaitable<bool> write_response(const search_server::http_response& r, bool keep_alive) {
        head_.clear();
        head_ += "HTTP/1.1 ";
        head_ += std::to_string(r.status);
        head_ += ' ';
        head_ += reason_phrase(r.status);
        head_ += "\r\nContent-Type: application/json\r\nContent-Length: ";
        head_ += std::to_string(r.body.size());
        head_ += "\r\n";
        if (!keep_alive) {
            head_ += "Connection: close\r\n";
        } else if (parser_.request().version_minor == 0) {
            head_ += "Connection: keep-alive\r\n";
        }
        if (r.retry_after) head_ += "Retry-After: " + std::to_string(server_.options_.retry_after_seconds) + "\r\n";
        if (!r.allow.empty()) {
            head_ += "Allow: ";
            head_ += r.allow;
            head_ += "\r\n";
        }
        head_ += "\r\n";
        server_.count_response(r.status);
        co_return co_await write_buffers({asio::buffer(head_), asio::buffer(r.body)});
    }

    asio::awaitable<bool> write_buffers(std::array<asio::const_buffer, 2> buffers) {
        const auto previous = deadline_;
        set_deadline(clock_type::now() + server_.options_.request_timeout);
        std::error_code ec;
        co_await asio::async_write(socket_, buffers, asio::redirect_error(asio::use_awaitable, ec));
        if (in_request_) set_deadline(previous);  // an interim 100 Continue: back to the request's deadline
        co_return !ec;
    }

    /// An error response, then a lingering close (see linger_limit).
    asio::awaitable<void> send_error(int status, std::string_view field, const std::string& message) {
        search_server::http_response r;
        r.status = status;
        r.body = error_body(field, message);
        if (!co_await write_response(r, false)) co_return;
        std::error_code ec;
        socket_.shutdown(tcp::socket::shutdown_send, ec);
        set_deadline(clock_type::now() + linger_limit);
        while (!ec) {
            co_await socket_.async_read_some(asio::buffer(buffer_), asio::redirect_error(asio::use_awaitable, ec));
        }
    }

    void reset_request() {
        parser_.next();
        in_request_ = false;
        continue_sent_ = false;
    }

    search_server& server_;
    tcp::socket socket_;
    asio::steady_timer timer_;
    clock_type::time_point deadline_ = clock_type::time_point::max();
    clock_type::time_point request_deadline_ = clock_type::time_point::max();
    http_request_parser parser_;
    std::vector<char> buffer_;
    std::string head_;

    bool in_request_ = false;    // a request has begun and is not answered yet
    bool continue_sent_ = false; // 100 Continue written for the current request

    bool idle_ = false;       // waiting for the first byte of a request
    bool timed_out_ = false;  // the watchdog cancelled the socket's operations
    bool closed_ = false;
    std::uint64_t served_ = 0;
};

search_server::search_server(search_engine& engine, server_options options)
    : engine_(engine),
      options_(std::move(options)),
      strand_(asio::make_strand(io_)),
      acceptor_(strand_),
      signals_(strand_),
      drain_timer_(strand_) {
    // Checked here as well as by tenferro-search's flags, for embedders: a
    // max_k below 1 made every search without "k" fail inside the engine.
    if (options_.max_k < 1) {
        throw std::invalid_argument("search_server: max_k must be at least 1, got " + std::to_string(options_.max_k));
    }
    if (options_.max_body_bytes < 1) throw std::invalid_argument("search_server: max_body_bytes must be at least 1");
    limits_.dim = engine_.dim();
    limits_.max_k = std::min(options_.max_k, engine_.rows());
    limits_.default_k = std::min<std::int64_t>(10, limits_.max_k);
    options_.io_threads = std::max<std::size_t>(1, options_.io_threads);

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
        auto c = std::make_shared<connection>(*this, std::move(socket));
        {
            std::lock_guard lock(connections_mutex_);
            connections_.emplace(c.get(), c);
        }
        accepted_.fetch_add(1, std::memory_order_relaxed);
        asio::co_spawn(c->executor(), connection::run(c), asio::detached);
    }
}

void search_server::begin_drain() {
    std::vector<std::shared_ptr<connection>> open;
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

void search_server::connection_closed(connection* c) {
    std::lock_guard lock(connections_mutex_);
    connections_.erase(c);
    if (draining_ && connections_.empty()) {
        asio::post(strand_, [this] { drain_timer_.cancel(); });
    }
}

void search_server::count_response(int status) noexcept {
    if (status >= 0 && status < int(responses_.size())) responses_[std::size_t(status)].fetch_add(1);
}

asio::awaitable<search_server::http_response> search_server::handle(std::string_view method, std::string_view target,
                                                                    std::string_view body,
                                                                    clock_type::time_point received) {
    const std::string_view path = target.substr(0, target.find('?'));
    http_response r;
    if (path == "/v1/search") {
        if (method != "POST") {
            r.status = 405;
            r.allow = "POST";
            r.body = error_body("method", "use POST for /v1/search");
            co_return r;
        }
        r = co_await handle_search(body);
        if (r.status == 200) search_latency_.record(clock_type::now() - received);
        co_return r;
    }
    if (path == "/healthz" || path == "/v1/stats") {
        if (method != "GET") {
            r.status = 405;
            r.allow = "GET";
            r.body = error_body("method", "use GET for " + std::string(path));
            co_return r;
        }
        if (path == "/healthz") {
            r.body = "{\"status\":\"ok\"}\n";
            healthz_latency_.record(clock_type::now() - received);
        } else {
            r.body = stats_json();
        }
        co_return r;
    }
    r.status = 404;
    r.body = error_body("path", "no such resource: " + std::string(path));
    co_return r;
}

asio::awaitable<search_server::http_response> search_server::handle_search(std::string_view body) {
    http_response r;
    auto query = parse_search_request(body, limits_);
    if (!query) {
        r.status = 400;
        r.body = render_field_error(query.error()) + '\n';
        co_return r;
    }
    search_outcome out = co_await engine_.search(std::move(*query));
    switch (out.status) {
    case search_status::ok: {
        json_writer w;
        w.begin_object().key("results").begin_array();
        for (const search_hit& h : out.hits)
            w.begin_object().field("index", h.index).field("score", h.score).end_object();
        w.end_array().end_object();
        r.body = w.take();
        r.body += '\n';
        break;
    }
    case search_status::shed:
        r.status = 503;
        r.retry_after = true;
        r.body = error_body("", "overloaded, retry later");
        break;
    case search_status::failed: {
        // The detail (an exception's what()) is the operator's, not the
        // client's: it goes to the log under an id the client also gets.
        static std::atomic<std::uint64_t> next_incident{1};
        const std::uint64_t incident = next_incident.fetch_add(1, std::memory_order_relaxed);
        std::fprintf(stderr, "tenferro-search: search failed (incident %llu): %s\n",
                     static_cast<unsigned long long>(incident), out.error.c_str());
        r.status = 500;
        r.body = error_body("", "internal error (incident " + std::to_string(incident) + ")");
        break;
    }
    }
    co_return r;
}

server_snapshot search_server::snapshot() const {
    server_snapshot s;
    s.connections_accepted = accepted_.load(std::memory_order_relaxed);
    {
        std::lock_guard lock(connections_mutex_);
        s.connections_open = connections_.size();
    }
    s.requests = requests_.load(std::memory_order_relaxed);
    s.keepalive_reused = keepalive_reused_.load(std::memory_order_relaxed);
    s.idle_timeouts = idle_timeouts_.load(std::memory_order_relaxed);
    s.request_timeouts = request_timeouts_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < responses_.size(); ++i) {
        if (const auto n = responses_[i].load(std::memory_order_relaxed)) s.responses.emplace_back(int(i), n);
    }
    s.search_latency = search_latency_.snapshot();
    s.healthz_latency = healthz_latency_.snapshot();
    s.uptime_seconds = std::chrono::duration<double>(clock_type::now() - started_).count();
    return s;
}

std::string search_server::stats_json() const {
    const server_snapshot s = snapshot();
    const engine_snapshot e = engine_.snapshot();
    tf::cpu_backend& cpu = engine_.backend();
    const tf::admission_stats a = cpu.stats();
    const tf::buffer_pool_stats pool = cpu.buffer_pool_stats();

    json_writer w;
    w.begin_object();
    w.field("uptime_s", s.uptime_seconds);
    w.field("mode", engine_.options().inline_compute ? "inline" : "tenferro");
    w.key("corpus").begin_object().field("rows", engine_.rows()).field("dim", engine_.dim()).end_object();
    w.key("requests").begin_object();
    w.field("total", s.requests).field("keepalive_reused", s.keepalive_reused);
    w.key("responses").begin_object();
    for (const auto& [status, n] : s.responses) w.field(std::to_string(status), n);
    w.end_object();
    w.end_object();
    w.key("connections").begin_object();
    w.field("accepted", s.connections_accepted).field("open", s.connections_open);
    w.field("idle_timeouts", s.idle_timeouts).field("request_timeouts", s.request_timeouts);
    w.end_object();
    w.key("latency_ms").begin_object();
    write_histogram(w, "search", s.search_latency);
    write_histogram(w, "healthz", s.healthz_latency);
    w.end_object();
    w.key("admission").begin_object();
    w.field("permits", a.permits).field("available", a.available).field("waiting", a.waiting);
    w.field("admitted", a.admitted).field("completed", a.completed).field("rejected", a.rejected);
    w.field("cancelled", a.cancelled);
    w.field("busy_permit_seconds", e.busy_permit_seconds);
    w.field("utilisation", s.uptime_seconds > 0 ? e.busy_permit_seconds / (double(a.permits) * s.uptime_seconds) : 0.0);
    write_histogram(w, "wait_ms", e.admission_wait);
    w.end_object();
    w.key("batching").begin_object();
    w.field("max_batch", engine_.options().max_batch).field("sessions", e.sessions).field("batches", e.batches);
    w.field("queries", e.batched_queries).field("largest", e.largest_batch).field("handed_over", e.handed_over);
    w.field("mean", e.batches ? double(e.batched_queries) / double(e.batches) : 0.0);
    write_histogram(w, "compute_ms", e.batch_compute);
    w.end_object();
    const tf::cache_stats cache = cpu.default_cache().stats();
    w.key("runtime_cache").begin_object();
    w.field("entries", cache.entries).field("retained_bytes", cache.retained_bytes);
    w.field("hits", cache.hits).field("misses", cache.misses).field("evictions", cache.evictions);
    w.end_object();
    w.key("buffer_pool").begin_object();
    w.field("capacity_bytes", pool.capacity_bytes).field("retained_bytes", pool.retained_bytes);
    w.field("outstanding_bytes", pool.outstanding_bytes).field("allocations", pool.allocations);
    w.field("hits", pool.hits).field("misses", pool.misses).field("discarded", pool.discarded);
    w.end_object();
    w.end_object();
    std::string out = w.take();
    out += '\n';
    return out;
}

}  // namespace embedding_search
