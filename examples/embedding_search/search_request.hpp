#pragma once
// The body of `POST /v1/search`: `{"vector": [D numbers], "k": 10,
// "timeout_ms": 250, "filter": {"labels": [3], "ids": [17]}}` (all but "vector" optional), validated field by field
// so that a 400 response can name what was wrong.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <optional>

#include <tenferro/live_corpus.hpp>
#include <tl/expected.hpp>

namespace embedding_search {

/// What was wrong with a request body: the field (`"body"`, `"vector"`,
/// `"vector[3]"`, `"k"`) and a sentence for humans.
struct field_error {
    std::string field;
    std::string message;
};

/// A validated query: the vector scaled to unit length (so a dot product with
/// a unit corpus row is the cosine), and how many results to return.
struct search_query {
    std::vector<float> unit_vector;
    std::int64_t k = 10;
    /// Milliseconds from the request's arrival to its deadline, in [0, one
    /// day] (0: already due, answered deadline_exceeded); -1: none given.
    std::int64_t timeout_ms = -1;
    /// `"filter"`: the rows it may return (labels any-of, an id allow-list, or both).
    std::optional<tenferro::row_filter> filter;
};

struct search_limits {
    std::int64_t dim = 0;      ///< required vector length
    std::int64_t max_k = 0;    ///< largest `k` accepted (at most the corpus rows)
    std::int64_t default_k = 10;
};

/// Parses and validates `body` (JSON). Never throws for any input; every
/// rejection names the offending field.
tl::expected<search_query, field_error> parse_search_request(std::string_view body, const search_limits& limits);

/// `{"error": {"field": ..., "message": ...}}` (no "field" when it is empty).
std::string render_field_error(const field_error& e);

}  // namespace embedding_search
