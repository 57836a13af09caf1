// The write-ahead log (src/corpus/write_log.hpp): round trips, torn and corrupt
// tails, group commit, every write / fdatasync fault of the engines' fault shim, and
// a child process killed with SIGKILL mid-stream; on the engine the process picks and,
// where that is io_uring, again in a child with TENFERRO_IO_URING=0 (the pool engine).
#include "corpus/write_log.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "spawn_self.hpp"

#include "io/file_engine.hpp"
#include "io/io_testing.hpp"

namespace fs = std::filesystem;
using namespace tenferro::detail::corpus;
namespace tio = tenferro::detail::io;
using tio::io_call;
using tio::io_fault;

using tenferro::test::spawn_self;

namespace {

struct scratch_dir {
    fs::path path;
    scratch_dir() {
        const char* tmp = std::getenv("TMPDIR");
        std::string pattern = (fs::path(tmp && *tmp ? tmp : "/tmp") / "tenferro-wal-XXXXXX").string();
        REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        path = pattern;
    }
    ~scratch_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string file(const char* name) const { return (path / name).string(); }
};

std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

// A payload that says which seq and which attempt wrote it.
std::vector<std::byte> make_payload(std::uint64_t seq, unsigned attempt, std::size_t len) {
    std::vector<std::byte> p(len);
    for (std::size_t i = 0; i < len; ++i) p[i] = static_cast<std::byte>(seq * 131 + attempt * 71 + i);
    return p;
}

struct stored {
    std::uint64_t seq;
    std::vector<std::byte> payload;
    bool operator==(const stored&) const = default;
};

std::vector<stored> by_seq(std::vector<stored> v) {
    std::sort(v.begin(), v.end(), [](const stored& a, const stored& b) { return a.seq < b.seq; });
    return v;
}

// Opens (recovering) `path`; the records it held.
std::unique_ptr<write_log> open_log(const std::string& path, std::vector<stored>& records) {
    records.clear();
    std::error_code ec;
    const auto keep = [&](const log_record& r) { records.push_back({r.seq, {r.payload.begin(), r.payload.end()}}); };
    auto log = write_log::open(path, keep, ec);
    INFO(ec.message());
    REQUIRE((!ec && log != nullptr));
    return log;
}

std::vector<stored> recover(const std::string& path) {
    std::vector<stored> records;
    open_log(path, records);
    return records;
}

// Appends and waits for the outcome.
std::error_code append_wait(write_log& log, std::uint64_t seq, const std::vector<std::byte>& payload) {
    std::promise<std::error_code> promise;
    std::future<std::error_code> outcome = promise.get_future();
    if (std::error_code ec =
            log.append(seq, payload, [p = std::move(promise)](std::error_code ec) mutable { p.set_value(ec); }))
        return ec;
    return outcome.get();
}

// Opens (recovering) `path` and appends seqs [first, last), `len` bytes each.
void append_range(const std::string& path, std::uint64_t first, std::uint64_t last, std::size_t len) {
    std::vector<stored> records;
    auto log = open_log(path, records);
    for (std::uint64_t seq = first; seq < last; ++seq) REQUIRE(!append_wait(*log, seq, make_payload(seq, 0, len)));
}

// Closed-loop appenders: `window` records kept in flight, each completion appending
// the next (from its engine thread), until `total` appends have completed. Seqs come
// from next_seq(), so appends continue after a failure rewinds it; a payload carries
// the number of failures seen before it, so a retried seq writes different bytes.
struct appenders {
    appenders(write_log& l, std::size_t len, std::uint64_t n) : log(l), payload_len(len), total(n) {}
    write_log& log;
    std::size_t payload_len;
    std::uint64_t total, issued = 0;
    std::mutex m;        // serialises seq assignment with the append call, as a caller must
    int report_fd = -1;  // each seq that completes successfully is written here (8 bytes)
    bool keep = false;   // collect the records that completed successfully in `ok_records`
    std::vector<stored> ok_records;
    std::atomic<std::uint64_t> ok{0}, failed{0}, refused{0}, completed{0};
    std::condition_variable done_cv;

    void one() {
        std::unique_lock lock(m);
        while (issued < total) {
            const std::uint64_t seq = log.next_seq();
            const auto attempt = static_cast<unsigned>(failed.load());
            const std::error_code ec =
                log.append(seq, make_payload(seq, attempt, payload_len), [this, seq, attempt](std::error_code e) {
                    (e ? failed : ok).fetch_add(1);
                    if (!e) on_ok(seq, attempt);
                    one();
                    finish();
                });
            if (ec == std::errc::invalid_argument) continue;  // a failure rewound the seq meanwhile
            ++issued;
            if (!ec) return;
            refused.fetch_add(1);  // a broken log
            lock.unlock();
            return finish();
        }
    }
    void on_ok(std::uint64_t seq, unsigned attempt) {
        if (report_fd >= 0 && ::write(report_fd, &seq, sizeof seq) != sizeof seq) std::abort();
        if (!keep) return;
        std::lock_guard lock(m);
        ok_records.push_back({seq, make_payload(seq, attempt, payload_len)});
    }
    void finish() {
        if (completed.fetch_add(1) + 1 != total) return;
        std::lock_guard lock(m);
        done_cv.notify_all();
    }
    // `threads` threads start `window` appends between them; waits for all to complete.
    double run(unsigned threads, unsigned window) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; ++t)
            ts.emplace_back([&, t] {
                for (unsigned i = t; i < window; i += threads) one();
            });
        for (auto& t : ts) t.join();
        std::unique_lock lock(m);
        done_cv.wait(lock, [&] { return completed.load() == total; });
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
};

// One scripted sequence of appends under a fault plan. Each round's records are
// appended while the previous round's first completion is held inside its callback
// (so they queue behind it and form one group), after that completion's outcome is
// settled (so they carry the seqs it leaves): the engine calls are the same in every
// run, and a fault at call N always hits the same step.
struct scripted {
    struct rec {
        std::uint64_t seq = 0;
        std::vector<std::byte> payload;
        std::error_code ec;
        int calls = 0;
    };
    std::vector<std::unique_ptr<rec>> recs;
    std::mutex m;
    std::condition_variable cv;
    unsigned refused = 0;

    void run(write_log& log) {
        unsigned attempt = 0;
        std::promise<void> held;  // lets the previous round's first completion return
        for (const unsigned k : {1u, 3u, 2u, 4u, 1u, 2u}) {
            std::promise<void> release;
            const std::shared_future<void> released = release.get_future().share();
            std::future<void> led;  // the round's first completion has been entered
            for (unsigned i = 0; i < k; ++i) {
                auto r = std::make_unique<rec>();
                r->seq = log.next_seq();
                r->payload = make_payload(r->seq, ++attempt, 40 + 11 * i);
                rec* rp = r.get();
                const bool lead = !led.valid();
                std::promise<void> entered;
                std::future<void> entered_f = entered.get_future();
                const std::error_code ec =
                    log.append(rp->seq, rp->payload,
                               [this, rp, lead, entered = std::move(entered), released](std::error_code e) mutable {
                                   {
                                       std::lock_guard lock(m);
                                       rp->ec = e;
                                       ++rp->calls;
                                   }
                                   cv.notify_all();
                                   if (!lead) return;
                                   entered.set_value();
                                   released.wait();
                               });
                if (ec) {
                    ++refused;
                    continue;
                }
                if (lead) led = std::move(entered_f);
                recs.push_back(std::move(r));
            }
            held.set_value();
            held = std::move(release);
            if (led.valid()) led.wait();
        }
        held.set_value();
        std::unique_lock lock(m);
        cv.wait(lock,
                [&] { return std::all_of(recs.begin(), recs.end(), [](const auto& r) { return r->calls > 0; }); });
    }
    std::vector<stored> succeeded() const {
        std::vector<stored> out;
        for (const auto& r : recs)
            if (!r->ec) out.push_back({r->seq, r->payload});
        return by_seq(std::move(out));
    }
    unsigned failed() const {
        return static_cast<unsigned>(std::count_if(recs.begin(), recs.end(), [](const auto& r) { return !!r->ec; }));
    }
};

const char* name_of(io_fault f) {
    constexpr const char* names[] = {"none",      "eio",   "enospc",       "eintr",         "eagain",
                                     "ecanceled", "short", "submit_ebusy", "submit_eagain", "ring_full"};
    return names[static_cast<unsigned>(f)];
}

// Whether `f` at a call of kind `c` fails the request (rather than being retried,
// continued or carried by the other engine). EAGAIN is retried on a write only (docs/io.md).
bool fails(io_fault f, io_call c) {
    const bool error = f == io_fault::eio || f == io_fault::enospc || f == io_fault::ecanceled;
    return c == io_call::fsync ? error || f == io_fault::eagain : c == io_call::write && error;
}

}  // namespace

TEST_CASE("crc32c: the CPU's instruction and the table agree on every length and alignment", "[write_log]") {
    std::vector<std::byte> data(300);
    std::uint32_t x = 12345;
    for (std::byte& b : data) b = static_cast<std::byte>((x = x * 1103515245u + 12345u) >> 24);
    for (std::size_t offset = 0; offset < 9; ++offset)
        for (std::size_t len = 0; len + offset <= data.size(); len += 7) {
            const std::span<const std::byte> s(data.data() + offset, len);
            REQUIRE(crc32c(s, 0x1234u) == crc32c_table(s, 0x1234u));
            REQUIRE(crc32c(s) == crc32c_table(s));
        }
}

TEST_CASE("crc32c: check values (RFC 3720 B.4), and continuation", "[write_log]") {
    const std::string s = "123456789";
    const auto* b = reinterpret_cast<const std::byte*>(s.data());
    CHECK(crc32c({b, s.size()}) == 0xe3069283u);
    for (std::size_t cut = 0; cut <= s.size(); ++cut)
        CHECK(crc32c({b + cut, s.size() - cut}, crc32c({b, cut})) == 0xe3069283u);
    std::vector<std::byte> v(32, std::byte{0});
    CHECK(crc32c(v) == 0x8a9136aau);
    for (std::size_t i = 0; i < 32; ++i) v[i] = static_cast<std::byte>(i);
    CHECK(crc32c(v) == 0x46dd794eu);
}

TEST_CASE("write_log: round trip", "[write_log]") {
    scratch_dir dir;
    const std::string path = dir.file("log");
    std::vector<stored> expected;
    {
        std::vector<stored> none;
        auto log = open_log(path, none);
        CHECK(none.empty());
        // Several records in flight at once; lengths 0 to 40,000 (across padding).
        std::vector<std::future<std::error_code>> outcomes;
        for (std::uint64_t seq = 7; seq < 207; ++seq) {
            const std::size_t len = seq % 10 == 0 ? 40'000 : (seq * 37) % 301;
            expected.push_back({seq, make_payload(seq, 0, len)});
            std::promise<std::error_code> promise;
            outcomes.push_back(promise.get_future());
            REQUIRE(!log->append(seq, expected.back().payload,
                                 [p = std::move(promise)](std::error_code ec) mutable { p.set_value(ec); }));
        }
        for (auto& f : outcomes) CHECK(!f.get());
        CHECK(log->bytes() == fs::file_size(path));
        CHECK(log->next_seq() == 207);
        CHECK(log->stats().records == 200);
        // Refused on the spot, `done` never called.
        bool called = false;
        CHECK(log->append(5, {}, [&](std::error_code) { called = true; }) == std::errc::invalid_argument);
        CHECK(log->append(208, {}, [&](std::error_code) { called = true; }) == std::errc::invalid_argument);
        CHECK(!called);
    }
    std::vector<stored> got;
    auto log = open_log(path, got);
    CHECK(got == expected);
    CHECK(log->next_seq() == 207);
    REQUIRE(!append_wait(*log, 207, make_payload(207, 0, 3)));
    log.reset();
    expected.push_back({207, make_payload(207, 0, 3)});
    CHECK(recover(path) == expected);
}

TEST_CASE("write_log: reset", "[write_log]") {
    scratch_dir dir;
    const std::string path = dir.file("log");
    append_range(path, 0, 5, 10);
    std::vector<stored> got;
    auto log = open_log(path, got);
    CHECK(log->reset(4) == std::errc::invalid_argument);  // would lose seq 4
    CHECK(!log->reset(5));
    CHECK(log->bytes() == 0);
    CHECK(fs::file_size(path) == 0);
    CHECK(log->append(6, {}, [](std::error_code) {}) == std::errc::invalid_argument);
    REQUIRE(!append_wait(*log, 5, make_payload(5, 1, 10)));
    log.reset();
    CHECK(recover(path) == std::vector<stored>{{5, make_payload(5, 1, 10)}});
}

TEST_CASE("write_log: torn and corrupt tails", "[write_log]") {
    scratch_dir dir;
    const std::string path = dir.file("log");
    append_range(path, 0, 4, 50);
    const std::string prefix = slurp(path);
    append_range(path, 4, 5, 21);  // 32 + 24 bytes, 3 of them padding
    const std::string whole = slurp(path);
    REQUIRE(whole.size() == prefix.size() + 56);
    std::vector<stored> expected;
    for (std::uint64_t seq = 0; seq < 4; ++seq) expected.push_back({seq, make_payload(seq, 0, 50)});

    // After the damage: the first four only; then an append continues, and survives.
    auto check_damaged = [&](const std::string& bytes) {
        spit(path, bytes);
        std::vector<stored> got;
        {
            auto log = open_log(path, got);
            CHECK(got == expected);
            CHECK(log->next_seq() == 4);
            CHECK(fs::file_size(path) == prefix.size());
            REQUIRE(!append_wait(*log, 4, make_payload(4, 9, 13)));
        }
        std::vector<stored> again = expected;
        again.push_back({4, make_payload(4, 9, 13)});
        CHECK(recover(path) == again);
    };
    for (std::size_t cut = prefix.size(); cut < whole.size(); ++cut) {
        INFO("truncated at " << cut);
        check_damaged(whole.substr(0, cut));
    }
    // Every byte of the last record's header and payload (its padding is not checked).
    for (std::size_t at = prefix.size(); at < prefix.size() + 32 + 21; ++at) {
        INFO("byte flipped at " << at);
        std::string bytes = whole;
        bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
        check_damaged(bytes);
    }
    // Garbage after the last record.
    check_damaged(prefix + std::string(100, '\x5a'));
}

TEST_CASE("write_log: a seq gap or a lower generation ends the log", "[write_log]") {
    scratch_dir dir;
    const std::string a = dir.file("a"), b = dir.file("b"), c = dir.file("c");
    append_range(a, 0, 3, 8);
    append_range(a, 3, 5, 8);   // a reopened log writes a higher generation
    append_range(b, 5, 7, 8);   // generation 0, seqs 5 and 6: they would follow a's
    append_range(c, 9, 11, 8);  // generation 0, seqs 9 and 10: a gap
    const std::string log_a = slurp(a);
    std::vector<stored> expected;
    for (std::uint64_t seq = 0; seq < 5; ++seq) expected.push_back({seq, make_payload(seq, 0, 8)});
    spit(a, log_a + slurp(b));
    CHECK(recover(a) == expected);
    spit(a, log_a + slurp(c));
    CHECK(recover(a) == expected);
    // b after c's generation-0 records is fine by generation, not by seq; c after b is a gap.
    spit(b, slurp(b) + slurp(c));
    CHECK(recover(b).size() == 2);
}

// 256 appenders of 3000-byte records; prints the figures against a pwrite + fdatasync per record.
TEST_CASE("write_log: group commit", "[write_log]") {
    scratch_dir dir;
    const std::string path = dir.file("log");
    std::vector<stored> got;
    constexpr std::uint64_t n = 10000;
    constexpr std::size_t len = 3000;
    {
        auto log = open_log(path, got);
        appenders a(*log, len, n);
        const double seconds = a.run(4, 256);
        CHECK(a.ok.load() == n);
        CHECK(a.failed.load() == 0);
        CHECK(log->stats().records == n);
        // A group holds whatever arrived during the previous one's write and sync.
        CHECK(log->stats().groups * 4 <= n);
        std::printf("write_log (%s), 256 appenders of %zu bytes: %llu records in %llu fdatasyncs, %.1f MB/s\n",
                    tio::io_engine().kind() == tenferro::io_backend::io_uring ? "io_uring" : "pool", len,
                    static_cast<unsigned long long>(n), static_cast<unsigned long long>(log->stats().groups),
                    n * len / seconds / 1e6);
    }
    open_log(path, got);
    REQUIRE(got.size() == n);
    for (std::uint64_t i = 0; i < n; ++i)
        if (got[i].seq != i || got[i].payload != make_payload(i, 0, len)) FAIL("record " << i);

    // The same records (header included), one pwrite + fdatasync each: at most 1 s of them.
    const int fd = ::open(dir.file("plain").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    const std::vector<std::byte> bytes = make_payload(1, 0, len + 32);
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t k = 0;
    for (; k < n && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1); ++k) {
        REQUIRE(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(k * bytes.size())) == len + 32);
        REQUIRE(::fdatasync(fd) == 0);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("pwrite + fdatasync per record: %llu records, %.1f MB/s\n", static_cast<unsigned long long>(k),
                k * len / seconds / 1e6);
    ::close(fd);
}

TEST_CASE("write_log: every write and fdatasync fault", "[write_log][faults]") {
    constexpr io_fault faults[] = {io_fault::eio,          io_fault::enospc,        io_fault::short_transfer,
                                   io_fault::eintr,        io_fault::eagain,        io_fault::ecanceled,
                                   io_fault::submit_ebusy, io_fault::submit_eagain, io_fault::ring_full};
    scratch_dir dir;
    for (const io_fault fault : faults) {
        for (const std::uint64_t count : {std::uint64_t{1}, std::uint64_t{0}}) {
            if (count == 0 && fault != io_fault::eio && fault != io_fault::short_transfer) continue;
            for (std::uint64_t at = 1; at < 400; ++at) {
                const std::string path = dir.file("log");
                fs::remove(path);
                scripted s;
                io_call hit = io_call::open;
                bool broken = false;
                tio::io_fault_record counts;
                {
                    std::vector<stored> none;
                    auto log = open_log(path, none);
                    tio::set_io_fault_plan({fault, at, count});
                    s.run(*log);
                    counts = tio::io_fault_counts();
                    const bool logged = counts.faulted > 0 && tio::io_fault_logged_call(counts.first_faulted, hit);
                    tio::clear_io_fault_plan();
                    // With the faults gone the log takes the next record, unless it is broken.
                    const std::uint64_t next = log->next_seq();
                    const std::vector<std::byte> last = make_payload(next, 999, 5);
                    const std::error_code ec = append_wait(*log, next, last);
                    broken = s.refused > 0 || ec;
                    CHECK(broken == !!ec);
                    if (!ec) s.recs.push_back(std::make_unique<scripted::rec>(scripted::rec{next, last, {}, 1}));
                    INFO(name_of(fault) << " at call " << at << (count == 0 ? "+" : "") << ": failed " << s.failed()
                                        << ", refused " << s.refused);
                    for (const auto& r : s.recs) CHECK(r->calls == 1);
                    if (count == 1 && logged) CHECK((s.failed() > 0) == fails(fault, hit));
                    if (count == 1) CHECK(!broken);  // a single fault never hits both a group and its invalidation
                }
                // A reopen returns exactly the records that completed successfully: none
                // that failed, none lost. A broken log may return more after them (the
                // failed group it could not invalidate: write_log.hpp).
                const std::vector<stored> expected = s.succeeded();
                const std::vector<stored> got = recover(path);
                INFO(name_of(fault) << " at call " << at << (count == 0 ? "+" : "") << ": " << expected.size()
                                    << " succeeded, " << got.size() << " recovered");
                const bool prefix =
                    got.size() >= expected.size() && std::equal(expected.begin(), expected.end(), got.begin());
                CHECK((broken ? prefix : got == expected));
                if (at > counts.calls) break;  // past the last call
            }
        }
    }
}

TEST_CASE("write_log: faults under concurrent appends", "[write_log][faults]") {
    // Records queued behind a group when it fails fail with it; later ones reuse the seqs.
    scratch_dir dir;
    for (const io_fault fault : {io_fault::eio, io_fault::enospc}) {
        for (std::uint64_t at = 1; at <= 40; ++at) {
            const std::string path = dir.file("log");
            fs::remove(path);
            std::vector<stored> none;
            auto log = open_log(path, none);
            appenders a(*log, 200, 400);
            a.keep = true;
            tio::set_io_fault_plan({fault, at, 1});
            a.run(4, 32);
            tio::clear_io_fault_plan();
            log.reset();
            INFO(name_of(fault) << " at call " << at << ": " << a.ok.load() << " ok, " << a.failed.load() << " failed");
            CHECK(a.ok.load() + a.failed.load() == 400);
            CHECK(a.refused.load() == 0);
            CHECK(recover(path) == by_seq(a.ok_records));
        }
    }
}

// The crash test's child: appends to TENFERRO_WAL_CHILD_LOG until killed, each seq done to fd 3.
TEST_CASE("write_log: crash child", "[.wal_child]") {
    const char* path = std::getenv("TENFERRO_WAL_CHILD_LOG");
    if (path == nullptr) return;
    std::vector<stored> got;
    auto log = open_log(path, got);
    appenders a(*log, 1000, std::uint64_t{1} << 40);
    a.report_fd = 3;
    a.run(2, 64);
}

TEST_CASE("write_log: a writer killed at a random moment", "[write_log][crash]") {
    scratch_dir dir;
    const std::string path = dir.file("log");
    std::mt19937 rng(std::random_device{}());
    std::uint64_t reported = 0;  // seqs [0, reported) were reported durable, over every run
    for (int run = 0; run < 6; ++run) {
        int fds[2];
        REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
        const pid_t pid = spawn_self("[.wal_child]", "TENFERRO_WAL_CHILD_LOG=" + path, fds[1]);
        ::close(fds[1]);
        // Drained as the child writes (a full pipe would stall its log). Once it reports
        // its first record, it runs a random while before the kill.
        std::atomic<std::uint64_t> count{0}, last{0};
        std::thread reader([&, fd = fds[0]] {
            std::uint64_t seq;
            while (::read(fd, &seq, sizeof seq) == sizeof seq) {
                last.store(seq);
                count.fetch_add(1);
            }
        });
        const auto start = std::chrono::steady_clock::now();
        while (count.load() == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        const bool any = count.load() > 0;
        const int delay_ms = std::uniform_int_distribution<int>(0, 250)(rng);
        if (any) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        ::kill(pid, SIGKILL);
        reader.join();  // EOF: the child is gone
        ::close(fds[0]);
        int status = 0;
        ::waitpid(pid, &status, 0);
        REQUIRE(any);  // the child did start appending
        CHECK(WIFSIGNALED(status));
        if (any) reported = std::max(reported, last.load() + 1);

        std::vector<stored> got = recover(path);
        INFO("run " << run << " killed after " << delay_ms << " ms: " << reported << " reported, " << got.size()
                    << " recovered");
        CHECK(got.size() >= reported);
        for (std::size_t i = 0; i < got.size(); ++i)
            if (got[i].seq != i || got[i].payload != make_payload(i, 0, 1000)) FAIL("record " << i);
    }
}

// The engine is chosen once per process: where this one runs on io_uring, every case
// again in a child on the pool engine.
TEST_CASE("write_log: every case on the pool engine too", "[write_log][pool]") {
    if (tio::io_engine().kind() != tenferro::io_backend::io_uring) return;
    const pid_t pid = spawn_self("[write_log]~[pool]", "TENFERRO_IO_URING=0", -1);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}
