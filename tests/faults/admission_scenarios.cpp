// The allocation-failure scenarios of the admission layer: entries of every
// completion token and placement, entries that wait, are cancelled, shut
// down or refused, scopes, a custom backend whose open_session allocates,
// batcher submits, and a poisoned host.

#include "fault_scenario.hpp"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <tenferro/tenferro.hpp>

#include "fault_loop.hpp"
#include "test_asio.hpp"

namespace tenferro::test::faults {
namespace {

/// How a callback entry's handler names its executor: bound to the
/// io_context, none (plain), or bound to Asio's system executor. Neither of
/// the last two may make Asio's system context: this process never has one
/// (S19; the completion goes to the library's context).
enum class callback_kind { io_bound, plain, system_bound };

scenario entry_callback(placement where, callback_kind kind) {
    const char* kinds[] = {"io-callback/", "plain-callback/", "system-callback/"};
    return {std::string("entry/") + kinds[static_cast<int>(kind)] + placement_name(where),
            [where, kind](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                const auto callback = [&p](std::exception_ptr e, session_result<int> r) { p.record(e, r, true); };
                arm(c);
                try {
                    if (kind == callback_kind::io_bound)
                        cpu.with_backend_session(opts(where), the_body, io_handler(io, p));
                    else if (kind == callback_kind::plain)
                        cpu.with_backend_session(opts(where), the_body, callback);
                    else
                        cpu.with_backend_session(opts(where), the_body,
                                                 asio::bind_executor(asio::system_executor(), callback));
                } catch (const std::bad_alloc&) {
                    p.initiation_threw = true;
                }
                return finish(io, cpu, p, v, injected);
            }};
}

enum class await_kind { plain, as_tuple, queued, async_body };

/// `co_await` with the default token (use_awaitable), or as_tuple of it; the
/// entry admitted at once or queued behind a holder; a synchronous or an
/// asynchronous body. The initiation must not throw (Asio runs it inside a
/// noexcept await_suspend): a failure arrives at the co_await.
scenario entry_awaited(placement where, await_kind kind) {
    const char* kinds[] = {"default", "as_tuple", "queued", "async-body"};
    return {std::string("entry/awaitable-") + kinds[static_cast<int>(kind)] + "/" + placement_name(where),
            [where, kind](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                std::atomic<bool> release{false}, held{false};
                if (kind == await_kind::queued) hold(io, cpu, 2, release, v, held);
                asio::co_spawn(
                    io,
                    [&]() -> asio::awaitable<void> {
                        arm(c);
                        try {
                            const bool mine = true;
                            if (kind == await_kind::as_tuple) {
                                auto [e, r] = co_await cpu.with_backend_session(
                                    opts(where), the_body, tenferro::test::as_tuple(asio::use_awaitable));
                                p.record(e, r, io.get_executor().running_in_this_thread() && mine);
                            } else if (kind == await_kind::async_body) {
                                session_result<int> r = co_await cpu.with_backend_session(
                                    opts(where), [](backend_session& s) -> asio::awaitable<int> {
                                        {
                                            const af::users_own mine;  // the body's own await
                                            co_await asio::post(co_await asio::this_coro::executor,
                                                                asio::use_awaitable);
                                        }
                                        co_return static_cast<int>(s.parallelism()) + 41;
                                    });
                                p.record(nullptr, r, io.get_executor().running_in_this_thread());
                            } else {
                                session_result<int> r = co_await cpu.with_backend_session(opts(where), the_body);
                                p.record(nullptr, r, io.get_executor().running_in_this_thread());
                            }
                        } catch (...) {
                            p.record_exception();  // delivered at the co_await: allowed
                        }
                    },
                    asio::detached);
                if (kind == await_kind::queued) {
                    // Let the entry park, then release the holder.
                    drive(
                        io, v, [&] { return cpu.stats().waiting == 1 || p.completions.load() > 0; }, 2s);
                }
                release = true;
                return finish(io, cpu, p, v, injected);
            }};
}

/// A running session asked to stop (S20): by a terminal cancellation emitted
/// once its body runs, or by its deadline passing while it runs. The body
/// allocates nothing itself (it looks at its stop and sleeps), so every
/// failing allocation is the library's: the stop state, the deadline timer,
/// the completion's hand-off. It completes once: `cancelled` or
/// `deadline_exceeded` (stopped), or `executor` when its stop state could not
/// be made (then it never queued).
///
/// `awaiting`: an asynchronous body that waits an hour on a timer, so only the
/// stop emitted into its own slot ends it (S20): the library's allocations
/// are then also co_spawn's for the slot, the body's turns and the emit's hop.
/// The timer and its await are the body's own (users_own); a stop that did
/// not reach the await leaves the run hanging, which the loop reports.
enum class stop_kind { cancel, deadline };

scenario entry_stopped(stop_kind kind, bool awaiting) {
    return {
        std::string(awaiting ? "entry/stopped-await/" : "entry/stopped/") +
            (kind == stop_kind::cancel ? "cancel" : "deadline"),
        [kind, awaiting](const run_config& c, verdict& v, std::uint64_t& injected) {
            asio::io_context io;
            cpu_backend cpu({.permits = 2});
            probe p;
            p.expected_value = probe::unchecked;
            asio::cancellation_signal cancel;
            std::atomic<bool> running{false};
            const auto body = [&running](backend_session& s) -> int {
                running = true;
                for (;;) {
                    s.throw_if_stop_requested();
                    std::this_thread::sleep_for(50us);
                }
            };
            const auto awaiting_body = [&running](backend_session&) -> asio::awaitable<int> {
                const auto ex = co_await asio::this_coro::executor;
                const af::users_own mine;  // the body's own timer and await
                asio::steady_timer timer(ex, 1h);
                running = true;
                co_await timer.async_wait(asio::use_awaitable);
                co_return 0;
            };
            arm(c);
            try {
                session_options o = opts(placement::compute);
                if (kind == stop_kind::deadline) o.deadline = std::chrono::steady_clock::now() + 3ms;
                auto token = asio::bind_cancellation_slot(cancel.slot(), io_handler(io, p));
                if (awaiting)
                    cpu.with_backend_session(o, awaiting_body, std::move(token));
                else
                    cpu.with_backend_session(o, body, std::move(token));
            } catch (const std::bad_alloc&) {
                p.initiation_threw = true;
            }
            if (kind == stop_kind::cancel && !p.initiation_threw) {
                    // Emitted on this thread, the only one running `io` (the
                    // handler's executor), once the body runs.
                drive(
                    io, v, [&] { return running.load() || p.completions.load() > 0; }, 5s);
                cancel.emit(asio::cancellation_type::terminal);
            }
            const std::uint64_t events = finish(io, cpu, p, v, injected);
            if (p.values.load() != 0) v.fail("a body that only ends by its stop delivered a value");
            const int code = p.last_code.load();
            const int expected_code = static_cast<int>(
                kind == stop_kind::cancel ? session_entry_errc::cancelled : session_entry_errc::deadline_exceeded);
            if (p.errors.load() == 1 && code != expected_code && code != static_cast<int>(session_entry_errc::executor))
                v.fail("completed with error code %d, expected %d (stopped) or executor", code, expected_code);
            return events;
        }};
}

/// `co_await` under an adapter of use_awaitable (bind_executor,
/// bind_cancellation_slot, consign, cancel_after), compute-placed: the
/// reservation must be the op Asio's handler for that adapter makes.
scenario entry_adapted(adapter a) {
    return {std::string("entry/awaitable-") + adapter_name(a) + "/compute",
            [a](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                asio::co_spawn(
                    io,
                    [&]() -> asio::awaitable<void> {
                        const auto start = [&](auto token) {
                            return cpu.with_backend_session(opts(placement::compute), the_body, std::move(token));
                        };
                        if (needs_warm_up(a)) {
                            (void)co_await await_adapted<session_result<int>>(a, start);
                            detail::empty_op_cache();
                        }
                        arm(c);
                        try {
                            session_result<int> r = co_await await_adapted<session_result<int>>(a, start);
                            p.record(nullptr, r, io.get_executor().running_in_this_thread());
                        } catch (...) {
                            p.record_exception();  // delivered at the co_await: allowed
                        }
                    },
                    asio::detached);
                return finish(io, cpu, p, v, injected);
            }};
}

/// Two entries' awaitables made before either initiates, as `a && b` or a
/// parallel group does (as_tuple, queued behind a holder): the second is
/// spawned and initiates first; the first, kept, initiates after it. Each
/// must find the block taken when it was made (S19: the initiation carries
/// it), or the kept one would allocate inside Asio's noexcept function.
scenario entry_awaitable_pair() {
    return {"entry/awaitable-pair/caller", [](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                std::atomic<bool> release{false}, held{false};
                bool spawned = false;  // set before the coroutine first suspends
                // Which of the two co_spawns (Asio's, the user's) handed its
                // handler on; either can lose it to its last dispatch.
                bool outer_handed_on = false, spawned_handed_on = false;
                hold(io, cpu, 2, release, v, held);
                asio::co_spawn(
                    io,
                    [&]() -> asio::awaitable<void> {
                        const asio::any_io_executor ex = co_await asio::this_coro::executor;
                        detail::empty_op_cache();  // the two blocks are made under the armed failure
                        arm(c);
                        try {
                            const auto make = [&] {
                                return cpu.with_backend_session(opts(placement::caller), the_body,
                                                                tenferro::test::as_tuple(asio::use_awaitable));
                            };
                            auto kept = make();
                            auto other = make();
                            {
                                const af::users_own mine;  // the spawn is the user's
                                asio::co_spawn(ex, std::move(other), [&](std::exception_ptr spawn_error, auto t) {
                                    spawned_handed_on = true;
                                    auto [e, r] = std::move(t);
                                    if (spawn_error)
                                        p.record_exception();
                                    else
                                        p.record(e, r, io.get_executor().running_in_this_thread());
                                });
                                spawned = true;
                            }
                            {
                                const af::users_own mine;  // the yield is the user's
                                co_await asio::post(ex, asio::use_awaitable);
                            }
                            auto [e, r] = co_await std::move(kept);
                            p.record(e, r, io.get_executor().running_in_this_thread());
                        } catch (...) {
                            // Thrown at a call (making an awaitable) or
                            // delivered at the co_await: both allowed. The
                            // spawned one, if made, still completes.
                            p.record_exception();
                        }
                    },
                    [&](std::exception_ptr) { outer_handed_on = true; });
                drive(
                    io, v, [&] { return cpu.stats().waiting == 2 || p.completions.load() > 0; }, 2s);
                release = true;
                // Both complete once spawned (the kept one with its outcome
                // or an exception); else making one of them threw, caught
                // once. A co_spawn that cannot allocate its last dispatch
                // loses its handler, and its std::bad_alloc escapes into poll
                // (drive counts it): the outer one's (after the kept one was
                // recorded) or the spawned one's (its completion is then
                // lost). Each escape is one lost handler, so the escapes the
                // outer one does not account for are the spawned one's; any
                // other would be a lost tenferro completion.
                const int escaped_before = escaped_into_poll.load();
                const auto escapes = [&] { return escaped_into_poll.load() - escaped_before; };
                // Settled: every handler handed on or lost to an escape.
                drive(
                    io, v,
                    [&] {
                        return p.completions.load() >= 1 &&
                               int(outer_handed_on) + int(spawned && spawned_handed_on) + escapes() >= 1 + int(spawned);
                    },
                    5s);
                const int spawned_lost = spawned && !spawned_handed_on ? escapes() - int(!outer_handed_on) : 0;
                if (spawned_lost < 0 || spawned_lost > 1)
                    v.fail("handlers handed on: outer %d, spawned %d; %d escape(s) into poll", int(outer_handed_on),
                           int(spawned_handed_on), escapes());
                return finish(io, cpu, p, v, injected, 1 + int(spawned) - std::max(0, spawned_lost));
            }};
}

/// use_future: the outcome is taken from the future on this thread.
scenario entry_future(placement where) {
    return {std::string("entry/future/") + placement_name(where),
            [where](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                create_system_context();
                arm(c);
                std::optional<std::future<session_result<int>>> f;
                try {
                    f.emplace(cpu.with_backend_session(opts(where), the_body, asio::use_future));
                } catch (const std::bad_alloc&) {
                    p.initiation_threw = true;
                }
                if (f) {
                    if (f->wait_for(10s) != std::future_status::ready) {
                        v.fail("use_future: the future is not ready after 10 s");
                    } else {
                        try {
                            p.record(nullptr, f->get(), true);
                        } catch (...) {
                            p.record_exception();
                        }
                    }
                }
                return finish(io, cpu, p, v, injected);
            }};
}

/// deferred: the operation is launched later with a bound callback.
scenario entry_deferred(placement where) {
    return {std::string("entry/deferred/") + placement_name(where),
            [where](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                arm(c);
                try {
                    auto op = cpu.with_backend_session(opts(where), the_body, tenferro::test::deferred);
                    std::move(op)(io_handler(io, p));
                } catch (const std::bad_alloc&) {
                    p.initiation_threw = true;
                }
                return finish(io, cpu, p, v, injected);
            }};
}

enum class wait_kind { queued, weighted, cancelled, shutdown, deadline, grouped, resized, timed };

/// host_options::timer as a server would write it: each wake-up an
/// asio::steady_timer on the server's io_context. Its allocations fail like
/// any other (the host then keeps the deadline at the entry's grant).
struct io_timer final : admission_timer {
    asio::io_context& io;
    explicit io_timer(asio::io_context& c) : io(c) {}
    std::chrono::steady_clock::time_point now() override { return std::chrono::steady_clock::now(); }
    void wake_at(std::chrono::steady_clock::time_point when, std::function<void()> fire) override {
        auto t = std::make_shared<asio::steady_timer>(io, when);
        t->async_wait([t, f = std::move(fire)](const std::error_code&) { f(); });
    }
};

/// An entry that waits: behind a holder of every permit (queued), asking two
/// permits behind a holder of one (weighted), cancelled while it waits,
/// drained by shutdown(), left at its deadline (the host's deadline thread
/// starts inside the fault window), in the second group of a host with
/// groups, or granted by set_permits growing the host (its new worker starts
/// inside the window) while the fault is armed; or left at its deadline
/// through a host timer of the program's (io_timer) instead of the thread.
scenario entry_waiting(wait_kind kind) {
    const char* kinds[] = {"queued", "weighted", "cancelled", "shutdown", "deadline", "grouped", "resized", "timed"};
    return {std::string("entry/") + kinds[static_cast<int>(kind)],
            [kind](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend_options options{.permits = 2};
                if (kind == wait_kind::grouped) options.groups = {{"bulk", 1}, {"interactive", 2}};
                if (kind == wait_kind::timed) options.timer = std::make_shared<io_timer>(io);
                cpu_backend cpu(std::move(options));
                probe p;
                std::atomic<bool> release{false}, held{false};
                hold(io, cpu, kind == wait_kind::weighted ? 1 : 2, release, v, held);
                asio::cancellation_signal cancel;
                arm(c);
                try {
                    const std::size_t permits = kind == wait_kind::weighted ? 2 : 1;
                    p.expected_value = static_cast<int>(permits) + 41;
                    session_options o = opts(placement::compute, permits);
                    if (kind == wait_kind::deadline || kind == wait_kind::timed)
                        o.deadline = std::chrono::steady_clock::now() + 2ms;
                    if (kind == wait_kind::grouped) o.group = 1;
                    cpu.with_backend_session(o, the_body,
                                             asio::bind_cancellation_slot(cancel.slot(), io_handler(io, p)));
                } catch (const std::bad_alloc&) {
                    p.initiation_threw = true;
                }
                if (kind == wait_kind::cancelled) cancel.emit(asio::cancellation_type::terminal);
                if (kind == wait_kind::shutdown) cpu.shutdown();
                if (kind == wait_kind::deadline || kind == wait_kind::timed)
                    std::this_thread::sleep_for(5ms);  // past it, still held
                if (kind == wait_kind::resized) {
                    try {
                        cpu.set_permits(3);  // grants the waiter, behind a holder of two
                    } catch (const std::exception&) {
                        // No memory for the new worker: the permits stay 2 and the waiter waits.
                    }
                }
                release = true;
                return finish(io, cpu, p, v, injected, 1, kind != wait_kind::shutdown);
            }};
}

/// with_backend_session_cached while another session holds the cache: the
/// entry is rejected with `contended` before it queues.
scenario entry_cached_busy() {
    return {"entry/cached-busy", [](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                cpu_runtime_cache cache;
                probe p;
                std::atomic<bool> release{false}, held{false};
                cpu.with_backend_session_cached(
                    cache,
                    [&](backend_session&) {
                        held = true;
                        while (!release.load()) std::this_thread::sleep_for(50us);
                        return 0;
                    },
                    asio::bind_executor(io, [](std::exception_ptr, session_result<int>) {}));
                if (!drive(
                        io, v, [&] { return held.load(); }, 5s))
                    v.fail("set-up: the cached holder did not start");
                arm(c);
                try {
                    cpu.with_backend_session_cached(cache, the_body, io_handler(io, p));
                } catch (const std::bad_alloc&) {
                    p.initiation_threw = true;
                }
                release = true;
                return finish(io, cpu, p, v, injected);
            }};
}

/// An execution scope whose body enters a session (reusing the scope's
/// permit) and then one asking two permits (rejected: incompatible_context);
/// with a bound callback, or awaited.
scenario scope_with_sessions(bool awaited) {
    return {std::string("scope/inner-sessions/") + (awaited ? "awaitable" : "io-callback"),
            [awaited](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                auto body = [&cpu](execution_scope&) -> asio::awaitable<int> {
                    session_result<int> first = co_await cpu.with_backend_session(the_body);
                    session_result<int> second = co_await cpu.with_backend_session(session_options{2}, the_body);
                    const bool rejected = !second && second.error().code() == session_entry_errc::incompatible_context;
                    co_return (first ? *first : 0) + (rejected ? 0 : 1000);
                };
                if (awaited) {
                    asio::co_spawn(
                        io,
                        [&]() -> asio::awaitable<void> {
                            arm(c);
                            try {
                                session_result<int> r = co_await cpu.with_execution_scope(body);
                                p.record(nullptr, r, io.get_executor().running_in_this_thread());
                            } catch (...) {
                                p.record_exception();
                            }
                        },
                        asio::detached);
                } else {
                    arm(c);
                    try {
                        cpu.with_execution_scope(body, io_handler(io, p));
                    } catch (const std::bad_alloc&) {
                        p.initiation_threw = true;
                    }
                }
                return finish(io, cpu, p, v, injected);
            }};
}

// A backend whose open_session allocates (a vector and a string per session).
struct allocating_session {
    std::vector<int> scratch;
    std::string label;
    std::size_t permits;
    std::size_t parallelism() const noexcept { return permits; }
};
struct allocating_backend {
    using session_type = allocating_session;
    std::string_view name() const noexcept { return "allocating"; }
    allocating_session open_session(const session_grant& g) {
        return {std::vector<int>(64, 1), std::string(100, 'x'), g.permits};
    }
};

scenario custom_backend(placement where) {
    return {std::string("custom/open-allocates/") + placement_name(where),
            [where](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                session_host<allocating_backend> host({.permits = 2});
                probe p;
                arm(c);
                try {
                    host.with_backend_session(opts(where), the_body, io_handler(io, p));
                } catch (const std::bad_alloc&) {
                    p.initiation_threw = true;
                }
                return finish(io, host, p, v, injected);
            }};
}

enum class batch_kind { sync, async, delayed, cancel, destroyed, awaited };

/// Three items submitted to a batcher: synchronous or asynchronous body, a
/// timer policy (max_delay), one item cancelled, or the batcher destroyed
/// right after the submits; or three coroutines that `co_await` a submit each
/// (`awaited`: the initiation runs inside Asio's noexcept function, so a
/// failure must arrive at the co_await).
scenario batcher_submit(batch_kind kind, std::optional<adapter> adapted = std::nullopt) {
    const char* kinds[] = {"sync", "async", "delayed", "cancel", "destroyed", "awaited"};
    return {std::string("batcher/") + kinds[static_cast<int>(kind)] +
                (adapted ? std::string("-") + adapter_name(*adapted) : std::string()),
            [kind, adapted](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                p.expected_value = probe::unchecked;  // checked per item below
                std::atomic<int> wrong{0};
                batch_options options{.max_batch = 4};
                if (kind == batch_kind::delayed) options.max_delay = 1ms;
                using batcher_t = batcher<cpu_backend, int, int>;
                std::unique_ptr<batcher_t> b;
                if (kind == batch_kind::async) {
                    b = std::make_unique<batcher_t>(
                        cpu, options, [](backend_session&, std::span<int> items) -> asio::awaitable<std::vector<int>> {
                            {
                                const af::users_own mine;  // the body's own await
                                co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                            }
                            co_return std::vector<int>(items.begin(), items.end());
                        });
                } else {
                    b = std::make_unique<batcher_t>(cpu, options, [](backend_session&, std::span<int> items) {
                        return std::vector<int>(items.begin(), items.end());
                    });
                }
                // An awaited item's coroutine (a named lambda: the coroutines
                // refer to it until they end, within finish()).
                auto awaited_item = [&](int i) -> asio::awaitable<void> {
                    try {
                        std::optional<session_result<int>> awaited;
                        if (adapted)
                            awaited.emplace(co_await await_adapted<session_result<int>>(
                                *adapted, [&](auto token) { return b->submit(i, std::move(token)); }));
                        else
                            awaited.emplace(co_await b->submit(i));
                        session_result<int>& r = *awaited;
                        if (r && *r != i) wrong.fetch_add(1);
                        p.record(nullptr, r, io.get_executor().running_in_this_thread());
                    } catch (...) {
                        p.record_exception();  // delivered at the co_await: allowed
                    }
                };
                asio::cancellation_signal cancel;
                int submitted = 0;
                if (kind == batch_kind::awaited) {
                    // The spawns and the coroutines' frames are the test's
                    // allocations, made before the fault is armed (each
                    // awaitable made here, spawned as a value); the fault is
                    // armed by a function queued ahead of them.
                    const bool warm_up = adapted && needs_warm_up(*adapted);
                    // Under an adapter that allocates for itself (needs_warm_up):
                    // one item, in one coroutine that runs the same submit once
                    // before arming, as entry_adapted does, so that in the
                    // window Asio finds the very blocks that submit freed.
                    const int items = warm_up ? 1 : 3;
                    if (warm_up) {
                        asio::co_spawn(
                            io,
                            [&]() -> asio::awaitable<void> {
                                const auto start = [&](auto token) { return b->submit(1, std::move(token)); };
                                (void)co_await await_adapted<session_result<int>>(*adapted, start);
                                detail::empty_op_cache();
                                arm(c);
                                try {
                                    session_result<int> r =
                                        co_await await_adapted<session_result<int>>(*adapted, start);
                                    if (r && *r != 1) wrong.fetch_add(1);
                                    p.record(nullptr, r, io.get_executor().running_in_this_thread());
                                } catch (...) {
                                    p.record_exception();  // delivered at the co_await: allowed
                                }
                            },
                            asio::detached);
                    } else {
                        asio::post(io, [&] { arm(c); });
                        for (int i = 1; i <= items; ++i) asio::co_spawn(io, awaited_item(i), asio::detached);
                    }
                    submitted = items;
                } else
                    try {
                        arm(c);
                        for (int i = 1; i <= 3; ++i) {
                            auto handler = asio::bind_executor(io, [&, i](std::exception_ptr e, session_result<int> r) {
                                if (!e && r && *r != i) wrong.fetch_add(1);
                                p.record(e, r, io.get_executor().running_in_this_thread());
                            });
                            if (kind == batch_kind::cancel && i == 3)
                                b->submit(i, asio::bind_cancellation_slot(cancel.slot(), std::move(handler)));
                            else
                                b->submit(i, std::move(handler));
                            ++submitted;
                        }
                    } catch (const std::bad_alloc&) {
                        // An item whose submit threw was not queued; the earlier ones complete.
                    }
                if (kind == batch_kind::cancel) cancel.emit(asio::cancellation_type::terminal);
                if (kind == batch_kind::destroyed) b.reset();
                const std::uint64_t events = finish(io, cpu, p, v, injected, submitted);
                if (wrong.load() != 0) v.fail("%d batch item(s) got another item's result", wrong.load());
                if (b) {
                    const batch_stats s = b->stats();
                    if (s.submitted != s.completed + s.cancelled + s.rejected || s.waiting != 0)
                        v.fail(
                            "batcher not quiescent: submitted %llu, completed %llu, cancelled %llu, rejected "
                            "%llu, waiting %zu",
                            static_cast<unsigned long long>(s.submitted), static_cast<unsigned long long>(s.completed),
                            static_cast<unsigned long long>(s.cancelled), static_cast<unsigned long long>(s.rejected),
                            s.waiting);
                }
                return events;
            }};
}

/// An observer whose on_admitted throws while the fault is armed: the host
/// is poisoned (S11) while memory fails; the entry still completes once and
/// the permits come back.
struct throwing_observer final : admission_observer {
    std::atomic<bool> armed{false};
    void on_admitted(std::size_t) override {
        if (armed.load()) throw std::runtime_error("observer");
    }
};

scenario entry_poisoned() {
    return {"entry/poisoned", [](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                auto observer = std::make_shared<throwing_observer>();
                cpu_backend cpu({.permits = 2, .observer = observer});
                probe p;
                observer->armed = true;
                arm(c);
                try {
                    cpu.with_backend_session(the_body, io_handler(io, p));
                } catch (const std::bad_alloc&) {
                    p.initiation_threw = true;
                }
                return finish(io, cpu, p, v, injected, 1, /*expect_usable=*/false);
            }};
}

}  // namespace

std::vector<scenario> admission_scenarios() {
    std::vector<scenario> s;
    for (placement where : {placement::compute, placement::caller}) {
        for (callback_kind k : {callback_kind::io_bound, callback_kind::plain, callback_kind::system_bound})
            s.push_back(entry_callback(where, k));
        for (await_kind k : {await_kind::plain, await_kind::as_tuple, await_kind::queued})
            s.push_back(entry_awaited(where, k));
        s.push_back(entry_awaited(where, await_kind::async_body));
        s.push_back(entry_future(where));
        s.push_back(entry_deferred(where));
        s.push_back(custom_backend(where));
    }
    for (wait_kind k : {wait_kind::queued, wait_kind::weighted, wait_kind::cancelled, wait_kind::shutdown,
                        wait_kind::deadline, wait_kind::grouped, wait_kind::resized, wait_kind::timed})
        s.push_back(entry_waiting(k));
    s.push_back(entry_awaitable_pair());
    s.push_back(entry_cached_busy());
    s.push_back(entry_poisoned());
    for (const bool awaiting : {false, true}) {
        s.push_back(entry_stopped(stop_kind::cancel, awaiting));
        s.push_back(entry_stopped(stop_kind::deadline, awaiting));
    }
    s.push_back(scope_with_sessions(false));
    s.push_back(scope_with_sessions(true));
    for (batch_kind k :
         {batch_kind::sync, batch_kind::delayed, batch_kind::cancel, batch_kind::destroyed, batch_kind::awaited})
        s.push_back(batcher_submit(k));
    s.push_back(batcher_submit(batch_kind::async));
    for (adapter a : adapters()) {
        s.push_back(entry_adapted(a));
        s.push_back(batcher_submit(batch_kind::awaited, a));
    }
    return s;
}

}  // namespace tenferro::test::faults
