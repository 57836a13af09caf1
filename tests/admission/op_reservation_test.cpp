// The S19 reservation is exact: before an initiation that Asio runs inside a
// noexcept function (use_awaitable and its adapters), the operation's block
// is taken when the awaitable is made and carried by the initiation
// (entry_reservation_t); the entry then allocates it. Too small a reservation and the allocation may throw where it
// must not (the fault loop, tests/faults, finds that); too large a one passes the fault loop unseen and keeps a block
// per thread that no entry fills. So each token, on each path that allocates, must ask the op cache for exactly the
// size reserved for it (src/async/op_cache_record.hpp records both). With a
// token that binds an allocator, the block comes from that allocator when the
// operation is made, and the initiation takes nothing more from it.
//
// The reservation names Asio's handler types through their public
// declarations and models the adapters' wrappers (docs/asio-detail-pins.md):
// this test is what fails when a version of Asio lays them out otherwise.

#include "tenferro/detail/admission/entry_awaitable.hpp"

#include <tenferro/batcher.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "async/op_cache_record.hpp"
#include "spawn.hpp"
#include "test_allocator.hpp"
#include "test_host.hpp"
#include "test_support.hpp"
#include "testing_access.hpp"

using namespace tenferro;
using tenferro::detail::clear_op_cache_record;
using tenferro::detail::last_op_cache_record;
using tenferro::detail::op_cache_record;
using tenferro::test::gate;
using tenferro::test::run_until;
using tenferro::test::spawn;

// A named namespace, not an anonymous one: scope_body below.
namespace op_reservation_test {

/// use_awaitable and each adapter of it this Asio has (noexcept_initiation.hpp).
enum class token_kind {
    plain,
    as_tuple,
    redirect_error,
    bind_executor,
    bind_cancellation_slot,
    consign,
    bind_immediate_executor,
    cancel_after,
};

const char* name_of(token_kind t) {
    switch (t) {
    case token_kind::plain:
        return "use_awaitable";
    case token_kind::as_tuple:
        return "as_tuple(use_awaitable)";
    case token_kind::redirect_error:
        return "redirect_error(use_awaitable)";
    case token_kind::bind_executor:
        return "bind_executor(use_awaitable)";
    case token_kind::bind_cancellation_slot:
        return "bind_cancellation_slot(use_awaitable)";
    case token_kind::consign:
        return "consign(use_awaitable)";
    case token_kind::bind_immediate_executor:
        return "bind_immediate_executor(use_awaitable)";
    case token_kind::cancel_after:
        return "cancel_after(use_awaitable)";
    }
    return "?";
}

constexpr token_kind tokens[] = {
    token_kind::plain,
    token_kind::as_tuple,
    token_kind::redirect_error,
    token_kind::bind_executor,
    token_kind::bind_cancellation_slot,
#if TENFERRO_ASIO_HAS_CONSIGN
    token_kind::consign,
#endif
#if TENFERRO_ASIO_HAS_IMMEDIATE_EXECUTOR
    token_kind::bind_immediate_executor,
#endif
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
    token_kind::cancel_after,
#endif
};

/// Awaits `start(t)` for the token `t` of `token`'s kind (start makes the
/// operation: the reservation happens there, right before the co_await); true
/// if it completed with `expected`.
template <class Start>
asio::awaitable<bool> await_with(token_kind token, Start start, int expected) {
    const auto ok = [expected](const session_result<int>& r) { return r.has_value() && *r == expected; };
    switch (token) {
    case token_kind::plain:
        co_return ok(co_await start(asio::use_awaitable));
    case token_kind::as_tuple: {
        auto [e, r] = co_await start(tenferro::test::as_tuple(asio::use_awaitable));
        co_return e == nullptr&& ok(r);
    }
    case token_kind::redirect_error: {
        tenferro::asio_error_code ec;
        const session_result<int> r = co_await start(asio::redirect_error(asio::use_awaitable, ec));
        co_return !ec && ok(r);
    }
    case token_kind::bind_executor: {
        const asio::any_io_executor ex = co_await asio::this_coro::executor;
        co_return ok(co_await start(asio::bind_executor(ex, asio::use_awaitable)));
    }
    case token_kind::bind_cancellation_slot: {
        asio::cancellation_signal signal;
        co_return ok(co_await start(asio::bind_cancellation_slot(signal.slot(), asio::use_awaitable)));
    }
    case token_kind::consign:
#if TENFERRO_ASIO_HAS_CONSIGN
        co_return ok(co_await start(asio::consign(asio::use_awaitable, std::make_shared<int>(7))));
#else
        break;
#endif
    case token_kind::bind_immediate_executor:
#if TENFERRO_ASIO_HAS_IMMEDIATE_EXECUTOR
    {
        const asio::any_io_executor ex = co_await asio::this_coro::executor;
        co_return ok(co_await start(asio::bind_immediate_executor(ex, asio::use_awaitable)));
    }
#else
        break;
#endif
    case token_kind::cancel_after:
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
        co_return ok(co_await start(asio::cancel_after(std::chrono::hours(1), asio::use_awaitable)));
#else
        break;
#endif
    }
    co_return false;
}

template <class F>
asio::awaitable<bool> enter(test_host& host, token_kind token, session_options options, F body, int expected) {
    co_return co_await await_with(
        token, [&](auto t) { return host.with_backend_session(options, body, std::move(t)); }, expected);
}

/// An execution scope's body. (A class of this namespace, not a lambda: GCC
/// warns that Asio's co_spawn frame holding a lambda of a function here "uses
/// the anonymous namespace", -Wsubobject-linkage.)
struct scope_body {
    asio::awaitable<int> operator()(execution_scope&) const { co_return 5; }
};

/// One execution scope entry with `token`'s kind.
asio::awaitable<bool> enter_scope(test_host& host, token_kind token) {
    const scope_body body;
    co_return co_await await_with(
        token, [&](auto t) { return host.with_execution_scope(body, std::move(t)); }, 5);
}

/// Checks one record: the entry allocated, and exactly what was reserved.
/// (`later_ops`: the thread allocated other ops after the one reserved for,
/// whose sizes are not checked: a submit's batch session.)
void check_exact(token_kind token, const char* path, const op_cache_record& r, bool later_ops = false) {
    INFO(name_of(token) << ", " << path << ": reserved " << r.reserved << " B, asked " << r.asked << " B, then "
                        << r.last_asked << " B");
    // (Printed for the record of sizes per Asio version, docs/asio-detail-pins.md.)
    std::printf("reservation %-40s %-16s reserved %4zu asked %4zu last %4zu\n", name_of(token), path, r.reserved,
                r.asked, r.last_asked);
    CHECK(r.reserved != 0);
    CHECK(r.asked == r.reserved);
    if (!later_ops) CHECK(r.last_asked == r.reserved);
}

}  // namespace op_reservation_test

using namespace op_reservation_test;

TEST_CASE("S19: an entry queued behind a holder allocates exactly the block reserved for its initiation") {
    for (const token_kind token : tokens) {
        asio::io_context io;
        test_host host({.permits = 1});
        gate g;
        auto holder = host.with_backend_session(
            {1, wait_policy::fifo, placement::compute}, [&](test_session&) { g.wait(); }, asio::use_future);
        REQUIRE(g.wait_for_waiters(1));
        bool ok = false, done = false;
        spawn(io, [&]() -> asio::awaitable<void> {
            clear_op_cache_record();
            ok = co_await enter(
                host, token, {1, wait_policy::fifo, placement::caller}, [](test_session&) { return 3; }, 3);
            done = true;
        });
        REQUIRE(run_until(io, [&] { return host.stats().waiting == 1; }));
        check_exact(token, "queued", last_op_cache_record());
        g.open();
        REQUIRE(run_until(io, [&] { return done; }));
        CHECK(ok);
        holder.get();
    }
}

TEST_CASE("S19: a compute-placed entry admitted at once allocates exactly the block reserved") {
    for (const token_kind token : tokens) {
        asio::io_context io;
        test_host host({.permits = 1});
        std::optional<op_cache_record> record;
        bool ok = false;
        spawn(io, [&]() -> asio::awaitable<void> {
            clear_op_cache_record();
            ok = co_await enter(
                host, token, {1, wait_policy::fifo, placement::compute}, [](test_session&) { return 4; }, 4);
            // Nothing else on this thread reserved or allocated an op since.
            record = last_op_cache_record();
        });
        REQUIRE(run_until(io, [&] { return record.has_value(); }));
        CHECK(ok);
        check_exact(token, "compute", *record);
    }
}

TEST_CASE("S19: a caller-placed entry admitted at once allocates exactly the block reserved, or none") {
    // The inline fast path: an adapter's entry takes the handler's way
    // (entry_op::try_run_inline, whose block is sized for the op as well);
    // a plain use_awaitable entry returns in place, allocating nothing,
    // except every 32nd, which goes through the executor (entry_awaitable.hpp).
    for (const token_kind token : tokens) {
        asio::io_context io;
        test_host host({.permits = 1});
        int allocated = 0, exact = 0, ok = 0;
        op_cache_record seen{};
        bool done = false;
        spawn(io, [&]() -> asio::awaitable<void> {
            tenferro::detail::testing_access::renew_inline_return_budget();
            for (int i = 0; i < 40; ++i) {
                clear_op_cache_record();
                ok += co_await enter(
                    host, token, {1, wait_policy::fifo, placement::caller}, [i](test_session&) { return i; }, i);
                const op_cache_record r = last_op_cache_record();
                if (r.asked != 0) {
                    ++allocated;
                    exact += r.asked == r.reserved && r.last_asked == r.reserved;
                    seen = r;
                }
            }
            done = true;
        });
        REQUIRE(run_until(io, [&] { return done; }));
        CHECK(ok == 40);
        REQUIRE(allocated > 0);
        CHECK(exact == allocated);
        check_exact(token, "caller (inline)", seen);
    }
}

TEST_CASE("S19: an execution scope allocates exactly the block reserved for its initiation") {
    for (const token_kind token : tokens) {
        asio::io_context io;
        test_host host({.permits = 1});
        std::optional<op_cache_record> record;
        bool ok = false;
        spawn(io, [&]() -> asio::awaitable<void> {
            clear_op_cache_record();
            ok = co_await enter_scope(host, token);
            record = last_op_cache_record();
        });
        REQUIRE(run_until(io, [&] { return record.has_value(); }));
        CHECK(ok);
        check_exact(token, "execution scope", *record);
    }
}

TEST_CASE("S19: a batcher submit allocates exactly the block reserved for its item") {
    for (const token_kind token : tokens) {
        asio::io_context io;
        test_host host({.permits = 1});
        batcher<test_host, int, int> b(host, {.max_batch = 4}, [](test_session&, std::span<int> items) {
            std::vector<int> out;
            for (const int i : items) out.push_back(2 * i);
            return out;
        });
        std::optional<op_cache_record> record;
        bool ok = false;
        spawn(io, [&]() -> asio::awaitable<void> {
            clear_op_cache_record();
            ok = co_await await_with(
                token, [&](auto t) { return b.submit(21, std::move(t)); }, 42);
            record = last_op_cache_record();
        });
        REQUIRE(run_until(io, [&] { return record.has_value(); }));
        CHECK(ok);
        check_exact(token, "batcher submit", *record, /*later_ops=*/true);
    }
}

namespace op_reservation_test {

using tenferro::test::allocation_policy;
using tenferro::test::test_allocator;

/// bind_allocator, outermost and under each adapter that exposes the token it
/// wraps (noexcept_initiation.hpp, bound_allocator).
enum class bound_kind {
    outer,
    under_as_tuple,
    under_bind_executor,
    under_redirect_error,
    under_cancel_after,
    over_as_tuple
};

const char* name_of(bound_kind k) {
    switch (k) {
    case bound_kind::outer:
        return "bind_allocator(use_awaitable)";
    case bound_kind::under_as_tuple:
        return "as_tuple(bind_allocator(use_awaitable))";
    case bound_kind::under_bind_executor:
        return "bind_executor(bind_allocator(use_awaitable))";
    case bound_kind::under_redirect_error:
        return "redirect_error(bind_allocator(use_awaitable))";
    case bound_kind::under_cancel_after:
        return "cancel_after(bind_allocator(use_awaitable))";
    case bound_kind::over_as_tuple:
        return "bind_allocator(as_tuple(use_awaitable))";
    }
    return "?";
}

constexpr bound_kind bound_kinds[] = {
    bound_kind::outer,
    bound_kind::under_as_tuple,
    bound_kind::under_bind_executor,
    bound_kind::under_redirect_error,
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
    bound_kind::under_cancel_after,
#endif
    bound_kind::over_as_tuple,
};

/// Makes the operation with `start(token)` for `kind`'s token around `a`,
/// records how many blocks `a` had served once it was made (`at_make`), then
/// awaits it.
template <class Start>
asio::awaitable<void> make_then_await(bound_kind kind, test_allocator<void> a, Start start, int& at_make) {
    const auto made = [&] { at_make = a.policy->made; };
    const asio::any_io_executor ex = co_await asio::this_coro::executor;
    tenferro::asio_error_code ec;
    switch (kind) {
    case bound_kind::outer: {
        auto op = start(asio::bind_allocator(a, asio::use_awaitable));
        made();
        (void)co_await std::move(op);
        break;
    }
    case bound_kind::under_as_tuple: {
        auto op = start(tenferro::test::as_tuple(asio::bind_allocator(a, asio::use_awaitable)));
        made();
        (void)co_await std::move(op);
        break;
    }
    case bound_kind::under_bind_executor: {
        auto op = start(asio::bind_executor(ex, asio::bind_allocator(a, asio::use_awaitable)));
        made();
        (void)co_await std::move(op);
        break;
    }
    case bound_kind::under_redirect_error: {
        auto op = start(asio::redirect_error(asio::bind_allocator(a, asio::use_awaitable), ec));
        made();
        (void)co_await std::move(op);
        break;
    }
    case bound_kind::under_cancel_after:
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
    {
        auto op = start(asio::cancel_after(std::chrono::hours(1), asio::bind_allocator(a, asio::use_awaitable)));
        made();
        (void)co_await std::move(op);
    }
#endif
    break;
    case bound_kind::over_as_tuple: {
        auto op = start(asio::bind_allocator(a, tenferro::test::as_tuple(asio::use_awaitable)));
        made();
        (void)co_await std::move(op);
        break;
    }
    }
}

/// Runs `start` for each bound kind while a holder keeps the host's one
/// permit, so that the operation waits once initiated: its op's block must
/// have come from the bound allocator when the operation was made, and the
/// initiation (inside Asio's noexcept function) must have taken nothing more
/// from it. `waiting`: true once the operation waits.
template <class Start, class Waiting>
void check_block_taken_when_made(const char* what, test_host& host, Start start, Waiting waiting) {
    for (const bound_kind kind : bound_kinds) {
        asio::io_context io;
        gate g;
        auto holder = host.with_backend_session(
            {1, wait_policy::fifo, placement::compute}, [&](test_session&) { g.wait(); }, asio::use_future);
        REQUIRE(g.wait_for_waiters(1));
        auto policy = std::make_shared<allocation_policy>();
        int at_make = -1;
        bool done = false;
        spawn(io, [&]() -> asio::awaitable<void> {
            co_await make_then_await(kind, test_allocator<void>(policy), start, at_make);
            done = true;
        });
        REQUIRE(run_until(io, [&] { return waiting(); }));
        INFO(what << ", " << name_of(kind) << ": at make " << at_make << ", once waiting " << policy->made << " ("
                  << policy->library_blocks << " the library's)");
        CHECK(at_make == 1);                 // taken when the operation was made
        CHECK(policy->library_blocks == 1);  // and nothing more in the initiation
        // cancel_after's own operation and its timer's wait come from the
        // handler's allocator too, in Asio's initiation: Asio's (S19).
        if (kind != bound_kind::under_cancel_after) CHECK(policy->made == 1);
        g.open();
        REQUIRE(run_until(io, [&] { return done; }));
        holder.get();
        io.run();
        CHECK(policy->freed == policy->made);
    }
}

}  // namespace op_reservation_test

TEST_CASE("S19: a token that binds an allocator has the op's block taken from it when the operation is made") {
    // Before, the block came from the allocator inside the initiation, which
    // Asio runs inside a noexcept function: an allocator that threw there
    // ended the process.
    test_host host({.permits = 1});
    check_block_taken_when_made(
        "entry", host,
        [&](auto token) {
            return host.with_backend_session(
                {1, wait_policy::fifo, placement::compute}, [](test_session&) { return 6; }, std::move(token));
        },
        [&] { return host.stats().waiting == 1; });
    check_block_taken_when_made(
        "execution scope", host, [&](auto token) { return host.with_execution_scope(scope_body{}, std::move(token)); },
        [&] { return host.stats().waiting == 1; });
    batcher<test_host, int, int> b(host, {.max_batch = 4}, [](test_session&, std::span<int> items) {
        return std::vector<int>(items.begin(), items.end());
    });
    check_block_taken_when_made(
        "batcher submit", host, [&](auto token) { return b.submit(21, std::move(token)); },
        [&] { return host.stats().waiting == 1; });  // its batch's session waits
}

TEST_CASE("S19: a bound allocator that refuses the block fails the call that makes the operation, nothing queued") {
    asio::io_context io;
    test_host host({.permits = 1});
    auto policy = std::make_shared<allocation_policy>();
    policy->allowed = 0;
    bool threw = false, unawaited_given_back = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        try {
            (void)host.with_backend_session(
                {1, wait_policy::fifo, placement::compute}, [](test_session&) { return 6; },
                asio::bind_allocator(test_allocator<void>(policy), asio::use_awaitable));
        } catch (const std::bad_alloc&) {
            threw = true;
        }
        // A block taken for an operation never awaited goes back to the allocator.
        policy->allowed = -1;
        {
            auto unawaited = host.with_backend_session(
                {1, wait_policy::fifo, placement::compute}, [](test_session&) { return 6; },
                asio::bind_allocator(test_allocator<void>(policy), asio::use_awaitable));
        }
        unawaited_given_back = policy->made == 1 && policy->freed == 1;
        co_return;
    });
    io.run();
    CHECK(threw);
    CHECK(policy->refused == 1);
    CHECK(unawaited_given_back);
    CHECK(host.stats().admitted == 0);
    CHECK(host.stats().waiting == 0);
}

namespace op_reservation_test {

/// Makes two entries' awaitables with `token`'s kind, as `a && b` or a
/// parallel group does, before either initiates: the first is kept; the
/// second is spawned, and initiates (queued: its op stays allocated) while
/// this coroutine yields once. This thread's record is then cleared and the
/// kept entry awaited: its initiation must find its block without the heap
/// (record.from_heap stays 0).
asio::awaitable<void> await_kept(test_host& host, token_kind token) {
    const session_options caller{1, wait_policy::fifo, placement::caller};
    const auto body = [](test_session&) { return 8; };
    const auto pair = [](auto make) -> asio::awaitable<void> {
        auto kept = make();
        auto other = make();
        const asio::any_io_executor ex = co_await asio::this_coro::executor;
        asio::co_spawn(ex, std::move(other), asio::detached);
        co_await asio::post(ex, asio::use_awaitable);
        clear_op_cache_record();
        (void)co_await std::move(kept);
    };
    [[maybe_unused]] const asio::any_io_executor ex = co_await asio::this_coro::executor;
    tenferro::asio_error_code ec;
    asio::cancellation_signal signal;
    switch (token) {
    case token_kind::plain:
        co_await pair([&] { return host.with_backend_session(caller, body, asio::use_awaitable); });
        break;
    case token_kind::as_tuple:
        co_await pair(
            [&] { return host.with_backend_session(caller, body, tenferro::test::as_tuple(asio::use_awaitable)); });
        break;
    case token_kind::redirect_error:
        co_await pair(
            [&] { return host.with_backend_session(caller, body, asio::redirect_error(asio::use_awaitable, ec)); });
        break;
    case token_kind::bind_executor:
        co_await pair(
            [&] { return host.with_backend_session(caller, body, asio::bind_executor(ex, asio::use_awaitable)); });
        break;
    case token_kind::bind_cancellation_slot:
        co_await pair([&] {
            return host.with_backend_session(caller, body,
                                             asio::bind_cancellation_slot(signal.slot(), asio::use_awaitable));
        });
        break;
    case token_kind::consign:
#if TENFERRO_ASIO_HAS_CONSIGN
        co_await pair([&] {
            return host.with_backend_session(caller, body,
                                             asio::consign(asio::use_awaitable, std::make_shared<int>(7)));
        });
#endif
        break;
    case token_kind::bind_immediate_executor:
#if TENFERRO_ASIO_HAS_IMMEDIATE_EXECUTOR
        co_await pair([&] {
            return host.with_backend_session(caller, body, asio::bind_immediate_executor(ex, asio::use_awaitable));
        });
#endif
        break;
    case token_kind::cancel_after:
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
        co_await pair([&] {
            return host.with_backend_session(caller, body,
                                             asio::cancel_after(std::chrono::hours(1), asio::use_awaitable));
        });
#endif
        break;
    }
}

}  // namespace op_reservation_test

TEST_CASE("S19: two awaitables made before either initiates (a && b) each find their own block") {
    // The block is carried by the initiation (reserved_op_block), not left in
    // the thread's cache: there, the two reservations would be one block,
    // which the first initiation takes; the second, inside Asio's noexcept
    // function, would then allocate from the heap, and out of memory end the
    // process.
    for (const token_kind token : tokens) {
        asio::io_context io;
        test_host host({.permits = 1});
        gate g;
        auto holder = host.with_backend_session(
            {1, wait_policy::fifo, placement::compute}, [&](test_session&) { g.wait(); }, asio::use_future);
        REQUIRE(g.wait_for_waiters(1));
        bool done = false;
        spawn(io, [&]() -> asio::awaitable<void> {
            tenferro::detail::empty_op_cache();  // the two reservations are all the blocks there are
            co_await await_kept(host, token);
            done = true;
        });
        REQUIRE(run_until(io, [&] { return host.stats().waiting == 2; }));
        const op_cache_record r = last_op_cache_record();
        INFO(name_of(token) << ": asked " << r.asked << " B, from the heap " << r.from_heap);
        CHECK(r.asked != 0);
        CHECK(r.from_heap == 0);
        g.open();
        REQUIRE(run_until(io, [&] { return done && host.stats().completed == 3; }));
        holder.get();
    }
}

#if TENFERRO_ASIO_HAS_CONSIGN
namespace op_reservation_test {

/// A value whose alignment is more than the op cache's blocks have: consigned,
/// it makes the op over-aligned, and the reserve comes from the heap.
struct alignas(64) over_aligned {
    int v = 7;
};

/// Awaits `start(consign(bind_allocator(a, use_awaitable), Value{}))` while a
/// holder keeps the host's one permit (so the op lives on, queued, once
/// initiated), then lets it through. `a` serves blocks or refuses them, as
/// `policy` says. The allocator is out of the library's reach before the
/// initiation: consign keeps the token it wraps private.
template <class Value, class Start>
void await_consigned_allocator(test_host& host, const std::shared_ptr<allocation_policy>& policy, Start start,
                               int expected) {
    asio::io_context io;
    gate g;
    auto holder = host.with_backend_session(
        {1, wait_policy::fifo, placement::compute}, [&](test_session&) { g.wait(); }, asio::use_future);
    REQUIRE(g.wait_for_waiters(1));
    std::optional<session_result<int>> result;
    spawn(io, [&]() -> asio::awaitable<void> {
        result = co_await start(
            asio::consign(asio::bind_allocator(test_allocator<void>(policy), asio::use_awaitable), Value{}));
    });
    REQUIRE(run_until(io, [&] { return host.stats().waiting == 1; }));
    g.open();
    REQUIRE(run_until(io, [&] { return result.has_value(); }));
    holder.get();
    io.run();
    REQUIRE(result->has_value());
    CHECK(**result == expected);
}

/// Runs `start` for an entry, a scope and a submit against `policy`'s allocator,
/// consigning a `Value`.
template <class Value>
void check_consigned_allocator(const std::shared_ptr<allocation_policy>& policy) {
    test_host host({.permits = 1});
    await_consigned_allocator<Value>(
        host, policy,
        [&](auto token) {
            return host.with_backend_session(
                {1, wait_policy::fifo, placement::compute}, [](test_session&) { return 6; }, std::move(token));
        },
        6);
    await_consigned_allocator<Value>(
        host, policy, [&](auto token) { return host.with_execution_scope(scope_body{}, std::move(token)); }, 5);
    batcher<test_host, int, int> b(host, {.max_batch = 4}, [](test_session&, std::span<int> items) {
        return std::vector<int>(items.begin(), items.end());
    });
    await_consigned_allocator<Value>(
        host, policy, [&](auto token) { return b.submit(21, std::move(token)); }, 21);
    CHECK(host.stats().waiting == 0);
}

}  // namespace op_reservation_test

TEST_CASE("S19: an allocator bound inside consign that throws inside the initiation: the op takes the block reserved") {
    // Before, the allocator was asked for the op inside the initiation, which
    // Asio runs inside a noexcept function, with nothing to fall back on: an
    // allocator that threw there ended the process.
    auto refusing = std::make_shared<allocation_policy>();
    refusing->allowed = 0;
    check_consigned_allocator<std::shared_ptr<int>>(refusing);
    CHECK(refusing->refused == 3);  // once per operation, inside its initiation
    CHECK(refusing->made == 0);
    CHECK(refusing->freed == 0);  // the reserve's blocks went back to the op cache, not to the allocator
    // An over-aligned op: its reserve is the heap's (the op cache's blocks are not aligned for it).
    auto refusing_aligned = std::make_shared<allocation_policy>();
    refusing_aligned->allowed = 0;
    check_consigned_allocator<over_aligned>(refusing_aligned);
    CHECK(refusing_aligned->refused == 3);
    CHECK(refusing_aligned->freed == 0);
}

TEST_CASE("S19: an allocator bound inside consign that serves the op: the block is its, and the reserve goes back") {
    auto serving = std::make_shared<allocation_policy>();
    check_consigned_allocator<std::shared_ptr<int>>(serving);
    CHECK(serving->refused == 0);
    CHECK(serving->library_blocks == 3);  // each op's block, from the allocator as the handler asks
    CHECK(serving->freed == serving->made);
}
#endif
