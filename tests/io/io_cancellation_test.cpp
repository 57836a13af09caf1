// async_read_npy / async_write_npy interrupted: cancelled mid-read or
// mid-write, a failure injected at every step of a write, a writer killed
// mid-write. A write leaves the old file whole and no temporary. tests/io/meson.build runs this file
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

namespace {

// Emits a cancellation (on the io_context's thread, where the slot lives) when
// `event` happens for the first time, and holds every engine thread that meets
// `event` until it has: a busy machine may be slow to run the io_context's
// thread, and the pool's other threads would otherwise finish the whole file
// meanwhile (a cancellation "in the middle" that came after the end).
struct cancel_on_event {
    asio::io_context* io;
    asio::cancellation_signal* signal;
    tio::io_event event;
    std::atomic<int> seen{0};
    std::promise<void> emitted{};
    std::shared_future<void> done = emitted.get_future().share();

    static int hook(tio::io_event e, void* context) {
        auto* self = static_cast<cancel_on_event*>(context);
        if (e != self->event) return 0;
        if (self->seen.fetch_add(1) == 0) {
            asio::post(*self->io, [self] {
                self->signal->emit(asio::cancellation_type::terminal);
                self->emitted.set_value();
            });
        }
        self->done.wait();
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
