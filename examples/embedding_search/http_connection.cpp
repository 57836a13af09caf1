// One HTTP/1.1 connection: the request loop, the deadline watchdog, the
// response head, the lingering close after an error (http_connection.hpp).

#include "http_connection.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "search_request.hpp"  // render_field_error: the one error shape of the server

using asio::ip::tcp;

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

}  // namespace

std::string error_body(std::string_view field, std::string_view message) {
    return render_field_error({std::string(field), std::string(message)}) + '\n';
}

http_connection::http_connection(connection_owner& owner, const connection_limits& limits,
                                 connection_counters& counters, tcp::socket socket)
    : owner_(owner),
      limits_(limits),
      counters_(counters),
      socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      parser_(http_parse_limits{.max_body_bytes = limits.max_body_bytes}),
      buffer_(read_buffer_bytes),
      watch_done_(socket_.get_executor(), clock_type::time_point::max()) {}

asio::awaitable<void> http_connection::run(std::shared_ptr<http_connection> self) {
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
    self->owner_.connection_closed(self.get());
}

void http_connection::drain_notice() {
    if (idle_) {
        std::error_code ignored;
        socket_.cancel(ignored);
    }
}

void http_connection::force_close() {
    std::error_code ignored;
    socket_.close(ignored);
}

asio::awaitable<void> http_connection::watchdog(std::shared_ptr<http_connection> self) {
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

void http_connection::set_deadline(clock_type::time_point t) {
    deadline_ = t;
    if (t < timer_.expiry()) timer_.cancel();  // the watchdog re-arms with the earlier deadline
}

asio::awaitable<void> http_connection::serve() {
    for (;;) {
        if (begin_ == end_) {
            begin_ = end_ = 0;
            if (!in_request_ && owner_.draining()) co_return;
            idle_ = !in_request_;
            set_deadline(in_request_ ? request_deadline_ : clock_type::now() + limits_.idle_timeout);
            std::error_code ec;
            const std::size_t n =
                co_await socket_.async_read_some(asio::buffer(buffer_), asio::redirect_error(asio::use_awaitable, ec));
            idle_ = false;
            if (ec) {
                if (timed_out_ && in_request_) {
                    counters_.request_timeouts.fetch_add(1, std::memory_order_relaxed);
                    co_await send_error(408, "request", "the request was not received in time");
                } else if (timed_out_) {
                    counters_.idle_timeouts.fetch_add(1, std::memory_order_relaxed);
                }
                co_return;
            }
            end_ = n;
        }
        // The parser stops after a complete request, so pipelined requests
        // are answered one at a time, in order.
        begin_ += parser_.parse(buffer_.data() + begin_, end_ - begin_);
        if (parser_.started() && !in_request_) {
            in_request_ = true;
            request_deadline_ = clock_type::now() + limits_.request_timeout;
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

asio::awaitable<bool> http_connection::respond() {
    const auto received = clock_type::now();
    // (An Upgrade header is ignored, as RFC 9110 §7.8 allows: the answer is plain HTTP/1.1.)
    const http_request& request = parser_.request();
    const bool keep_alive_requested = request.keep_alive;
    in_request_ = false;
    counters_.requests.fetch_add(1, std::memory_order_relaxed);
    if (served_ > 0) counters_.keepalive_reused.fetch_add(1, std::memory_order_relaxed);

    set_deadline(clock_type::time_point::max());  // the server's own work has no deadline
    http_response r;
    if (limits_.notice_closed) {
        // Reading while the answer is made is how a client that left is
        // noticed: a closed socket says nothing until it is read (or written).
        peer_gone_ = stop_watch_ = false;
        watch_read();
        r = co_await owner_.handle(request, received, gone_.slot());
        co_await stop_watching();
        gone_.slot().clear();  // whatever the owner left there
        if (peer_gone_) {
            // No one to answer: a reset or the end of the stream. (A client that
            // only shut down its sending side also ends the stream; it is taken
            // as gone too, as nginx and Go's net/http take it.)
            counters_.abandoned.fetch_add(1, std::memory_order_relaxed);
            co_return false;
        }
    } else {
        r = co_await owner_.handle(request, received, asio::cancellation_slot());
    }
    const bool keep_alive = keep_alive_requested && !r.close && !owner_.draining();
    const bool written = co_await write_response(r, keep_alive);
    ++served_;
    reset_request();
    co_return written&& keep_alive;
}

void http_connection::watch_read() {
    // Room after what is already buffered; a request pipelined behind this
    // one, partly parsed or not at all, stays where it is.
    if (begin_ > 0 && begin_ < end_)
        std::copy(buffer_.begin() + std::ptrdiff_t(begin_), buffer_.begin() + std::ptrdiff_t(end_), buffer_.begin());
    end_ -= begin_;
    begin_ = 0;
    if (end_ == buffer_.size()) return;  // full: the rest waits in the kernel, unwatched, until its turn
    watching_ = true;
    socket_.async_read_some(asio::buffer(buffer_.data() + end_, buffer_.size() - end_),
                            [self = shared_from_this()](std::error_code ec, std::size_t n) {
                                // On the strand (the socket's executor).
                                self->watching_ = false;
                                self->end_ += n;
                                if (!ec && !self->stop_watch_) {
                                    self->watch_read();
                                    if (self->watching_) return;
                                }
                                if (ec && !self->stop_watch_) {
                                    self->peer_gone_ = true;
                                    self->gone_.emit(asio::cancellation_type::terminal);
                                }
                                self->watch_done_.cancel();
                            });
}

asio::awaitable<void> http_connection::stop_watching() {
    stop_watch_ = true;
    if (watching_) {
        std::error_code ec;
        socket_.cancel(ec);
    }
    while (watching_) {
        std::error_code ec;
        co_await watch_done_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
}

asio::awaitable<bool> http_connection::write_response(const http_response& r, bool keep_alive) {
    head_.clear();
    head_ += "HTTP/1.1 ";
    head_ += std::to_string(r.status);
    head_ += ' ';
    head_ += reason_phrase(r.status);
    head_ += "\r\nContent-Type: ";
    head_ += r.content_type;
    head_ += "\r\nContent-Length: ";
    head_ += std::to_string(r.body.size());
    head_ += "\r\n";
    if (!keep_alive) {
        head_ += "Connection: close\r\n";
    } else if (parser_.request().version_minor == 0) {
        head_ += "Connection: keep-alive\r\n";
    }
    if (r.retry_after) {
        const int seconds = r.retry_after_seconds > 0 ? r.retry_after_seconds : limits_.retry_after_seconds;
        head_ += "Retry-After: " + std::to_string(seconds) + "\r\n";
    }
    if (!r.allow.empty()) {
        head_ += "Allow: ";
        head_ += r.allow;
        head_ += "\r\n";
    }
    head_ += "\r\n";
    counters_.count_response(r.status);
    co_return co_await write_buffers({asio::buffer(head_), asio::buffer(r.body)});
}

asio::awaitable<bool> http_connection::write_buffers(std::array<asio::const_buffer, 2> buffers) {
    const auto previous = deadline_;
    set_deadline(clock_type::now() + limits_.request_timeout);
    std::error_code ec;
    co_await asio::async_write(socket_, buffers, asio::redirect_error(asio::use_awaitable, ec));
    if (in_request_) set_deadline(previous);  // an interim 100 Continue: back to the request's deadline
    co_return !ec;
}

asio::awaitable<void> http_connection::send_error(int status, std::string_view field, const std::string& message) {
    http_response r;
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

void http_connection::reset_request() {
    parser_.next();
    in_request_ = false;
    continue_sent_ = false;
}

}  // namespace embedding_search
