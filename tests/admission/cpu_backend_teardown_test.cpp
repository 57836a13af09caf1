// cpu_backend: shutdown and the end of what an entry depends on (S12, S16):
// the host shut down or destroyed, executors that drop work or die, a caller's
// io_context destroyed as soon as its run() returns.
#include <tenferro/cpu_backend.hpp>

#include <sched.h>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "entry_helpers.hpp"
#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using tenferro::test::gate;
using tenferro::test::holder;
using tenferro::test::on_caller;
using tenferro::test::run_until;
using tenferro::test::spawn;

TEST_CASE("shutdown: queued and new entries complete with executor; the running one finishes") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    gate g;
    std::optional<session_result<int>> running, queued, late;
    spawn(io, [&]() -> asio::awaitable<void> {
        running = co_await cpu.with_backend_session([&](test_session&) {
            g.wait();
            return 1;
        });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        queued = co_await cpu.with_backend_session([](test_session&) { return 2; });
    });
    io.poll();
    REQUIRE(g.wait_for_waiters(1));
    REQUIRE(cpu.stats().waiting == 1);
    cpu.shutdown();
    cpu.shutdown();  // idempotent
    spawn(io, [&]() -> asio::awaitable<void> {
        late = co_await cpu.with_backend_session([](test_session&) { return 3; });
    });
    io.poll();
    REQUIRE(queued.has_value());
    CHECK(queued->error() == session_entry_errc::executor);
    REQUIRE(late.has_value());
    CHECK(late->error() == session_entry_errc::executor);
    CHECK_FALSE(running.has_value());
    g.open();
    REQUIRE(run_until(io, [&] { return running.has_value(); }));
    CHECK(running->value() == 1);
    CHECK(cpu.stats().available == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("shutdown with every permit free: an entry that would start inline completes with executor") {
    // The caller-placed entry below would be admitted at once and run inline
    // in its initiation (the inline fast path); after shutdown() it must not.
    asio::io_context io;
    test_host cpu({.permits = 2});
    cpu.shutdown();
    bool ran = false;
    std::optional<session_result<int>> late;
    spawn(io, [&]() -> asio::awaitable<void> {
        late = co_await cpu.with_backend_session(on_caller(), [&](test_session&) {
            ran = true;
            return 3;
        });
    });
    io.run();
    REQUIRE(late.has_value());
    REQUIRE_FALSE(late->has_value());
    CHECK(late->error() == session_entry_errc::executor);
    CHECK(late->error().detail() == "the host was shut down");
    CHECK_FALSE(ran);
    const admission_stats st = cpu.stats();
    CHECK(st.available == 2);
    CHECK(st.admitted == 0);
    CHECK(st.rejected == 1);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 0);
}

TEST_CASE("A compute executor that drops work completes the entry with executor, leaking nothing") {
    asio::io_context io;
    test_host cpu({.permits = 1});
    cpu.drop_next_runs(1);
    std::optional<session_result<int>> dropped, next;
    bool ran = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        dropped = co_await cpu.with_backend_session([&](test_session&) {
            ran = true;
            return 1;
        });
        next = co_await cpu.with_backend_session([&](test_session&) { return 2; });
    });
    REQUIRE(run_until(io, [&] { return next.has_value(); }));
    CHECK(dropped->error() == session_entry_errc::executor);
    CHECK_FALSE(ran);
    CHECK(next->value() == 2);
    const admission_stats st = cpu.stats();
    CHECK(st.available == 1);
    CHECK(st.admitted == st.completed);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 1);  // `next` only: the dropped runner opened none
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("A caller executor destroyed with a granted caller-placed runner frees everything") {
    auto io = std::make_unique<asio::io_context>();
    test_host cpu({.permits = 1});
    bool ran = false;
    tenferro::test::counted::live = 0;
    {
        tenferro::test::counted probe;
        cpu.with_backend_session(
            on_caller(), [&, probe](test_session&) { ran = true; },
            asio::bind_executor(io->get_executor(), [](std::exception_ptr, session_result<void>) {}));
    }
    CHECK(tenferro::test::counted::live == 1);  // the body is held by the pending operation
    io.reset();                                 // destroys the posted runner unrun
    CHECK_FALSE(ran);
    CHECK(tenferro::test::counted::live == 0);
    const admission_stats st = cpu.stats();
    CHECK(st.available == 1);
    CHECK(st.admitted == st.completed);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 0);
}

TEST_CASE("A caller's io_context may be destroyed as soon as its run() returns (strands, both placements)") {
    // The worker that completes an entry (or grants a caller-placed one) hands
    // a function to the caller's executor; that function may run, finish the
    // last entry and let run() return while the worker is still inside
    // post/dispatch. Destroying the context right then must be safe: a
    // use-after-free of the strand's service, which ASan reports.
    test_host cpu({.permits = 1});
    // About 40 us a round; the race needs thousands of rounds under ASan to
    // show (10,000 catch it every time, 2,000 only sometimes).
    const long rounds = 10 * tenferro::test::stress_iterations(1000);
    long sum = 0, errors = 0;
    for (long i = 0; i < rounds; ++i) {
        auto io = std::make_unique<asio::io_context>();
        std::optional strand(asio::make_strand(*io));
        const session_options opts{1, wait_policy::fifo, i % 2 == 0 ? placement::compute : placement::caller};
        // Three entries contend for one permit: the second and third are
        // granted by the worker releasing the previous one.
        for (int j = 0; j < 3; ++j) {
            auto body = [j](test_session&) { return j + 1; };
            auto done = [&](std::exception_ptr e, session_result<int> r) {
                if (e || !r)
                    ++errors;
                else
                    sum += *r;
            };
            if (j == 2)
                asio::co_spawn(
                    *strand,
                    [&, opts]() -> asio::awaitable<void> {
                        const session_result<int> r =
                            co_await cpu.with_backend_session(opts, [](test_session&) { return 3; });
                        if (r)
                            sum += *r;
                        else
                            ++errors;
                    },
                    asio::detached);
            else
                cpu.with_backend_session(opts, body, asio::bind_executor(*strand, done));
        }
        strand.reset();  // ours only: the entries hold their own copies
        io->run();
        io.reset();  // at once, while a worker may still be returning from post
    }
    CHECK(errors == 0);
    CHECK(sum == 6 * rounds);
    const admission_stats st = cpu.stats();
    CHECK(st.available == 1);
    CHECK(st.admitted == st.completed);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("Destruction waits for running sessions") {
    std::atomic<bool> finished{false};
    std::promise<bool> completed;  // the completion may arrive after the destructor returned
    {
        test_host cpu({.permits = 1});
        gate started;
        cpu.with_backend_session(
            [&](test_session&) {
                started.open();
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                finished = true;
            },
            [&](std::exception_ptr, session_result<void> r) { completed.set_value(r.has_value()); });
        started.wait();
    }
    CHECK(finished);
    CHECK(completed.get_future().get());
}
