#pragma once
// The socket side of the HTTP/1.1 server: one keep-alive connection reading
// requests (parsed strictly, http_request_parser.hpp), writing responses,
// answering `Expect: 100-continue`, enforcing the idle and request timeouts and
// the body limit, and closing on a framing error or a drain. While a request is
// answered it keeps reading (keeping what arrives), so that a client that
// leaves is noticed and its request's work cancelled (connection_limits::
// notice_closed). What a request is answered with is its owner's business
// (`connection_owner::handle`); the connection knows no routes.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/buffer.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "http_request_parser.hpp"

namespace embedding_search {

struct http_response {
    int status = 200;
    std::string body;
    bool close = false;        // close the connection after this response
    bool retry_after = false;  // 503: tell the client when to come back
    int retry_after_seconds = 0;  // with retry_after: these seconds; 0: connection_limits' default
    std::string_view allow;    // 405: the allowed method
    std::string_view content_type = "application/json";
};

/// The server's JSON error body, `{"error": {"field": ..., "message": ...}}`
/// and a newline: the connection's own errors (400, 408, 413, ...) and the
/// routes' answer alike.
std::string error_body(std::string_view field, std::string_view message);

/// What the owner's options say about every connection.
struct connection_limits {
    std::size_t max_body_bytes = 1 << 20;
    std::chrono::milliseconds idle_timeout{30'000};
    std::chrono::milliseconds request_timeout{10'000};
    int retry_after_seconds = 1;
    /// Read the socket while a request is being answered, and when the client
    /// turns out to be gone (end of stream, a reset, an error) emit `terminal`
    /// on the slot given to `connection_owner::handle`, then close without an
    /// answer. false: the socket is not read until the answer is written (a
    /// gone client is only found then).
    bool notice_closed = true;
};

/// The counters the connections keep for their owner, cumulative.
struct connection_counters {
    std::atomic<std::uint64_t> requests{0}, keepalive_reused{0}, idle_timeouts{0}, request_timeouts{0};
    /// Requests whose client was found gone while they were being answered
    /// (connection_limits::notice_closed): closed unanswered.
    std::atomic<std::uint64_t> abandoned{0};
    std::array<std::atomic<std::uint64_t>, 600> responses{};  // by status

    void count_response(int status) noexcept {
        if (status >= 0 && status < int(responses.size())) responses[std::size_t(status)].fetch_add(1);
    }
};

class http_connection;

/// The server a connection belongs to.
class connection_owner {
public:
    /// The answer to a complete request; runs on the connection's strand.
    /// `gone` gets `terminal` (on the strand) when the client leaves before the
    /// answer is ready: the work for it may stop, and whatever is returned
    /// then is dropped. (Not connected when the connection does not watch.)
    virtual asio::awaitable<http_response> handle(const http_request& request,
                                                  std::chrono::steady_clock::time_point received,
                                                  asio::cancellation_slot gone) = 0;
    /// Draining: no new request on a connection, and `Connection: close` on
    /// the response of the one in progress.
    virtual bool draining() const noexcept = 0;
    /// The connection has closed its socket and will not call again.
    virtual void connection_closed(http_connection* c) = 0;

protected:
    ~connection_owner() = default;
};

// One client connection. Its socket's executor is a strand: the request loop
// (`serve`), the deadline watchdog and the drain notices all run on it.
class http_connection : public std::enable_shared_from_this<http_connection> {
public:
    /// `owner`, `limits` and `counters` outlive the connection.
    http_connection(connection_owner& owner, const connection_limits& limits, connection_counters& counters,
                    asio::ip::tcp::socket socket);

    asio::any_io_executor executor() { return socket_.get_executor(); }

    /// Serves requests until the connection closes, then tells the owner.
    static asio::awaitable<void> run(std::shared_ptr<http_connection> self);

    /// The server is draining: an idle connection closes now, a busy one after
    /// its response (which then says `Connection: close`).
    void drain_notice();

    void force_close();

private:
    using clock_type = std::chrono::steady_clock;

    static asio::awaitable<void> watchdog(std::shared_ptr<http_connection> self);
    void set_deadline(clock_type::time_point t);
    asio::awaitable<void> serve();
    /// Answers the complete request; false when the connection must close.
    asio::awaitable<bool> respond();
    /// While the answer is being made: reads into the buffer's free space,
    /// keeping what arrives (pipelined requests) for later, and emits on
    /// `gone_` when the stream ends or fails.
    void watch_read();
    /// Ends watch_read (its bytes stay in the buffer).
    asio::awaitable<void> stop_watching();
    asio::awaitable<bool> write_response(const http_response& r, bool keep_alive);
    asio::awaitable<bool> write_buffers(std::array<asio::const_buffer, 2> buffers);
    /// An error response, then a lingering close (see linger_limit).
    asio::awaitable<void> send_error(int status, std::string_view field, const std::string& message);
    void reset_request();

    connection_owner& owner_;
    const connection_limits& limits_;
    connection_counters& counters_;
    asio::ip::tcp::socket socket_;
    asio::steady_timer timer_;
    clock_type::time_point deadline_ = clock_type::time_point::max();
    clock_type::time_point request_deadline_ = clock_type::time_point::max();
    http_request_parser parser_;
    std::vector<char> buffer_;
    std::size_t begin_ = 0, end_ = 0;  // buffer_[begin_, end_): received, not yet parsed
    std::string head_;

    bool in_request_ = false;    // a request has begun and is not answered yet
    bool continue_sent_ = false; // 100 Continue written for the current request

    bool idle_ = false;       // waiting for the first byte of a request
    bool timed_out_ = false;  // the watchdog cancelled the socket's operations
    bool closed_ = false;
    std::uint64_t served_ = 0;

    // The watch while a request is answered (connection_limits::notice_closed).
    asio::cancellation_signal gone_;
    asio::steady_timer watch_done_;  // never expires: cancelled when watch_read ends
    bool watching_ = false;          // a watch read is in flight
    bool stop_watch_ = false;        // the answer is ready: do not read again
    bool peer_gone_ = false;         // the watch found the stream ended or failed
};

}  // namespace embedding_search
