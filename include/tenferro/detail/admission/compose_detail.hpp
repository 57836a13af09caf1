#pragma once
// Error texts that never throw (S19): an admission failure is decided on
// paths that cannot throw, and its code says what happened without the text.

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace tenferro::detail {

/// One piece of an error's detail text: a string, or a number.
struct detail_piece {
    detail_piece(std::string_view s) noexcept : text(s) {}  // NOLINT(google-explicit-constructor)
    detail_piece(const char* s) noexcept : text(s) {}       // NOLINT(google-explicit-constructor)
    detail_piece(std::size_t n) noexcept;                    // NOLINT(google-explicit-constructor)
    std::string_view text;
    char digits[24] = {};
};

/// The pieces joined, or an empty string when memory runs out.
std::string compose_detail(std::initializer_list<detail_piece> pieces) noexcept;

}  // namespace tenferro::detail
