// numpy interop: files numpy writes load here, files written here load in
// numpy. Skipped (exit 77) where python3 has no numpy. tests/io/meson.build runs this file
// twice: on the backend the process picks (io_uring where available) and with
// TENFERRO_IO_URING=0 (the pread/pwrite pool).
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
#include "npy_test_support.hpp"

using namespace tenferro;
using namespace tenferro::test::npy_io;

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
