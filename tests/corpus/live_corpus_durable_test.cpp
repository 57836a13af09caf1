// A durable live corpus (L6, L7): writes survive a reopen, checkpoints and the logs after them
// recover to the same state, a directory of another corpus is refused, a write the disk fails is
// not visible and the corpus stays usable and recoverable (the engines' fault shim at every
// boundary call of a script), and a writer killed with SIGKILL at a random moment, checkpointing
// meanwhile, recovers every acknowledged write and each other write whole or not at all.

#include "tenferro/live_corpus.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "spawn_self.hpp"

#include "cpu_session_fixture.hpp"
#include "io/io_testing.hpp"
#include "test_asio.hpp"

using namespace tenferro;
namespace fs = std::filesystem;
namespace tio = tenferro::detail::io;

using tenferro::test::spawn_self;

namespace {

struct scratch_dir {
    fs::path path;
    scratch_dir() {
        char tmpl[] = "/tmp/tenferro-corpus-XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        path = tmpl;
    }
    ~scratch_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

constexpr std::int64_t dim = 6;

// Write i (1-based) of the scripted workload: upserts ids 4i .. 4i + 3 with vectors marking i,
// labels i % 5, and erases write i - 10's group. The state after n writes is a function of n.
corpus_write scripted_write(std::uint64_t i) {
    corpus_write w;
    for (std::uint64_t j = 0; j < 4; ++j) {
        const std::vector<float> v{float(i), float(j), 1, 2, 3, 4};
        const std::vector<row_label> l{static_cast<row_label>(i % 5)};
        w.upsert(4 * i + j, v, l);
    }
    if (i > 10)
        for (std::uint64_t j = 0; j < 4; ++j) w.erase(4 * (i - 10) + j);
    return w;
}

// The corpus holds exactly the state after `n` scripted writes.
void check_scripted_state(const live_corpus& c, std::uint64_t n) {
    CHECK(c.snapshot().seq() == n);
    std::int64_t rows = 0;
    for (std::uint64_t i = 1; i <= n; ++i) {
        const bool erased = i + 10 <= n;
        for (std::uint64_t j = 0; j < 4; ++j) {
            const auto row = c.get(4 * i + j);
            if (erased) {
                CHECK_FALSE(row);
                continue;
            }
            ++rows;
            REQUIRE(row);
            CHECK(row->vector == std::vector<float>{float(i), float(j), 1, 2, 3, 4});
            CHECK(row->labels == std::vector<row_label>{static_cast<row_label>(i % 5)});
        }
    }
    CHECK(c.snapshot().rows() == rows);
}

live_corpus_options options_in(const fs::path& dir) {
    live_corpus_options o;
    o.dim = dim;
    o.segment_rows = 64;
    o.directory = dir.string();
    return o;
}

}  // namespace

TEST_CASE("writes survive a reopen, through checkpoints and the logs after them (L6)", "[durable]") {
    scratch_dir dir;
    {
        live_corpus c(options_in(dir.path));
        CHECK(c.durable());
        for (std::uint64_t i = 1; i <= 30; ++i) REQUIRE(c.apply(scripted_write(i)).seq == i);
        check_scripted_state(c, 30);
        CHECK(c.stats().log_bytes > 0);
    }
    {
        live_corpus c(options_in(dir.path));
        check_scripted_state(c, 30);
        REQUIRE_FALSE(c.checkpoint());
        for (std::uint64_t i = 31; i <= 45; ++i) REQUIRE(c.apply(scripted_write(i)).seq == i);
        REQUIRE_FALSE(c.checkpoint());  // a second checkpoint: the first one's files go
        for (std::uint64_t i = 46; i <= 50; ++i) REQUIRE(c.apply(scripted_write(i)).seq == i);
        check_scripted_state(c, 50);
    }
    live_corpus c(options_in(dir.path));
    check_scripted_state(c, 50);
    // One checkpoint's files and the log after it remain.
    int checkpoints = 0, logs = 0;
    for (const auto& e : fs::directory_iterator(dir.path)) {
        const std::string name = e.path().filename().string();
        checkpoints += name.starts_with("checkpoint-") && name.ends_with("-rows.npy");
        logs += name.starts_with("wal-");
    }
    CHECK(checkpoints == 1);
    CHECK(logs == 1);
    // Searches over the recovered corpus work as over any other.
    tenferro::test::cpu_session_fixture f(1);
    const std::vector<float> q{50, 0, 1, 2, 3, 4};
    const tensor qt = tensor::from(std::span<const float>(q), {1, dim});
    const corpus_hits hits = search(f.session, c.snapshot(), qt.view(), 1);
    REQUIRE(hits[0].size() == 1);
    CHECK(hits[0][0].id == 200);
}

TEST_CASE(
    "async_apply completes on the handler's executor once durable, and writes that arrive together "
    "share a commit",
    "[durable]") {
    scratch_dir dir;
    live_corpus c(options_in(dir.path));
    asio::io_context io;
    std::vector<std::uint64_t> seqs;
    for (std::uint64_t i = 1; i <= 64; ++i)
        c.async_apply(scripted_write(i), asio::bind_executor(io, [&](write_result r) {
                          CHECK(r);
                          seqs.push_back(r.seq);
                      }));
    CHECK(seqs.empty());  // never inside the call
    io.run();
    REQUIRE(seqs.size() == 64);
    for (std::size_t i = 0; i < seqs.size(); ++i) CHECK(seqs[i] == i + 1);  // in sequence order
    check_scripted_state(c, 64);
}

TEST_CASE("a directory holding another corpus is refused", "[durable]") {
    scratch_dir dir;
    { live_corpus c(options_in(dir.path)); }
    live_corpus_options other = options_in(dir.path);
    other.dim = dim + 1;
    try {
        live_corpus c(other);
        FAIL("opened");
    } catch (const std::system_error& e) {
        CHECK(e.code() == corpus_errc::dimension_mismatch);
    }
    other = options_in(dir.path);
    other.normalize = true;
    CHECK_THROWS_AS(live_corpus(other), std::system_error);
}

TEST_CASE(
    "a write the disk fails completes with the error, is not visible, and the corpus stays usable and "
    "recoverable (L7)",
    "[durable][faults]") {
    // Each fault at each boundary call of one scripted write (its log write and fdatasync, and
    // the log's invalidation of a failed group), then a write that must succeed.
    int failed = 0;
    for (const tio::io_fault fault : {tio::io_fault::eio, tio::io_fault::enospc}) {
        for (std::uint64_t at = 1; at <= 6; ++at) {
            INFO("fault " << static_cast<int>(fault) << " at call " << at);
            scratch_dir dir;
            std::uint64_t applied = 0;
            {
                live_corpus c(options_in(dir.path));
                REQUIRE(c.apply(scripted_write(1)));
                applied = 1;
                tio::set_io_fault_plan({fault, at, 1});
                const write_result r = c.apply(scripted_write(2));
                tio::clear_io_fault_plan();
                if (r) {
                    applied = 2;
                } else {
                    ++failed;
                    CHECK(r.error.category() == std::system_category());
                    check_scripted_state(c, 1);  // not visible
                }
                // Usable: the next write gets the next sequence number.
                const write_result next = c.apply(scripted_write(applied + 1));
                REQUIRE(next);
                ++applied;
                check_scripted_state(c, applied);
            }
            live_corpus again(options_in(dir.path));  // recoverable: exactly what completed
            check_scripted_state(again, applied);
        }
    }
    CHECK(failed >= 4);  // the write and the fdatasync of the scripted write, each fault
}

// The crash test's child: writes the scripted workload until killed, 32 writes in flight, a
// checkpoint every 150 writes from another thread; reports each acknowledged write's seq on fd 3.
TEST_CASE("durable corpus: crash child", "[.corpus_child]") {
    const char* dir = std::getenv("TENFERRO_CORPUS_CHILD_DIR");
    if (dir == nullptr) return;
    live_corpus c(options_in(dir));
    std::uint64_t next = c.snapshot().seq() + 1;
    std::atomic<std::int64_t> in_flight{0};
    std::atomic<bool> stop{false};
    std::thread checkpoints([&] {
        while (!stop.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            (void)c.checkpoint();
        }
    });
    struct report final : write_completion {
        std::atomic<std::int64_t>* in_flight;
        explicit report(std::atomic<std::int64_t>* f) : in_flight(f) {}
        void complete(std::unique_ptr<write_completion>, write_result r) noexcept override {
            if (r) {
                const std::uint64_t seq = r.seq;
                (void)!::write(3, &seq, sizeof seq);
            }
            in_flight->fetch_sub(1);
        }
    };
    for (;;) {
        while (in_flight.load() >= 32) std::this_thread::yield();
        in_flight.fetch_add(1);
        c.submit(scripted_write(next++), std::make_unique<report>(&in_flight));
    }
}

TEST_CASE("a writer killed at a random moment recovers every acknowledged write, each other whole or absent",
          "[durable][crash]") {
    scratch_dir dir;
    std::mt19937 rng(std::random_device{}());
    std::uint64_t acknowledged = 0;
    for (int run = 0; run < 5; ++run) {
        int fds[2];
        REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
        const pid_t pid = spawn_self("[.corpus_child]", "TENFERRO_CORPUS_CHILD_DIR=" + dir.path.string(), fds[1]);
        ::close(fds[1]);
        std::atomic<std::uint64_t> count{0}, last{0};
        std::thread reader([&, fd = fds[0]] {
            std::uint64_t seq;
            while (::read(fd, &seq, sizeof seq) == sizeof seq) {
                last.store(std::max(last.load(), seq));
                count.fetch_add(1);
            }
        });
        const auto start = std::chrono::steady_clock::now();
        while (count.load() == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        const bool any = count.load() > 0;
        const int delay_ms = std::uniform_int_distribution<int>(0, 300)(rng);
        if (any) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        ::kill(pid, SIGKILL);
        reader.join();
        ::close(fds[0]);
        int status = 0;
        ::waitpid(pid, &status, 0);
        REQUIRE(any);
        acknowledged = std::max(acknowledged, last.load());

        live_corpus c(options_in(dir.path));
        const std::uint64_t recovered = c.snapshot().seq();
        INFO("run " << run << " killed after " << delay_ms << " ms: " << acknowledged << " acknowledged, " << recovered
                    << " recovered");
        CHECK(recovered >= acknowledged);
        check_scripted_state(c, recovered);  // every write whole: the state after exactly `recovered`
        acknowledged = recovered;            // the next child continues from here
    }
}
