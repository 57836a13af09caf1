#include "http_client.hpp"

#include <algorithm>
#include <system_error>

#include <asio/connect.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

using asio::ip::tcp;

namespace embedding_search {

namespace {

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return (x | 0x20) == (y | 0x20); });
}

std::error_code parse_error() { return std::make_error_code(std::errc::protocol_error); }

}  // namespace

std::string make_request(std::string_view method, std::string_view target, std::string_view body,
                         std::string_view extra_headers) {
    std::string r;
    r.reserve(96 + extra_headers.size() + body.size());
    r += method;
    r += ' ';
    r += target;
    r += " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    if (!body.empty() || method == "POST") {
        r += "Content-Type: application/json\r\nContent-Length: ";
        r += std::to_string(body.size());
        r += "\r\n";
    }
    r += extra_headers;
    r += "\r\n";
    r += body;
    return r;
}

http_client::http_client(asio::any_io_executor executor) : socket_(std::move(executor)), buffer_(16 * 1024) {
    http_parser_init(&parser_, HTTP_RESPONSE);
    parser_.data = this;
}

asio::awaitable<void> http_client::connect(const std::string& host, std::uint16_t port) {
    close();
    const tcp::endpoint endpoint(asio::ip::make_address(host), port);
    co_await socket_.async_connect(endpoint, asio::use_awaitable);
    socket_.set_option(tcp::no_delay(true));
    http_parser_init(&parser_, HTTP_RESPONSE);
    parser_.data = this;
    begin_ = end_ = 0;
}

void http_client::close() noexcept {
    std::error_code ignored;
    socket_.close(ignored);
}

asio::awaitable<void> http_client::send(std::string_view bytes) {
    co_await asio::async_write(socket_, asio::buffer(bytes.data(), bytes.size()), asio::use_awaitable);
}

asio::awaitable<http_reply> http_client::roundtrip(std::string_view request) {
    co_await send(request);
    co_return co_await receive();
}

asio::awaitable<http_reply> http_client::receive() {
    static const http_parser_settings settings = [] {
        http_parser_settings s;
        http_parser_settings_init(&s);
        s.on_header_field = on_header_field;
        s.on_header_value = on_header_value;
        s.on_headers_complete = on_headers_complete;
        s.on_body = on_body;
        s.on_message_complete = on_message_complete;
        return s;
    }();

    reply_ = http_reply{};
    complete_ = false;
    for (;;) {
        if (begin_ == end_) {
            begin_ = end_ = 0;
            std::error_code ec;
            const std::size_t n =
                co_await socket_.async_read_some(asio::buffer(buffer_), asio::redirect_error(asio::use_awaitable, ec));
            if (ec == asio::error::eof) {
                http_parser_execute(&parser_, &settings, nullptr, 0);  // a body delimited by the end of stream
                if (complete_) break;
            }
            if (ec) throw std::system_error(ec, "reading a response");
            end_ = n;
        }
        begin_ += http_parser_execute(&parser_, &settings, buffer_.data() + begin_, end_ - begin_);
        if (complete_) break;
        if (HTTP_PARSER_ERRNO(&parser_) != HPE_OK) throw std::system_error(parse_error(), "malformed response");
    }
    http_parser_pause(&parser_, 0);
    reply_.status = int(parser_.status_code);
    reply_.keep_alive = http_should_keep_alive(&parser_) != 0;
    co_return std::move(reply_);
}

asio::awaitable<bool> http_client::closed_by_peer() {
    if (begin_ != end_) co_return false;
    std::error_code ec;
    co_await socket_.async_read_some(asio::buffer(buffer_), asio::redirect_error(asio::use_awaitable, ec));
    co_return ec == asio::error::eof || ec == asio::error::connection_reset;
}

void http_client::finish_header() {
    if (iequals(field_, "retry-after")) reply_.retry_after = value_;
    if (iequals(field_, "content-type")) reply_.content_type = value_;
    field_.clear();
    value_.clear();
    in_value_ = false;
}

int http_client::on_header_field(http_parser* p, const char* at, std::size_t n) {
    auto& c = *static_cast<http_client*>(p->data);
    if (c.in_value_) c.finish_header();
    c.field_.append(at, n);
    return 0;
}

int http_client::on_header_value(http_parser* p, const char* at, std::size_t n) {
    auto& c = *static_cast<http_client*>(p->data);
    c.in_value_ = true;
    c.value_.append(at, n);
    return 0;
}

int http_client::on_headers_complete(http_parser* p) {
    auto& c = *static_cast<http_client*>(p->data);
    if (c.in_value_) c.finish_header();
    return 0;
}

int http_client::on_body(http_parser* p, const char* at, std::size_t n) {
    static_cast<http_client*>(p->data)->reply_.body.append(at, n);
    return 0;
}

int http_client::on_message_complete(http_parser* p) {
    static_cast<http_client*>(p->data)->complete_ = true;
    http_parser_pause(p, 1);
    return 0;
}

}  // namespace embedding_search
