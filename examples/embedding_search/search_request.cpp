#include "search_request.hpp"

#include <charconv>
#include <cmath>
#include <optional>
#include <string>

#include <simdjson.h>

#include "json_writer.hpp"
#include "tenant_groups.hpp"

namespace embedding_search {

namespace {

tl::unexpected<field_error> reject(std::string field, std::string message) {
    return tl::unexpected(field_error{std::move(field), std::move(message)});
}

// simdjson refuses a whole document when one number in it is beyond double
// range (1e400) or an integer beyond 64 bits (100000000000000000000, which is
// 1e20, a fine f32): the client would be told "malformed JSON" about `body`
// instead of which element is out of range. So when the first parse fails that
// way, the body is parsed again with every number replaced by its ordinal
// (0, 1, 2, ...); the structure is then validated by simdjson as before, and
// each number is converted from its own text here.

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

/// Reads numbers from the parsed document: simdjson's values, or (after
/// `number_ordinals`) the ordinal's text converted here.
struct number_reader {
    const std::vector<std::string_view>* numbers = nullptr;  // null: simdjson's own values

    /// The element's value; nullopt when it is not a number.
    std::optional<double> real(simdjson::dom::element e) const {
        if (!numbers) {
            double v = 0.0;
            if (e.get_double().get(v)) return std::nullopt;
            return v;
        }
        std::uint64_t ordinal = 0;
        if (e.get_uint64().get(ordinal) || ordinal >= numbers->size()) return std::nullopt;
        return json_number_value((*numbers)[ordinal]);
    }
    /// The element as an integer; nullopt when it is not an integer that fits
    /// in 64 bits (a fraction, an exponent, another type).
    std::optional<std::int64_t> integer(simdjson::dom::element e) const {
        std::int64_t v = 0;
        if (!numbers) {
            if (e.get_int64().get(v)) return std::nullopt;
            return v;
        }
        std::uint64_t ordinal = 0;
        if (e.get_uint64().get(ordinal) || ordinal >= numbers->size()) return std::nullopt;
        const std::string_view t = (*numbers)[ordinal];
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
        return v;
    }
};

}  // namespace

tl::expected<search_query, field_error> parse_search_request(std::string_view body, const search_limits& limits) {
    // One parser per thread: its buffers are reused from request to request, and
    // nothing parsed outlives this call (the values are copied out below).
    thread_local simdjson::dom::parser parser;

    simdjson::dom::element doc;
    number_reader numbers;
    std::vector<std::string_view> number_texts;
    std::string with_ordinals;
    if (auto err = parser.parse(body.data(), body.size()).get(doc); err) {
        if (err == simdjson::NUMBER_ERROR) {  // also what simdjson 3.0 reports for integers beyond 64 bits
            if (auto replaced = number_ordinals(body, number_texts)) {
                with_ordinals = std::move(*replaced);
                err = parser.parse(with_ordinals.data(), with_ordinals.size()).get(doc);
                numbers.numbers = &number_texts;
            }
        }
        if (err) return reject("body", std::string("malformed JSON: ") + simdjson::error_message(err));
    }
    simdjson::dom::object object;
    if (doc.get_object().get(object)) return reject("body", "expected a JSON object");

    simdjson::dom::element vector_element;
    if (const auto err = object["vector"].get(vector_element); err) {
        return reject("vector", "missing: expected an array of " + std::to_string(limits.dim) + " numbers");
    }
    simdjson::dom::array array;
    if (vector_element.get_array().get(array)) {
        return reject("vector", "expected an array of " + std::to_string(limits.dim) + " numbers");
    }
    if (const auto n = std::int64_t(array.size()); n != limits.dim) {
        return reject("vector", "has " + std::to_string(n) + " elements, expected " + std::to_string(limits.dim));
    }

    search_query q;
    q.unit_vector.reserve(std::size_t(limits.dim));
    double norm_squared = 0.0;
    std::size_t i = 0;
    for (const simdjson::dom::element e : array) {
        const std::optional<double> v = numbers.real(e);
        if (!v) return reject("vector[" + std::to_string(i) + "]", "is not a number");
        const float f = static_cast<float>(*v);
        if (!std::isfinite(f)) {
            return reject("vector[" + std::to_string(i) + "]", "is not a finite 32-bit float");
        }
        q.unit_vector.push_back(f);
        norm_squared += double(f) * double(f);
        ++i;
    }
    if (!(norm_squared > 0.0)) return reject("vector", "has zero length: cosine similarity is undefined");
    const double inverse_norm = 1.0 / std::sqrt(norm_squared);
    for (float& f : q.unit_vector) f = static_cast<float>(double(f) * inverse_norm);

    q.k = limits.default_k;
    simdjson::dom::element k_element;
    if (const auto err = object["k"].get(k_element); err != simdjson::NO_SUCH_FIELD) {
        const std::optional<std::int64_t> parsed = err ? std::nullopt : numbers.integer(k_element);
        if (!parsed) return reject("k", "expected an integer in [1, " + std::to_string(limits.max_k) + "]");
        const std::int64_t k = *parsed;
        if (k < 1 || k > limits.max_k) {
            return reject("k", std::to_string(k) + " is out of range [1, " + std::to_string(limits.max_k) + "]");
        }
        q.k = k;
    }

    simdjson::dom::element timeout_element;
    if (const auto err = object["timeout_ms"].get(timeout_element); err != simdjson::NO_SUCH_FIELD) {
        const std::string expected =
            "expected a whole number of milliseconds from 0 to " + std::to_string(max_timeout_ms);
        // A fraction, an exponent, a string, a number beyond 64 bits: not an integer.
        const std::optional<std::int64_t> parsed = err ? std::nullopt : numbers.integer(timeout_element);
        if (!parsed || *parsed < 0 || *parsed > max_timeout_ms) {
            return reject("timeout_ms", parsed ? std::to_string(*parsed) + " is out of range: " + expected : expected);
        }
        q.timeout_ms = *parsed;
    }
    return q;
}

std::string render_field_error(const field_error& e) {
    json_writer w;
    w.begin_object().key("error").begin_object();
    if (!e.field.empty()) w.field("field", e.field);
    w.field("message", e.message);
    w.end_object().end_object();
    return w.take();
}

}  // namespace embedding_search
