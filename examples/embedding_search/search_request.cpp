#include "search_request.hpp"

#include <cmath>
#include <string>

#include <simdjson.h>

#include "json_writer.hpp"

namespace embedding_search {

namespace {

tl::unexpected<field_error> reject(std::string field, std::string message) {
    return tl::unexpected(field_error{std::move(field), std::move(message)});
}

}  // namespace

tl::expected<search_query, field_error> parse_search_request(std::string_view body, const search_limits& limits) {
    // One parser per thread: its buffers are reused from request to request, and
    // nothing parsed outlives this call (the values are copied out below).
    thread_local simdjson::dom::parser parser;

    simdjson::dom::element doc;
    if (const auto err = parser.parse(body.data(), body.size()).get(doc); err) {
        return reject("body", std::string("malformed JSON: ") + simdjson::error_message(err));
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
        double v = 0.0;
        if (e.get_double().get(v)) {
            return reject("vector[" + std::to_string(i) + "]", "is not a number");
        }
        const float f = static_cast<float>(v);
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
        std::int64_t k = 0;
        if (err || k_element.get_int64().get(k)) {
            return reject("k", "expected an integer in [1, " + std::to_string(limits.max_k) + "]");
        }
        if (k < 1 || k > limits.max_k) {
            return reject("k", std::to_string(k) + " is out of range [1, " + std::to_string(limits.max_k) + "]");
        }
        q.k = k;
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
