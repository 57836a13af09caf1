// libFuzzer target for the server's HTTP/1.1 request parser
// (examples/embedding_search/http_request_parser.cpp): the input is the byte
// stream a client sends on one connection. Beyond "no crash, no sanitizer
// report", it checks properties that must hold for every input:
//   - the outcome (the requests parsed, in order, then an error or the state
//     of the unfinished one) does not depend on how the stream is split into
//     reads: whole, one byte at a time, and in pieces of 2 to 8 bytes agree;
//   - the parser takes every byte it is given unless it has just completed a
//     request or failed, and takes none once failed;
//   - a parsed request is within the limits: a token method, a target of
//     visible ASCII, a body of at most max_body_bytes;
//   - a parsed request, written out again in canonical form (with
//     Content-Length, or chunked with an extension and a trailer), parses back
//     to the same request, consuming exactly what was written.
// Built with -Dfuzz=enabled by clang (tests/fuzz/meson.build); `./dev test` runs
// it for a bounded time on the seed corpus in tests/fuzz/corpus/http_request/.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "http_request_parser.hpp"

using embedding_search::http_parse_limits;
using embedding_search::http_request;
using embedding_search::http_request_parser;

namespace {

[[noreturn]] void violated(const char* what) {
    std::fprintf(stderr, "http_request_fuzz: property violated: %s\n", what);
    std::abort();
}

#define PROPERTY(cond)                \
    do {                              \
        if (!(cond)) violated(#cond); \
    } while (0)

// Small limits, so that the fuzzer reaches them with short inputs.
http_parse_limits test_limits() {
    http_parse_limits lim;
    lim.max_body_bytes = 512;
    lim.max_head_bytes = 512;
    lim.max_fields = 12;
    lim.max_leading_empty_lines = 3;
    return lim;
}

std::string describe(const http_request& r) {
    std::string d = r.method + '\n' + r.target + '\n' + std::to_string(r.version_minor);
    d += r.keep_alive ? " keep-alive" : " close";
    d += r.expect_continue ? " expect" : "";
    d += r.chunked ? " chunked\n" : "\n";
    return d + r.body;
}

bool is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != 0 && std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos);
}

void check_request(const http_request& r, const http_parse_limits& lim) {
    PROPERTY(!r.method.empty());
    PROPERTY(std::all_of(r.method.begin(), r.method.end(), [](char c) { return is_tchar((unsigned char)c); }));
    PROPERTY(!r.target.empty());
    PROPERTY(std::all_of(r.target.begin(), r.target.end(), [](char c) { return c > 0x20 && c < 0x7f; }));
    PROPERTY(r.version_minor >= 0 && r.version_minor <= 9);
    PROPERTY(r.body.size() <= lim.max_body_bytes);
    PROPERTY(!r.chunked || r.version_minor >= 1);
}

/// `r` written out canonically; `chunked` picks the framing of the body.
std::string serialize(const http_request& r, bool chunked) {
    std::string s = r.method + ' ' + r.target + " HTTP/1." + std::to_string(r.version_minor) + "\r\nHost: fuzz\r\n";
    if (r.version_minor == 0 && r.keep_alive) s += "Connection: keep-alive\r\n";
    if (r.version_minor >= 1 && !r.keep_alive) s += "Connection: close\r\n";
    if (r.expect_continue) s += "Expect: 100-continue\r\n";
    if (chunked && r.version_minor >= 1) {
        s += "Transfer-Encoding: chunked\r\n\r\n";
        // Two chunks when there is enough body, to cover the joining.
        const std::size_t half = r.body.size() / 2;
        char size[32];
        if (half > 0) {
            std::snprintf(size, sizeof size, "%zx;a=\"b\\\"c\"\r\n", half);
            s += size + r.body.substr(0, half) + "\r\n";
        }
        if (r.body.size() > half) {
            std::snprintf(size, sizeof size, "%zX ; x\r\n", r.body.size() - half);
            s += size + r.body.substr(half) + "\r\n";
        }
        s += "0\r\nTrailer-Field: t\r\n\r\n";
    } else {
        s += "Content-Length: " + std::to_string(r.body.size()) + "\r\n\r\n" + r.body;
    }
    return s;
}

void check_round_trip(const http_request& r, bool chunked, const http_parse_limits& lim) {
    const std::string wire = serialize(r, chunked);
    http_request_parser p(lim);
    const std::size_t used = p.parse(wire.data(), wire.size());
    // The canonical head may be longer than the original one, but the limits
    // leave room: skip the check only where they are exceeded.
    if (p.failed() && (p.error().status == 431 || p.error().status == 414)) return;
    PROPERTY(p.complete());
    PROPERTY(used == wire.size());
    http_request expected = r;
    expected.chunked = chunked && r.version_minor >= 1;
    PROPERTY(describe(p.request()) == describe(expected));
}

/// Feeds `data` in pieces of `piece` bytes (0: all at once) and records what
/// happened, one string per request, error or final state.
std::vector<std::string> transcript(const std::uint8_t* data, std::size_t size, std::size_t piece, bool check) {
    const http_parse_limits lim = test_limits();
    http_request_parser p(lim);
    std::vector<std::string> events;
    const char* const bytes = reinterpret_cast<const char*>(data);
    std::size_t pos = 0, fed_until = 0;
    while (pos < size) {
        // The bytes "read" so far end at fed_until; the parser sees what it
        // has not taken of them, as the server's read loop does.
        if (pos == fed_until) fed_until = piece == 0 ? size : std::min(size, pos + piece);
        const std::size_t offered = fed_until - pos;
        const std::size_t used = p.parse(bytes + pos, offered);
        PROPERTY(used <= offered);
        pos += used;
        if (p.complete()) {
            PROPERTY(p.headers_complete());
            if (check) {
                check_request(p.request(), lim);
                check_round_trip(p.request(), false, lim);
                check_round_trip(p.request(), true, lim);
            }
            events.push_back("request " + describe(p.request()));
            p.next();
            PROPERTY(!p.started() && !p.complete() && !p.failed());
            continue;
        }
        if (p.failed()) {
            PROPERTY(p.parse(bytes + pos, size - pos) == 0 || pos == size);
            PROPERTY(p.error().status == 400 || p.error().status == 413 || p.error().status == 414 ||
                     p.error().status == 431 || p.error().status == 501 || p.error().status == 505);
            events.push_back("error " + std::to_string(p.error().status) + " " + p.error().message);
            return events;
        }
        PROPERTY(used == offered);  // neither complete nor failed: it took everything
    }
    events.push_back(std::string("end") + (p.started() ? " started" : "") + (p.headers_complete() ? " headers" : ""));
    return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::vector<std::string> whole = transcript(data, size, 0, true);
    PROPERTY(transcript(data, size, 1, false) == whole);
    const std::size_t piece = size > 0 ? 2 + data[0] % 7 : 2;
    PROPERTY(transcript(data, size, piece, false) == whole);
    return 0;
}
