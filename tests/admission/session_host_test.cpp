// What section 6 of the contract (custom backends, session_host.hpp) adds to
// S1-S20, for a backend: what a session_backend is; when and where
// its open_session is called, and what its rejections and exceptions do; the
// backend built in place; destruction with waiters; sessions that can be
// neither copied nor moved. Caller-placed entries on a stepped io_context,
// exact event orders.
#include <tenferro/session_host.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#include <catch2/catch.hpp>
#include <tenferro/cpu_backend.hpp>
#include "test_asio.hpp"

#include "entry_helpers.hpp"
#include "probe_backend.hpp"
#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace tenferro::test::probe;
using tenferro::test::gate;
using tenferro::test::on_caller;
using tenferro::test::on_compute;
using tenferro::test::placed;
using tenferro::test::run_until;
using tenferro::test::spawn;

namespace {

// --- Backends that are not session_backends -------------------------------

struct without_session_type {
    std::string_view name() const { return "x"; }
    int open_session(const session_grant&) { return 0; }
};
struct without_name {
    using session_type = int;
    int open_session(const session_grant&) { return 0; }
};
struct without_open_session {
    using session_type = int;
    std::string_view name() const { return "x"; }
};

// --- A session_type that is a base class, opened as a derived one ---------

class stream_base {
public:
    stream_base() = default;
    stream_base(const stream_base&) = delete;
    stream_base& operator=(const stream_base&) = delete;
    virtual ~stream_base() = default;
    virtual int stream() const noexcept = 0;
};

class stream_impl final : public stream_base {
public:
    stream_impl(int stream, std::atomic<int>& live) : stream_(stream), live_(&live) { live_->fetch_add(1); }
    ~stream_impl() override { live_->fetch_sub(1); }
    int stream() const noexcept override { return stream_; }

private:
    int stream_;
    std::atomic<int>* live_;
};

/// Hands out immovable derived sessions by value (a prvalue, no session_result).
class stream_pool {
public:
    using session_type = stream_base;
    std::string_view name() const noexcept { return "streams"; }
    stream_impl open_session(const session_grant&) { return stream_impl(next_.fetch_add(1) + 1, live); }
    std::atomic<int> live{0};

private:
    std::atomic<int> next_{0};
};

// --- A backend built in place from forwarded arguments --------------------

class configured_backend {
public:
    using session_type = test::device_session;
    configured_backend(std::string name, int tag, std::unique_ptr<int> payload)
        : name_(std::move(name)), tag_(tag), payload_(std::move(payload)) {}
    configured_backend(const configured_backend&) = delete;
    configured_backend& operator=(const configured_backend&) = delete;

    std::string_view name() const noexcept { return name_; }
    test::device_session open_session(const session_grant& g) { return test::device_session(name_, g, counters_); }

    int tag() const noexcept { return tag_; }
    const int* payload() const noexcept { return payload_.get(); }
    const void* self() const noexcept { return this; }

private:
    std::string name_;
    int tag_;
    std::unique_ptr<int> payload_;
    test::session_counters counters_;
};

}  // namespace

static_assert(session_backend<probe_backend>);
static_assert(session_backend<test::device_backend>);
static_assert(session_backend<stream_pool>);
static_assert(session_backend<configured_backend>);
static_assert(!session_backend<without_session_type>);
static_assert(!session_backend<without_name>);
static_assert(!session_backend<without_open_session>);
static_assert(std::is_same_v<probe_host::session_type, probe_session>);
static_assert(std::is_same_v<probe_host::backend_type, probe_backend>);
static_assert(!std::is_copy_constructible_v<probe_session> && !std::is_move_constructible_v<probe_session>);
static_assert(!std::is_copy_constructible_v<stream_impl> && !std::is_move_constructible_v<stream_impl>);
static_assert(!std::is_move_constructible_v<test::device_session>);

TEST_CASE("open_session: once per admitted entry, after admission, on the body's thread, with the grant (caller)") {
    probe_log log;
    asio::io_context io;
    probe_host host({.permits = 3}, log);
    const auto main_thread = std::this_thread::get_id();

    // Admitted at once: the session is opened inside the initiation, on this
    // thread, right before the body (which runs inline), and closed after it.
    std::optional<session_result<std::size_t>> a;
    std::thread::id a_thread;
    spawn(io, [&]() -> asio::awaitable<void> {
        a = co_await host.with_backend_session(on_caller(2), [&](probe_session& s) {
            log.push("body a #" + std::to_string(s.id()));
            a_thread = std::this_thread::get_id();
            return s.parallelism();
        });
    });
    io.poll_one();
    CHECK(log.take_events() == std::vector<std::string>{"open #1 k=2", "body a #1", "close #1"});
    io.run();
    REQUIRE(a.has_value());
    CHECK(a->value() == 2);
    CHECK(a_thread == main_thread);

    // A holder takes every permit. A waiting entry opens nothing until it is
    // granted; rejected and cancelled entries never open a session.
    io.restart();
    asio::steady_timer release(io, std::chrono::hours(1));
    std::optional<session_result<int>> h, b, c, d, e;
    asio::cancellation_signal cancel_e;
    int rejected_runs = 0;
    spawn(io, [&]() -> asio::awaitable<void> {
        h = co_await host.with_backend_session(on_caller(3), [&](probe_session& s) -> asio::awaitable<int> {
            log.push("body h #" + std::to_string(s.id()));
            tenferro::asio_error_code ec;
            co_await release.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            log.push("body h done #" + std::to_string(s.id()));
            co_return 0;
        });
    });
    io.poll();
    CHECK(log.take_events() == std::vector<std::string>{"open #2 k=3", "body h #2"});
    spawn(io, [&]() -> asio::awaitable<void> {
        b = co_await host.with_backend_session(on_caller(1), [&](probe_session& s) {
            log.push("body b #" + std::to_string(s.id()));
            return 1;
        });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        c = co_await host.with_backend_session({1, wait_policy::never, placement::caller}, [&](probe_session&) {
            ++rejected_runs;
            return 2;
        });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        d = co_await host.with_backend_session(on_caller(4), [&](probe_session&) {
            ++rejected_runs;
            return 3;
        });
    });
    spawn(io, [&]() -> asio::awaitable<void> {
        auto body = [&](probe_session&) {
            ++rejected_runs;
            return 4;
        };
        e = co_await host.with_backend_session(on_caller(1), std::move(body),
                                               asio::bind_cancellation_slot(cancel_e.slot(), asio::use_awaitable));
    });
    io.poll();
    CHECK(host.stats().waiting == 2);
    REQUIRE(c.has_value());
    CHECK(c->error() == session_entry_errc::contended);
    REQUIRE(d.has_value());
    CHECK(d->error() == session_entry_errc::incompatible_context);
    cancel_e.emit(asio::cancellation_type::terminal);
    io.poll();
    REQUIRE(e.has_value());
    CHECK(e->error() == session_entry_errc::cancelled);
    CHECK(log.take_events().empty());
    CHECK(log.opened == 2);

    // The holder's session goes before its permits; only then is b granted,
    // and only then is b's session opened.
    release.cancel();
    io.run();
    CHECK(log.take_events() ==
          std::vector<std::string>{"body h done #2", "close #2", "open #3 k=1", "body b #3", "close #3"});
    REQUIRE(h.has_value());
    CHECK(h->value() == 0);
    REQUIRE(b.has_value());
    CHECK(b->value() == 1);
    CHECK(rejected_runs == 0);
    CHECK(log.opened == 3);
    CHECK(log.closed == 3);
    CHECK(log.copy(log.grant_permits) == std::vector<std::size_t>{2, 3, 1});
    CHECK(log.copy(log.grant_contexts) == std::vector<const void*>(3, context_id(io)));
    CHECK(log.copy(log.open_threads) == std::vector<std::thread::id>(3, main_thread));
    CHECK(balanced(host.stats()));
}

TEST_CASE("open_session: on the compute worker that runs the body (sync and async), with the pool's executor") {
    probe_log log;
    asio::io_context io;
    probe_host host({.permits = 2}, log);
    std::thread::id sync_thread, async_thread, async_resumed_thread;
    std::optional<session_result<std::size_t>> s1, s2;
    spawn(io, [&]() -> asio::awaitable<void> {
        s1 = co_await host.with_backend_session(on_compute(2), [&](probe_session& s) {
            sync_thread = std::this_thread::get_id();
            return s.parallelism();
        });
        s2 = co_await host.with_backend_session(on_compute(1), [&](probe_session& s) -> asio::awaitable<std::size_t> {
            async_thread = std::this_thread::get_id();
            co_return s.parallelism();
        });
    });
    REQUIRE(run_until(io, [&] { return s2.has_value(); }));
    REQUIRE(s1.has_value());
    CHECK(s1->value() == 2);
    CHECK(s2->value() == 1);
    const auto threads = log.copy(log.open_threads);
    REQUIRE(threads.size() == 2);
    CHECK(threads[0] == sync_thread);
    CHECK(threads[1] == async_thread);
    CHECK(sync_thread != std::this_thread::get_id());
    CHECK(async_thread != std::this_thread::get_id());
    CHECK(log.copy(log.grant_permits) == std::vector<std::size_t>{2, 1});
    CHECK(log.copy(log.grant_contexts) == std::vector<const void*>(2, pool_id(host)));
    CHECK(log.take_events() == std::vector<std::string>{"open #1 k=2", "close #1", "open #2 k=1", "close #2"});
    CHECK(balanced(host.stats()));
}

TEST_CASE("open_session rejecting with a code outside session_entry_errc: executor, naming the code") {
    // The entry keeps its admission failure's code in a byte, 0 meaning none: a backend's
    // session_entry_errc{0} must not read as "no error" (the body never ran, so the entry would claim
    // that the body threw), nor a large code be truncated.
    for (const open_plan plan : {open_plan::reject_code_zero, open_plan::reject_code_large})
        for (placement where : {placement::caller, placement::compute}) {
            const bool zero = plan == open_plan::reject_code_zero;
            INFO(name_of(where) << (zero ? ", code 0" : ", code 1000"));
            probe_log log;
            asio::io_context io;
            probe_host host({.permits = 1}, log);
            log.will(plan);
            std::optional<session_result<int>> r;
            std::atomic<int> runs{0};
            spawn(io, [&]() -> asio::awaitable<void> {
                r = co_await host.with_backend_session(placed(where), [&](probe_session&) { return ++runs; });
            });
            REQUIRE(run_until(io, [&] { return r.has_value(); }));
            REQUIRE_FALSE(r->has_value());
            CHECK(r->error() == session_entry_errc::executor);
            CHECK(r->error().backend() == "probe");
            CHECK(r->error().detail() == std::string("the backend rejected the session with ") + (zero ? "0" : "1000") +
                                             ", which is not a session_entry_errc: " + (zero ? "zero" : "large"));
            CHECK(runs == 0);
            CHECK(balanced(host.stats()));
        }
}

TEST_CASE("open_session rejecting: the entry completes with its error, the body never runs, the permits return") {
    for (session_entry_errc code : {session_entry_errc::contended, session_entry_errc::incompatible_context})
        for (placement where : {placement::caller, placement::compute})
            for (bool async_body : {false, true}) {
                INFO(name_of(where) << (async_body ? ", async body" : ", sync body") << ", errc "
                                    << static_cast<int>(code));
                probe_log log;
                asio::io_context io;
                probe_host host({.permits = 1}, log);
                asio::steady_timer release(io, std::chrono::hours(1));
                std::optional<session_result<int>> h, a, b;
                std::atomic<int> a_runs{0};
                spawn(io, [&]() -> asio::awaitable<void> {
                    h = co_await host.with_backend_session(on_caller(), [&](probe_session&) -> asio::awaitable<int> {
                        tenferro::asio_error_code ec;
                        co_await release.async_wait(asio::redirect_error(asio::use_awaitable, ec));
                        co_return 0;
                    });
                });
                io.poll();
                REQUIRE(log.opened == 1);
                log.will(code == session_entry_errc::contended ? open_plan::reject_contended
                                                               : open_plan::reject_incompatible);
                spawn(io, [&]() -> asio::awaitable<void> {
                    if (async_body) {
                        a = co_await host.with_backend_session(placed(where),
                                                               [&](probe_session&) -> asio::awaitable<int> {
                                                                   ++a_runs;
                                                                   co_return 1;
                                                               });
                    } else {
                        a = co_await host.with_backend_session(placed(where), [&](probe_session&) { return ++a_runs; });
                    }
                });
                // b waits behind a: only a's rejection can give it the permit.
                spawn(io, [&]() -> asio::awaitable<void> {
                    b = co_await host.with_backend_session(placed(where), [](probe_session& s) { return s.id(); });
                });
                io.poll();
                REQUIRE(host.stats().waiting == 2);
                release.cancel();
                REQUIRE(run_until(io, [&] { return h && a && b; }));
                CHECK(h->value() == 0);
                REQUIRE_FALSE(a->has_value());
                CHECK(a->error() == code);
                CHECK(a->error().backend() == "probe");
                CHECK(a->error().detail() ==
                      (code == session_entry_errc::contended ? "the device is busy" : "wrong device generation"));
                CHECK(a_runs == 0);
                CHECK(b->value() == 2);
                CHECK(log.take_events() ==
                      std::vector<std::string>{"open #1 k=1", "close #1", "reject k=1", "open #2 k=1", "close #2"});
                CHECK_FALSE(host.poisoned());
                const admission_stats st = host.stats();
                CHECK(balanced(st));
                CHECK(st.admitted == 3);
                CHECK(st.rejected == 1);
                CHECK(log.live == 0);
            }
}

TEST_CASE("open_session throwing: executor with the message; the host is not poisoned and keeps admitting") {
    for (open_plan plan : {open_plan::throw_runtime_error, open_plan::throw_int})
        for (placement where : {placement::caller, placement::compute})
            for (bool async_body : {false, true}) {
                INFO(name_of(where) << (async_body ? ", async body" : ", sync body")
                                    << (plan == open_plan::throw_int ? ", throws an int" : ", throws runtime_error"));
                probe_log log;
                asio::io_context io;
                probe_host host({.permits = 1}, log);
                std::optional<session_result<int>> a, b, c;
                std::atomic<int> a_runs{0};
                log.will(plan);
                spawn(io, [&]() -> asio::awaitable<void> {
                    if (async_body) {
                        a = co_await host.with_backend_session(placed(where),
                                                               [&](probe_session&) -> asio::awaitable<int> {
                                                                   ++a_runs;
                                                                   co_return 1;
                                                               });
                    } else {
                        a = co_await host.with_backend_session(placed(where), [&](probe_session&) { return ++a_runs; });
                    }
                    b = co_await host.with_backend_session(placed(where), [](probe_session& s) { return s.id(); });
                    c = co_await host.with_backend_session(
                        placed(where), [](probe_session& s) -> asio::awaitable<int> { co_return s.id(); });
                });
                REQUIRE(run_until(io, [&] { return c.has_value(); }));
                REQUIRE_FALSE(a->has_value());
                CHECK(a->error() == session_entry_errc::executor);
                CHECK(a->error().backend() == "probe");
                if (plan == open_plan::throw_runtime_error)
                    CHECK(a->error().detail().find("device lost") != std::string_view::npos);
                else
                    CHECK(a->error().detail().find("open_session") != std::string_view::npos);
                CHECK(a_runs == 0);
                CHECK_FALSE(host.poisoned());
                CHECK(b->value() == 1);
                CHECK(c->value() == 2);
                CHECK(log.take_events() ==
                      std::vector<std::string>{"throw k=1", "open #1 k=1", "close #1", "open #2 k=1", "close #2"});
                const admission_stats st = host.stats();
                CHECK(balanced(st));
                CHECK(st.admitted == 3);
                CHECK(st.rejected == 1);
            }
}

TEST_CASE("backend(): the backend is built in place from the forwarded arguments; name() is its name") {
    session_host<configured_backend> host({.permits = 2}, std::string("gpu0"), 7, std::make_unique<int>(42));
    const auto& const_host = host;
    static_assert(std::is_same_v<decltype(host.backend()), configured_backend&>);
    static_assert(std::is_same_v<decltype(const_host.backend()), const configured_backend&>);
    CHECK(host.backend().tag() == 7);
    REQUIRE(host.backend().payload() != nullptr);
    CHECK(*host.backend().payload() == 42);
    CHECK(host.backend().self() == &host.backend());  // the very object, not a copy
    CHECK(&const_host.backend() == &host.backend());
    CHECK(host.name() == "gpu0");
    CHECK(host.name() == host.backend().name());
    CHECK(host.permits() == 2);

    asio::io_context io;
    std::optional<session_result<std::string>> in_session;
    std::optional<session_result<int>> rejected;
    spawn(io, [&]() -> asio::awaitable<void> {
        in_session = co_await host.with_backend_session(
            [](test::device_session& s) { return std::string(s.backend()) + "/" + std::to_string(s.parallelism()); });
        rejected = co_await host.with_backend_session(on_compute(3), [](test::device_session&) { return 0; });
    });
    REQUIRE(run_until(io, [&] { return rejected.has_value(); }));
    CHECK(in_session->value() == "gpu0/1");
    CHECK(rejected->error() == session_entry_errc::incompatible_context);
    CHECK(rejected->error().backend() == "gpu0");
}

TEST_CASE("Destroying a session_host with waiters completes them with executor; the running session finishes") {
    probe_log log;
    asio::io_context io;
    auto host = std::make_unique<probe_host>(host_options{.permits = 1}, log);
    gate g;
    std::optional<session_result<int>> running, w1, w2;
    std::atomic<int> waiter_runs{0};
    spawn(io, [&]() -> asio::awaitable<void> {
        running = co_await host->with_backend_session(on_compute(), [&](probe_session& s) {
            g.wait();
            return s.id();
        });
    });
    for (auto* w : {&w1, &w2})
        spawn(io, [&, w]() -> asio::awaitable<void> {
            *w = co_await host->with_backend_session(placed(w == &w1 ? placement::caller : placement::compute),
                                                     [&](probe_session&) { return ++waiter_runs; });
        });
    io.poll();
    REQUIRE(g.wait_for_waiters(1));
    REQUIRE(host->stats().waiting == 2);
    // The destructor waits for the running session: destroy on another thread.
    std::thread destroyer([&] { host.reset(); });
    REQUIRE(run_until(io, [&] { return w1.has_value() && w2.has_value(); }));
    CHECK(w1->error() == session_entry_errc::executor);
    CHECK(w2->error() == session_entry_errc::executor);
    CHECK_FALSE(running.has_value());
    g.open();
    destroyer.join();
    REQUIRE(run_until(io, [&] { return running.has_value(); }));
    CHECK(running->value() == 1);
    CHECK(waiter_runs == 0);
    CHECK(log.opened == 1);
    CHECK(log.closed == 1);
}

TEST_CASE("A session_type that can be neither copied nor moved, returned as a prvalue (also of a derived type)") {
    asio::io_context io;
    session_host<stream_pool> host({.permits = 2});
    std::optional<session_result<int>> sync_caller, async_caller, sync_compute, async_compute;
    std::atomic<int> live_in_body{-1};
    spawn(io, [&]() -> asio::awaitable<void> {
        sync_caller = co_await host.with_backend_session(on_caller(), [&](stream_base& s) {
            live_in_body = host.backend().live.load();
            return s.stream();
        });
        async_caller = co_await host.with_backend_session(on_caller(), [](stream_base& s) -> asio::awaitable<int> {
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
            co_return s.stream();
        });
        sync_compute = co_await host.with_backend_session(on_compute(), [](stream_base& s) { return s.stream(); });
        async_compute = co_await host.with_backend_session(on_compute(), [](stream_base& s) -> asio::awaitable<int> {
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
            co_return s.stream();
        });
    });
    REQUIRE(run_until(io, [&] { return async_compute.has_value(); }));
    CHECK(sync_caller->value() == 1);
    CHECK(async_caller->value() == 2);
    CHECK(sync_compute->value() == 3);
    CHECK(async_compute->value() == 4);
    CHECK(live_in_body == 1);
    CHECK(host.backend().live == 0);
    CHECK(balanced(host.stats()));

    // The same through session_result<immovable> (probe_backend) is covered
    // above; here the test backend of the generic admission suite.
    session_host<test::device_backend> device({.permits = 1});
    io.restart();
    std::optional<session_result<std::size_t>> d;
    spawn(io, [&]() -> asio::awaitable<void> {
        d = co_await device.with_backend_session(
            [](test::device_session& s) -> asio::awaitable<std::size_t> { co_return s.parallelism(); });
    });
    REQUIRE(run_until(io, [&] { return d.has_value(); }));
    CHECK(d->value() == 1);
    CHECK(device.backend().sessions_opened() == 1);
    CHECK(test::all_sessions_closed(device));
}
