// The .npy header parser and formatter (src/io/npy_format.hpp): pure functions,
// tested on bytes built here and on bytes numpy writes (copied from numpy 1.24).
#include "io/npy_format.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using namespace tenferro;
namespace npy = tenferro::detail::npy;

namespace {

std::span<const std::uint8_t> bytes_of(const std::string& s) {
    return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// A file: magic, version, length field, the dict as given (no padding added), data.
std::string make_file(const std::string& dict, std::size_t data_bytes, int major = 1, int minor = 0) {
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += static_cast<char>(minor);
    const std::size_t n = dict.size();
    const int length_bytes = major == 1 ? 2 : 4;
    for (int i = 0; i < length_bytes; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
    out += dict;
    out.append(data_bytes, '\0');
    return out;
}

tl::expected<npy::header_info, npy_errc> parse(const std::string& file, npy::limits lim = {}) {
    return npy::parse_header(bytes_of(file), file.size(), lim);
}

npy_errc error_of(const std::string& file, npy::limits lim = {}) {
    const auto r = parse(file, lim);
    REQUIRE_FALSE(r.has_value());
    return r.error();
}

// What numpy 1.24 writes for np.save(f, np.zeros((2, 3), '<f4')): the first 128 bytes.
std::string numpy_header_2x3_f4() {
    std::string h("\x93NUMPY\x01\x00v\x00", 10);
    h += "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    h.append(128 - h.size() - 1, ' ');
    h += '\n';
    return h;
}

}  // namespace

TEST_CASE("npy: numpy's own header parses, and format_header reproduces it byte for byte") {
    const std::string h = numpy_header_2x3_f4();
    REQUIRE(h.size() == 128);
    std::string file = h;
    file.append(24, '\0');
    const auto info = parse(file);
    REQUIRE(info.has_value());
    CHECK(info->type == dtype::f32);
    CHECK_FALSE(info->swap_bytes);
    CHECK_FALSE(info->fortran_order);
    CHECK(info->rank == 2);
    CHECK(info->shape[0] == 2);
    CHECK(info->shape[1] == 3);
    CHECK(info->data_offset == 128);
    CHECK(info->data_bytes == 24);
    const std::int64_t shape[] = {2, 3};
    CHECK(npy::format_header(dtype::f32, shape, false) == h);
}

TEST_CASE("npy: format_header then parse_header round-trips every dtype, rank and order") {
    for (dtype t : {dtype::f32, dtype::f64, dtype::i32, dtype::i64}) {
        for (std::size_t rank = 0; rank <= max_rank; ++rank) {
            for (bool fortran : {false, true}) {
                std::vector<std::int64_t> shape;
                for (std::size_t i = 0; i < rank; ++i) shape.push_back(static_cast<std::int64_t>(i % 3) + 1);
                const std::string h = npy::format_header(t, shape, fortran);
                CHECK(h.size() % 64 == 0);
                CHECK(h.back() == '\n');
                std::int64_t count = 1;
                for (auto e : shape) count *= e;
                std::string file = h;
                file.append(static_cast<std::size_t>(count) * size_of(t), '\0');
                const auto info = parse(file);
                REQUIRE(info.has_value());
                CHECK(info->type == t);
                CHECK(info->fortran_order == fortran);
                CHECK(info->rank == rank);
                CHECK(std::vector<std::int64_t>(info->extents().begin(), info->extents().end()) == shape);
                CHECK(info->data_offset == h.size());
            }
        }
    }
    // Rank 1 needs the trailing comma of a one-tuple; rank 0 is ().
    const std::int64_t five[] = {5};
    CHECK(npy::format_header(dtype::i64, five, false).find("'shape': (5,), }") != std::string::npos);
    CHECK(npy::format_header(dtype::i64, {}, false).find("'shape': (), }") != std::string::npos);
}

TEST_CASE("npy: byte orders and the forms of descr") {
    struct {
        const char* descr;
        dtype type;
        bool swap;
    } cases[] = {
        {"<f4", dtype::f32, false}, {"<f8", dtype::f64, false}, {"<i4", dtype::i32, false}, {"<i8", dtype::i64, false},
        {">f4", dtype::f32, true},  {">f8", dtype::f64, true},  {">i4", dtype::i32, true},  {">i8", dtype::i64, true},
        {"=f8", dtype::f64, false}, {"|i4", dtype::i32, false},
    };
    for (const auto& c : cases) {
        const std::string dict = std::string("{'descr': '") + c.descr + "', 'fortran_order': False, 'shape': (3,), }";
        const auto info = parse(make_file(dict, 3 * size_of(c.type)));
        INFO(c.descr);
        REQUIRE(info.has_value());
        CHECK(info->type == c.type);
        CHECK(info->swap_bytes == c.swap);
    }
}

TEST_CASE("npy: what ast.literal_eval accepts for such a dict is accepted") {
    const char* dicts[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
        "{\"shape\": (2,3), \"descr\": \"<f4\", \"fortran_order\": False}",
        "{'fortran_order':False,'shape':(2,3,),'descr':'<f4'}",
        "{ 'descr' : '<f4' ,\n 'fortran_order' : False ,\t'shape' : ( 2 , 3 ) , }   \n",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",  // Python 2 numpy
    };
    for (const char* d : dicts) {
        INFO(d);
        const auto info = parse(make_file(d, 24));
        REQUIRE(info.has_value());
        CHECK(info->rank == 2);
        CHECK(info->shape[0] == 2);
        CHECK(info->shape[1] == 3);
    }
    // Versions 2.0 and 3.0: a four-byte length field.
    for (int major : {2, 3}) {
        const auto info = parse(make_file("{'descr': '<i8', 'fortran_order': True, 'shape': (4, 1), }", 32, major));
        REQUIRE(info.has_value());
        CHECK(info->major_version == major);
        CHECK(info->fortran_order);
        CHECK(info->data_offset == 12 + 58);
    }
    // Zero extents: no data at all.
    const auto empty = parse(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 7), }", 0));
    REQUIRE(empty.has_value());
    CHECK(empty->data_bytes == 0);
}

TEST_CASE("npy: every parser error code from a crafted file") {
    const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    CHECK(error_of(std::string("\x93NUMPX\x01\x00", 8)) == npy_errc::bad_magic);
    CHECK(error_of("PK\x03\x04 this is a zip file") == npy_errc::bad_magic);
    CHECK(error_of(make_file(good, 24, 4)) == npy_errc::unsupported_version);
    CHECK(error_of(make_file(good, 24, 1, 1)) == npy_errc::unsupported_version);
    CHECK(error_of(make_file(good, 24, 0)) == npy_errc::unsupported_version);
    CHECK(error_of(std::string("\x93NUMPY\x01", 7)) == npy_errc::truncated_header);
    CHECK(error_of(make_file(good, 24), {.max_data_bytes = UINT64_MAX, .max_header_bytes = 32}) ==
          npy_errc::header_too_large);
    CHECK(error_of(make_file("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 12)) ==
          npy_errc::unsupported_dtype);
    CHECK(error_of(make_file("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (2,), }", 16)) ==
          npy_errc::unsupported_dtype);
    CHECK(error_of(make_file("{'descr': '<i4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4)) ==
          npy_errc::unsupported_rank);
    CHECK(error_of(make_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0)) ==
          npy_errc::shape_overflow);
    CHECK(error_of(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 2), }", 0)) ==
          npy_errc::shape_overflow);
    CHECK(error_of(make_file(good, 24), {.max_data_bytes = 23, .max_header_bytes = 1024}) == npy_errc::shape_overflow);
    CHECK(error_of(make_file(good, 23)) == npy_errc::truncated_data);
    CHECK(error_of(make_file(good, 25)) == npy_errc::trailing_data);
    // The byte-size rule counts zero extents as one (as tensor::empty does).
    CHECK(error_of(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4611686018427387904), }", 0)) ==
          npy_errc::shape_overflow);
    // At INT64_MAX exactly the extent itself is fine; the byte size is not.
    CHECK(error_of(make_file("{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775807,), }", 0)) ==
          npy_errc::shape_overflow);
}

TEST_CASE("npy: malformed headers") {
    const char* dicts[] = {
        "",
        "{}",
        "{'descr': '<f4', 'fortran_order': False}",                                      // no shape
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}",         // extra key
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",     // repeated key
        "{'descr': '<f4', 'fortran_order': False, 'shape': (5)}",                        // an int, not a tuple
        "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}",                     // a list
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3)}",                    // negative
        "{'descr': '<f4', 'fortran_order': False, 'shape': (02, 3)}",                    // leading zero
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,, 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3x)}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}",
        "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3)}",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}",                      // quotes
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)",                      // no }
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x",                   // junk after
        "{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}",                      // no comma
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3),,}",
        "{'descr': 5, 'fortran_order': False, 'shape': (2, 3)}",
        "{'descr': [('a', '<f4'), 'fortran_order': False, 'shape': (2, 3)}",             // unbalanced
        "{'de\\x73cr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",                 // escapes
    };
    for (const char* d : dicts) {
        INFO(d);
        CHECK(error_of(make_file(d, 24)) == npy_errc::malformed_header);
    }
    const std::string nul_after = std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}") + '\0';
    CHECK(error_of(make_file(nul_after, 24)) == npy_errc::malformed_header);
}

TEST_CASE("npy: a file cut at every byte offset is truncated_header, then truncated_data") {
    const std::int64_t shape[] = {3, 5};
    const std::string header = npy::format_header(dtype::f64, shape, false);
    std::string file = header;
    for (int i = 0; i < 15; ++i) {
        const double v = i * 1.5;
        file.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    for (std::size_t k = 0; k < file.size(); ++k) {
        const std::string cut = file.substr(0, k);
        INFO("cut at " << k);
        CHECK(error_of(cut) == (k < header.size() ? npy_errc::truncated_header : npy_errc::truncated_data));
        // header_size agrees on the preamble part: it needs the whole preamble to answer.
        const auto size = npy::header_size(bytes_of(cut), k, {});
        if (k < header.size()) {
            REQUIRE_FALSE(size.has_value());
            CHECK(size.error() == npy_errc::truncated_header);
        } else {
            CHECK(size.value() == header.size());
        }
    }
    CHECK(parse(file).has_value());
    CHECK(error_of(file + 'x') == npy_errc::trailing_data);
}

TEST_CASE("npy: header_size answers from the first bytes alone") {
    std::string file = make_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1000,), }", 4000, 2);
    // Only the 12-byte preamble is at hand, the file is 4000+ bytes long.
    const auto size = npy::header_size(bytes_of(file.substr(0, 12)), file.size(), {});
    REQUIRE(size.has_value());
    CHECK(*size == file.size() - 4000);
    // A length field pointing past the end of the file.
    CHECK(npy::header_size(bytes_of(file.substr(0, 12)), 50, {}).error() == npy_errc::truncated_header);
}
