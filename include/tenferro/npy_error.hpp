#pragma once
/// \file
/// `npy_errc`: why a `.npy` file could not be read, as `std::error_code` values of
/// `npy_category()` (see `<tenferro/io.hpp>`).

#include <system_error>
#include <type_traits>

namespace tenferro {

/// Why a `.npy` file could not be read (value 0 is never used: it means success).
enum class npy_errc {
    bad_magic = 1,        ///< the file does not start with `"\x93NUMPY"`
    unsupported_version,  ///< a format version other than 1.0, 2.0 and 3.0
    truncated_header,     ///< the file ends inside the magic, the version, the length or the header
    header_too_large,     ///< the header is longer than `npy_read_options::max_header_bytes`
    malformed_header,     ///< the header is not the Python dict literal numpy writes
    unsupported_dtype,    ///< `descr` is not one of `<f4 <f8 <i4 <i8` or their `> = |` forms
    unsupported_rank,     ///< the shape has more than `max_rank` (8) axes
    shape_overflow,       ///< element count x itemsize overflows, or exceeds `max_data_bytes`
    truncated_data,       ///< the file holds fewer data bytes than the header describes
    trailing_data,        ///< the file holds more bytes than the header describes
    not_a_regular_file,   ///< the path names a FIFO, a device or a socket
};

/// The category of `npy_errc` (name `"tenferro.npy"`).
const std::error_category& npy_category() noexcept;

/// `std::error_code(static_cast<int>(e), npy_category())`.
std::error_code make_error_code(npy_errc e) noexcept;

}  // namespace tenferro

template <>
struct std::is_error_code_enum<tenferro::npy_errc> : std::true_type {};
