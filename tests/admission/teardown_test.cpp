// Rule S16: once a completion handler has run, nothing of tenferro touches its
// executor or execution context again, so a caller may destroy its io_context
// the moment the handler ran — whichever way it drives the context. Each case
// repeats a short life (make a context, complete one or a few operations on it,
// destroy it at once) many times: the window in which a worker that posted the
// completion is still inside `post` is a few hundred nanoseconds wide, so it
// takes thousands of rounds to hit. What it guards is the hand-off gate
// (detail/async/handoff_gate.hpp): without it, ASan reports a heap-use-after-free
// here within a few rounds, and a release build loses completions (a stale work
// decrement stops the next context).
//
// Rounds: 10 x TENFERRO_STRESS_ITERATIONS (default 2,000, so 20,000 rounds).
//
// The session-entry cases run against test_host.hpp's host: cpu_backend, and
// (teardown_generic) session_host<device_backend>.
#include <tenferro/batcher.hpp>
#include <tenferro/cpu_backend.hpp>
#include <tenferro/io.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
namespace fs = std::filesystem;

namespace {

long rounds() { return 10 * tenferro::test::stress_iterations(2000); }

/// How the caller drives its context until its handlers have run.
enum class drive { run_one, poll, run };

/// Drives `io` until `done()`; false when it cannot get there (the context
/// stopped by itself, or 10 s passed: a lost completion).
template <class Pred>
bool drive_until(asio::io_context& io, drive how, Pred done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        switch (how) {
        case drive::run_one:
            // A context with no work left returns 0 at once; one whose work
            // count was corrupted would, too, and never see the handler.
            if (io.run_one_for(std::chrono::seconds(1)) == 0 && io.stopped() && !done()) return false;
            break;
        case drive::poll:
            io.restart();
            if (io.poll() == 0) std::this_thread::yield();
            break;
        case drive::run:
            io.restart();
            io.run_for(std::chrono::seconds(1));
            break;
        }
    }
    return true;
}

struct tally {
    long completed = 0, errors = 0, lost = 0;
};

/// `entries` entries contending for one permit, each with a plain callback
/// bound to `ex`; the context is destroyed as soon as the last handler ran.
/// `mixed`: the first entry is compute-placed and the others caller-placed,
/// so a compute worker's release grants the second and posts its runner.
template <class MakeExecutor>
tally entry_rounds(test_host& cpu, placement where, drive how, int entries, MakeExecutor make_executor,
                   bool mixed = false) {
    tally t;
    const long n = rounds();
    for (long i = 0; i < n; ++i) {
        auto io = std::make_unique<asio::io_context>();
        int done = 0;
        {
            auto ex = make_executor(*io);
            for (int j = 0; j < entries; ++j)
                cpu.with_backend_session(
                    session_options{1, wait_policy::fifo,
                                    mixed ? (j == 0 ? placement::compute : placement::caller) : where},
                    [j](test_session&) { return j; },
                    asio::bind_executor(ex, [&, j](std::exception_ptr e, session_result<int> r) {
                        if (e || !r || *r != j) ++t.errors;
                        ++done;
                    }));
        }
        if (!drive_until(*io, how, [&] { return done == entries; })) {
            ++t.lost;
            (void)io.release();  // leak it: its state is not to be trusted
            break;
        }
        t.completed += done;
        io.reset();  // at once: a worker may be finishing its post right now
    }
    return t;
}

void check_quiescent(const test_host& cpu) {
    const admission_stats st = cpu.stats();
    CHECK(st.available == st.permits);
    CHECK(st.admitted == st.completed);
    CHECK(st.waiting == 0);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

}  // namespace

TEST_CASE("S16: an io_context destroyed right after run_one() ran the completion (both placements)") {
    test_host cpu({.permits = 1});
    for (placement where : {placement::compute, placement::caller}) {
        INFO((where == placement::compute ? "compute placement" : "caller placement"));
        const tally t =
            entry_rounds(cpu, where, drive::run_one, 1, [](asio::io_context& io) { return io.get_executor(); });
        CHECK(t.lost == 0);
        CHECK(t.errors == 0);
        CHECK(t.completed == rounds());
    }
    check_quiescent(cpu);
}

TEST_CASE("S16: three contending entries, the context destroyed after run_one() and after poll() loops") {
    // With one permit, the second and third entries are granted by the worker
    // (or the caller) releasing the previous one: the runner hop and the
    // completion hop both cross threads.
    test_host cpu({.permits = 1});
    for (drive how : {drive::run_one, drive::poll})
        for (placement where : {placement::compute, placement::caller}) {
            INFO("drive " << static_cast<int>(how) << ", placement " << static_cast<int>(where));
            const tally t = entry_rounds(cpu, where, how, 3, [](asio::io_context& io) { return io.get_executor(); });
            CHECK(t.lost == 0);
            CHECK(t.errors == 0);
            CHECK(t.completed == 3 * rounds());
        }
    check_quiescent(cpu);
}

TEST_CASE("S16: a compute body's release grants caller-placed waiters: the runner hop from a worker") {
    test_host cpu({.permits = 1});
    for (drive how : {drive::run_one, drive::poll}) {
        INFO("drive " << static_cast<int>(how));
        const tally t = entry_rounds(
            cpu, placement::caller, how, 3, [](asio::io_context& io) { return io.get_executor(); }, true);
        CHECK(t.lost == 0);
        CHECK(t.errors == 0);
        CHECK(t.completed == 3 * rounds());
    }
    check_quiescent(cpu);
}

TEST_CASE("S16: strand-bound handlers, the context destroyed right after the last one ran") {
    test_host cpu({.permits = 1});
    for (placement where : {placement::compute, placement::caller}) {
        INFO((where == placement::compute ? "compute placement" : "caller placement"));
        const tally t =
            entry_rounds(cpu, where, drive::run_one, 2, [](asio::io_context& io) { return asio::make_strand(io); });
        CHECK(t.lost == 0);
        CHECK(t.errors == 0);
        CHECK(t.completed == 2 * rounds());
    }
    check_quiescent(cpu);
}

TEST_CASE("S16: a coroutine that awaits an entry and then calls stop(); the context destroyed at once") {
    test_host cpu({.permits = 1});
    long errors = 0, lost = 0, completed = 0;
    const long n = rounds();
    for (long i = 0; i < n; ++i) {
        auto io = std::make_unique<asio::io_context>();
        bool done = false;
        const placement where = i % 2 == 0 ? placement::compute : placement::caller;
        asio::co_spawn(
            *io,
            [&, where]() -> asio::awaitable<void> {
                const session_result<int> r = co_await cpu.with_backend_session(
                    session_options{1, wait_policy::fifo, where}, [](test_session&) { return 7; });
                if (!r || *r != 7) ++errors;
                done = true;
                io->stop();
            },
            asio::detached);
        if (!drive_until(*io, drive::run, [&] { return done; })) {
            ++lost;
            (void)io.release();
            break;
        }
        ++completed;
        io.reset();
    }
    CHECK(lost == 0);
    CHECK(errors == 0);
    CHECK(completed == n);
    check_quiescent(cpu);
}

#ifndef TENFERRO_TEST_GENERIC_HOST
// CPU variant only: .npy I/O is no host's (it runs on the I/O engine), so the
// generic-host build (TENFERRO_TEST_GENERIC_HOST) has nothing to add here.
TEST_CASE("S16: .npy reads and writes, the context destroyed right after the handler ran") {
    // On tmpfs where there is one: the writes' fsync is then nearly free, so
    // they can have as many rounds as the reads.
    const char* tmp = std::getenv("TMPDIR");
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::path(tmp && *tmp ? tmp : "/tmp");
    std::string pattern = (base / "tenferro-teardown-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    const fs::path dir = pattern;
    const fs::path file = dir / "t.npy";
    const std::vector<float> values{1.f, 2.f, 3.f, 4.f};
    const tensor source = tensor::from<float>(values, {2, 2});

    const long read_rounds = rounds();
    const long write_rounds = rounds();
    long errors = 0, lost = 0, reads = 0, writes = 0;
    for (long i = 0; i < write_rounds + read_rounds && lost == 0; ++i) {
        const bool write = i < write_rounds;
        auto io = std::make_unique<asio::io_context>();
        bool done = false;
        auto check = [&](std::error_code ec) {
            if (ec) ++errors;
            done = true;
        };
        if (write)
            async_write_npy(io->get_executor(), file, source, asio::bind_executor(*io, check));
        else
            async_read_npy(io->get_executor(), file,
                           asio::bind_executor(asio::make_strand(*io), [&](std::error_code ec, tensor t) {
                               if (!ec && (t.size() != 4 || t.data<float>()[3] != 4.f)) ++errors;
                               check(ec);
                           }));
        if (!drive_until(*io, i % 2 == 0 ? drive::run_one : drive::poll, [&] { return done; })) {
            ++lost;
            (void)io.release();
            break;
        }
        ++(write ? writes : reads);
        io.reset();
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    CHECK(lost == 0);
    CHECK(errors == 0);
    CHECK(writes == write_rounds);
    CHECK(reads == read_rounds);
}
#endif  // TENFERRO_TEST_GENERIC_HOST

// ---------------------------------------------------------------------------
// A completion its executor destroys unrun (an executor shut down with work
// queued) frees the operation: the handler the operation installed in the
// caller's cancellation slot must go with it. A signal that outlives the
// executor may still be emitted; it must find no handler, not a freed op.
// ---------------------------------------------------------------------------

namespace {

/// An executor that keeps what it is given, unrun, until the test destroys it
/// (as an executor shut down with work queued destroys its functions).
struct held_work {
    struct task {
        virtual ~task() = default;
    };
    template <class F>
    struct task_of final : task {
        template <class G>
        explicit task_of(G&& fn) : f(std::forward<G>(fn)) {}
        F f;
    };
    std::mutex m;
    std::vector<std::unique_ptr<task>> tasks;
    std::atomic<int> count{0};

    void drop_all() {
        std::vector<std::unique_ptr<task>> dropped;
        {
            std::lock_guard<std::mutex> lock(m);
            dropped.swap(tasks);
        }
        dropped.clear();  // the functions' destructors run here, unrun
    }
};

struct holding_executor {
    asio::io_context* ctx;
    held_work* held;

    asio::execution_context& query(asio::execution::context_t) const noexcept { return *ctx; }
    static constexpr asio::execution::blocking_t query(asio::execution::blocking_t) noexcept {
        return asio::execution::blocking.never;
    }
    holding_executor prefer(asio::execution::outstanding_work_t::tracked_t) const noexcept { return *this; }
    holding_executor prefer(asio::execution::outstanding_work_t::untracked_t) const noexcept { return *this; }
    template <class F>
    void execute(F&& f) const {
        auto t = std::make_unique<held_work::task_of<std::decay_t<F>>>(std::forward<F>(f));
        std::lock_guard<std::mutex> lock(held->m);
        held->tasks.push_back(std::move(t));
        held->count.fetch_add(1);
    }
    friend bool operator==(const holding_executor& a, const holding_executor& b) noexcept { return a.held == b.held; }
    friend bool operator!=(const holding_executor& a, const holding_executor& b) noexcept { return !(a == b); }
};

bool wait_for_count(const std::atomic<int>& count, int n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count.load() < n) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

}  // namespace

TEST_CASE("S13: an entry's completion destroyed unrun by its executor leaves nothing in the caller's slot") {
    asio::cancellation_signal signal;  // outlives the executor, as a caller's may
    asio::io_context ctx;
    held_work held;
    test_host cpu({.permits = 1});
    bool called = false;
    cpu.with_backend_session(
        {1, wait_policy::fifo, placement::compute}, [](test_session&) { return 1; },
        asio::bind_cancellation_slot(
            signal.slot(), asio::bind_executor(holding_executor{&ctx, &held},
                                               [&](std::exception_ptr, session_result<int>) { called = true; })));
    CHECK(signal.slot().has_handler());  // the entry's, while it may still be cancelled
    REQUIRE(wait_for_count(held.count, 1));  // the completion, handed to the executor
    held.drop_all();
    CHECK_FALSE(called);
    CHECK_FALSE(signal.slot().has_handler());  // gone with the operation
    signal.emit(asio::cancellation_type::terminal);  // reaches nothing (under ASan: no use after free)
    check_quiescent(cpu);
}

TEST_CASE("S13: a batch item's completion destroyed unrun by its executor leaves nothing in the caller's slot") {
    asio::cancellation_signal signal;
    asio::io_context ctx;
    held_work held;
    test_host cpu({.permits = 1});
    batcher<test_host, int, int> b(cpu, {.max_batch = 4}, [](test_session&, std::span<int> items) {
        return std::vector<int>(items.begin(), items.end());
    });
    bool called = false;
    b.submit(7,
             asio::bind_cancellation_slot(
                 signal.slot(), asio::bind_executor(holding_executor{&ctx, &held},
                                                    [&](std::exception_ptr, session_result<int>) { called = true; })));
    CHECK(signal.slot().has_handler());
    REQUIRE(wait_for_count(held.count, 1));
    held.drop_all();
    CHECK_FALSE(called);
    CHECK_FALSE(signal.slot().has_handler());
    signal.emit(asio::cancellation_type::terminal);
    const batch_stats s = b.stats();
    CHECK(s.waiting == 0);
    check_quiescent(cpu);
}
