// Numbers in request bodies (json_numbers.hpp).

#include "json_numbers.hpp"

#include <charconv>
#include <cmath>

namespace embedding_search {

/// The JSON number grammar (RFC 8259 §6): -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
bool is_json_number(std::string_view t) {
    std::size_t i = 0;
    const auto digits = [&] {
        const std::size_t start = i;
        while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
        return i > start;
    };
    if (i < t.size() && t[i] == '-') ++i;
    if (i < t.size() && t[i] == '0') {
        ++i;
    } else if (!digits()) {
        return false;
    }
    if (i < t.size() && t[i] == '.') {
        ++i;
        if (!digits()) return false;
    }
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
        ++i;
        if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
        if (!digits()) return false;
    }
    return i == t.size();
}

/// A JSON number's value as a double: +-inf beyond the double range, 0 (or a
/// subnormal) below it; nullopt when the text is not a JSON number.
std::optional<double> json_number_value(std::string_view t) {
    if (!is_json_number(t)) return std::nullopt;
    double v = 0.0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec == std::errc() && end == t.data() + t.size()) return v;
    // Out of range: overflow if the decimal exponent of the leading significant
    // digit is positive, underflow otherwise.
    const bool negative = t.front() == '-';
    const std::size_t exp_at = t.find_first_of("eE");
    const std::string_view mantissa = t.substr(negative ? 1 : 0, exp_at - (negative ? 1 : 0));
    long long exponent = 0;
    if (exp_at != std::string_view::npos) {
        std::string_view e = t.substr(exp_at + 1);
        const bool e_negative = !e.empty() && e.front() == '-';
        if (!e.empty() && (e.front() == '+' || e.front() == '-')) e.remove_prefix(1);
        for (const char c : e) exponent = std::min(exponent * 10 + (c - '0'), 1'000'000'000LL);
        if (e_negative) exponent = -exponent;
    }
    const std::size_t point = std::min(mantissa.find('.'), mantissa.size());
    const std::size_t first = mantissa.find_first_of("123456789");
    long long order = exponent;
    if (first != std::string_view::npos)
        order += first < point ? (long long)(point - first) : -(long long)(first - point);
    const double magnitude = order > 0 ? HUGE_VAL : 0.0;
    return negative ? -magnitude : magnitude;
}

namespace {

/// `body` with every number (outside strings) replaced by its ordinal; the
/// numbers' texts go to `numbers`. nullopt when a number-like token is not a
/// JSON number.
std::optional<std::string> number_ordinals(std::string_view body, std::vector<std::string_view>& numbers) {
    std::string out;
    out.reserve(body.size());
    bool in_string = false;
    for (std::size_t i = 0; i < body.size();) {
        const char c = body[i];
        if (in_string) {
            out += c;
            if (c == '\\' && i + 1 < body.size()) {
                out += body[i + 1];
                i += 2;
                continue;
            }
            if (c == '"') in_string = false;
            ++i;
        } else if (c == '"') {
            in_string = true;
            out += c;
            ++i;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            std::size_t end = i + 1;
            while (end < body.size() && std::string_view("0123456789.eE+-").find(body[end]) != std::string_view::npos)
                ++end;
            const std::string_view token = body.substr(i, end - i);
            if (!is_json_number(token)) return std::nullopt;
            out += std::to_string(numbers.size());
            numbers.push_back(token);
            i = end;
        } else {
            out += c;
            ++i;
        }
    }
    return out;
}

}  // namespace

std::optional<double> number_reader::real(simdjson::dom::element e) const {
    if (!numbers) {
        double v = 0.0;
        if (e.get_double().get(v)) return std::nullopt;
        return v;
    }
    std::uint64_t ordinal = 0;
    if (e.get_uint64().get(ordinal) || ordinal >= numbers->size()) return std::nullopt;
    return json_number_value((*numbers)[ordinal]);
}

namespace {

// An integer element of type T: simdjson's own value (a negative one is no uint64), or the
// ordinal's text, which from_chars reads only when it is a whole number of T's range.
template <class T>
std::optional<T> whole_number(simdjson::dom::element e, const std::vector<std::string_view>* numbers) {
    T v = 0;
    if (!numbers) {
        if (e.get<T>().get(v)) return std::nullopt;
        return v;
    }
    std::uint64_t ordinal = 0;
    if (e.get_uint64().get(ordinal) || ordinal >= numbers->size()) return std::nullopt;
    const std::string_view t = (*numbers)[ordinal];
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
    return v;
}

}  // namespace

std::optional<std::int64_t> number_reader::integer(simdjson::dom::element e) const {
    return whole_number<std::int64_t>(e, numbers);
}

std::optional<std::uint64_t> number_reader::unsigned_integer(simdjson::dom::element e) const {
    return whole_number<std::uint64_t>(e, numbers);
}

std::optional<std::string> parse_body(std::string_view body, parsed_body& out) {
    // One parser per thread: its buffers are reused from request to request, and nothing parsed
    // outlives the request's handling on this thread (values are copied out).
    thread_local simdjson::dom::parser parser;
    out.numbers = {};
    out.number_texts.clear();
    out.with_ordinals.clear();
    if (auto err = parser.parse(body.data(), body.size()).get(out.doc); err) {
        if (err == simdjson::NUMBER_ERROR) {  // also what simdjson 3.0 reports for integers beyond 64 bits
            if (auto replaced = number_ordinals(body, out.number_texts)) {
                out.with_ordinals = std::move(*replaced);
                err = parser.parse(out.with_ordinals.data(), out.with_ordinals.size()).get(out.doc);
                out.numbers.numbers = &out.number_texts;
            }
        }
        if (err) return std::string("malformed JSON: ") + simdjson::error_message(err);
    }
    return std::nullopt;
}

}  // namespace embedding_search
