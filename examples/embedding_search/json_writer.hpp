#pragma once
// A small streaming JSON writer: objects, arrays, strings (escaped), integers
// and floating-point numbers in their shortest round-trip form (non-finite
// numbers, which JSON cannot express, are written as null).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace embedding_search {

class json_writer {
public:
    json_writer& begin_object();
    json_writer& end_object();
    json_writer& begin_array();
    json_writer& end_array();
    /// The next value's key; only inside an object.
    json_writer& key(std::string_view k);

    json_writer& value(std::string_view s);
    json_writer& value(const char* s) { return value(std::string_view(s)); }
    json_writer& value(bool b);
    json_writer& value(double d);
    json_writer& value(float f);
    json_writer& value(std::int64_t i);
    json_writer& value(std::uint64_t u);
    json_writer& value(int i) { return value(std::int64_t{i}); }
    json_writer& value(unsigned u) { return value(std::uint64_t{u}); }
    json_writer& value(long long i) { return value(std::int64_t(i)); }
    json_writer& value(unsigned long long u) { return value(std::uint64_t(u)); }
    json_writer& null();
    /// A value that is already JSON (inserted as it is, surrounding whitespace trimmed).
    json_writer& raw(std::string_view json);

    /// `key(k).value(v)`.
    template <class T>
    json_writer& field(std::string_view k, const T& v) {
        return key(k).value(v);
    }

    const std::string& str() const noexcept { return out_; }
    std::string take() noexcept { return std::move(out_); }

private:
    void before_value();

    std::string out_;
    std::vector<bool> has_member_;  // one per open container
    bool after_key_ = false;
};

/// Appends `s` as a JSON string literal (quotes included) to `out`.
void append_json_string(std::string& out, std::string_view s);

}  // namespace embedding_search
