#pragma once
// A strict, incremental HTTP/1.1 request parser (RFC 9112) for the server's
// connections. It depends on nothing but the standard library, so that the
// libFuzzer target (tests/fuzz/http_request_fuzz.cpp) compiles it alone.
//
// Why not http_parser: Debian's libhttp_parser is built without
// HTTP_PARSER_STRICT, and that mode accepts framing that a proxy in front of the
// server may read differently (request smuggling): a space before the colon of
// `Content-Length`, any two bytes in place of the CRLF after chunk data, any
// byte in place of LF after CR, a coding list such as `gzip, chunked`. Its
// callbacks do not see those bytes, so they cannot be checked there, and the
// project is unmaintained upstream; no maintained C parser (llhttp) is packaged
// for Debian 12. So the server parses requests itself, rejecting:
//
//   400  anything that is not request-line CRLF *(field-line CRLF) CRLF [body]
//        with CRLF line ends (no bare CR, no bare LF), a token method, a target
//        of visible ASCII, `HTTP/1.x`, token field names with no whitespace
//        before the colon, no obsolete line folding, no control characters in
//        field values; more than one Host or none (HTTP/1.1); a Content-Length
//        that is not digits or that disagrees with another one; Content-Length
//        together with Transfer-Encoding; Transfer-Encoding in HTTP/1.0, or
//        without chunked as its final coding, or with chunked twice; a chunk
//        size that is not hex, a malformed chunk extension, anything but CRLF
//        after chunk data, a malformed trailer field
//   413  a declared Content-Length or a chunk size that takes the body past
//        max_body_bytes (as soon as the size is read, before any body byte)
//   414 / 431  a request line / header (or trailer) section over max_head_bytes,
//        or more than max_fields fields
//   400  also: a second X-Tenferro-Group or X-Tenferro-Timeout-Ms field (which
//        one counts would depend on who reads the request)
//   501  a transfer coding other than chunked (`gzip, chunked`, `identity, chunked`)
//   505  an HTTP major version other than 1
//
// Every error is final: the connection must be closed after the response.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace embedding_search {

struct http_parse_limits {
    std::size_t max_body_bytes = 1 << 20;    ///< decoded body (Content-Length or the chunks together)
    std::size_t max_head_bytes = 16 * 1024;  ///< request line + fields, and separately the trailer section
    std::size_t max_fields = 100;            ///< header fields (and trailer fields)
    std::size_t max_leading_empty_lines = 8; ///< CRLFs tolerated before a request line (RFC 9112 §2.2)
};

/// A complete request, as far as the server needs it.
struct http_request {
    std::string method;        ///< case-sensitive token, e.g. "GET"
    std::string target;        ///< as sent, e.g. "/v1/search?x=1"
    int version_minor = 1;     ///< HTTP/1.<minor>
    std::string body;          ///< decoded (chunks joined)
    bool keep_alive = true;    ///< HTTP/1.1 without `Connection: close`, or HTTP/1.0 with `keep-alive`
    bool expect_continue = false;
    bool chunked = false;
    /// The server's own fields (names matched case-insensitively), their
    /// values OWS-trimmed and not yet validated: the tenant group and the
    /// timeout. Each at most once; bounded only by max_head_bytes here (the
    /// routes judge the values).
    std::string tenant_group, timeout_ms;
    bool has_tenant_group = false, has_timeout_ms = false;
};

struct http_parse_error {
    int status = 0;  ///< 400, 413, 414, 431, 501, 505
    std::string message;
};

class http_request_parser {
public:
    explicit http_request_parser(http_parse_limits limits = {}) : limits_(limits) {}

    /// Consumes bytes of the stream; returns how many it took. It stops after
    /// the last byte of a complete request (the rest belongs to the next one:
    /// call `next()` after answering) and takes nothing once failed or complete.
    std::size_t parse(const char* data, std::size_t size);

    /// A request has begun (a byte other than the CRLFs allowed before it).
    bool started() const noexcept { return started_; }
    /// The header section is complete (the body may still be arriving).
    bool headers_complete() const noexcept { return phase_ > phase::fields && phase_ != phase::failed; }
    bool complete() const noexcept { return phase_ == phase::complete; }
    bool failed() const noexcept { return phase_ == phase::failed; }

    /// Valid once `headers_complete()`; the body once `complete()`.
    const http_request& request() const noexcept { return request_; }
    /// Valid once `failed()`.
    const http_parse_error& error() const noexcept { return error_; }

    /// Forgets the complete request and expects the next one.
    void next();

private:
    enum class phase {
        request_line,
        fields,
        body,  // Content-Length
        chunk_size,
        chunk_data,
        chunk_data_cr,
        chunk_data_lf,
        trailers,
        complete,
        failed,
    };
    enum class line_status { partial, done, failed };

    line_status take_line(const char*& p, const char* end, std::size_t limit, int too_long_status);
    void fail(int status, std::string message);
    void on_request_line();
    void on_field_line(bool trailer);
    void on_header_section_end();
    void on_chunk_size_line();

    http_parse_limits limits_;
    phase phase_ = phase::request_line;
    http_request request_;
    http_parse_error error_;
    std::string line_;  // the line being received, without its CRLF once done
    std::size_t section_bytes_ = 0, fields_ = 0, empty_lines_ = 0;
    std::uint64_t remaining_ = 0;  // body or chunk bytes still to come
    bool started_ = false;
    // Framing fields, checked when the header section ends.
    int hosts_ = 0;
    bool has_content_length_ = false, has_transfer_encoding_ = false;
    std::uint64_t content_length_ = 0;
    std::string content_length_text_, transfer_encoding_;
    bool connection_close_ = false, connection_keep_alive_ = false;
};

}  // namespace embedding_search
