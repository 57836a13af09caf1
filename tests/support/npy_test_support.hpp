#pragma once
// What the .npy I/O tests share: scratch directories and file bytes, test
// tensors of every dtype and layout with a known element formula, operations
// run to completion on a private io_context, the engines' test hooks, and the
// helper process (tests/support/npy_io_child.cpp, TENFERRO_NPY_CHILD).

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <tenferro/io.hpp>
#include "test_asio.hpp"

#include "io/file_engine.hpp"
#include "io/io_testing.hpp"
#include "io/npy_format.hpp"

extern char** environ;

namespace fs = std::filesystem;
namespace tio = tenferro::detail::io;

namespace tenferro::test::npy_io {

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

inline std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void spit(const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

// magic, version, length, the dict as given, then `data`.
inline std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
    return out + dict + data;
}

inline std::string dict_for(const std::string& descr, bool fortran, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape +
           ", }";
}

// Asio's error code for an OS error (boost::system's system category with Boost.Asio).
inline asio_error_code sys(int err) { return tenferro::detail::to_asio_error_code({err, std::system_category()}); }

inline bool is_root() { return ::geteuid() == 0; }

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

inline const unsigned char* element(const_tensor_view v, std::span<const std::int64_t> idx) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * v.strides()[d];
    return static_cast<const unsigned char*>(v.data()) + off * static_cast<std::int64_t>(v.itemsize());
}

// A row-major tensor of `shape` whose element k is value_at(k).
inline tensor make_tensor(dtype t, std::span<const std::int64_t> shape) {
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
inline std::int64_t mismatches(const_tensor_view a, const_tensor_view b) {
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
inline tensor reversed_copy(const tensor& x) {
    std::vector<std::int64_t> rshape(x.shape().rbegin(), x.shape().rend());
    tensor r = tensor::empty(x.type(), rshape);
    const_tensor_view rt = std::as_const(r).transposed();
    for_each_index(x.shape(), [&](std::span<const std::int64_t> idx, std::int64_t) {
        std::memcpy(const_cast<unsigned char*>(element(rt, idx)), element(x.view(), idx), x.itemsize());
    });
    return r;
}

// The bytes of `x` (row-major) with each element's bytes reversed.
inline std::string big_endian_bytes(const tensor& x) {
    std::string out(static_cast<const char*>(x.data()), x.nbytes());
    for (std::size_t i = 0; i < out.size(); i += x.itemsize())
        std::reverse(out.begin() + i, out.begin() + i + x.itemsize());
    return out;
}

inline std::string raw_bytes(const tensor& x) { return {static_cast<const char*>(x.data()), x.nbytes()}; }

inline std::vector<std::int64_t> test_shape(std::size_t rank) {
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

inline read_result read_now(const fs::path& p, const npy_read_options& options = {}) {
    asio::io_context io;
    std::optional<read_result> out;
    async_read_npy(io.get_executor(), p, options, [&](asio_error_code ec, tensor t) {
        out.emplace(read_result{ec, std::move(t)});
    });
    io.run();
    REQUIRE(out.has_value());
    return std::move(*out);
}

inline asio_error_code write_now(const fs::path& p, const_tensor_view v) {
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

inline child_process spawn_child(const std::vector<std::string>& args) {
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
inline std::string run_child_as(uid_t uid, const std::string& cmd, const fs::path& p) {
    child_process c = spawn_child({"--uid", std::to_string(uid), cmd, p.string()});
    std::string line = c.read_line();
    c.wait();
    return line;
}

}  // namespace tenferro::test::npy_io
