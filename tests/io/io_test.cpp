// async_read_npy / async_write_npy end to end: the formats, the errors of
// files and paths, the completion tokens, many operations at once. tests/io/meson.build runs this file
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
#include <memory>
#include <new>
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
#include "test_allocator.hpp"

using namespace tenferro;
using namespace tenferro::test::npy_io;

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

TEST_CASE("io: a handler bound to Asio's system executor completes in the library's context") {
    // No host in this process needs to exist: the operation starts the
    // library's context at its initiation. Asio's system context is not used.
    scratch_dir dir;
    asio::io_context io;
    const std::vector<float> values(64, 3.0f);
    const tensor t = tensor::from(std::span<const float>(values), {8, 8});
    std::promise<bool> wrote, read;
    async_write_npy(io.get_executor(), dir.path / "s.npy", t,
                    asio::bind_executor(asio::system_executor(), [&](asio_error_code ec) {
                        wrote.set_value(!ec && tenferro::detail::in_library_context());
                    }));
    CHECK(wrote.get_future().get());  // (io is never run: nothing goes there)
    async_read_npy(io.get_executor(), dir.path / "s.npy",
                   asio::bind_executor(asio::system_executor(), [&](asio_error_code ec, tensor r) {
                       read.set_value(!ec && r.size() == 64 && tenferro::detail::in_library_context());
                   }));
    CHECK(read.get_future().get());
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

TEST_CASE("io: S19 with use_future: a read or write whose completion cannot be allocated fails its future") {
    // Not a throw from the initiating function: the handler, destroyed
    // uncalled, would break its promise (libstdc++ allocates that error inside
    // a noexcept destructor). The future reports not_enough_memory.
    scratch_dir dir;
    const tensor x = make_tensor(dtype::f64, std::vector<std::int64_t>{3});
    const fs::path p = dir / "a.npy", q = dir / "b.npy";
    asio::io_context io;
    // use_future's allocator serves `allowed` allocations, then refuses. The
    // promise's state is allocated first, the operation's completion block
    // last: allowing one less than a normal run takes refuses that block only.
    auto st = std::make_shared<tenferro::test::allocation_policy>();
    const asio::use_future_t<tenferro::test::test_allocator<void>> token(tenferro::test::test_allocator<void>{st});
    // A normal run of each, to count the allocations.
    async_write_npy(io.get_executor(), p, x, token).get();
    const int write_allocations = std::exchange(st->made, 0);
    (void)async_read_npy(io.get_executor(), p, token).get();
    const int read_allocations = std::exchange(st->made, 0);
    REQUIRE(write_allocations >= 2);
    REQUIRE(read_allocations >= 2);

    st->allowed = write_allocations - 1;
    std::optional<std::future<void>> w;
    REQUIRE_NOTHROW(w.emplace(async_write_npy(io.get_executor(), q, x, token)));
    CHECK(st->refused == 1);
    asio_error_code ec;
    try {
        w->get();
    } catch (const tenferro::asio_system_error& e) {
        ec = e.code();
    }
    CHECK(ec.value() == ENOMEM);
    CHECK_FALSE(fs::exists(q));  // never started
    st->made = 0;
    st->allowed = read_allocations - 1;
    std::optional<std::future<tensor>> r;
    REQUIRE_NOTHROW(r.emplace(async_read_npy(io.get_executor(), p, token)));
    CHECK(st->refused == 2);
    CHECK_THROWS_AS(r->get(), tenferro::asio_system_error);
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
