// async_read_npy / async_write_npy end to end. tests/meson.build runs this file
// twice: on the backend the process picks (io_uring where available) and with
// TENFERRO_IO_URING=0 (the pread/pwrite pool); the numpy interop cases ([numpy])
// run as their own tests, skipped (exit 77) where python3 has no numpy.
#include <tenferro/io.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "io/file_engine.hpp"
#include "io/io_testing.hpp"
#include "io/npy_format.hpp"

extern char** environ;

namespace fs = std::filesystem;
using namespace tenferro;
namespace tio = tenferro::detail::io;

namespace {

// ---------------------------------------------------------------------------
// Files and directories.
// ---------------------------------------------------------------------------

struct scratch_dir {
    fs::path path;
    scratch_dir() {
        const char* tmp = std::getenv("TMPDIR");
        std::string pattern = (fs::path(tmp && *tmp ? tmp : "/tmp") / "tenferro-io-XXXXXX").string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        path = pattern;
    }
    ~scratch_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    fs::path operator/(const std::string& name) const { return path / name; }
    /// The names in the directory, sorted.
    std::vector<std::string> entries() const {
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
};

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

// magic, version, length, the dict as given, then `data`.
std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
    return out + dict + data;
}

std::string dict_for(const std::string& descr, bool fortran, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape +
           ", }";
}

// Asio's error code for an OS error (boost::system's system category with Boost.Asio).
asio_error_code sys(int err) { return tenferro::detail::to_asio_error_code({err, std::system_category()}); }

bool is_root() { return ::geteuid() == 0; }

// ---------------------------------------------------------------------------
// Tensors.
// ---------------------------------------------------------------------------

// Element k (row-major) of the test tensors.
template <class T>
T value_at(std::int64_t k) {
    if constexpr (std::is_floating_point_v<T>)
        return static_cast<T>(k) * T(0.25) - T(7);
    else if constexpr (sizeof(T) == 8)
        return static_cast<T>(k) * 3000000019LL - 5;
    else
        return static_cast<T>(k * 3 - 1000);
}

template <class F>
void for_each_index(std::span<const std::int64_t> shape, F f) {
    std::int64_t count = 1;
    for (auto e : shape) count *= e;
    std::vector<std::int64_t> idx(shape.size(), 0);
    for (std::int64_t k = 0; k < count; ++k) {
        f(std::span<const std::int64_t>(idx), k);
        for (std::size_t d = shape.size(); d-- > 0;) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

const unsigned char* element(const_tensor_view v, std::span<const std::int64_t> idx) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * v.strides()[d];
    return static_cast<const unsigned char*>(v.data()) + off * static_cast<std::int64_t>(v.itemsize());
}

// A row-major tensor of `shape` whose element k is value_at(k).
tensor make_tensor(dtype t, std::span<const std::int64_t> shape) {
    tensor x = tensor::empty(t, shape);
    auto* p = static_cast<unsigned char*>(x.data());
    for_each_index(shape, [&](std::span<const std::int64_t>, std::int64_t k) {
        switch (t) {
        case dtype::f32:
            reinterpret_cast<float*>(p)[k] = value_at<float>(k);
            break;
        case dtype::f64:
            reinterpret_cast<double*>(p)[k] = value_at<double>(k);
            break;
        case dtype::i32:
            reinterpret_cast<std::int32_t*>(p)[k] = value_at<std::int32_t>(k);
            break;
        case dtype::i64:
            reinterpret_cast<std::int64_t*>(p)[k] = value_at<std::int64_t>(k);
            break;
        }
    });
    return x;
}

// The number of elements that differ (bytewise) between two views of one shape.
std::int64_t mismatches(const_tensor_view a, const_tensor_view b) {
    REQUIRE(a.type() == b.type());
    REQUIRE(std::vector<std::int64_t>(a.shape().begin(), a.shape().end()) ==
            std::vector<std::int64_t>(b.shape().begin(), b.shape().end()));
    std::int64_t bad = 0;
    for_each_index(a.shape(), [&](std::span<const std::int64_t> idx, std::int64_t) {
        if (std::memcmp(element(a, idx), element(b, idx), a.itemsize()) != 0) ++bad;
    });
    return bad;
}

// A tensor holding `x`'s elements in reversed axis order: its transposed view is
// an F-contiguous view equal to `x`.
tensor reversed_copy(const tensor& x) {
    std::vector<std::int64_t> rshape(x.shape().rbegin(), x.shape().rend());
    tensor r = tensor::empty(x.type(), rshape);
    const_tensor_view rt = std::as_const(r).transposed();
    for_each_index(x.shape(), [&](std::span<const std::int64_t> idx, std::int64_t) {
        std::memcpy(const_cast<unsigned char*>(element(rt, idx)), element(x.view(), idx), x.itemsize());
    });
    return r;
}

// The bytes of `x` (row-major) with each element's bytes reversed.
std::string big_endian_bytes(const tensor& x) {
    std::string out(static_cast<const char*>(x.data()), x.nbytes());
    for (std::size_t i = 0; i < out.size(); i += x.itemsize())
        std::reverse(out.begin() + i, out.begin() + i + x.itemsize());
    return out;
}

std::string raw_bytes(const tensor& x) { return {static_cast<const char*>(x.data()), x.nbytes()}; }

std::vector<std::int64_t> test_shape(std::size_t rank) {
    static const std::int64_t extents[] = {2, 3, 1, 4, 2, 1, 2, 3};
    return {extents, extents + rank};
}

// ---------------------------------------------------------------------------
// Running operations to completion on a private io_context.
// ---------------------------------------------------------------------------

struct read_result {
    asio_error_code ec;
    tensor t;
};

read_result read_now(const fs::path& p, const npy_read_options& options = {}) {
    asio::io_context io;
    std::optional<read_result> out;
    async_read_npy(io.get_executor(), p, options, [&](asio_error_code ec, tensor t) {
        out.emplace(read_result{ec, std::move(t)});
    });
    io.run();
    REQUIRE(out.has_value());
    return std::move(*out);
}

asio_error_code write_now(const fs::path& p, const_tensor_view v) {
    asio::io_context io;
    std::optional<asio_error_code> out;
    async_write_npy(io.get_executor(), p, v, [&](asio_error_code ec) { out = ec; });
    io.run();
    REQUIRE(out.has_value());
    return *out;
}

// Installs a test hook for the lifetime of the guard.
struct hook_guard {
    hook_guard(tio::io_test_hook hook, void* context) { tio::set_io_test_hook(hook, context); }
    ~hook_guard() { tio::set_io_test_hook(nullptr, nullptr); }
};

struct named_temp_guard {
    explicit named_temp_guard(bool on) { tio::set_io_force_named_temp(on); }
    ~named_temp_guard() { tio::set_io_force_named_temp(false); }
};

// ---------------------------------------------------------------------------
// Child processes (tests/support/npy_io_child.cpp).
// ---------------------------------------------------------------------------

struct child_process {
    pid_t pid = -1;
    int out = -1;

    std::string read_line() const {
        std::string line;
        char c;
        while (::read(out, &c, 1) == 1 && c != '\n') line += c;
        return line;
    }
    int wait() {
        int status = 0;
        ::waitpid(pid, &status, 0);
        ::close(out);
        pid = -1;
        return status;
    }
};

child_process spawn_child(const std::vector<std::string>& args) {
    const char* exe = std::getenv("TENFERRO_NPY_CHILD");
    REQUIRE(exe != nullptr);  // set by tests/meson.build
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    std::vector<std::string> storage{exe};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : storage) argv.push_back(s.data());
    argv.push_back(nullptr);
    child_process child;
    const int rc = ::posix_spawn(&child.pid, exe, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    REQUIRE(rc == 0);
    child.out = fds[0];
    return child;
}

// The outcome line of `npy_io_child --uid UID CMD PATH`.
std::string run_child_as(uid_t uid, const std::string& cmd, const fs::path& p) {
    child_process c = spawn_child({"--uid", std::to_string(uid), cmd, p.string()});
    std::string line = c.read_line();
    c.wait();
    return line;
}

}  // namespace

// ---------------------------------------------------------------------------

TEST_CASE("io: the backend is io_uring where the kernel allows it, the pool under TENFERRO_IO_URING=0") {
    const char* env = std::getenv("TENFERRO_IO_URING");
    const io_backend b = active_io_backend();
    INFO("backend: " << to_string(b));
    if (env != nullptr && std::string_view(env) == "0") {
        CHECK(b == io_backend::thread_pool);
    } else {
        CHECK(b == (tio::uring_io_engine() != nullptr ? io_backend::io_uring : io_backend::thread_pool));
    }
    WARN("tenferro I/O backend in this run: " << to_string(b));
}

TEST_CASE("io: round trips for every dtype, rank 0..8 and layout (C, Fortran, strided)") {
    scratch_dir dir;
    int files = 0;
    for (dtype t : {dtype::f32, dtype::f64, dtype::i32, dtype::i64}) {
        for (std::size_t rank = 0; rank <= max_rank; ++rank) {
            const auto shape = test_shape(rank);
            const tensor c = make_tensor(t, shape);
            INFO("dtype " << to_string(t) << " shape " << to_string(std::span<const std::int64_t>(shape)));

            // C order.
            const fs::path pc = dir / "c.npy";
            REQUIRE(write_now(pc, c) == asio_error_code{});
            const std::string bytes = slurp(pc);
            const auto info = detail::npy::parse_header(
                {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, bytes.size(), {});
            REQUIRE(info.has_value());
            CHECK_FALSE(info->fortran_order);
            CHECK(bytes.substr(info->data_offset) == raw_bytes(c));
            auto r = read_now(pc);
            REQUIRE(r.ec == asio_error_code{});
            CHECK(mismatches(r.t, c) == 0);
            ++files;

            // Fortran order: an F-contiguous view is written as is.
            const tensor rev = reversed_copy(c);
            const_tensor_view f = rev.transposed();
            REQUIRE(mismatches(f, c) == 0);
            const fs::path pf = dir / "f.npy";
            REQUIRE(write_now(pf, f) == asio_error_code{});
            const std::string fbytes = slurp(pf);
            const auto finfo = detail::npy::parse_header(
                {reinterpret_cast<const std::uint8_t*>(fbytes.data()), fbytes.size()}, fbytes.size(), {});
            REQUIRE(finfo.has_value());
            CHECK(finfo->fortran_order == (rank >= 2));
            r = read_now(pf);
            REQUIRE(r.ec == asio_error_code{});
            CHECK(r.t.is_contiguous());
            CHECK(mismatches(r.t, c) == 0);
            ++files;

            // Any other strided view is gathered.
            if (rank >= 1) {
                std::vector<std::int64_t> wide = shape;
                wide.back() *= 2;
                const tensor w = make_tensor(t, wide);
                const const_tensor_view s = w.slice(-1, 0, wide.back(), 2);
                const fs::path ps = dir / "s.npy";
                REQUIRE(write_now(ps, s) == asio_error_code{});
                r = read_now(ps);
                REQUIRE(r.ec == asio_error_code{});
                CHECK(mismatches(r.t, s) == 0);
                ++files;
            }
        }
    }
    CHECK(files == 4 * (9 + 9 + 8));
    CHECK(dir.entries() == std::vector<std::string>{"c.npy", "f.npy", "s.npy"});
}

TEST_CASE("io: big-endian data is byte-swapped, Fortran files are transposed, versions 2.0 and 3.0 read") {
    scratch_dir dir;
    for (dtype t : {dtype::f32, dtype::f64, dtype::i32, dtype::i64}) {
        const std::string code =
            std::string(t == dtype::f32 || t == dtype::f64 ? "f" : "i") + std::to_string(size_of(t));
        for (std::size_t rank : {0u, 1u, 2u, 3u, 8u}) {
            const auto shape = test_shape(rank);
            const tensor c = make_tensor(t, shape);
            std::string shape_text = "(";
            for (auto e : shape) shape_text += std::to_string(e) + ",";
            shape_text += ")";
            const tensor rev = reversed_copy(c);  // its bytes are c's in Fortran order
            struct variant {
                std::string descr;
                bool fortran;
                std::string data;
                int major;
            } variants[] = {
                {">" + code, false, big_endian_bytes(c), 1},
                {">" + code, true, big_endian_bytes(rev), 2},
                {"<" + code, true, raw_bytes(rev), 3},
                {"<" + code, false, raw_bytes(c), 3},
            };
            for (const auto& v : variants) {
                INFO(v.descr << " fortran " << v.fortran << " rank " << rank << " version " << v.major);
                const fs::path p = dir / "x.npy";
                spit(p, npy_file(dict_for(v.descr, v.fortran, shape_text), v.data, v.major));
                const auto r = read_now(p);
                REQUIRE(r.ec == asio_error_code{});
                CHECK(mismatches(r.t, c) == 0);
            }
        }
    }
}

TEST_CASE("io: multi-chunk reads and writes (big-endian, Fortran, odd sizes)") {
    scratch_dir dir;
    // 5.2 MB of big-endian f32: three chunks, the last one short.
    const std::int64_t n = 1300007;
    const tensor x = make_tensor(dtype::f32, std::vector<std::int64_t>{n});
    const fs::path pb = dir / "big_be.npy";
    spit(pb, npy_file(dict_for(">f4", false, "(" + std::to_string(n) + ",)"), big_endian_bytes(x)));
    auto r = read_now(pb);
    REQUIRE(r.ec == asio_error_code{});
    CHECK(mismatches(r.t, x) == 0);

    // A 1000 x 701 f64 matrix (5.6 MB) written from its transposed storage (Fortran order).
    const std::vector<std::int64_t> shape{1000, 701};
    const tensor m = make_tensor(dtype::f64, shape);
    const tensor mr = reversed_copy(m);
    const fs::path pf = dir / "big_f.npy";
    REQUIRE(write_now(pf, mr.transposed()) == asio_error_code{});
    r = read_now(pf);
    REQUIRE(r.ec == asio_error_code{});
    CHECK(mismatches(r.t, m) == 0);
}

TEST_CASE("io: every npy_errc from a crafted file") {
    scratch_dir dir;
    const std::string good_dict = dict_for("<f4", false, "(2, 3)");
    const std::string data(24, '\0');
    struct crafted {
        const char* name;
        std::string bytes;
        npy_errc expected;
        npy_read_options options;
    } cases[] = {
        {"bad_magic", "\x93NUMPX\x01\x00" + data, npy_errc::bad_magic, {}},
        {"unsupported_version", npy_file(good_dict, data, 4), npy_errc::unsupported_version, {}},
        {"truncated_header", npy_file(good_dict, "").substr(0, 30), npy_errc::truncated_header, {}},
        {"header_too_large", npy_file(good_dict, data), npy_errc::header_too_large, {.max_header_bytes = 40}},
        {"malformed_header", npy_file("{'descr': '<f4', 'shape': (2, 3)}", data), npy_errc::malformed_header, {}},
        {"unsupported_dtype", npy_file(dict_for("<c8", false, "(2, 3)"), data), npy_errc::unsupported_dtype, {}},
        {"unsupported_rank",
         npy_file(dict_for("<f4", false, "(1,1,1,1,1,1,1,1,1)"), std::string(4, '\0')),
         npy_errc::unsupported_rank,
         {}},
        {"shape_overflow",
         npy_file(dict_for("<f8", false, "(3037000500, 3037000500)"), ""),
         npy_errc::shape_overflow,
         {}},
        {"shape_overflow (cap)", npy_file(good_dict, data), npy_errc::shape_overflow, {.max_data_bytes = 16}},
        {"truncated_data", npy_file(good_dict, data.substr(1)), npy_errc::truncated_data, {}},
        {"trailing_data", npy_file(good_dict, data + "x"), npy_errc::trailing_data, {}},
    };
    for (const auto& c : cases) {
        INFO(c.name);
        const fs::path p = dir / "crafted.npy";
        spit(p, c.bytes);
        const auto r = read_now(p, c.options);
        CHECK(r.ec == c.expected);
        CHECK(std::error_code(r.ec).category() == npy_category());  // (a Boost code carries the std one)
        CHECK(r.t.data() == nullptr);  // nothing handed out on error
    }
    // not_a_regular_file: a FIFO (opening it must not block either).
    const fs::path fifo = dir / "fifo.npy";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(read_now(fifo).ec == npy_errc::not_a_regular_file);
    // Every code has its own message.
    for (int v = 1; v <= static_cast<int>(npy_errc::not_a_regular_file); ++v)
        CHECK(make_error_code(static_cast<npy_errc>(v)).message().find("unknown") == std::string::npos);
    CHECK(std::string(npy_category().name()) == "tenferro.npy");
}

TEST_CASE("io: a file cut at every byte offset of its header (and into its data) fails cleanly") {
    scratch_dir dir;
    const tensor x = make_tensor(dtype::i64, std::vector<std::int64_t>{3, 2});
    const fs::path whole = dir / "whole.npy";
    REQUIRE(write_now(whole, x) == asio_error_code{});
    const std::string bytes = slurp(whole);
    const std::size_t header = bytes.size() - x.nbytes();
    REQUIRE(header == 128);
    const fs::path p = dir / "cut.npy";
    for (std::size_t k = 0; k < bytes.size(); ++k) {
        INFO("cut at " << k);
        spit(p, bytes.substr(0, k));
        const auto r = read_now(p);
        CHECK(r.ec == (k < header ? npy_errc::truncated_header : npy_errc::truncated_data));
    }
    spit(p, bytes);
    CHECK(read_now(p).ec == asio_error_code{});
}

TEST_CASE("io: a 2 GiB+ sparse file whose header claims more (or less) than it holds") {
    scratch_dir dir;
    const fs::path p = dir / "sparse.npy";
    const std::uint64_t two_gib = std::uint64_t{1} << 31;
    auto make_sparse = [&](const std::string& shape, std::uint64_t data_bytes) {
        std::string bytes = npy_file(dict_for("<f8", false, shape), "");
        spit(p, bytes);
        REQUIRE(::truncate(p.c_str(), static_cast<off_t>(bytes.size() + data_bytes)) == 0);
    };
    // Claims 4 TiB, holds 2 GiB + 4 KiB: refused from the sizes, nothing allocated.
    make_sparse("(549755813888,)", two_gib + 4096);
    CHECK(read_now(p).ec == npy_errc::truncated_data);
    // Claims one element more than the 2 GiB it holds.
    make_sparse("(268435457,)", two_gib);
    CHECK(read_now(p).ec == npy_errc::truncated_data);
    // Claims one element less.
    make_sparse("(268435455,)", two_gib);
    CHECK(read_now(p).ec == npy_errc::trailing_data);
    // A cap below the claim is reported before the size mismatch.
    make_sparse("(549755813888,)", two_gib);
    CHECK(read_now(p, {.max_data_bytes = two_gib}).ec == npy_errc::shape_overflow);
}

TEST_CASE("io: missing files, directories, paths through files, permissions") {
    scratch_dir dir;
    const tensor x = make_tensor(dtype::f32, std::vector<std::int64_t>{4});
    const fs::path file = dir / "file.npy";
    REQUIRE(write_now(file, x) == asio_error_code{});

    CHECK(read_now(dir / "missing.npy").ec == sys(ENOENT));
    CHECK(read_now(file / "below.npy").ec == sys(ENOTDIR));
    CHECK(read_now(dir.path).ec == sys(EISDIR));
    CHECK(read_now("").ec == sys(ENOENT));

    CHECK(write_now(dir / "no_such_dir" / "x.npy", x) == sys(ENOENT));
    CHECK(write_now(file / "below.npy", x) == sys(ENOTDIR));
    CHECK(write_now(dir.path.string() + "/", x) == sys(EISDIR));
    fs::create_directory(dir / "a_dir");
    CHECK(write_now(dir / "a_dir", x) == sys(EISDIR));  // rename(2) will not replace a directory
    CHECK(dir.entries() == std::vector<std::string>{"a_dir", "file.npy"});
    CHECK(fs::is_empty(dir / "a_dir"));

    // Permission denied: root bypasses mode bits, so as root the check runs in a
    // child process that first drops to uid 65534 (nobody).
    const fs::path locked_dir = dir / "locked";
    fs::create_directory(locked_dir);
    const fs::path secret = locked_dir / "secret.npy";
    REQUIRE(write_now(secret, x) == asio_error_code{});
    REQUIRE(::chmod(secret.c_str(), 0600) == 0);
    REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);
    REQUIRE(::chmod(locked_dir.c_str(), 0755) == 0);
    const std::string eacces = "error " + std::to_string(EACCES) + " system";
    if (is_root()) {
        CHECK(run_child_as(65534, "read", secret) == eacces);
        CHECK(run_child_as(65534, "write", locked_dir / "new.npy") == eacces);
        CHECK(run_child_as(65534, "write", secret) == eacces);
        // The sanity check of the helper itself: nobody can read a world-readable file.
        REQUIRE(::chmod(secret.c_str(), 0644) == 0);
        CHECK(run_child_as(65534, "read", secret) == "ok");
    } else {
        REQUIRE(::chmod(secret.c_str(), 0000) == 0);
        CHECK(read_now(secret).ec == sys(EACCES));
        REQUIRE(::chmod(locked_dir.c_str(), 0555) == 0);
        CHECK(write_now(locked_dir / "new.npy", x) == sys(EACCES));
        REQUIRE(::chmod(locked_dir.c_str(), 0755) == 0);
    }
    const auto again = read_now(secret);  // the destination of the refused write is intact
    REQUIRE(again.ec == asio_error_code{});
    CHECK(mismatches(again.t, x) == 0);
    CHECK(fs::directory_iterator(locked_dir) != fs::directory_iterator());
    CHECK(std::distance(fs::directory_iterator(locked_dir), fs::directory_iterator()) == 1);
}

TEST_CASE("io: use_awaitable returns the tensor and throws system_error naming the path") {
    scratch_dir dir;
    const tensor x = make_tensor(dtype::i32, std::vector<std::int64_t>{2, 2});
    const fs::path p = dir / "a.npy", missing = dir / "missing.npy";
    asio::io_context io;
    std::int64_t bad = -1;
    std::string what;
    asio_error_code code;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            co_await async_write_npy(ex, p, x);
            tensor t = co_await async_read_npy(ex, p);
            bad = mismatches(t, x);
            try {
                co_await async_read_npy(ex, missing);
            } catch (const tenferro::asio_system_error& e) {
                what = e.what();
                code = e.code();
            }
        },
        asio::detached);
    io.run();
    CHECK(bad == 0);
    CHECK(code == sys(ENOENT));
    CHECK(what.find("async_read_npy") != std::string::npos);
    CHECK(what.find(missing.string()) != std::string::npos);

    // A failed write through use_awaitable, and as_tuple (no exception).
    asio_error_code tuple_ec;
    std::string write_what;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            auto ex = co_await asio::this_coro::executor;
            auto [ec, t] = co_await async_read_npy(ex, missing, tenferro::test::as_tuple(asio::use_awaitable));
            tuple_ec = ec;
            try {
                co_await async_write_npy(ex, dir / "nope" / "x.npy", x);
            } catch (const tenferro::asio_system_error& e) {
                write_what = e.what();
            }
        },
        asio::detached);
    io.restart();
    io.run();
    CHECK(tuple_ec == sys(ENOENT));
    CHECK(write_what.find("async_write_npy") != std::string::npos);
    CHECK(write_what.find("nope") != std::string::npos);
}

TEST_CASE("io: use_future, and the handler runs on its associated executor, never inline") {
    scratch_dir dir;
    const tensor x = make_tensor(dtype::f64, std::vector<std::int64_t>{3});
    const fs::path p = dir / "a.npy";
    {
        asio::io_context io;
        auto guard = asio::make_work_guard(io);
        std::thread runner([&] { io.run(); });
        std::future<void> w = async_write_npy(io.get_executor(), p, x, asio::use_future);
        w.get();
        std::future<tensor> r = async_read_npy(io.get_executor(), p, asio::use_future);
        const tensor t = r.get();
        std::future<tensor> missing = async_read_npy(io.get_executor(), dir / "missing.npy", asio::use_future);
        asio_error_code ec;
        try {
            missing.get();
        } catch (const tenferro::asio_system_error& e) {
            ec = e.code();
        }
        guard.reset();
        runner.join();
        CHECK(mismatches(t, x) == 0);
        CHECK(ec == sys(ENOENT));
    }
    {
        asio::io_context io;
        auto strand = asio::make_strand(io);
        bool initiated = false, inline_call = false, on_strand = false, on_io_thread = false;
        const auto test_thread = std::this_thread::get_id();
        async_read_npy(io.get_executor(), p, asio::bind_executor(strand, [&](asio_error_code, tensor) {
                           inline_call = !initiated;
                           on_strand = strand.running_in_this_thread();
                           on_io_thread = std::this_thread::get_id() == test_thread;
                       }));
        initiated = true;
        io.run();
        CHECK_FALSE(inline_call);
        CHECK(on_strand);
        CHECK(on_io_thread);
    }
    {
        // An error found before any I/O (no file name) is delivered by post as well.
        asio::io_context io;
        bool initiated = false, inline_call = true;
        async_write_npy(io.get_executor(), "", x, [&](asio_error_code ec) {
            inline_call = !initiated;
            CHECK(ec == sys(ENOENT));
        });
        initiated = true;
        io.run();
        CHECK_FALSE(inline_call);
    }
}

TEST_CASE("io: many operations at once") {
    scratch_dir dir;
    constexpr int n = 24;
    std::vector<tensor> xs;
    for (int i = 0; i < n; ++i)
        xs.push_back(make_tensor(i % 2 ? dtype::f32 : dtype::i64, std::vector<std::int64_t>{i * 1000 + 7, 3}));
    asio::io_context io;
    std::vector<asio_error_code> wrote(n, sys(EINVAL));
    for (int i = 0; i < n; ++i)
        async_write_npy(io.get_executor(), dir / (std::to_string(i) + ".npy"), xs[i],
                        [&, i](asio_error_code ec) { wrote[i] = ec; });
    io.run();
    std::vector<std::optional<read_result>> read(n);
    for (int i = 0; i < n; ++i)
        async_read_npy(io.get_executor(), dir / (std::to_string(i) + ".npy"), [&, i](asio_error_code ec, tensor t) {
            read[i].emplace(read_result{ec, std::move(t)});
        });
    io.restart();
    io.run();
    for (int i = 0; i < n; ++i) {
        INFO(i);
        CHECK(wrote[i] == asio_error_code{});
        REQUIRE(read[i].has_value());
        CHECK(read[i]->ec == asio_error_code{});
        CHECK(mismatches(read[i]->t, xs[i]) == 0);
    }
}

namespace {

// Emits a cancellation (on the io_context's thread, where the slot lives) when
// `event` happens for the first time, and holds that engine thread until it has.
struct cancel_on_event {
    asio::io_context* io;
    asio::cancellation_signal* signal;
    tio::io_event event;
    std::atomic<int> seen{0};
    std::promise<void> emitted{};

    static int hook(tio::io_event e, void* context) {
        auto* self = static_cast<cancel_on_event*>(context);
        if (e != self->event || self->seen.fetch_add(1) != 0) return 0;
        asio::post(*self->io, [self] {
            self->signal->emit(asio::cancellation_type::terminal);
            self->emitted.set_value();
        });
        self->emitted.get_future().wait();
        return 0;
    }
};

// Fails the `nth` occurrence of `event` with `err`.
struct fail_on_event {
    tio::io_event event;
    int nth;
    int err;
    std::atomic<int> seen{0};

    static int hook(tio::io_event e, void* context) {
        auto* self = static_cast<fail_on_event*>(context);
        if (e != self->event) return 0;
        return self->seen.fetch_add(1) == self->nth ? self->err : 0;
    }
};

}  // namespace

TEST_CASE("io: cancelling a read in the middle of its data") {
    scratch_dir dir;
    const tensor x = make_tensor(dtype::f32, std::vector<std::int64_t>{12 << 20});  // 48 MiB: 24 chunks
    const fs::path p = dir / "big.npy";
    REQUIRE(write_now(p, x) == asio_error_code{});

    asio::io_context io;
    asio::cancellation_signal signal;
    cancel_on_event cancel{&io, &signal, tio::io_event::read_chunk_done};
    hook_guard hook(&cancel_on_event::hook, &cancel);
    std::optional<read_result> out;
    async_read_npy(io.get_executor(), p, asio::bind_cancellation_slot(signal.slot(), [&](asio_error_code ec, tensor t) {
                       out.emplace(read_result{ec, std::move(t)});
                   }));
    io.run();
    REQUIRE(out.has_value());
    CHECK(out->ec == asio::error::operation_aborted);
    CHECK(out->t.data() == nullptr);
    CHECK(cancel.seen.load() >= 1);
    CHECK(cancel.seen.load() < 24);  // stopped early
}

TEST_CASE("io: cancelling a write in the middle leaves the old file and no temporary") {
    for (bool named : {false, true}) {
        INFO((named ? "named temporary" : "O_TMPFILE where available"));
        named_temp_guard temp_mode(named);
        scratch_dir dir;
        const fs::path p = dir / "dest.npy";
        const tensor old = make_tensor(dtype::i32, std::vector<std::int64_t>{5});
        REQUIRE(write_now(p, old) == asio_error_code{});
        const std::string old_bytes = slurp(p);
        const tensor x = make_tensor(dtype::f64, std::vector<std::int64_t>{3 << 20});  // 24 MiB: 13 chunks

        asio::io_context io;
        asio::cancellation_signal signal;
        cancel_on_event cancel{&io, &signal, tio::io_event::write_chunk_done};
        hook_guard hook(&cancel_on_event::hook, &cancel);
        std::optional<asio_error_code> out;
        async_write_npy(io.get_executor(), p, x,
                        asio::bind_cancellation_slot(signal.slot(), [&](asio_error_code ec) { out = ec; }));
        io.run();
        REQUIRE(out.has_value());
        CHECK(*out == asio::error::operation_aborted);
        CHECK(slurp(p) == old_bytes);
        CHECK(dir.entries() == std::vector<std::string>{"dest.npy"});
    }
}

TEST_CASE("io: a cancellation emitted right after initiation: aborted or complete, never half") {
    scratch_dir dir;
    const fs::path p = dir / "dest.npy";
    const tensor old = make_tensor(dtype::i32, std::vector<std::int64_t>{5});
    REQUIRE(write_now(p, old) == asio_error_code{});
    const std::string old_bytes = slurp(p);
    const tensor x = make_tensor(dtype::i64, std::vector<std::int64_t>{1 << 20});
    int aborted = 0;
    for (int round = 0; round < 10; ++round) {
        asio::io_context io;
        asio::cancellation_signal signal;
        std::optional<asio_error_code> out;
        async_write_npy(io.get_executor(), p, x,
                        asio::bind_cancellation_slot(signal.slot(), [&](asio_error_code ec) { out = ec; }));
        signal.emit(asio::cancellation_type::total);
        io.run();
        REQUIRE(out.has_value());
        if (*out == asio::error::operation_aborted) {
            ++aborted;
            CHECK(slurp(p) == old_bytes);
        } else {
            REQUIRE(*out == asio_error_code{});
            const auto r = read_now(p);
            REQUIRE(r.ec == asio_error_code{});
            CHECK(mismatches(r.t, x) == 0);
            REQUIRE(write_now(p, old) == asio_error_code{});
        }
        CHECK(dir.entries() == std::vector<std::string>{"dest.npy"});

        std::optional<read_result> rout;
        async_read_npy(io.get_executor(), p,
                       asio::bind_cancellation_slot(signal.slot(), [&](asio_error_code ec, tensor t) {
                           rout.emplace(read_result{ec, std::move(t)});
                       }));
        signal.emit(asio::cancellation_type::partial);
        io.restart();
        io.run();
        REQUIRE(rout.has_value());
        CHECK((rout->ec == asio::error::operation_aborted || rout->ec == asio_error_code{}));
        CHECK((rout->ec ? rout->t.data() == nullptr : rout->t.size() > 0));
    }
    WARN(aborted << " of 10 writes cancelled right after initiation were aborted");
}

TEST_CASE("io: an injected failure at every step of a write leaves the old file and no temporary") {
    struct step {
        tio::io_event event;
        int nth;
        const char* name;
    } steps[] = {
        {tio::io_event::write_chunk_done, 0, "first chunk"}, {tio::io_event::write_chunk_done, 3, "fourth chunk"},
        {tio::io_event::before_fsync, 0, "fsync"},           {tio::io_event::before_link, 0, "link"},
        {tio::io_event::before_rename, 0, "rename"},
    };
    const tensor x = make_tensor(dtype::f32, std::vector<std::int64_t>{3 << 20});  // 12 MiB
    for (bool named : {false, true}) {
        named_temp_guard temp_mode(named);
        for (const auto& s : steps) {
            INFO(s.name << (named ? ", named temporary" : ", O_TMPFILE where available"));
            scratch_dir dir;
            const fs::path p = dir / "dest.npy";
            const tensor old = make_tensor(dtype::i64, std::vector<std::int64_t>{7});
            REQUIRE(write_now(p, old) == asio_error_code{});
            const std::string old_bytes = slurp(p);
            fail_on_event fail{s.event, s.nth, EIO};
            asio_error_code ec;
            {
                hook_guard hook(&fail_on_event::hook, &fail);
                ec = write_now(p, x);
            }
            const bool reached = fail.seen.load() > s.nth;
            if (reached) {
                CHECK(ec == sys(EIO));
                CHECK(slurp(p) == old_bytes);
            } else {
                // Only the link step can be skipped: named temporaries (or no O_TMPFILE).
                CHECK(s.event == tio::io_event::before_link);
                CHECK(ec == asio_error_code{});
            }
            CHECK(dir.entries() == std::vector<std::string>{"dest.npy"});
        }
    }
    // And a read failing in its data hands out nothing.
    scratch_dir dir;
    REQUIRE(write_now(dir / "x.npy", x) == asio_error_code{});
    fail_on_event fail{tio::io_event::read_chunk_done, 2, EIO};
    hook_guard hook(&fail_on_event::hook, &fail);
    const auto r = read_now(dir / "x.npy");
    CHECK(r.ec == sys(EIO));
    CHECK(r.t.data() == nullptr);
}

TEST_CASE("io: a writer killed with SIGKILL mid-write leaves the old file intact (crash consistency)") {
    scratch_dir dir;
    const fs::path p = dir / "dest.npy";
    const tensor old = make_tensor(dtype::i32, std::vector<std::int64_t>{5});
    REQUIRE(write_now(p, old) == asio_error_code{});
    const std::string old_bytes = slurp(p);
    // Can this directory hold O_TMPFILE inodes? Then a killed writer leaves nothing behind.
    const int probe = ::open(dir.path.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    const bool tmpfile = probe >= 0;
    if (probe >= 0) ::close(probe);

    constexpr int mib = 64;
    int killed_mid_write = 0;
    for (int delay_ms : {0, 2, 10, 40, 150}) {
        INFO("kill " << delay_ms << " ms after the write began");
        child_process child = spawn_child({"write-loop", p.string(), std::to_string(mib)});
        REQUIRE(child.read_line() == "writing 0");
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        ::kill(child.pid, SIGKILL);
        const std::string next = child.read_line();  // "wrote 0" if the first write finished in time
        const int status = child.wait();
        CHECK(WIFSIGNALED(status));
        const std::string now = slurp(p);
        // No "wrote 0": the kill landed before the child reported the write, which is usually mid-write
        // (old file) but may be after the rename (a fast disk writes 64 MiB within the longest delay):
        // then the file is the new one. Either way it is one whole file, old or new, never a mix.
        if (next.empty() && now == old_bytes) ++killed_mid_write;
        if (now != old_bytes) {
            // Then it must be one complete new file.
            const auto r = read_now(p);
            REQUIRE(r.ec == asio_error_code{});
            REQUIRE(r.t.size() == std::int64_t{mib} * (1 << 20) / 4);
            const auto* v = r.t.data<std::int32_t>();
            std::int64_t bad = 0;
            for (std::int64_t k = 0; k < r.t.size(); ++k) bad += v[k] != static_cast<std::int32_t>(k);
            CHECK(bad == 0);
        }
        auto names = dir.entries();
        if (!tmpfile) {
            // Named temporaries of killed writers stay behind; that is all that may.
            std::erase_if(names, [](const std::string& n) { return n.rfind(".dest.npy.tenferro-", 0) == 0; });
        }
        CHECK(names == std::vector<std::string>{"dest.npy"});
        REQUIRE(write_now(p, old) == asio_error_code{});
    }
    CHECK(killed_mid_write >= 1);
    if (!tmpfile) WARN("no O_TMPFILE in " << dir.path << ": killed writers leave named temporaries");
}

// ---------------------------------------------------------------------------
// numpy interop ([numpy]: its own meson tests, skipped without numpy).
// ---------------------------------------------------------------------------

namespace {

std::string python_with_numpy() {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("TENFERRO_PYTHON")) candidates.emplace_back(env);
    candidates.emplace_back("/usr/bin/python3");
    candidates.emplace_back("python3");
    for (const auto& py : candidates)
        if (std::system(("'" + py + "' -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return py;
    return {};
}

std::string require_numpy() {
    std::string py = python_with_numpy();
    if (py.empty()) {
        std::fprintf(stderr, "SKIP: no python3 with numpy (install python3-numpy or set TENFERRO_PYTHON)\n");
        std::exit(77);  // meson: skipped
    }
    return py;
}

int run_python(const std::string& py, const fs::path& script, const fs::path& dir, std::string& output) {
    const fs::path log = dir / "python.log";
    const int rc = std::system(
        ("'" + py + "' '" + script.string() + "' '" + dir.string() + "' >'" + log.string() + "' 2>&1").c_str());
    output = slurp(log);
    fs::remove(log);
    return rc;
}

const char* dtype_code(dtype t) {
    switch (t) {
    case dtype::f32:
        return "f4";
    case dtype::f64:
        return "f8";
    case dtype::i32:
        return "i4";
    case dtype::i64:
        return "i8";
    }
    return "?";
}

// The same element formula as value_at, in numpy.
constexpr const char* numpy_prelude = R"(
import sys, os, io
import numpy as np
d = sys.argv[1]
extents = [2, 3, 1, 4, 2, 1, 2, 3]
def values(code, n):
    k = np.arange(n, dtype=np.int64)
    if code[0] == 'f':
        return (k.astype(code) * np.array(0.25, code) - np.array(7, code)).astype(code)
    if code == 'i8':
        return k * 3000000019 - 5
    return (k * 3 - 1000).astype(code)
)";

}  // namespace

TEST_CASE("io: files numpy writes load here", "[numpy]") {
    const std::string py = require_numpy();
    scratch_dir dir;
    const fs::path script = dir / "write.py";
    spit(script, std::string(numpy_prelude) + R"(
for code in ['f4', 'f8', 'i4', 'i8']:
    for order in '<>':
        for rank in range(9):
            shape = tuple(extents[:rank])
            n = int(np.prod(shape, dtype=np.int64))
            a = values(code, n).reshape(shape).astype(order + code)
            np.save(os.path.join(d, '%s%s_%d_C.npy' % ('le' if order == '<' else 'be', code, rank)), a)
            f = np.asfortranarray(a) if rank > 0 else a  # asfortranarray makes a 0-d array 1-d
            np.save(os.path.join(d, '%s%s_%d_F.npy' % ('le' if order == '<' else 'be', code, rank)), f)
print('wrote')
)");
    std::string output;
    REQUIRE(run_python(py, script, dir.path, output) == 0);
    INFO(output);
    int checked = 0;
    for (dtype t : {dtype::f32, dtype::f64, dtype::i32, dtype::i64}) {
        for (const char* order : {"le", "be"}) {
            for (std::size_t rank = 0; rank <= max_rank; ++rank) {
                const tensor expected = make_tensor(t, test_shape(rank));
                for (const char* layout : {"C", "F"}) {
                    const std::string name =
                        std::string(order) + dtype_code(t) + "_" + std::to_string(rank) + "_" + layout + ".npy";
                    INFO(name);
                    const auto r = read_now(dir / name);
                    REQUIRE(r.ec == asio_error_code{});
                    CHECK(mismatches(r.t, expected) == 0);
                    ++checked;
                }
            }
        }
    }
    CHECK(checked == 4 * 2 * 9 * 2);
}

TEST_CASE("io: files written here load in numpy, byte-identical to np.save for C order", "[numpy]") {
    const std::string py = require_numpy();
    scratch_dir dir;
    for (dtype t : {dtype::f32, dtype::f64, dtype::i32, dtype::i64}) {
        for (std::size_t rank = 0; rank <= max_rank; ++rank) {
            const auto shape = test_shape(rank);
            const tensor c = make_tensor(t, shape);
            const std::string stem = std::string(dtype_code(t)) + "_" + std::to_string(rank);
            REQUIRE(write_now(dir / (stem + "_C.npy"), c) == asio_error_code{});
            const tensor rev = reversed_copy(c);
            REQUIRE(write_now(dir / (stem + "_F.npy"), rev.transposed()) == asio_error_code{});
            if (rank >= 1) {
                std::vector<std::int64_t> wide = shape;
                wide.front() *= 2;
                const tensor w = make_tensor(t, wide);
                // Rows 0, 2, 4, ... of w (check.py slices the same way).
                REQUIRE(write_now(dir / (stem + "_S.npy"), w.slice(0, 0, wide.front(), 2)) == asio_error_code{});
            }
        }
    }
    const fs::path script = dir / "check.py";
    spit(script, std::string(numpy_prelude) + R"(
bad = []
count = 0
for code in ['f4', 'f8', 'i4', 'i8']:
    for rank in range(9):
        shape = tuple(extents[:rank])
        n = int(np.prod(shape, dtype=np.int64))
        expected = values(code, n).reshape(shape).astype('<' + code)
        for layout in 'CFS':
            name = os.path.join(d, '%s_%d_%s.npy' % (code, rank, layout))
            if layout == 'S':
                if rank == 0:
                    continue
                wide = (shape[0] * 2,) + shape[1:]
                m = int(np.prod(wide, dtype=np.int64))
                want = values(code, m).reshape(wide).astype('<' + code)[::2]
            else:
                want = expected
            a = np.load(name)
            count += 1
            if a.dtype != np.dtype('<' + code) or a.shape != want.shape or not np.array_equal(a, want):
                bad.append(name + ' values')
            if layout == 'F' and rank >= 2 and not (a.flags.f_contiguous and not a.flags.c_contiguous):
                bad.append(name + ' not fortran')
            if layout == 'C':
                buf = io.BytesIO()
                np.save(buf, want)
                if buf.getvalue() != open(name, 'rb').read():
                    bad.append(name + ' bytes differ from np.save')
print('checked', count)
for b in bad:
    print('BAD', b)
sys.exit(1 if bad else 0)
)");
    std::string output;
    const int rc = run_python(py, script, dir.path, output);
    INFO(output);
    CHECK(rc == 0);
    CHECK(output.find("checked " + std::to_string(4 * (9 * 2 + 8))) != std::string::npos);
}
