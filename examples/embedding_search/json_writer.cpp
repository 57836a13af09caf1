#include "json_writer.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace embedding_search {

void append_json_string(std::string& out, std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    out.push_back('"');
    for (const char c : s) {
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                out += "\\u00";
                out.push_back(hex[(c >> 4) & 0xf]);
                out.push_back(hex[c & 0xf]);
            } else {
                out.push_back(c);
            }
        }
    }
    out.push_back('"');
}

void json_writer::before_value() {
    if (after_key_) {
        after_key_ = false;
        return;
    }
    if (!has_member_.empty()) {
        if (has_member_.back()) out_.push_back(',');
        has_member_.back() = true;
    }
}

json_writer& json_writer::begin_object() {
    before_value();
    out_.push_back('{');
    has_member_.push_back(false);
    return *this;
}

json_writer& json_writer::end_object() {
    has_member_.pop_back();
    out_.push_back('}');
    return *this;
}

json_writer& json_writer::begin_array() {
    before_value();
    out_.push_back('[');
    has_member_.push_back(false);
    return *this;
}

json_writer& json_writer::end_array() {
    has_member_.pop_back();
    out_.push_back(']');
    return *this;
}

json_writer& json_writer::key(std::string_view k) {
    before_value();
    append_json_string(out_, k);
    out_.push_back(':');
    after_key_ = true;
    return *this;
}

json_writer& json_writer::value(std::string_view s) {
    before_value();
    append_json_string(out_, s);
    return *this;
}

json_writer& json_writer::value(bool b) {
    before_value();
    out_ += b ? "true" : "false";
    return *this;
}

json_writer& json_writer::null() {
    before_value();
    out_ += "null";
    return *this;
}

json_writer& json_writer::raw(std::string_view json) {
    while (!json.empty() && (json.back() == '\n' || json.back() == ' ')) json.remove_suffix(1);
    while (!json.empty() && (json.front() == '\n' || json.front() == ' ')) json.remove_prefix(1);
    before_value();
    out_ += json;
    return *this;
}

namespace {
template <class T>
void append_number(std::string& out, T v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}
}  // namespace

json_writer& json_writer::value(double d) {
    before_value();
    if (std::isfinite(d))
        append_number(out_, d);
    else
        out_ += "null";
    return *this;
}

json_writer& json_writer::value(float f) {
    before_value();
    if (std::isfinite(f))
        append_number(out_, f);
    else
        out_ += "null";
    return *this;
}

json_writer& json_writer::value(std::int64_t i) {
    before_value();
    append_number(out_, i);
    return *this;
}

json_writer& json_writer::value(std::uint64_t u) {
    before_value();
    append_number(out_, u);
    return *this;
}

}  // namespace embedding_search
