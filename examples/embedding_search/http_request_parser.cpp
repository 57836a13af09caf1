#include "http_request_parser.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace embedding_search {

namespace {

// RFC 9110 §5.6.2: tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-"
// / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
bool is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

bool is_token(std::string_view s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

bool is_ows(char c) { return c == ' ' || c == '\t'; }

// field-vchar / SP / HTAB, obs-text included (RFC 9110 §5.5); no other controls.
bool is_field_value_char(unsigned char c) { return c == '\t' || c == ' ' || (c >= 0x21 && c != 0x7f); }

std::string_view trim_ows(std::string_view s) {
    while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
    return s;
}

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
               return lower(x) == lower(y);
           });
}

/// Calls `f(element)` for each non-empty element of a comma-separated list,
/// OWS trimmed (RFC 9110 §5.6.1: empty elements are ignored).
template <class F>
void for_each_element(std::string_view list, F&& f) {
    while (!list.empty()) {
        const std::size_t comma = list.find(',');
        const std::string_view element = trim_ows(list.substr(0, comma));
        if (!element.empty()) f(element);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/// chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ), ext-val =
/// token / quoted-string (RFC 9112 §7.1.1).
bool valid_chunk_extensions(std::string_view s) {
    std::size_t i = 0;
    const auto skip_ws = [&] {
        while (i < s.size() && is_ows(s[i])) ++i;
    };
    const auto token = [&] {
        const std::size_t start = i;
        while (i < s.size() && is_tchar(static_cast<unsigned char>(s[i]))) ++i;
        return i > start;
    };
    for (;;) {
        skip_ws();
        if (i == s.size()) return true;
        if (s[i] != ';') return false;
        ++i;
        skip_ws();
        if (!token()) return false;
        skip_ws();
        if (i == s.size() || s[i] != '=') continue;
        ++i;
        skip_ws();
        if (i < s.size() && s[i] == '"') {
            // quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE
            ++i;
            for (;;) {
                if (i == s.size()) return false;
                const auto c = static_cast<unsigned char>(s[i]);
                if (c == '"') {
                    ++i;
                    break;
                }
                if (c == '\\') {
                    if (i + 1 == s.size() || !is_field_value_char(static_cast<unsigned char>(s[i + 1]))) return false;
                    i += 2;
                    continue;
                }
                if (!is_field_value_char(c)) return false;
                ++i;
            }
        } else if (!token()) {
            return false;
        }
    }
}

}  // namespace

void http_request_parser::fail(int status, std::string message) {
    phase_ = phase::failed;
    error_.status = status;
    error_.message = std::move(message);
}

void http_request_parser::next() {
    // A fresh parser, but the buffers keep their capacity for the next request.
    std::string body = std::move(request_.body), line = std::move(line_);
    body.clear();
    line.clear();
    *this = http_request_parser(limits_);
    request_.body = std::move(body);
    line_ = std::move(line);
}

// Appends bytes up to and including the next LF to line_. `done`: line_ holds
// a whole line, its CRLF removed. A line ending in a bare LF, or holding a CR
// anywhere but right before its LF, fails: RFC 9112 §2.2 lets a recipient
// accept a bare LF, but a proxy that does not would frame the stream
// differently, so this parser takes CRLF only.
http_request_parser::line_status http_request_parser::take_line(const char*& p, const char* end, std::size_t limit,
                                                                int too_long_status) {
    const void* lf = std::memchr(p, '\n', std::size_t(end - p));
    const char* stop = lf ? static_cast<const char*>(lf) + 1 : end;
    const std::size_t n = std::size_t(stop - p);
    if (section_bytes_ + n > limit) {
        fail(too_long_status, too_long_status == 414 ? "the request line is too long"
                              : too_long_status == 431
                                  ? "the header section is too large (at most " + std::to_string(limit) + " bytes)"
                                  : "a chunk size line is too long");
        return line_status::failed;
    }
    section_bytes_ += n;
    line_.append(p, n);
    p = stop;
    if (!lf) return line_status::partial;
    line_.pop_back();  // LF
    if (line_.empty() || line_.back() != '\r') {
        fail(400, "a line ends in LF without CR");
        return line_status::failed;
    }
    line_.pop_back();
    if (line_.find('\r') != std::string::npos) {
        fail(400, "a CR not followed by LF");
        return line_status::failed;
    }
    return line_status::done;
}

std::size_t http_request_parser::parse(const char* data, std::size_t size) {
    const char* p = data;
    const char* const end = data + size;
    while (p < end) {
        switch (phase_) {
        case phase::complete:
        case phase::failed:
            return std::size_t(p - data);

        case phase::request_line: {
            const line_status got = take_line(p, end, limits_.max_head_bytes, 414);
            // Begun at the first byte that is not part of an empty line,
            // however the bytes were split into reads.
            if (!started_ && line_.find_first_not_of("\r\n") != std::string::npos) started_ = true;
            if (got != line_status::done) break;
            if (line_.empty() && !started_) {
                // RFC 9112 §2.2: a server SHOULD ignore at least one empty line
                // before a request line; a few are tolerated, not a stream of them.
                if (++empty_lines_ > limits_.max_leading_empty_lines) {
                    fail(400, "too many empty lines before the request line");
                } else {
                    section_bytes_ = 0;
                }
                break;
            }
            on_request_line();
            break;
        }

        case phase::fields:
            if (take_line(p, end, limits_.max_head_bytes, 431) != line_status::done) break;
            if (line_.empty()) {
                on_header_section_end();
            } else {
                on_field_line(false);
            }
            line_.clear();
            break;

        case phase::body: {
            const std::size_t n = std::size_t(std::min<std::uint64_t>(remaining_, std::uint64_t(end - p)));
            request_.body.append(p, n);
            p += n;
            remaining_ -= n;
            if (remaining_ == 0) phase_ = phase::complete;
            break;
        }

        case phase::chunk_size:
            if (take_line(p, end, 1024, 400) != line_status::done) break;
            on_chunk_size_line();
            line_.clear();
            break;

        case phase::chunk_data: {
            const std::size_t n = std::size_t(std::min<std::uint64_t>(remaining_, std::uint64_t(end - p)));
            request_.body.append(p, n);
            p += n;
            remaining_ -= n;
            if (remaining_ == 0) phase_ = phase::chunk_data_cr;
            break;
        }

        // RFC 9112 §7.1: chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF.
        // Exactly these two bytes: anything else means the sender and this
        // parser disagree on where the chunk ended.
        case phase::chunk_data_cr:
            if (*p++ != '\r') {
                fail(400, "chunk data not followed by CRLF");
                break;
            }
            phase_ = phase::chunk_data_lf;
            break;
        case phase::chunk_data_lf:
            if (*p++ != '\n') {
                fail(400, "chunk data not followed by CRLF");
                break;
            }
            phase_ = phase::chunk_size;
            break;

        case phase::trailers:
            if (take_line(p, end, limits_.max_head_bytes, 431) != line_status::done) break;
            if (line_.empty()) {
                phase_ = phase::complete;
            } else {
                on_field_line(true);
            }
            line_.clear();
            break;
        }
    }
    return std::size_t(p - data);
}

// request-line = method SP request-target SP HTTP-version (RFC 9112 §3), single
// spaces, nothing else.
void http_request_parser::on_request_line() {
    const std::string_view line = line_;
    const std::size_t sp1 = line.find(' ');
    const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos) return fail(400, "malformed request line");
    const std::string_view method = line.substr(0, sp1);
    const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version = line.substr(sp2 + 1);
    if (!is_token(method)) return fail(400, "malformed request line: the method is not a token");
    if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) {
            const auto u = static_cast<unsigned char>(c);
            return u > 0x20 && u < 0x7f;
        })) {
        return fail(400, "malformed request line: the target must be visible ASCII");
    }
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[5] < '0' || version[5] > '9' ||
        version[6] != '.' || version[7] < '0' || version[7] > '9') {
        return fail(400, "malformed request line: expected HTTP/1.0 or HTTP/1.1");
    }
    if (version[5] != '1') return fail(505, "only HTTP/1.x is supported");
    request_.method = method;
    request_.target = target;
    request_.version_minor = version[7] - '0';
    line_.clear();
    section_bytes_ = 0;
    phase_ = phase::fields;
}

// field-line = field-name ":" OWS field-value OWS (RFC 9112 §5).
void http_request_parser::on_field_line(bool trailer) {
    if (++fields_ > limits_.max_fields) {
        return fail(431, "more than " + std::to_string(limits_.max_fields) + " header fields");
    }
    const std::string_view line = line_;
    if (is_ows(line.front())) {
        // §5.2: obs-fold; a server must reject it or unfold it. Rejected.
        return fail(400, "obsolete line folding in a header field");
    }
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return fail(400, "a header line without a colon");
    const std::string_view name = line.substr(0, colon);
    if (name.empty()) return fail(400, "an empty header field name");
    if (is_ows(name.back())) {
        // §5.1: "A server MUST reject, with a response status code of 400 (Bad
        // Request), any received request message that contains whitespace
        // between a header field name and colon."
        return fail(400, "whitespace between a header field name and the colon");
    }
    if (!is_token(name)) return fail(400, "a header field name that is not a token");
    const std::string_view value = trim_ows(line.substr(colon + 1));
    if (!std::all_of(value.begin(), value.end(),
                     [](char c) { return is_field_value_char(static_cast<unsigned char>(c)); })) {
        return fail(400, "a control character in a header field value");
    }
    if (trailer) return;  // trailer fields are checked, then ignored

    if (iequals(name, "content-length")) {
        // §6.3: 1*DIGIT; several must agree (RFC 9110 §8.6), else the framing is ambiguous.
        if (value.empty() || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            return fail(400, "Content-Length is not a decimal number");
        }
        if (has_content_length_ && value != content_length_text_) {
            return fail(400, "Content-Length fields that disagree");
        }
        has_content_length_ = true;
        content_length_text_ = value;
        std::uint64_t n = 0;
        for (const char c : value) {
            const std::uint64_t digit = std::uint64_t(c - '0');
            if (n > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
                n = std::numeric_limits<std::uint64_t>::max();  // too large either way: 413
                break;
            }
            n = n * 10 + digit;
        }
        content_length_ = n;
    } else if (iequals(name, "transfer-encoding")) {
        // Several fields form one list, in order (RFC 9110 §5.3).
        if (has_transfer_encoding_) transfer_encoding_ += ',';
        has_transfer_encoding_ = true;
        transfer_encoding_ += value;
    } else if (iequals(name, "host")) {
        ++hosts_;
    } else if (iequals(name, "connection")) {
        for_each_element(value, [&](std::string_view option) {
            if (iequals(option, "close")) connection_close_ = true;
            if (iequals(option, "keep-alive")) connection_keep_alive_ = true;
        });
    } else if (iequals(name, "expect")) {
        if (iequals(value, "100-continue")) request_.expect_continue = true;
    } else if (iequals(name, "x-tenferro-group")) {
        if (request_.has_tenant_group) return fail(400, "more than one X-Tenferro-Group field");
        request_.has_tenant_group = true;
        request_.tenant_group = value;
    } else if (iequals(name, "x-tenferro-timeout-ms")) {
        if (request_.has_timeout_ms) return fail(400, "more than one X-Tenferro-Timeout-Ms field");
        request_.has_timeout_ms = true;
        request_.timeout_ms = value;
    }
}

void http_request_parser::on_header_section_end() {
    const bool http11 = request_.version_minor >= 1;
    // RFC 9112 §3.2: a server MUST respond 400 to an HTTP/1.1 request without
    // a Host field, and to any request with more than one.
    if (hosts_ > 1 || (http11 && hosts_ == 0)) return fail(400, "expected exactly one Host header");

    if (has_transfer_encoding_) {
        // §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing. §6.3: with
        // Content-Length as well, the framing is ambiguous (a smuggling
        // vector); a server may reject it, and this one does.
        if (!http11) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
        if (has_content_length_) return fail(400, "both Content-Length and Transfer-Encoding");
        int chunked = 0, unknown = 0;
        bool chunked_last = false;
        for_each_element(transfer_encoding_, [&](std::string_view coding) {
            // A coding may carry parameters (";q=..."); only its name matters here.
            const std::string_view name = trim_ows(coding.substr(0, coding.find(';')));
            chunked_last = iequals(name, "chunked");
            if (chunked_last) {
                ++chunked;
            } else {
                ++unknown;
            }
        });
        // §6.3: chunked not final -> the length cannot be determined: 400.
        // §7: chunked at most once. §6.1: a coding not understood -> 501.
        if (!chunked_last || chunked > 1) {
            return fail(400, "Transfer-Encoding must end with chunked, once: \"" + transfer_encoding_ + "\"");
        }
        if (unknown > 0) {
            return fail(501, "only the chunked transfer coding is supported: \"" + transfer_encoding_ + "\"");
        }
        request_.chunked = true;
    }
    request_.keep_alive = http11 ? !connection_close_ : connection_keep_alive_ && !connection_close_;

    line_.clear();
    section_bytes_ = 0;
    fields_ = 0;
    if (request_.chunked) {
        phase_ = phase::chunk_size;
    } else if (has_content_length_) {
        if (content_length_ > limits_.max_body_bytes) {
            return fail(413, "the body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes");
        }
        request_.body.reserve(std::size_t(content_length_));
        remaining_ = content_length_;
        phase_ = remaining_ > 0 ? phase::body : phase::complete;
    } else {
        phase_ = phase::complete;  // §6.3: a request without either has no body
    }
}

// chunk-size [ chunk-ext ] CRLF, chunk-size = 1*HEXDIG.
void http_request_parser::on_chunk_size_line() {
    section_bytes_ = 0;  // the limit applies to each chunk size line
    const std::string_view line = line_;
    std::size_t i = 0;
    std::uint64_t size = 0;
    bool over = false;
    for (; i < line.size() && hex_value(line[i]) >= 0; ++i) {
        if (size > (std::numeric_limits<std::uint64_t>::max() >> 4)) over = true;
        size = over ? size : (size << 4) | std::uint64_t(hex_value(line[i]));
    }
    if (i == 0) return fail(400, "a chunk size that is not hexadecimal");
    if (!valid_chunk_extensions(line.substr(i))) return fail(400, "a malformed chunk extension");
    // Refused as soon as the size is known: the client need not send the data.
    if (over || size > limits_.max_body_bytes - request_.body.size()) {
        return fail(413, "the body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes");
    }
    if (size == 0) {
        phase_ = phase::trailers;
        section_bytes_ = 0;
        fields_ = 0;
        return;
    }
    remaining_ = size;
    phase_ = phase::chunk_data;
}

}  // namespace embedding_search
