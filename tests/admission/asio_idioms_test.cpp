// Today's Asio idioms over every asynchronous operation of the library, on
// the Asio this build compiles against (docs/asio-versions.md): the executor
// each initiation exposes, cancel_after and cancel_at (Asio 1.31 and later),
// deferred, as_tuple, redirect_error (where the signature starts with an error
// code: the .npy operations), experimental::make_parallel_group with
// wait_for_one and wait_for_all, consign (1.26 and later), use_future and
// strands. Each checks S6 (the completion on the handler's executor), S13 (a
// waiting entry cancelled, its body never run, the waiters behind it in
// order) and S16 where the idiom adds a path (the io_context's run() returns
// once the operation completed: nothing of it keeps work there).

#include <tenferro/batcher.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <tuple>
#include <vector>

#include <tenferro/detail/async/library_context.hpp>
#include <tenferro/io.hpp>
#include <tenferro/tensor.hpp>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "npy_test_support.hpp"
#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace std::chrono_literals;
using tenferro::test::gate;
using tenferro::test::run_until;
using tenferro::test::spawn;

namespace {

/// A host with one permit held by a body that waits on `g`: entries made
/// while it is held queue.
struct held_host {
    test_host cpu{{.permits = 1}};
    gate g;
    std::future<session_result<int>> holder;

    held_host() {
        holder = cpu.with_backend_session(
            [this](test_session&) {
                g.wait();
                return 1;
            },
            asio::use_future);
        REQUIRE(g.wait_for_waiters(1));
    }
    ~held_host() { release(); }
    void release() {
        g.open();
        if (holder.valid()) CHECK(holder.get().value() == 1);
    }
};

/// Runs `io` on a thread of its own until it runs out of work; join() says
/// whether it did within `limit` (false: something kept work on it).
class runner {
public:
    explicit runner(asio::io_context& io)
        : thread_([&io, this] {
              io.run();
              done_.store(true);
          }) {}
    ~runner() {
        if (thread_.joinable()) thread_.join();
    }
    bool join(std::chrono::milliseconds limit = 20s) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!done_.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
        if (!done_.load()) return false;
        thread_.join();
        return true;
    }

private:
    std::atomic<bool> done_{false};
    std::thread thread_;
};

using int_batcher = batcher<test_host, int, int>;

auto doubled() {
    return [](test_session&, std::span<int> items) {
        std::vector<int> out;
        for (const int i : items) out.push_back(2 * i);
        return out;
    };
}

}  // namespace

TEST_CASE("idioms: a handler with no executor completes in the library's context, not Asio's system context") {
    test_host cpu({.permits = 1});
    std::promise<bool> where;
    cpu.with_backend_session([](test_session&) { return 3; },
                             [&](std::exception_ptr, session_result<int> r) {
                                 where.set_value(r.value() == 3 && detail::in_library_context());
                             });
    CHECK(where.get_future().get());

    // batcher::submit's plain callback too.
    int_batcher b(cpu, {.max_batch = 4}, doubled());
    std::promise<bool> item;
    b.submit(5, [&](std::exception_ptr, session_result<int> r) {
        item.set_value(r.value() == 10 && detail::in_library_context());
    });
    CHECK(item.get_future().get());
}

TEST_CASE("idioms: a handler bound to Asio's system executor completes in the library's context") {
    // The system executor allows any thread; Asio's system context, made
    // inside pthread_once where out of memory ends the process, is not used.
    test_host cpu({.permits = 1});
    std::promise<bool> where;
    cpu.with_backend_session(
        [](test_session&) { return 3; },
        asio::bind_executor(asio::system_executor(), [&](std::exception_ptr, session_result<int> r) {
            where.set_value(r.value() == 3 && detail::in_library_context());
        }));
    CHECK(where.get_future().get());

    int_batcher b(cpu, {.max_batch = 4}, doubled());
    std::promise<bool> item;
    b.submit(5, asio::bind_executor(asio::system_executor(), [&](std::exception_ptr, session_result<int> r) {
                 item.set_value(r.value() == 10 && detail::in_library_context());
             }));
    CHECK(item.get_future().get());

    // The same for an entry placed on the caller: its body runs in the
    // library's context as well.
    std::promise<bool> body_where;
    cpu.with_backend_session(
        {1, wait_policy::fifo, placement::caller}, [](test_session&) { return detail::in_library_context(); },
        asio::bind_executor(asio::system_executor(), [&](std::exception_ptr, session_result<bool> r) {
            body_where.set_value(r.value() && detail::in_library_context());
        }));
    CHECK(body_where.get_future().get());
}

TEST_CASE("idioms: deferred, as_tuple and consign on an entry, a scope and a submit") {
    asio::io_context io;
    test_host cpu({.permits = 2});
    int_batcher b(cpu, {.max_batch = 4}, doubled());
    auto keep = std::make_shared<int>(7);
    bool done = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        auto op = cpu.with_backend_session([](test_session&) { return 1; }, tenferro::test::deferred);
        session_result<int> r = co_await std::move(op)(asio::use_awaitable);
        CHECK(r.value() == 1);
        CHECK(io.get_executor().running_in_this_thread());

        auto [e, s] = co_await cpu.with_execution_scope([](execution_scope&) -> asio::awaitable<int> { co_return 4; },
                                                        tenferro::test::as_tuple(asio::use_awaitable));
        CHECK(e == nullptr);
        CHECK(s.value() == 4);
        CHECK(io.get_executor().running_in_this_thread());

        auto [e2, item] = co_await b.submit(21, tenferro::test::as_tuple(asio::use_awaitable));
        CHECK(e2 == nullptr);
        CHECK(item.value() == 42);
#if TENFERRO_ASIO_HAS_CONSIGN
        // consign keeps its values alive until the completion (the body
        // sees the copy; the handler that holds it is destroyed after the
        // coroutine resumed, as for Asio's own operations).
        session_result<int> c =
            co_await cpu.with_backend_session([&](test_session&) { return static_cast<int>(keep.use_count()); },
                                              asio::consign(asio::use_awaitable, keep));
        CHECK(c.value() == 2);
        bool consigned_at_submit = false;
        session_result<int> ci = co_await b.submit(1, asio::consign(asio::use_awaitable, keep));
        consigned_at_submit = ci.value() == 2;
        CHECK(consigned_at_submit);
#endif
        done = true;
    });
    runner r(io);
    REQUIRE(r.join());
    CHECK(done);
    CHECK(keep.use_count() == 1);  // every consigned copy went with its operation
}

TEST_CASE("idioms: make_parallel_group wait_for_one cancels the entry still waiting; wait_for_all waits for both") {
    held_host h;
    asio::io_context io;
    std::atomic<bool> second_ran{false};
    std::optional<std::size_t> first_index;
    std::optional<session_result<int>> waiting_result;
    spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor, 20ms);
        auto [order, timer_ec, e, r] = co_await asio::experimental::make_parallel_group(
                                           timer.async_wait(tenferro::test::deferred), h.cpu.with_backend_session(
                                                                                           [&](test_session&) {
                                                                                               second_ran = true;
                                                                                               return 2;
                                                                                           },
                                                                                           tenferro::test::deferred))
                                           .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
        first_index = order[0];
        waiting_result = r;
        (void)timer_ec;
        (void)e;
    });
    REQUIRE(run_until(io, [&] { return waiting_result.has_value(); }));
    CHECK(*first_index == 0);  // the timer
    CHECK(waiting_result->error() == session_entry_errc::cancelled);
    CHECK_FALSE(second_ran);
    CHECK(h.cpu.stats().cancelled == 1);
    h.release();

    // wait_for_all: both entries run, each result in its place.
    std::optional<std::pair<int, int>> both;
    spawn(io, [&]() -> asio::awaitable<void> {
        auto [order, e1, r1, e2, r2] =
            co_await asio::experimental::make_parallel_group(
                h.cpu.with_backend_session([](test_session&) { return 10; }, tenferro::test::deferred),
                h.cpu.with_backend_session([](test_session&) { return 20; }, tenferro::test::deferred))
                .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
        (void)order;
        CHECK(e1 == nullptr);
        CHECK(e2 == nullptr);
        both.emplace(r1.value(), r2.value());
    });
    REQUIRE(run_until(io, [&] { return both.has_value(); }));
    CHECK(both->first == 10);
    CHECK(both->second == 20);
    const admission_stats st = h.cpu.stats();
    CHECK(st.admitted == st.completed);
    CHECK(st.available == st.permits);
}

TEST_CASE("idioms: a strand-bound callback and a coroutine on a strand resume on the strand") {
    test_host cpu({.permits = 2});
    asio::io_context io;
    auto strand = asio::make_strand(io);
    std::atomic<int> on_strand{0};
    constexpr int n = 16;
    for (int i = 0; i < n; ++i) {
        cpu.with_backend_session([i](test_session&) { return i; },
                                 asio::bind_executor(strand, [&, i](std::exception_ptr, session_result<int> r) {
                                     if (strand.running_in_this_thread() && r.value() == i) ++on_strand;
                                 }));
    }
    std::atomic<int> coroutines{0};
    for (int i = 0; i < n; ++i) {
        spawn(strand, [&, i]() -> asio::awaitable<void> {
            session_result<int> r = co_await cpu.with_backend_session([i](test_session&) { return i; });
            if (strand.running_in_this_thread() && r.value() == i) ++coroutines;
        });
    }
    // Two threads run the io_context: the strand serialises the handlers.
    std::thread other([&] { io.run(); });
    io.run();
    other.join();
    CHECK(on_strand == n);
    CHECK(coroutines == n);
}

#if TENFERRO_ASIO_HAS_CANCEL_AFTER

TEST_CASE("idioms: cancel_after cancels a waiting entry; its body never runs; the waiters behind keep their order") {
    held_host h;
    asio::io_context io;
    std::vector<int> order;
    std::mutex order_mutex;
    auto body = [&](int id) {
        return [&, id](test_session&) {
            const std::lock_guard lock(order_mutex);
            order.push_back(id);
            return id;
        };
    };
    std::optional<session_result<int>> timed, behind1, behind2;
    bool resumed_on_io = false;
    spawn(io, [&]() -> asio::awaitable<void> { behind1 = co_await h.cpu.with_backend_session(body(1)); });
    spawn(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        timed = co_await h.cpu.with_backend_session(body(2), asio::cancel_after(20ms, asio::use_awaitable));
        resumed_on_io = io.get_executor().running_in_this_thread();
    });
    spawn(io, [&]() -> asio::awaitable<void> { behind2 = co_await h.cpu.with_backend_session(body(3)); });
    REQUIRE(run_until(io, [&] { return timed.has_value(); }));
    CHECK(timed->error() == session_entry_errc::cancelled);
    CHECK(resumed_on_io);
    CHECK(h.cpu.stats().cancelled == 1);
    CHECK(h.cpu.stats().waiting == 2);
    h.release();
    REQUIRE(run_until(io, [&] { return behind1.has_value() && behind2.has_value(); }));
    CHECK(order == std::vector<int>{1, 3});
    const admission_stats st = h.cpu.stats();
    CHECK(st.admitted == st.completed);
    CHECK(st.available == st.permits);
}

TEST_CASE("idioms: cancel_after that does not fire leaves the value, and no work behind on the caller's context") {
    test_host cpu({.permits = 1});
    asio::io_context io;
    std::optional<session_result<int>> r, s, t;
    spawn(io, [&]() -> asio::awaitable<void> {
        r = co_await cpu.with_backend_session([](test_session&) { return 5; },
                                              asio::cancel_after(10s, asio::use_awaitable));
        s = co_await cpu.with_backend_session(
            {1, wait_policy::fifo, placement::caller}, [](test_session&) { return 6; },
            asio::cancel_at(std::chrono::steady_clock::now() + 10s, asio::use_awaitable));
        t = co_await cpu.with_backend_session([](test_session&) -> asio::awaitable<int> { co_return 7; },
                                              asio::cancel_after(10s, asio::use_awaitable));
    });
    runner run(io);
    // Ten seconds of timers: run() returning at once proves they were
    // cancelled with their operations, and hold nothing on `io`.
    REQUIRE(run.join(5s));
    CHECK(r->value() == 5);
    CHECK(s->value() == 6);
    CHECK(t->value() == 7);
}

TEST_CASE("idioms: cancel_at, the user's own timer, a scope, a submit and a plain callback") {
    held_host h;
    asio::io_context io;
    int_batcher b(h.cpu, {.max_batch = 4}, doubled());
    bool ran = false;
    std::optional<session_result<int>> at, own, scope, item;
    spawn(io, [&]() -> asio::awaitable<void> {
        at = co_await h.cpu.with_backend_session(
            [&](test_session&) {
                ran = true;
                return 0;
            },
            asio::cancel_at(std::chrono::steady_clock::now() + 10ms, asio::use_awaitable));
    });
    asio::steady_timer mine(io);
    spawn(io, [&]() -> asio::awaitable<void> {
        own = co_await h.cpu.with_backend_session(
            [&](test_session&) {
                ran = true;
                return 0;
            },
            asio::cancel_after(mine, 10ms, asio::use_awaitable));
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        scope = co_await h.cpu.with_execution_scope(
            [&](execution_scope&) -> asio::awaitable<int> {
                ran = true;
                co_return 0;
            },
            asio::cancel_after(10ms, asio::use_awaitable));
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        item = co_await b.submit(1, asio::cancel_after(10ms, asio::use_awaitable));
    });
    // A plain callback: its cancel_after timer and its completion are both in
    // the library's context (the executor the entry exposes).
    std::promise<std::pair<session_entry_errc, bool>> callback;
    h.cpu.with_backend_session(
        [&](test_session&) {
            ran = true;
            return 0;
        },
        asio::cancel_after(10ms, [&](std::exception_ptr, session_result<int> r) {
            callback.set_value({r ? session_entry_errc{} : r.error().code(), detail::in_library_context()});
        }));
    REQUIRE(run_until(io, [&] { return at && own && scope && item; }));
    CHECK(at->error() == session_entry_errc::cancelled);
    CHECK(own->error() == session_entry_errc::cancelled);
    CHECK(scope->error() == session_entry_errc::cancelled);
    CHECK(item->error() == session_entry_errc::cancelled);
    const auto [code, in_library] = callback.get_future().get();
    CHECK(code == session_entry_errc::cancelled);
    CHECK(in_library);
    CHECK_FALSE(ran);
    h.release();
    // The batcher's own session, queued for the cancelled item, still runs
    // (with nothing to do) once the permit is back: wait for quiescence.
    CHECK(run_until(io, [&] {
        const admission_stats st = h.cpu.stats();
        return st.admitted == st.completed && st.available == st.permits;
    }));
}

#endif  // TENFERRO_ASIO_HAS_CANCEL_AFTER

#ifndef TENFERRO_TEST_GENERIC_HOST

TEST_CASE("idioms: cached entries take the same tokens") {
    test_host cpu({.permits = 1});
    cpu_runtime_cache cache;
    asio::io_context io;
    std::optional<session_result<int>> r, d;
    spawn(io, [&]() -> asio::awaitable<void> {
        auto [e, v] = co_await cpu.with_backend_session_cached(
            cache, [](test_session&) { return 8; }, tenferro::test::as_tuple(asio::use_awaitable));
        CHECK(e == nullptr);
        r = v;
        auto op = cpu.with_backend_session_cached(
            cache, [](test_session&) { return 9; }, tenferro::test::deferred);
        d = co_await std::move(op)(asio::use_awaitable);
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
        session_result<int> c = co_await cpu.with_backend_session_cached(
            cache, [](test_session&) { return 10; }, asio::cancel_after(10s, asio::use_awaitable));
        CHECK(c.value() == 10);
#endif
    });
    runner run(io);
    REQUIRE(run.join(5s));
    CHECK(r->value() == 8);
    CHECK(d->value() == 9);
}

TEST_CASE("idioms: the .npy operations expose the I/O executor, and take redirect_error, as_tuple, deferred") {
    test::npy_io::scratch_dir dir;
    const auto path = dir / "x.npy";
    const tensor x = tensor::from<float>({1.f, 2.f, 3.f}, {3});
    asio::io_context io;
    bool done = false;
    std::promise<bool> on_io;
    spawn(io, [&]() -> asio::awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        asio_error_code ec;
        co_await async_write_npy(ex, path, x, asio::redirect_error(asio::use_awaitable, ec));
        CHECK_FALSE(ec);
        tensor t = co_await async_read_npy(ex, dir / "missing.npy", asio::redirect_error(asio::use_awaitable, ec));
        CHECK(ec);  // no exception: the error went to `ec`
        CHECK(io.get_executor().running_in_this_thread());
        auto [ec2, y] = co_await async_read_npy(ex, path, tenferro::test::as_tuple(asio::use_awaitable));
        CHECK_FALSE(ec2);
        CHECK(y.size() == 3);
        auto op = async_read_npy(ex, path, tenferro::test::deferred);
        auto [ec3, z] = co_await std::move(op)(tenferro::test::as_tuple(asio::use_awaitable));
        CHECK_FALSE(ec3);
        CHECK(z.size() == 3);
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
        tensor w = co_await async_read_npy(ex, path, asio::cancel_after(10s, asio::use_awaitable));
        CHECK(w.size() == 3);
        co_await async_write_npy(ex, path, x, asio::cancel_after(10s, asio::use_awaitable));
#endif
        (void)t;
        // A plain callback completes on the I/O executor the caller named.
        async_read_npy(io.get_executor(), path, [&](asio_error_code e, tensor) {
            on_io.set_value(!e && io.get_executor().running_in_this_thread());
        });
        done = true;
    });
    runner run(io);
    REQUIRE(run.join(10s));
    CHECK(done);
    CHECK(on_io.get_future().get());
}

#endif  // TENFERRO_TEST_GENERIC_HOST
