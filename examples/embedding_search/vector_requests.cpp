// The live corpus's request bodies (vector_requests.hpp).

#include "vector_requests.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_set>

#include "json_numbers.hpp"
#include "json_writer.hpp"

namespace tf = tenferro;

namespace embedding_search {
namespace {

tl::unexpected<field_error> reject(std::string field, std::string message) {
    return tl::unexpected(field_error{std::move(field), std::move(message)});
}

constexpr std::string_view id_range = "an integer in [0, 18446744073709551615]";

}  // namespace

tl::expected<tf::corpus_write, field_error> parse_upsert_request(std::string_view body, std::int64_t dim) {
    parsed_body parsed;
    if (auto problem = parse_body(body, parsed)) return reject("body", *problem);
    const number_reader& numbers = parsed.numbers;
    simdjson::dom::object object;
    if (parsed.doc.get_object().get(object)) return reject("body", "expected a JSON object");
    simdjson::dom::array rows;
    simdjson::dom::element rows_element;
    if (object["vectors"].get(rows_element)) return reject("vectors", "missing: expected an array of rows");
    if (rows_element.get_array().get(rows)) return reject("vectors", "expected an array of rows");

    tf::corpus_write w;
    std::unordered_set<tf::row_id> seen;
    std::vector<float> vector;
    std::vector<tf::row_label> labels;
    std::size_t i = 0;
    for (const simdjson::dom::element row : rows) {
        const std::string at = "vectors[" + std::to_string(i) + "]";
        simdjson::dom::object fields;
        if (row.get_object().get(fields))
            return reject(at, "expected an object with \"id\", \"vector\" and optional \"labels\"");

        simdjson::dom::element id_element;
        if (fields["id"].get(id_element))
            return reject(at + ".id", std::string("missing: expected ") + std::string(id_range));
        const std::optional<std::uint64_t> id = numbers.unsigned_integer(id_element);
        if (!id) return reject(at + ".id", std::string("expected ") + std::string(id_range));
        if (!seen.insert(*id).second)
            return reject(at + ".id", std::to_string(*id) + " appears more than once in this request");

        const std::string expected_vector = "expected an array of " + std::to_string(dim) + " numbers";
        simdjson::dom::element vector_element;
        simdjson::dom::array values;
        if (fields["vector"].get(vector_element)) return reject(at + ".vector", "missing: " + expected_vector);
        if (vector_element.get_array().get(values)) return reject(at + ".vector", expected_vector);
        if (const auto n = static_cast<std::int64_t>(values.size()); n != dim)
            return reject(at + ".vector", "has " + std::to_string(n) + " elements, " + expected_vector);
        vector.clear();
        bool nonzero = false;
        std::size_t j = 0;
        for (const simdjson::dom::element x : values) {
            const std::optional<double> v = numbers.real(x);
            if (!v) return reject(at + ".vector", "element " + std::to_string(j) + " is not a number");
            const float f = static_cast<float>(*v);
            if (!std::isfinite(f))
                return reject(at + ".vector", "element " + std::to_string(j) + " is not a finite 32-bit float");
            nonzero = nonzero || f != 0.0f;
            vector.push_back(f);
            ++j;
        }
        if (!nonzero) return reject(at + ".vector", "is all zeros: cosine similarity is undefined");

        labels.clear();
        simdjson::dom::element labels_element;
        if (const auto err = fields["labels"].get(labels_element); err != simdjson::NO_SUCH_FIELD) {
            simdjson::dom::array list;
            if (err || labels_element.get_array().get(list))
                return reject(at + ".labels", "expected an array of at most 16 labels, integers in [0, 4294967295]");
            if (list.size() > tf::max_row_labels)
                return reject(at + ".labels", "has " + std::to_string(list.size()) + " labels, at most 16 are allowed");
            std::size_t l = 0;
            for (const simdjson::dom::element x : list) {
                const std::optional<std::uint64_t> v = numbers.unsigned_integer(x);
                if (!v || *v > 0xFFFFFFFFu)
                    return reject(at + ".labels",
                                  "element " + std::to_string(l) + " is not an integer in [0, 4294967295]");
                labels.push_back(static_cast<tf::row_label>(*v));
                ++l;
            }
        }
        w.upsert(*id, vector, labels);
        ++i;
    }
    return w;
}

tl::expected<std::vector<tf::row_id>, field_error> parse_delete_request(std::string_view body) {
    parsed_body parsed;
    if (auto problem = parse_body(body, parsed)) return reject("body", *problem);
    simdjson::dom::object object;
    if (parsed.doc.get_object().get(object)) return reject("body", "expected a JSON object");
    simdjson::dom::element ids_element;
    simdjson::dom::array list;
    if (object["ids"].get(ids_element)) return reject("ids", "missing: expected an array of ids");
    if (ids_element.get_array().get(list)) return reject("ids", "expected an array of ids");
    std::vector<tf::row_id> ids;
    std::unordered_set<tf::row_id> seen;
    std::size_t i = 0;
    for (const simdjson::dom::element x : list) {
        const std::string at = "ids[" + std::to_string(i) + "]";
        const std::optional<std::uint64_t> id = parsed.numbers.unsigned_integer(x);
        if (!id) return reject(at, std::string("expected ") + std::string(id_range));
        if (!seen.insert(*id).second)
            return reject(at, std::to_string(*id) + " appears more than once in this request");
        ids.push_back(*id);
        ++i;
    }
    return ids;
}

std::optional<tf::row_id> parse_row_id(std::string_view text) {
    if (text.empty() || text.size() > 20 ||
        !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    tf::row_id id = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return id;
}

std::string render_row(const tf::stored_row& row) {
    json_writer w;
    w.begin_object().field("id", row.id).key("vector").begin_array();
    for (const float x : row.vector) w.value(x);
    w.end_array().key("labels").begin_array();
    for (const tf::row_label l : row.labels) w.value(std::uint64_t{l});
    w.end_array().end_object();
    std::string out = w.take();
    out += '\n';
    return out;
}

}  // namespace embedding_search
