// libFuzzer target for the .npy header parser (src/io/npy_format.cpp): the input
// is a whole file. Beyond "no crash, no sanitizer report", it checks properties
// that must hold for every input:
//   - header_size and parse_header agree (same data offset, or the same error);
//   - an accepted header describes exactly the bytes the file holds, within the
//     limits, with at most max_rank axes;
//   - format_header of what was parsed parses back to the same array description;
//   - any strict prefix of an accepted file (as a file of its own) is rejected as
//     truncated, never accepted and never misread.
// Built with -Dfuzz=enabled by clang (tests/fuzz/meson.build); `./dev test` runs it
// for a bounded time on the seed corpus in tests/fuzz/corpus/npy_header/.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "io/npy_format.hpp"

namespace npy = tenferro::detail::npy;
using tenferro::npy_errc;

namespace {

[[noreturn]] void violated(const char* what) {
    std::fprintf(stderr, "npy_header_fuzz: property violated: %s\n", what);
    std::abort();
}

#define PROPERTY(cond)                \
    do {                              \
        if (!(cond)) violated(#cond); \
    } while (0)

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::uint8_t> bytes(data, size);
    npy::limits lim;
    lim.max_header_bytes = 1 << 16;
    // The last byte (data, when the file is valid) also picks a data cap and a cut.
    const unsigned last = size > 0 ? data[size - 1] : 0;
    lim.max_data_bytes = last == 0xff ? 64 : UINT64_MAX;

    const auto header = npy::header_size(bytes, size, lim);
    const auto info = npy::parse_header(bytes, size, lim);

    if (!header) {
        PROPERTY(!info && info.error() == header.error());
        return 0;
    }
    PROPERTY(*header <= size);
    if (!info) {
        PROPERTY(info.error() != npy_errc::bad_magic && info.error() != npy_errc::unsupported_version &&
                 info.error() != npy_errc::header_too_large && info.error() != npy_errc::truncated_header &&
                 info.error() != npy_errc::not_a_regular_file);
        return 0;
    }

    PROPERTY(info->data_offset == *header);
    PROPERTY(info->data_offset + info->data_bytes == size);
    PROPERTY(info->data_bytes <= lim.max_data_bytes);
    PROPERTY(info->rank <= tenferro::max_rank);
    const std::uint64_t itemsize = info->type == tenferro::dtype::f32 || info->type == tenferro::dtype::i32 ? 4 : 8;
    std::uint64_t count = 1;
    for (std::size_t i = 0; i < info->rank; ++i) {
        PROPERTY(info->shape[i] >= 0);
        count *= static_cast<std::uint64_t>(info->shape[i]);  // cannot wrap: the bytes fit the input
    }
    PROPERTY(count * itemsize == info->data_bytes);

    // Our own formatting of the parsed description parses back to it.
    const std::string again = npy::format_header(info->type, info->extents(), info->fortran_order);
    const std::span<const std::uint8_t> again_bytes(reinterpret_cast<const std::uint8_t*>(again.data()), again.size());
    const auto reparsed = npy::parse_header(again_bytes, again.size() + info->data_bytes, lim);
    PROPERTY(reparsed.has_value());
    PROPERTY(reparsed->type == info->type);
    PROPERTY(reparsed->fortran_order == info->fortran_order);
    PROPERTY(reparsed->rank == info->rank);
    for (std::size_t i = 0; i < info->rank; ++i) PROPERTY(reparsed->shape[i] == info->shape[i]);
    PROPERTY(reparsed->data_bytes == info->data_bytes);
    PROPERTY(reparsed->data_offset % 64 == 0);

    // A strict prefix of a valid file is a truncated file.
    const std::size_t cut = size > 0 ? (last * 257 + size / 2) % size : 0;
    const auto truncated = npy::parse_header(bytes.first(cut), cut, lim);
    PROPERTY(!truncated);
    PROPERTY(truncated.error() == (cut < *header ? npy_errc::truncated_header : npy_errc::truncated_data));
    return 0;
}
