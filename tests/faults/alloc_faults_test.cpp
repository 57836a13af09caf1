// The allocation-failure loop (issue 34, rule S19; docs/testing.md): every
// public asynchronous operation of the library, run once per allocation site
// with that allocation failed, each run in a fresh child process
// (fault_loop.hpp). Two modes:
//
//   transient   the N-th allocation after the operation starts fails, once;
//   persistent  every allocation from the N-th on fails for 50 ms, then
//               memory is back.
//
// After each run the child checks S19: the operation completed exactly once
// (or its initiating function threw std::bad_alloc with nothing queued; never
// under use_awaitable, whose failure arrives at the co_await), every permit
// came back and the counters balance (S14), the host is not poisoned and
// serves a new entry, a file an atomic write replaced is whole. A crash, an
// abort (std::terminate) or a hang of the child is a failure of the run; under
// ASan the leak check runs at the child's exit.
//
//   alloc_faults_test                       every scenario, both modes
//   alloc_faults_test --list                the scenarios' names
//   alloc_faults_test --strict              also fail on runs that end inside
//                                           Asio's coroutine machinery (below)
//   alloc_faults_test --scenario S [--mode transient|persistent] [--fail-at N]
//                                           one scenario, one mode, one N (replay;
//                                           TENFERRO_FAULTS_NO_FORK=1 runs it in
//                                           this process, for a debugger)

#include "alloc_fault.hpp"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
#include <sys/stat.h>

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

using namespace tenferro;
namespace af = tenferro::test::alloc_fault;
using tenferro::test::faults::verdict;
using namespace std::chrono_literals;

namespace {

// ---------------------------------------------------------------------------
// The run's knobs and the probe that records the operation's outcome.
// ---------------------------------------------------------------------------

struct run_config {
    std::uint64_t fail_at = 0;  // 0: count only
    bool persistent = false;
};

constexpr std::int64_t persist_ms = 50;

void arm(const run_config& c) {
    if (c.fail_at == 0)
        af::arm(UINT64_MAX);
    else
        af::arm(c.fail_at, c.persistent ? persist_ms : 0);
}

/// What the operation under test delivered. Recording never allocates.
struct probe {
    std::atomic<int> completions{0};
    std::atomic<int> values{0};
    std::atomic<int> wrong_values{0};
    std::atomic<int> errors{0};
    std::atomic<int> exceptions{0};
    std::atomic<int> off_executor{0};
    std::atomic<int> last_code{0};
    std::atomic<bool> initiation_threw{false};
    static constexpr int unchecked = -1;  // the scenario checks the values itself
    int expected_value = 42;

    template <class R>
    void record(const std::exception_ptr& e, const session_result<R>& r, bool on_its_executor) {
        if (!on_its_executor) off_executor.fetch_add(1);
        if (e) {
            exceptions.fetch_add(1);
        } else if (r) {
            if constexpr (std::is_same_v<R, int>) {
                if (expected_value != unchecked && *r != expected_value) wrong_values.fetch_add(1);
            }
            values.fetch_add(1);
        } else {
            last_code.store(static_cast<int>(r.error().code()));
            errors.fetch_add(1);
        }
        completions.fetch_add(1, std::memory_order_release);
    }
    void record_exception() {
        exceptions.fetch_add(1);
        completions.fetch_add(1, std::memory_order_release);
    }
};

/// Exceptions that escaped into io_context::poll (see drive).
std::atomic<int> escaped_into_poll{0};

/// Polls `io` (restarting it) until `done()` or the deadline. An exception
/// out of a handler is counted and polling goes on: out of memory, Asio's own
/// operations (the scenarios' timers, co_spawn's coroutines) let std::bad_alloc
/// out of run() and poll() by design, losing their handler; tenferro's
/// completions never do, and one that is lost fails the exactly-once check.
template <class Done>
bool drive(asio::io_context& io, verdict&, Done done, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        io.restart();
        try {
            if (io.poll() == 0) std::this_thread::sleep_for(100us);
        } catch (...) {
            escaped_into_poll.fetch_add(1);
        }
    }
    return true;
}

/// A callback handler bound to `io` that records into `p`.
auto io_handler(asio::io_context& io, probe& p) {
    return asio::bind_executor(
        io, [&io, &p](std::exception_ptr e, auto r) { p.record(e, r, io.get_executor().running_in_this_thread()); });
}

constexpr auto the_body = [](auto& s) { return static_cast<int>(s.parallelism()) + 41; };  // 42 with 1 permit

/// The checks after the operation: it completed exactly once (or threw at
/// initiation), the window of a persistent failure closed, the host quiesced
/// with every permit back (S14), is not poisoned and serves new entries of
/// both placements. Returns the allocations counted while armed.
template <class Host>
std::uint64_t finish(asio::io_context& io, Host& host, probe& p, verdict& v, std::uint64_t& injected,
                     int expected_completions = 1, bool expect_usable = true) {
    const bool threw = p.initiation_threw.load();
    const int expected = threw ? 0 : expected_completions;
    if (!drive(
            io, v, [&] { return p.completions.load(std::memory_order_acquire) >= expected && af::window_closed(); },
            10s))
        v.fail("no completion: %d of %d after 10 s", p.completions.load(), expected);
    const std::uint64_t events = af::disarm();
    injected = af::failures();
    // Long enough for a second completion of the same operation to show up.
    drive(
        io, v, [] { return false; }, 5ms);
    if (p.completions.load() != expected)
        v.fail("completed %d times, expected %d%s", p.completions.load(), expected,
               threw ? " (the initiating function threw)" : "");
    if (p.off_executor.load() != 0) v.fail("%d completion(s) ran off their executor (S6)", p.off_executor.load());
    if (p.wrong_values.load() != 0) v.fail("%d completion(s) with a wrong value", p.wrong_values.load());
    if (!drive(
            io, v,
            [&] {
                const admission_stats s = host.stats();
                return s.available == s.permits && s.waiting == 0 && s.admitted == s.completed;
            },
            5s)) {
        const admission_stats s = host.stats();
        v.fail("not quiescent (S14): available %zu of %zu, waiting %zu, admitted %llu, completed %llu", s.available,
               s.permits, s.waiting, static_cast<unsigned long long>(s.admitted),
               static_cast<unsigned long long>(s.completed));
    }
    if (!expect_usable) return events;
    if (host.poisoned()) v.fail("the host is poisoned after an allocation failure");
    for (placement where : {placement::compute, placement::caller}) {
        probe again;
        host.with_backend_session(session_options{1, wait_policy::fifo, where}, the_body, io_handler(io, again));
        if (!drive(
                io, v, [&] { return again.completions.load() == 1; }, 5s) ||
            again.values.load() != 1)
            v.fail(
                "the host does not serve a new %s-placed entry once memory is back (completions %d, values %d, "
                "error %d)",
                where == placement::compute ? "compute" : "caller", again.completions.load(), again.values.load(),
                again.last_code.load());
    }
    return events;
}

/// Occupies `permits` of `host` with a compute-placed session that sleeps
/// until `release` is set. Returns once the body runs. (Not an asynchronous
/// body waiting on an Asio timer: out of memory, Asio's own timer completion
/// and coroutine teardown terminate the process, which is Asio's to answer
/// for, not the operation under test's.)
template <class Host>
void hold(asio::io_context& io, Host& host, std::size_t permits, std::atomic<bool>& release, verdict& v,
          std::atomic<bool>& held) {
    host.with_backend_session(
        session_options{permits, wait_policy::fifo, placement::compute},
        [&release, &held](auto&) {
            held = true;
            while (!release.load()) std::this_thread::sleep_for(50us);
            return 0;
        },
        asio::bind_executor(io, [](std::exception_ptr, auto) {}));
    if (!drive(
            io, v, [&] { return held.load(); }, 5s))
        v.fail("set-up: the holder session did not start");
}

// ---------------------------------------------------------------------------
// Scenarios.
// ---------------------------------------------------------------------------

using scenario_fn = std::function<std::uint64_t(const run_config&, verdict&, std::uint64_t&)>;

struct scenario {
    std::string name;
    scenario_fn run;
    // Runs machinery of Asio's own inside the fault window that ends the
    // process when memory fails in it: co_spawn of an asynchronous body or a
    // scope body (co_spawn's first dispatch is a use_awaitable initiation
    // inside a noexcept function; an awaitable thread destroyed unresumed
    // posts its frames' destruction from a destructor), and use_future's
    // promise (a std::promise that breaks allocates its future_error in a
    // noexcept destructor). Such runs are reported, but fail the test only
    // with --strict (docs/testing.md, "What the loop does not cover").
    bool asio_internal = false;
};

/// Creates Asio's system context before the fault window, as any program
/// that has posted to a system executor once has it: Asio creates it inside
/// pthread_once at its first use, and out of memory there the process
/// aborts in Asio's code (std::terminate). tenferro creates it at the
/// initiation of an entry whose handler uses it (ensure_system_context),
/// where an allocation failure may still throw.
void create_system_context() { (void)asio::query(asio::system_executor(), asio::execution::context); }

session_options opts(placement where, std::size_t permits = 1) { return {permits, wait_policy::fifo, where}; }

const char* placement_name(placement where) { return where == placement::compute ? "compute" : "caller"; }

/// An entry whose callback is bound to an io_context (`bound`) or a plain
/// lambda (its associated executor is the system executor).
scenario entry_callback(placement where, bool bound) {
    return {std::string("entry/") + (bound ? "io-callback/" : "plain-callback/") + placement_name(where),
            [where, bound](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                if (!bound) create_system_context();
                arm(c);
                try {
                    if (bound)
                        cpu.with_backend_session(opts(where), the_body, io_handler(io, p));
                    else
                        cpu.with_backend_session(
                            opts(where), the_body,
                            [&p](std::exception_ptr e, session_result<int> r) { p.record(e, r, true); });
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
                                        co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
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

enum class wait_kind { queued, weighted, cancelled, shutdown };

/// An entry that waits: behind a holder of every permit (queued), asking two
/// permits behind a holder of one (weighted), cancelled while it waits, or
/// drained by shutdown() while the fault is armed.
scenario entry_waiting(wait_kind kind) {
    const char* kinds[] = {"queued", "weighted", "cancelled", "shutdown"};
    return {std::string("entry/") + kinds[static_cast<int>(kind)],
            [kind](const run_config& c, verdict& v, std::uint64_t& injected) {
                asio::io_context io;
                cpu_backend cpu({.permits = 2});
                probe p;
                std::atomic<bool> release{false}, held{false};
                hold(io, cpu, kind == wait_kind::weighted ? 1 : 2, release, v, held);
                asio::cancellation_signal cancel;
                arm(c);
                try {
                    const std::size_t permits = kind == wait_kind::weighted ? 2 : 1;
                    p.expected_value = static_cast<int>(permits) + 41;
                    cpu.with_backend_session(opts(placement::compute, permits), the_body,
                                             asio::bind_cancellation_slot(cancel.slot(), io_handler(io, p)));
                } catch (const std::bad_alloc&) {
                    p.initiation_threw = true;
                }
                if (kind == wait_kind::cancelled) cancel.emit(asio::cancellation_type::terminal);
                if (kind == wait_kind::shutdown) cpu.shutdown();
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

enum class batch_kind { sync, async, delayed, cancel, destroyed };

/// Three items submitted to a batcher: synchronous or asynchronous body, a
/// timer policy (max_delay), one item cancelled, or the batcher destroyed
/// right after the submits.
scenario batcher_submit(batch_kind kind) {
    const char* kinds[] = {"sync", "async", "delayed", "cancel", "destroyed"};
    return {std::string("batcher/") + kinds[static_cast<int>(kind)],
            [kind](const run_config& c, verdict& v, std::uint64_t& injected) {
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
                            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                            co_return std::vector<int>(items.begin(), items.end());
                        });
                } else {
                    b = std::make_unique<batcher_t>(cpu, options, [](backend_session&, std::span<int> items) {
                        return std::vector<int>(items.begin(), items.end());
                    });
                }
                asio::cancellation_signal cancel;
                int submitted = 0;
                arm(c);
                try {
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

// ---------------------------------------------------------------------------
// .npy files.
// ---------------------------------------------------------------------------

std::string file_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// A scratch directory for one child, removed with it.
struct scratch_dir {
    std::filesystem::path path;
    scratch_dir() {
        char tmpl[] = "/tmp/tenferro-faults-XXXXXX";
        const char* made = mkdtemp(tmpl);
        path = made != nullptr ? made : "/tmp";
    }
    ~scratch_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    std::size_t entries() const {
        std::error_code ec;
        std::size_t n = 0;
        for (auto it = std::filesystem::directory_iterator(path, ec); !ec && it != std::filesystem::end(it);
             it.increment(ec))
            ++n;
        return n;
    }
};

/// async_write_npy over an existing file, or async_read_npy, on the process's
/// engine (io_uring where the kernel allows it) or the pread/pwrite pool.
scenario npy(bool write, bool pool_engine) {
    return {
        std::string("npy/") + (write ? "write" : "read") + (pool_engine ? "/pool" : "/default"),
        [write, pool_engine](const run_config& c, verdict& v, std::uint64_t& injected) {
            if (pool_engine) setenv("TENFERRO_IO_URING", "0", 1);  // before the engine is chosen
            scratch_dir dir;
            const std::filesystem::path file = dir.path / "t.npy";
            asio::io_context io;
            std::vector<float> old_values(1000, 1.0f), new_values(1000, 2.0f);
            const tensor old_t = tensor::from(std::span<const float>(old_values), {10, 100});
            const tensor new_t = tensor::from(std::span<const float>(new_values), {10, 100});
            std::atomic<int> completions{0}, ok{0};
            std::atomic<bool> wrong_data{false};
            asio::co_spawn(
                io, [&]() -> asio::awaitable<void> { co_await async_write_npy(io.get_executor(), file, old_t); },
                asio::detached);
            drive(
                io, v, [&] { return std::filesystem::exists(file); }, 5s);
            drive(
                io, v, [] { return false; }, 2ms);
            const std::string old_bytes = file_bytes(file);
            if (old_bytes.empty()) v.fail("set-up: the first write failed");
            arm(c);
            bool threw = false;
            try {
                if (write) {
                    async_write_npy(io.get_executor(), file, new_t, asio::bind_executor(io, [&](asio_error_code ec) {
                                        if (!ec) ok.fetch_add(1);
                                        completions.fetch_add(1);
                                    }));
                } else {
                    async_read_npy(io.get_executor(), file, asio::bind_executor(io, [&](asio_error_code ec, tensor t) {
                                       if (!ec) {
                                           ok.fetch_add(1);
                                           if (t.size() != 1000 || t.data<float>()[999] != 1.0f) wrong_data = true;
                                       }
                                       completions.fetch_add(1);
                                   }));
                }
            } catch (const std::bad_alloc&) {
                threw = true;
            }
            const int expected = threw ? 0 : 1;
            if (!drive(
                    io, v, [&] { return completions.load() >= expected && af::window_closed(); }, 10s))
                v.fail("no completion after 10 s");
            const std::uint64_t events = af::disarm();
            injected = af::failures();
            drive(
                io, v, [] { return false; }, 5ms);
            if (completions.load() != expected) v.fail("completed %d times, expected %d", completions.load(), expected);
            if (wrong_data) v.fail("read completed with the wrong data");
            if (write) {
                const std::string now = file_bytes(file);
                if (ok.load() == 1) {
                    if (now == old_bytes) v.fail("the write reported success and left the old file");
                } else if (now != old_bytes) {
                    v.fail("a failed write changed the file (%zu bytes, was %zu)", now.size(), old_bytes.size());
                }
                if (dir.entries() != 1) v.fail("%zu entries in the directory: a temporary was left", dir.entries());
            }
            return events;
        }};
}

std::vector<scenario> all_scenarios() {
    std::vector<scenario> s;
    auto with_asio_internal = [](scenario sc) {
        sc.asio_internal = true;
        return sc;
    };
    for (placement where : {placement::compute, placement::caller}) {
        s.push_back(entry_callback(where, true));
        s.push_back(entry_callback(where, false));
        for (await_kind k : {await_kind::plain, await_kind::as_tuple, await_kind::queued})
            s.push_back(entry_awaited(where, k));
        s.push_back(with_asio_internal(entry_awaited(where, await_kind::async_body)));
        s.push_back(with_asio_internal(entry_future(where)));
        s.push_back(entry_deferred(where));
        s.push_back(custom_backend(where));
    }
    for (wait_kind k : {wait_kind::queued, wait_kind::weighted, wait_kind::cancelled, wait_kind::shutdown})
        s.push_back(entry_waiting(k));
    s.push_back(entry_cached_busy());
    s.push_back(entry_poisoned());
    s.push_back(with_asio_internal(scope_with_sessions(false)));
    s.push_back(with_asio_internal(scope_with_sessions(true)));
    for (batch_kind k : {batch_kind::sync, batch_kind::delayed, batch_kind::cancel, batch_kind::destroyed})
        s.push_back(batcher_submit(k));
    s.push_back(with_asio_internal(batcher_submit(batch_kind::async)));
    for (bool pool : {false, true}) {
        s.push_back(npy(false, pool));
        s.push_back(npy(true, pool));
    }
    return s;
}

bool matches(const std::string& name, const std::string& filter) {
    return filter.empty() || name == filter ||
           (filter.back() == '*' && name.rfind(filter.substr(0, filter.size() - 1), 0) == 0);
}

/// On SIGABRT (std::terminate, a glibc fatal error) a child prints its stack
/// to stderr before it dies, so that a failed run says where: backtrace() is
/// called once at start-up, where it may still load what it needs, and
/// backtrace_symbols_fd allocates nothing.
void print_stack_on_abort() {
    void* warm[4];
    (void)backtrace(warm, 4);
    struct sigaction sa {};
    sa.sa_handler = [](int) {
        void* frames[48];
        const int n = backtrace(frames, 48);
        static const char head[] = "alloc_faults_test: aborted; the stack:\n";
        (void)!write(2, head, sizeof head - 1);
        backtrace_symbols_fd(frames, n, 2);
        signal(SIGABRT, SIG_DFL);
        raise(SIGABRT);
    };
    sigaction(SIGABRT, &sa, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
    print_stack_on_abort();
    std::string only, mode_filter;
    std::uint64_t fail_at = 0;
    bool list = false, strict = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--scenario" && i + 1 < argc) {
            only = argv[++i];
        } else if (a == "--mode" && i + 1 < argc) {
            mode_filter = argv[++i];
        } else if (a == "--fail-at" && i + 1 < argc) {
            fail_at = std::strtoull(argv[++i], nullptr, 10);
        } else if (a == "--list") {
            list = true;
        } else if (a == "--strict") {
            strict = true;
        } else {
            std::fprintf(stderr,
                         "usage: %s [--list] [--strict] [--scenario NAME|PREFIX*] [--mode transient|persistent] "
                         "[--fail-at N]\n",
                         argv[0]);
            return 2;
        }
    }
    const std::vector<scenario> scenarios = all_scenarios();
    const auto timeout = std::chrono::seconds(
        std::getenv("TENFERRO_FAULTS_TIMEOUT") != nullptr ? std::atoi(std::getenv("TENFERRO_FAULTS_TIMEOUT")) : 20);
    std::uint64_t mishandled = 0, sites = 0, runs = 0, matched = 0, asio_limited = 0;
    std::printf("allocation-failure loop (%s)\n", TENFERRO_ALLOC_FAULT_MALLOC
                                                      ? "operator new and the malloc family"
                                                      : "operator new only: a sanitizer owns malloc");
    for (const scenario& s : scenarios) {
        if (!matches(s.name, only)) continue;
        ++matched;
        if (list) {
            std::printf("%s\n", s.name.c_str());
            continue;
        }
        for (const bool persistent : {false, true}) {
            const char* mode = persistent ? "persistent" : "transient";
            if (!mode_filter.empty() && mode_filter != mode) continue;
            auto child = [&](std::uint64_t n, verdict& v, std::uint64_t& injected) {
                return s.run(run_config{n, persistent}, v, injected);
            };
            if (fail_at != 0 && std::getenv("TENFERRO_FAULTS_NO_FORK") != nullptr) {
                // In this process, for a debugger: `gdb --args ... --fail-at N`.
                verdict v;
                std::uint64_t injected = 0;
                const std::uint64_t events = child(fail_at, v, injected);
                std::printf("%s [%s] fault at %llu (no fork): %llu allocations: %s%s\n", s.name.c_str(), mode,
                            static_cast<unsigned long long>(fail_at), static_cast<unsigned long long>(events),
                            v.failed() ? "FAIL " : "ok", v.message());
                mishandled += v.failed() ? 1 : 0;
                continue;
            }
            if (fail_at != 0) {
                const auto r = tenferro::test::faults::run_child(child, fail_at, timeout);
                std::printf("%s [%s] fault at %llu: %llu allocations, %llu failed: %s%s\n", s.name.c_str(), mode,
                            static_cast<unsigned long long>(fail_at), static_cast<unsigned long long>(r.events),
                            static_cast<unsigned long long>(r.injected), r.ok ? "ok" : "FAIL ", r.message);
                mishandled += r.ok ? 0 : 1;
                continue;
            }
            const auto r = tenferro::test::faults::run_loop(s.name.c_str(), mode, child, argv[0], timeout);
            if (s.asio_internal && !strict)
                asio_limited += r.mishandled;  // reported above; see the scenario's flag
            else
                mishandled += r.mishandled;
            runs += r.runs;
            if (!persistent) sites += r.sites;
        }
    }
    if (matched == 0) {
        std::fprintf(stderr, "no scenario matches '%s' (--list)\n", only.c_str());
        return 2;
    }
    if (list) return 0;
    std::printf("%llu allocation sites in all, %llu runs, %llu mishandled", static_cast<unsigned long long>(sites),
                static_cast<unsigned long long>(runs), static_cast<unsigned long long>(mishandled));
    if (asio_limited != 0)
        std::printf(" (and %llu inside Asio's own machinery, not counted without --strict)",
                    static_cast<unsigned long long>(asio_limited));
    std::printf("\n");
    return mishandled == 0 ? 0 : 1;
}
