#pragma once
// A minimal HTTP/1.1 client for the load generator, the demo and the tests:
// one keep-alive connection, raw requests out, responses parsed with
// http_parser (so pipelined responses are read one at a time, in order).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <http_parser.h>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

namespace embedding_search {

struct http_reply {
    int status = 0;
    std::string body;
    std::string retry_after;  ///< the Retry-After header, if any
    std::string content_type;  ///< the Content-Type header, if any
    bool keep_alive = false;  ///< the server keeps the connection open
};

/// `METHOD target HTTP/1.1` with Host, Content-Length (when there is a body)
/// and Content-Type: application/json, then `extra_headers` (whole lines,
/// each ending in CRLF, e.g. "X-Tenferro-Group: bulk\r\n").
std::string make_request(std::string_view method, std::string_view target, std::string_view body = {},
                         std::string_view extra_headers = {});

class http_client {
public:
    explicit http_client(asio::any_io_executor executor);

    /// \throws std::system_error
    asio::awaitable<void> connect(const std::string& host, std::uint16_t port);
    /// Writes `bytes` as they are. \throws std::system_error
    asio::awaitable<void> send(std::string_view bytes);
    /// Reads the next response. \throws std::system_error, also when the
    /// connection ends before a complete response or the response is malformed.
    asio::awaitable<http_reply> receive();
    /// `send(request)` then `receive()`.
    asio::awaitable<http_reply> roundtrip(std::string_view request);
    /// True when the server closes the connection (end of stream or reset)
    /// without sending anything more.
    asio::awaitable<bool> closed_by_peer();

    bool is_open() const noexcept { return socket_.is_open(); }
    void close() noexcept;
    asio::ip::tcp::socket& socket() noexcept { return socket_; }

private:
    static int on_header_field(http_parser* p, const char* at, std::size_t n);
    static int on_header_value(http_parser* p, const char* at, std::size_t n);
    static int on_headers_complete(http_parser* p);
    static int on_body(http_parser* p, const char* at, std::size_t n);
    static int on_message_complete(http_parser* p);
    void finish_header();

    asio::ip::tcp::socket socket_;
    http_parser parser_;
    std::vector<char> buffer_;
    std::size_t begin_ = 0, end_ = 0;

    http_reply reply_;
    std::string field_, value_;
    bool in_value_ = false;
    bool complete_ = false;
};

}  // namespace embedding_search
