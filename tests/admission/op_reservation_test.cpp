// The S19 reservation is exact: before an initiation that Asio runs inside a
// noexcept function (use_awaitable and its adapters), session_host reserves
// this thread's op block (reserve_for_initiation); the entry then allocates
// it. Too small a reservation and the allocation may throw where it must not
// (the fault loop, tests/faults, finds that); too large a one passes the
// fault loop unseen and keeps a block per thread that no entry fills. So each
// token, on each path that allocates, must ask the op cache for exactly the
// size reserved for it (src/async/op_cache_record.hpp records both).
//
// The reservation names Asio's handler types through their public
// declarations and models the adapters' wrappers (docs/asio-detail-pins.md):
// this test is what fails when a version of Asio lays them out otherwise.

#include "tenferro/detail/admission/entry_awaitable.hpp"

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "async/op_cache_record.hpp"
#include "spawn.hpp"
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

// (Not cancel_after(d, use_awaitable), Asio 1.31 on: an entry does not
// compile with it. Its initiation starts a timer on the executor of the
// initiation object, `Initiation::executor_type`, which an entry's has not;
// the entry's executor is its handler's, known only inside the initiation.)
enum class token_kind { plain, as_tuple, redirect_error };

const char* name_of(token_kind t) {
    switch (t) {
    case token_kind::plain:
        return "use_awaitable";
    case token_kind::as_tuple:
        return "as_tuple(use_awaitable)";
    case token_kind::redirect_error:
        return "redirect_error(use_awaitable)";
    }
    return "?";
}

/// One entry with `token`'s kind; true if it completed with `expected`.
template <class F>
asio::awaitable<bool> enter(test_host& host, token_kind token, session_options options, F body, int expected) {
    switch (token) {
    case token_kind::plain: {
        const session_result<int> r = co_await host.with_backend_session(options, std::move(body));
        co_return r.has_value() && *r == expected;
    }
    case token_kind::as_tuple: {
        auto [e, r] =
            co_await host.with_backend_session(options, std::move(body), tenferro::test::as_tuple(asio::use_awaitable));
        co_return e == nullptr&& r.has_value() && *r == expected;
    }
    case token_kind::redirect_error: {
        tenferro::asio_error_code ec;
        const session_result<int> r =
            co_await host.with_backend_session(options, std::move(body), asio::redirect_error(asio::use_awaitable, ec));
        co_return !ec && r.has_value() && *r == expected;
    }
    }
    co_return false;
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
    switch (token) {
    case token_kind::plain: {
        const session_result<int> r = co_await host.with_execution_scope(body);
        co_return r.has_value() && *r == 5;
    }
    case token_kind::as_tuple: {
        auto [e, r] = co_await host.with_execution_scope(body, tenferro::test::as_tuple(asio::use_awaitable));
        co_return e == nullptr&& r.has_value() && *r == 5;
    }
    case token_kind::redirect_error: {
        tenferro::asio_error_code ec;
        const session_result<int> r =
            co_await host.with_execution_scope(body, asio::redirect_error(asio::use_awaitable, ec));
        co_return !ec && r.has_value() && *r == 5;
    }
    }
    co_return false;
}

constexpr token_kind tokens[] = {token_kind::plain, token_kind::as_tuple, token_kind::redirect_error};

/// Checks one record: the entry allocated, and exactly what was reserved.
void check_exact(token_kind token, const char* path, const op_cache_record& r) {
    INFO(name_of(token) << ", " << path << ": reserved " << r.reserved << " B, asked " << r.asked << " B, then "
                        << r.last_asked << " B");
    // (Printed for the record of sizes per Asio version, docs/asio-detail-pins.md.)
    std::printf("reservation %-30s %-16s reserved %4zu asked %4zu last %4zu\n", name_of(token), path, r.reserved,
                r.asked, r.last_asked);
    CHECK(r.reserved != 0);
    CHECK(r.asked == r.reserved);
    CHECK(r.last_asked == r.reserved);
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
            detail::testing_access::renew_inline_return_budget();
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
