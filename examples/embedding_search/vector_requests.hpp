#pragma once
// The bodies of the live corpus's routes (contract section 10), validated field by field so that
// a 400 response names what was wrong and nothing is applied:
//
//   PUT    /v1/vectors  {"vectors": [{"id": 17, "vector": [D numbers], "labels": [3, 9]}, ...]}
//   DELETE /v1/vectors  {"ids": [17, 18]}
//   GET    /v1/vectors/{id}

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tenferro/live_corpus.hpp>
#include <tl/expected.hpp>

#include "search_request.hpp"

namespace embedding_search {

/// The write of a `PUT /v1/vectors` body for a corpus of dimension `dim`: every row's id (an
/// integer in [0, 2^64 - 1], once per request), vector (`dim` numbers, each a finite f32, not
/// all zero) and labels (at most 16 integers in [0, 2^32 - 1]). Never throws for any input but
/// std::bad_alloc.
tl::expected<tenferro::corpus_write, field_error> parse_upsert_request(std::string_view body, std::int64_t dim);

/// The ids of a `DELETE /v1/vectors` body, once each.
tl::expected<std::vector<tenferro::row_id>, field_error> parse_delete_request(std::string_view body);

/// The id of `GET /v1/vectors/{id}`: decimal digits, at most 2^64 - 1; nullopt otherwise.
std::optional<tenferro::row_id> parse_row_id(std::string_view text);

/// `{"id": 17, "vector": [...], "labels": [...]}`: each number printed so that it reads back as
/// the same f32.
std::string render_row(const tenferro::stored_row& row);

}  // namespace embedding_search
