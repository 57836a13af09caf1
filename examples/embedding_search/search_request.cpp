#include "search_request.hpp"

#include <cmath>
#include <optional>
#include <string>

#include <simdjson.h>

#include "json_numbers.hpp"
#include "json_writer.hpp"
#include "tenant_groups.hpp"

namespace tf = tenferro;

namespace embedding_search {

namespace {

tl::unexpected<field_error> reject(std::string field, std::string message) {
    return tl::unexpected(field_error{std::move(field), std::move(message)});
}

/// `"filter": {"labels": [...], "ids": [...]}`, either or both (contract section 10).
tl::expected<tf::row_filter, field_error> parse_filter(simdjson::dom::element e, const number_reader& numbers) {
    const std::string expected =
        "expected an object with \"labels\" (an array of labels), \"ids\" (an array of ids), or both";
    simdjson::dom::object object;
    if (e.get_object().get(object)) return reject("filter", expected);
    tf::row_filter f;
    for (const auto field : object) {
        const std::string_view key = field.key;
        simdjson::dom::array array;
        if (key != "labels" && key != "ids") {
            std::string message = "unknown member \"";
            message.append(key.substr(0, 64)).append("\": ").append(expected);
            return reject("filter", std::move(message));
        }
        if (field.value.get_array().get(array))
            return reject("filter",
                          std::string(key == "ids" ? "\"ids\"" : "\"labels\"") + " is not an array: " + expected);
        std::size_t i = 0;
        if (key == "labels") {
            f.labels.emplace();
            for (const simdjson::dom::element x : array) {
                const auto v = numbers.unsigned_integer(x);
                if (!v || *v > 0xFFFFFFFFu)
                    return reject("filter.labels[" + std::to_string(i) + "]",
                                  "expected a label: an integer in [0, 4294967295]");
                f.labels->push_back(static_cast<tf::row_label>(*v));
                ++i;
            }
        } else {
            f.ids.emplace();
            for (const simdjson::dom::element x : array) {
                const auto v = numbers.unsigned_integer(x);
                if (!v)
                    return reject("filter.ids[" + std::to_string(i) + "]",
                                  "expected an id: an integer in [0, 18446744073709551615]");
                f.ids->push_back(*v);
                ++i;
            }
        }
    }
    return f;
}

}  // namespace

tl::expected<search_query, field_error> parse_search_request(std::string_view body, const search_limits& limits) {
    parsed_body parsed;
    if (auto problem = parse_body(body, parsed)) return reject("body", *problem);
    const simdjson::dom::element doc = parsed.doc;
    const number_reader& numbers = parsed.numbers;
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

    simdjson::dom::element filter_element;
    if (const auto err = object["filter"].get(filter_element); err != simdjson::NO_SUCH_FIELD) {
        auto filter = parse_filter(filter_element, numbers);
        if (!filter) return tl::unexpected(std::move(filter.error()));
        q.filter = std::move(*filter);
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
