// npy_errc's category.

#include "tenferro/npy_error.hpp"

#include <string>

namespace tenferro {
namespace {

class npy_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "tenferro.npy"; }

    std::string message(int value) const override {
        switch (static_cast<npy_errc>(value)) {
        case npy_errc::bad_magic:
            return "not a .npy file: the magic string \\x93NUMPY is missing";
        case npy_errc::unsupported_version:
            return ".npy format version not supported (only 1.0, 2.0 and 3.0 are)";
        case npy_errc::truncated_header:
            return ".npy file ends inside its header";
        case npy_errc::header_too_large:
            return ".npy header is longer than the configured limit";
        case npy_errc::malformed_header:
            return ".npy header is not a valid dict with exactly the keys descr, fortran_order and shape";
        case npy_errc::unsupported_dtype:
            return ".npy dtype not supported (only f4, f8, i4 and i8, in either byte order)";
        case npy_errc::unsupported_rank:
            return ".npy shape has more than 8 axes";
        case npy_errc::shape_overflow:
            return ".npy shape too large: element count x itemsize overflows or exceeds the configured limit";
        case npy_errc::truncated_data:
            return ".npy file holds fewer data bytes than its header describes";
        case npy_errc::trailing_data:
            return ".npy file holds more bytes than its header describes";
        case npy_errc::not_a_regular_file:
            return "not a regular file";
        }
        std::string unknown = "unknown tenferro.npy error ";  // (not a + b: GCC 12 -Wrestrict false positive)
        unknown += std::to_string(value);
        return unknown;
    }
};

}  // namespace

const std::error_category& npy_category() noexcept {
    static const npy_category_impl category;
    return category;
}

std::error_code make_error_code(npy_errc e) noexcept { return {static_cast<int>(e), npy_category()}; }

}  // namespace tenferro
