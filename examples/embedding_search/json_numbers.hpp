#pragma once
// Numbers in request bodies, read so that each rejection can name its field.
//
// simdjson refuses a whole document when one number in it is beyond double range (1e400) or an
// integer beyond 64 bits (100000000000000000000, which is 1e20, a fine f32): the client would be
// told "malformed JSON" about `body` instead of which element is out of range. So when the first
// parse fails that way, the body is parsed again with every number replaced by its ordinal
// (0, 1, 2, ...); the structure is then validated by simdjson as before, and each number is
// converted from its own text (number_reader).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

namespace embedding_search {

/// The JSON number grammar (RFC 8259 §6): -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
bool is_json_number(std::string_view t);

/// A JSON number's value as a double: +-inf beyond the double range, 0 (or a subnormal) below
/// it; nullopt when the text is not a JSON number.
std::optional<double> json_number_value(std::string_view t);

/// Reads numbers from a parsed document: simdjson's values, or (after the ordinal re-parse) the
/// ordinal's text converted here.
struct number_reader {
    const std::vector<std::string_view>* numbers = nullptr;  // null: simdjson's own values

    /// The element's value; nullopt when it is not a number.
    std::optional<double> real(simdjson::dom::element e) const;
    /// The element as a signed integer; nullopt when it is not an integer that fits in 64 bits
    /// (a fraction, an exponent, another type).
    std::optional<std::int64_t> integer(simdjson::dom::element e) const;
    /// The element as an unsigned integer in [0, 2^64 - 1]; nullopt otherwise (a negative
    /// number, a fraction, an exponent, another type, a value beyond 64 bits).
    std::optional<std::uint64_t> unsigned_integer(simdjson::dom::element e) const;
};

/// A parsed body and how to read its numbers. Owns the re-parse's buffers; `doc` lives in the
/// thread's parser, valid until the next parse on this thread.
struct parsed_body {
    simdjson::dom::element doc;
    number_reader numbers;
    std::vector<std::string_view> number_texts;
    std::string with_ordinals;
};

/// Parses `body` with the thread's parser (and the ordinal re-parse where needed); the error
/// message (for field `body`) when it is not JSON.
std::optional<std::string> parse_body(std::string_view body, parsed_body& out);

}  // namespace embedding_search
