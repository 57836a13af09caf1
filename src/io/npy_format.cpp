// The `.npy` header parser and formatter (see npy_format.hpp). The parser reads
// untrusted bytes: every index is checked against the end, integers are
// accumulated with overflow checks, and nothing recurses, so no input can make it
// read out of bounds, overflow or exhaust the stack.

#include "io/npy_format.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string_view>

namespace tenferro::detail::npy {
namespace {

constexpr std::uint64_t int64_max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

std::uint64_t load_le(const std::uint8_t* p, int bytes) noexcept {
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// Not size_of(): this file is also built alone into the fuzzer, without src/tensor/.
std::uint64_t itemsize_of(dtype t) noexcept { return t == dtype::f32 || t == dtype::i32 ? 4 : 8; }

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
bool is_ident(char c) noexcept { return is_digit(c) || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// What the dict said, before the semantic checks.
struct parsed_dict {
    bool has_descr = false, has_fortran = false, has_shape = false;
    bool descr_supported = false;  // a string naming one of our dtypes
    dtype type = dtype::f32;
    bool big_endian = false;
    bool fortran_order = false;
    std::size_t rank = 0;  // may exceed max_rank (only the first max_rank extents are kept)
    std::array<std::int64_t, max_rank> shape{};
    bool extent_overflow = false;  // an extent above INT64_MAX
};

// A recursive-descent parser without recursion: the grammar is flat (a dict of
// strings, booleans and a tuple of integers); numpy's structured dtypes (a list
// as descr) are skipped with a bracket counter and reported as unsupported.
class dict_parser {
public:
    explicit dict_parser(std::string_view text) noexcept : p_(text.data()), end_(text.data() + text.size()) {}

    bool parse(parsed_dict& d) noexcept {
        skip_space();
        if (!eat('{')) return false;
        skip_space();
        while (!eat('}')) {
            std::string_view key;
            if (!parse_string(key)) return false;
            skip_space();
            if (!eat(':')) return false;
            skip_space();
            if (key == "descr") {
                if (d.has_descr || !parse_descr(d)) return false;
                d.has_descr = true;
            } else if (key == "fortran_order") {
                if (d.has_fortran || !parse_bool(d.fortran_order)) return false;
                d.has_fortran = true;
            } else if (key == "shape") {
                if (d.has_shape || !parse_shape(d)) return false;
                d.has_shape = true;
            } else {
                return false;  // numpy rejects any other key too
            }
            skip_space();
            if (eat(',')) {
                skip_space();
            } else if (!peek('}')) {
                return false;
            }
        }
        skip_space();
        return p_ == end_ && d.has_descr && d.has_fortran && d.has_shape;
    }

private:
    bool at_end() const noexcept { return p_ == end_; }
    bool peek(char c) const noexcept { return p_ != end_ && *p_ == c; }
    bool eat(char c) noexcept {
        if (!peek(c)) return false;
        ++p_;
        return true;
    }
    void skip_space() noexcept {
        while (p_ != end_ && is_space(*p_)) ++p_;
    }

    // A single- or double-quoted string without escapes or line breaks.
    bool parse_string(std::string_view& out) noexcept {
        if (at_end() || (*p_ != '\'' && *p_ != '"')) return false;
        const char quote = *p_++;
        const char* begin = p_;
        while (p_ != end_ && *p_ != quote) {
            if (*p_ == '\\' || *p_ == '\n' || *p_ == '\r') return false;
            ++p_;
        }
        if (at_end()) return false;
        out = std::string_view(begin, static_cast<std::size_t>(p_ - begin));
        ++p_;
        return true;
    }

    bool parse_descr(parsed_dict& d) noexcept {
        if (peek('[')) return skip_brackets();  // a structured dtype: well-formed, unsupported
        std::string_view s;
        if (!parse_string(s)) return false;
        if (s.size() != 3) return true;
        switch (s[0]) {
        case '<':
            d.big_endian = false;
            break;
        case '>':
            d.big_endian = true;
            break;
        case '=':
        case '|':
            d.big_endian = std::endian::native == std::endian::big;
            break;
        default:
            return true;
        }
        const std::string_view code = s.substr(1);
        if (code == "f4") {
            d.type = dtype::f32;
        } else if (code == "f8") {
            d.type = dtype::f64;
        } else if (code == "i4") {
            d.type = dtype::i32;
        } else if (code == "i8") {
            d.type = dtype::i64;
        } else {
            return true;
        }
        d.descr_supported = true;
        return true;
    }

    // A balanced [...] / (...) expression whose strings may hold brackets.
    bool skip_brackets() noexcept {
        std::size_t depth = 0;
        do {
            if (at_end()) return false;
            const char c = *p_;
            if (c == '\'' || c == '"') {
                std::string_view ignored;
                if (!parse_string(ignored)) return false;
                continue;
            }
            if (c == '[' || c == '(') {
                ++depth;
            } else if (c == ']' || c == ')') {
                if (depth == 0) return false;
                --depth;
            }
            ++p_;
        } while (depth > 0);
        return true;
    }

    bool parse_word(std::string_view word) noexcept {
        if (static_cast<std::size_t>(end_ - p_) < word.size() || std::memcmp(p_, word.data(), word.size()) != 0)
            return false;
        const char* after = p_ + word.size();
        if (after != end_ && is_ident(*after)) return false;
        p_ = after;
        return true;
    }

    bool parse_bool(bool& out) noexcept {
        if (parse_word("True")) {
            out = true;
            return true;
        }
        if (parse_word("False")) {
            out = false;
            return true;
        }
        return false;
    }

    // A non-negative decimal literal as Python 3 writes it (no sign, no leading
    // zeros, no underscores), optionally with Python 2's 'L' suffix.
    bool parse_extent(std::uint64_t& out, bool& overflow) noexcept {
        if (at_end() || !is_digit(*p_)) return false;
        const char* begin = p_;
        std::uint64_t v = 0;
        while (p_ != end_ && is_digit(*p_)) {
            const auto digit = static_cast<std::uint64_t>(*p_ - '0');
            if (v > (int64_max - digit) / 10)
                overflow = true;
            else
                v = v * 10 + digit;
            ++p_;
        }
        if (*begin == '0' && p_ - begin > 1) return false;
        if (p_ != end_ && (*p_ == 'L' || *p_ == 'l')) ++p_;
        if (p_ != end_ && is_ident(*p_)) return false;
        out = v;
        return true;
    }

    bool parse_shape(parsed_dict& d) noexcept {
        if (!eat('(')) return false;
        skip_space();
        if (eat(')')) return true;  // ()
        std::size_t commas = 0;
        for (;;) {
            std::uint64_t extent = 0;
            if (!parse_extent(extent, d.extent_overflow)) return false;
            if (d.rank < max_rank) d.shape[d.rank] = static_cast<std::int64_t>(extent);
            ++d.rank;
            skip_space();
            if (eat(')')) break;
            if (!eat(',')) return false;
            ++commas;
            skip_space();
            if (eat(')')) break;
        }
        return d.rank > 1 || commas == 1;  // (5) is an int, not a tuple
    }

    const char* p_;
    const char* end_;
};

}  // namespace

tl::expected<std::uint64_t, npy_errc> header_size(std::span<const std::uint8_t> prefix, std::uint64_t file_size,
                                                  const limits& lim) noexcept {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(prefix.size(), file_size));
    const std::size_t magic_seen = std::min(n, sizeof magic);
    if (magic_seen > 0 && std::memcmp(prefix.data(), magic, magic_seen) != 0)
        return tl::unexpected(npy_errc::bad_magic);
    if (n < sizeof magic + 2) return tl::unexpected(npy_errc::truncated_header);
    const int major = prefix[6], minor = prefix[7];
    if (major < 1 || major > 3 || minor != 0) return tl::unexpected(npy_errc::unsupported_version);
    const std::size_t preamble = major == 1 ? v1_preamble : v2_preamble;
    if (n < preamble) return tl::unexpected(npy_errc::truncated_header);
    const std::uint64_t header_len = load_le(prefix.data() + 8, major == 1 ? 2 : 4);
    if (header_len > lim.max_header_bytes) return tl::unexpected(npy_errc::header_too_large);
    const std::uint64_t total = preamble + header_len;
    if (total > file_size) return tl::unexpected(npy_errc::truncated_header);
    return total;
}

tl::expected<header_info, npy_errc> parse_header(std::span<const std::uint8_t> bytes, std::uint64_t file_size,
                                                 const limits& lim) noexcept {
    const auto total = header_size(bytes, file_size, lim);
    if (!total) return tl::unexpected(total.error());
    if (bytes.size() < *total) return tl::unexpected(npy_errc::truncated_header);  // the caller read too little
    header_info info;
    info.major_version = bytes[6];
    const std::size_t preamble = info.major_version == 1 ? v1_preamble : v2_preamble;
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + preamble,
                                static_cast<std::size_t>(*total) - preamble);

    parsed_dict d;
    if (!dict_parser(text).parse(d)) return tl::unexpected(npy_errc::malformed_header);
    if (!d.descr_supported) return tl::unexpected(npy_errc::unsupported_dtype);
    if (d.rank > max_rank) return tl::unexpected(npy_errc::unsupported_rank);
    if (d.extent_overflow) return tl::unexpected(npy_errc::shape_overflow);

    // The tensor rule: the product of the extents, zeros counted as ones, times the
    // itemsize fits int64 (so the allocation cannot be rejected later).
    const std::uint64_t itemsize = itemsize_of(d.type);
    std::uint64_t bound = itemsize;
    bool empty = false;
    for (std::size_t i = 0; i < d.rank; ++i) {
        const auto e = static_cast<std::uint64_t>(d.shape[i]);
        if (e == 0) {
            empty = true;
            continue;
        }
        if (bound > int64_max / e) return tl::unexpected(npy_errc::shape_overflow);
        bound *= e;
    }
    const std::uint64_t data_bytes = empty ? 0 : bound;
    if (data_bytes > lim.max_data_bytes) return tl::unexpected(npy_errc::shape_overflow);
    // *total <= 12 + UINT32_MAX and data_bytes <= INT64_MAX: the sum cannot wrap.
    const std::uint64_t end = *total + data_bytes;
    if (file_size < end) return tl::unexpected(npy_errc::truncated_data);
    if (file_size > end) return tl::unexpected(npy_errc::trailing_data);

    info.type = d.type;
    info.swap_bytes = d.big_endian != (std::endian::native == std::endian::big);
    info.fortran_order = d.fortran_order;
    info.rank = d.rank;
    info.shape = d.shape;
    info.data_offset = *total;
    info.data_bytes = data_bytes;
    return info;
}

std::string format_header(dtype type, std::span<const std::int64_t> shape, bool fortran_order) {
    std::string dict = "{'descr': '";
    dict += std::endian::native == std::endian::big ? '>' : '<';
    dict += type == dtype::f32 ? "f4" : type == dtype::f64 ? "f8" : type == dtype::i32 ? "i4" : "i8";
    dict += "', 'fortran_order': ";
    dict += fortran_order ? "True" : "False";
    dict += ", 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) dict += ", ";
        dict += std::to_string(shape[i]);
    }
    if (shape.size() == 1) dict += ',';
    dict += "), }";

    // numpy's _wrap_header: pad with spaces and a final '\n' so that the data
    // starts at a multiple of 64; the pad is 1..64 spaces, never 0.
    constexpr std::size_t align = 64;
    const auto wrap = [&](int major, std::size_t length_field) {
        const std::size_t hlen = dict.size() + 1;
        const std::size_t pad = align - ((sizeof magic + 2 + length_field + hlen) % align);
        const std::uint64_t stored = hlen + pad;
        std::string out(reinterpret_cast<const char*>(magic), sizeof magic);
        out += static_cast<char>(major);
        out += '\0';
        for (std::size_t i = 0; i < length_field; ++i) out += static_cast<char>((stored >> (8 * i)) & 0xff);
        out += dict;
        out.append(pad, ' ');
        out += '\n';
        return out;
    };
    std::string v1 = wrap(1, 2);
    if (v1.size() - v1_preamble <= 0xffff) return v1;
    return wrap(2, 4);
}

}  // namespace tenferro::detail::npy
