#pragma once
// The `.npy` header: parsing (pure, no I/O, fuzzed by tests/fuzz/npy_header_fuzz.cpp)
// and formatting. Layout of a file (numpy's format.py):
//
//   "\x93NUMPY" major minor   HEADER_LEN (u16 LE for 1.0, u32 LE for 2.0/3.0)   HEADER   data
//
// HEADER is a Python dict literal, e.g. "{'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }" padded with spaces and a '\n' so that the data starts at a
// multiple of 64. Parsing accepts any key order, either quote, any whitespace and an
// optional trailing comma (what `ast.literal_eval` accepts for such a dict), and
// nothing else: no other keys, no expressions, no signs or leading zeros in extents.
//
// The parser also checks the described data against the file's size, so a reader
// knows before allocating whether the file can hold what the header claims.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <tl/expected.hpp>

#include "tenferro/npy_error.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro::detail::npy {

/// The six magic bytes.
inline constexpr unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/// The bytes of the magic, the version and the 1.0 length field; enough to know the
/// full header size of any version but 2.0/3.0 (which need 12).
inline constexpr std::size_t v1_preamble = 10;
inline constexpr std::size_t v2_preamble = 12;

struct limits {
    std::uint64_t max_data_bytes = UINT64_MAX;
    std::uint64_t max_header_bytes = 64 * 1024;
};

/// What a valid header says about the file.
struct header_info {
    int major_version = 1;
    dtype type = dtype::f32;
    bool swap_bytes = false;      // the data's byte order differs from the host's
    bool fortran_order = false;   // column-major data
    std::size_t rank = 0;
    std::array<std::int64_t, max_rank> shape{};
    std::uint64_t data_offset = 0;  // preamble + header: where the data starts
    std::uint64_t data_bytes = 0;   // element count x itemsize

    std::span<const std::int64_t> extents() const noexcept { return {shape.data(), rank}; }
};

/// The size of the preamble and header together (the data offset) of a file of
/// `file_size` bytes, from its first bytes: `prefix` holds the first
/// `min(file_size, prefix.size())` bytes and at least `min(file_size, v2_preamble)`.
/// Errors: bad_magic, unsupported_version, header_too_large, truncated_header
/// (the file ends before the header does).
tl::expected<std::uint64_t, npy_errc> header_size(std::span<const std::uint8_t> prefix, std::uint64_t file_size,
                                                  const limits& lim) noexcept;

/// Parses the header of a file of `file_size` bytes; `bytes` holds at least the first
/// `header_size(...)` bytes of it (more are ignored). Every `npy_errc` but
/// not_a_regular_file can result; on success the data described fits the file exactly.
tl::expected<header_info, npy_errc> parse_header(std::span<const std::uint8_t> bytes, std::uint64_t file_size,
                                                 const limits& lim) noexcept;

/// The preamble and header numpy writes for an array of `type` and `shape`: version 1.0
/// (2.0 if the dict would not fit 1.0's 16-bit length), native byte order, padded
/// with spaces and a '\n' so that the data starts at a multiple of 64 bytes.
std::string format_header(dtype type, std::span<const std::int64_t> shape, bool fortran_order);

}  // namespace tenferro::detail::npy
