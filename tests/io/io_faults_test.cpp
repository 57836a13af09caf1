// The I/O fault loop (docs/testing.md, "I/O faults"): every fault of the engines' fault shim
// (src/io/io_testing.hpp) at every boundary call in turn, for a read, a write over
// an existing file and a write to a new path (both with O_TMPFILE and with a named
// temporary), on the engine the process picks; tests/io/meson.build runs it again
// with TENFERRO_IO_URING=0 (the pool engine). After each run: the operation
// completed exactly once; a read has the right data or the right error; a write
// that failed left the destination as it was (the old file whole, or absent), one
// that succeeded left the new file; no temporary is left; no descriptor leaked.
//
// Replay one case: TENFERRO_IO_FAULT_CASE="SCENARIO KIND N" (N+ for a fault on every
// call from N on, NxK on K calls from N on), e.g.
// TENFERRO_IO_FAULT_CASE="write-new/named eio 4"; the run's boundary calls are
// printed. docs/testing.md, "I/O faults".
#include <tenferro/io.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "io/file_engine.hpp"
#include "io/io_testing.hpp"

namespace fs = std::filesystem;
using namespace tenferro;
namespace tio = tenferro::detail::io;
using tio::io_call;
using tio::io_fault;

namespace {

// ---------------------------------------------------------------------------
// Names.
// ---------------------------------------------------------------------------

constexpr io_fault all_faults[] = {
    io_fault::eio,          io_fault::enospc,        io_fault::eintr,
    io_fault::eagain,       io_fault::ecanceled,     io_fault::short_transfer,
    io_fault::submit_ebusy, io_fault::submit_eagain, io_fault::ring_full,
};
// Also run with the fault on every call from N on.
constexpr io_fault persistent_faults[] = {io_fault::eio, io_fault::short_transfer, io_fault::ring_full};

const char* name_of(io_fault f) {
    switch (f) {
    case io_fault::none:
        return "none";
    case io_fault::eio:
        return "eio";
    case io_fault::enospc:
        return "enospc";
    case io_fault::eintr:
        return "eintr";
    case io_fault::eagain:
        return "eagain";
    case io_fault::ecanceled:
        return "ecanceled";
    case io_fault::short_transfer:
        return "short";
    case io_fault::submit_ebusy:
        return "submit_ebusy";
    case io_fault::submit_eagain:
        return "submit_eagain";
    case io_fault::ring_full:
        return "ring_full";
    }
    return "?";
}

const char* name_of(io_call c) {
    constexpr const char* names[] = {"open", "stat", "read", "write", "fsync", "link", "rename", "get_sqe", "submit"};
    return names[static_cast<unsigned>(c)];
}

// The shim's rule (io_testing.hpp): which calls a fault applies to.
bool applies(io_fault f, io_call c) {
    switch (f) {
    case io_fault::none:
        return false;
    case io_fault::short_transfer:
        return c == io_call::read || c == io_call::write;
    case io_fault::submit_ebusy:
    case io_fault::submit_eagain:
        return c == io_call::submit;
    case io_fault::ring_full:
        return c == io_call::get_sqe;
    default:
        return c != io_call::get_sqe && c != io_call::submit;
    }
}

// ---------------------------------------------------------------------------
// Files, descriptors.
// ---------------------------------------------------------------------------

struct scratch_dir {
    fs::path path;
    scratch_dir() {
        const char* tmp = std::getenv("TMPDIR");
        std::string pattern = (fs::path(tmp && *tmp ? tmp : "/tmp") / "tenferro-io-faults-XXXXXX").string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        path = pattern;
    }
    ~scratch_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    scratch_dir(const scratch_dir&) = delete;
    scratch_dir& operator=(const scratch_dir&) = delete;
    std::vector<std::string> entries() const {
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
};

// The file's bytes ("" if it cannot be read).
std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary | std::ios::ate);
    if (!in) return {};
    std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
    in.seekg(0);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return bytes;
}

void spit(const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

int open_fds() {
    int n = 0;
    DIR* d = ::opendir("/proc/self/fd");
    if (d == nullptr) return -1;
    while (const dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') ++n;
    ::closedir(d);
    return n - 1;  // the directory stream's own
}

// What each open descriptor refers to ("3 -> /tmp/x.npy"), for a failure's message.
std::string fd_targets() {
    std::string out;
    DIR* d = ::opendir("/proc/self/fd");
    if (d == nullptr) return out;
    while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        char target[512] = {};
        const std::string link = std::string("/proc/self/fd/") + e->d_name;
        const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
        out +=
            std::string(e->d_name) + " -> " + (n > 0 ? std::string(target, static_cast<std::size_t>(n)) : "?") + "; ";
    }
    ::closedir(d);
    return out;
}

/// The open descriptors once the count is back to `expected`, or after 2 s:
/// a descriptor the operation leaked stays open, while one that another part
/// of the process holds for a moment does not. (A CI run under ASan once saw
/// two more right after a read's completion, whose own descriptor is closed
/// before it completes; what held them is not known. A failure lists every
/// descriptor.)
int settled_fds(int expected) {
    int n = open_fds();
    for (int i = 0; i < 200 && n != expected; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        n = open_fds();
    }
    return n;
}

asio_error_code sys(int err) { return tenferro::detail::to_asio_error_code({err, std::system_category()}); }

// ---------------------------------------------------------------------------
// Scenarios.
// ---------------------------------------------------------------------------

struct scenario {
    const char* name;
    bool write;
    bool existing;  // a write over an existing file
    bool named;     // a write with a forced named temporary
};

constexpr scenario scenarios[] = {
    {"read", false, true, false},
    {"write-over/tmpfile", true, true, false},
    {"write-new/tmpfile", true, false, false},
    {"write-over/named", true, true, true},
    {"write-new/named", true, false, true},
};

// What a run must leave, and what it did.
struct fixture {
    scratch_dir dir;
    fs::path target = dir.path / "x.npy";
    tensor data;            // what a write writes and a read reads (2 data chunks)
    std::string new_bytes;  // its file
    std::string old_bytes;  // the file a write replaces
    asio::io_context io;

    fixture() {
        // 2 MiB + 4000 bytes of data: a read or write moves two data chunks (and the
        // write a header chunk), several requests in flight at once.
        const std::int64_t n = (2 << 20) / 4 + 1000;
        data = tensor::empty(dtype::f32, std::vector<std::int64_t>{n});
        auto* p = static_cast<float*>(data.data());
        for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i) * 0.5f - 3.0f;
        tensor old = tensor::empty(dtype::i64, std::vector<std::int64_t>{7});
        for (int i = 0; i < 7; ++i) static_cast<std::int64_t*>(old.data())[i] = 1000 + i;
        const fs::path scratch = dir.path / "scratch.npy";
        REQUIRE(write_sync(scratch, old.view()) == asio_error_code{});
        old_bytes = slurp(scratch);
        REQUIRE(write_sync(scratch, data.view()) == asio_error_code{});
        new_bytes = slurp(scratch);
        fs::remove(scratch);
    }

    asio_error_code write_sync(const fs::path& p, const_tensor_view v) {
        std::optional<asio_error_code> out;
        async_write_npy(io.get_executor(), p, v, [&](asio_error_code ec) { out = ec; });
        io.restart();
        io.run();
        REQUIRE(out.has_value());
        return *out;
    }

    void prepare(const scenario& s) {
        if (!s.write || s.existing)
            spit(target, s.write ? old_bytes : new_bytes);
        else
            fs::remove(target);
    }

    struct outcome {
        int completions = 0;
        asio_error_code ec;
        tensor t;
    };

    outcome run(const scenario& s) {
        outcome out;
        if (s.write) {
            async_write_npy(io.get_executor(), target, data.view(), [&](asio_error_code ec) {
                ++out.completions;
                out.ec = ec;
            });
        } else {
            async_read_npy(io.get_executor(), target, [&](asio_error_code ec, tensor t) {
                ++out.completions;
                out.ec = ec;
                out.t = std::move(t);
            });
        }
        io.restart();
        io.run_for(std::chrono::seconds(10));
        if (out.completions == 0) {
            // The operation still references this frame: no way to go on.
            std::fprintf(stderr, "io_faults: %s: the operation did not complete within 10 s\n", s.name);
            std::fflush(stderr);
            std::_Exit(1);
        }
        io.restart();
        io.poll();  // a second completion, if any, would be queued by now
        return out;
    }
};

struct plan_guard {
    explicit plan_guard(const tio::io_fault_plan& p) { tio::set_io_fault_plan(p); }
    ~plan_guard() { tio::clear_io_fault_plan(); }
};

struct named_temp_guard {
    explicit named_temp_guard(bool on) { tio::set_io_force_named_temp(on); }
    ~named_temp_guard() { tio::set_io_force_named_temp(false); }
};

std::vector<io_call> call_log(std::uint64_t calls) {
    std::vector<io_call> log;
    for (std::uint64_t i = 1; i <= calls; ++i) {
        io_call c{};
        if (!tio::io_fault_logged_call(i, c)) break;
        log.push_back(c);
    }
    return log;
}

std::string log_text(const std::vector<io_call>& log) {
    std::string s;
    for (std::size_t i = 0; i < log.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(i + 1);
        s += ':';
        s += name_of(log[i]);
    }
    return s;
}

struct case_result {
    std::uint64_t calls = 0;
    bool faulted = false;
};

// One case: `fault` at `count` boundary calls from call `at` on (0: every call).
// Checks everything the issue asks; returns how many boundary calls the run made.
case_result run_case(fixture& f, const scenario& s, io_fault fault, std::uint64_t at, std::uint64_t count,
                     bool print_log = false) {
    std::ostringstream replay;
    replay << "TENFERRO_IO_FAULT_CASE=\"" << s.name << ' ' << name_of(fault) << ' ' << at;
    if (count == 0)
        replay << '+';
    else if (count > 1)
        replay << 'x' << count;
    replay << '"';
    INFO("replay: " << replay.str() << " (engine " << to_string(active_io_backend()) << ")");
    named_temp_guard temp_mode(s.named);
    f.prepare(s);
    const int fds_before = open_fds();
    fixture::outcome out;
    tio::io_fault_record rec;
    std::vector<io_call> log;
    {
        plan_guard plan({fault, at, count});
        out = f.run(s);
        rec = tio::io_fault_counts();
        log = call_log(rec.calls);
    }
    const int fds_after = settled_fds(fds_before);
    INFO("boundary calls: " << log_text(log));
    INFO("open descriptors: " << fd_targets());
    if (print_log) std::printf("%s: %s\n", replay.str().c_str(), log_text(log).c_str());

    CHECK(out.completions == 1);
    CHECK(fds_after == fds_before);

    // The outcome the fault calls for.
    asio_error_code expected{};
    if (rec.faulted > 0) {
        io_call hit{};
        REQUIRE(tio::io_fault_logged_call(rec.first_faulted, hit));
        INFO("faulted call " << rec.first_faulted << ": " << name_of(hit));
        // After the rename the destination is replaced: the rest is best effort.
        bool committed = false;
        for (std::uint64_t i = 0; i + 1 < rec.first_faulted && i < log.size(); ++i)
            committed = committed || log[i] == io_call::rename;
        const bool retried = fault == io_fault::eagain && (hit == io_call::read || hit == io_call::write);
        if (!committed && !retried) {
            if (const int err = tio::io_fault_errno(fault); err != 0 && err != EINTR) expected = sys(err);
        }
    }
    CHECK(out.ec == expected);

    if (s.write) {
        if (!out.ec)
            CHECK(slurp(f.target) == f.new_bytes);
        else if (s.existing)
            CHECK(slurp(f.target) == f.old_bytes);
        else
            CHECK(!fs::exists(f.target));
    } else if (!out.ec) {
        REQUIRE(out.t.data() != nullptr);
        REQUIRE(out.t.size() == f.data.size());
        CHECK(std::memcmp(out.t.data(), f.data.data(), static_cast<std::size_t>(f.data.size()) * 4) == 0);
    } else {
        CHECK(out.t.data() == nullptr);
    }
    const bool target_left = !s.write || s.existing || !out.ec;
    CHECK(f.dir.entries() == (target_left ? std::vector<std::string>{"x.npy"} : std::vector<std::string>{}));
    return {rec.calls, rec.faulted > 0};
}

}  // namespace

// ---------------------------------------------------------------------------

TEST_CASE("io faults: every fault at every boundary call, for every operation") {
    fixture f;
    (void)tio::pool_io_engine();  // the overflow path's pool: created before the fd counts
    const char* only = std::getenv("TENFERRO_IO_FAULT_CASE");
    if (only != nullptr && *only != '\0') {
        std::istringstream in(only);
        std::string name, kind, n;
        in >> name >> kind >> n;
        char* rest = nullptr;
        const std::uint64_t at = std::strtoull(n.c_str(), &rest, 10);
        std::uint64_t count = 1;
        if (*rest == '+') count = 0;
        if (*rest == 'x') count = std::strtoull(rest + 1, nullptr, 10);
        const scenario* s = nullptr;
        for (const auto& sc : scenarios)
            if (name == sc.name) s = &sc;
        io_fault fault = io_fault::none;
        for (io_fault k : all_faults)
            if (kind == name_of(k)) fault = k;
        INFO("TENFERRO_IO_FAULT_CASE=\"" << only << "\": SCENARIO KIND N[+|xCOUNT]");
        REQUIRE(s != nullptr);
        REQUIRE((fault != io_fault::none || kind == "none"));
        run_case(f, *s, fault, at, count, true);
        return;
    }

    const auto start = std::chrono::steady_clock::now();
    std::printf("io faults on the %s engine\n", std::string(to_string(active_io_backend())).c_str());
    for (const scenario& s : scenarios) {
        // The clean run: how many boundary calls, of which kinds.
        const case_result clean = run_case(f, s, io_fault::none, 0, 1);
        const std::vector<io_call> clean_log = call_log(clean.calls);
        int runs = 0, faulted = 0;
        for (io_fault fault : all_faults) {
            if (std::none_of(clean_log.begin(), clean_log.end(), [&](io_call c) { return applies(fault, c); }))
                continue;  // nothing to fault on this engine
            for (bool persistent : {false, true}) {
                if (persistent && std::find(std::begin(persistent_faults), std::end(persistent_faults), fault) ==
                                      std::end(persistent_faults))
                    continue;
                for (std::uint64_t at = 1;; ++at) {
                    // The calls before `at` are those of the clean run: skip a call the
                    // fault does not apply to.
                    if (at <= clean_log.size() && !applies(fault, clean_log[at - 1])) continue;
                    const case_result r = run_case(f, s, fault, at, persistent ? 0 : 1);
                    ++runs;
                    faulted += r.faulted ? 1 : 0;
                    if (r.calls < at) break;
                }
            }
        }
        std::printf("  %-20s %3llu boundary calls (%s), %d faulted runs of %d\n", s.name,
                    static_cast<unsigned long long>(clean.calls), log_text(clean_log).c_str(), faulted, runs);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("  %.1f s\n", seconds);
}

// ---------------------------------------------------------------------------
// Regressions: the cases of the loop that failed before their fix, at fixed calls
// (found in the clean run's log, so that they name the same call on both engines).
// ---------------------------------------------------------------------------

namespace {

// The number of the first boundary call of kind `c` in a clean run of `s`, or 0.
std::uint64_t first_call(fixture& f, const scenario& s, io_call c, std::uint64_t after = 0) {
    const case_result clean = run_case(f, s, io_fault::none, 0, 1);
    const std::vector<io_call> log = call_log(clean.calls);
    for (std::uint64_t i = after; i < log.size(); ++i)
        if (log[i] == c) return i + 1;
    return 0;
}

}  // namespace

TEST_CASE("io faults: a step completing with -EINTR is issued again, not failed") {
    // io_uring completions carry -EINTR as the step's result (the pool engine
    // retries its syscalls itself): the engine issues the step again.
    fixture f;
    for (const scenario& s : scenarios) {
        for (io_call c : {io_call::open, io_call::stat, io_call::fsync, io_call::link, io_call::rename}) {
            const std::uint64_t at = first_call(f, s, c);
            if (at == 0) continue;
            INFO(s.name << ": EINTR at the first " << name_of(c));
            const case_result r = run_case(f, s, io_fault::eintr, at, 1);
            CHECK(r.faulted);
        }
    }
}

TEST_CASE("io faults: a refused io_uring submission with nothing else in flight still completes") {
    // The first request of an operation, submitted from the initiating thread while
    // the reaper sleeps with nothing in flight, refused once: it must not stay
    // queued for ever (the operation would never complete). And a request the
    // reaper submits, refused twice: the reaper must not go to sleep with it
    // still queued.
    fixture f;
    for (io_fault fault : {io_fault::submit_eagain, io_fault::submit_ebusy}) {
        for (const scenario& s : {scenarios[0], scenarios[2]}) {
            const std::uint64_t first_submit = first_call(f, s, io_call::submit);
            if (first_submit == 0) {
                SUCCEED("no io_uring submissions on this engine");
                return;
            }
            INFO(s.name << ": " << name_of(fault));
            CHECK(run_case(f, s, fault, first_submit, 1).faulted);
            // A step the reaper submits alone (the read's stat, the write's fsync):
            // its submission refused, and the reaper's own push after the batch too.
            const std::uint64_t step = first_call(f, s, s.write ? io_call::fsync : io_call::stat);
            const std::uint64_t reaper_submit = first_call(f, s, io_call::submit, step);
            CHECK(run_case(f, s, fault, reaper_submit, 2).faulted);
        }
    }
}
