#pragma once
// What the allocation-failure scenarios share (alloc_faults_test.cpp): the
// run's knobs, the probe that records what an operation delivered, driving an
// io_context through a fault window, the checks after every run (exactly
// once, S14, a host that serves again), and the scenario type.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <tenferro/tenferro.hpp>

#include "alloc_fault.hpp"
#include "async/op_cache_record.hpp"
#include "fault_loop.hpp"
#include "test_asio.hpp"

namespace tenferro::test::faults {

namespace af = tenferro::test::alloc_fault;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------
// The run's knobs and the probe that records the operation's outcome.
// ---------------------------------------------------------------------------

struct run_config {
    std::uint64_t fail_at = 0;  // 0: count only
    bool persistent = false;
};

constexpr std::int64_t persist_ms = 50;

inline void arm(const run_config& c) {
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
inline std::atomic<int> escaped_into_poll{0};

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
inline auto io_handler(asio::io_context& io, probe& p) {
    return asio::bind_executor(
        io, [&io, &p](std::exception_ptr e, auto r) { p.record(e, r, io.get_executor().running_in_this_thread()); });
}

inline constexpr auto the_body = [](auto& s) { return static_cast<int>(s.parallelism()) + 41; };  // 42 with 1 permit

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
};

/// Creates Asio's system context before the fault window, as any program
/// that has posted to a system executor once has it: Asio creates it inside
/// pthread_once at its first use, and out of memory there the process
/// aborts in Asio's code (std::terminate). tenferro never posts there (a
/// handler bound to the system executor completes in the library's context);
/// use_future's executor does (Asio's promise_executor posts to the system
/// executor), so its scenarios make it first.
inline void create_system_context() { (void)asio::query(asio::system_executor(), asio::execution::context); }

inline session_options opts(placement where, std::size_t permits = 1) { return {permits, wait_policy::fifo, where}; }

inline const char* placement_name(placement where) { return where == placement::compute ? "compute" : "caller"; }

// ---------------------------------------------------------------------------
// The adapters of use_awaitable an awaited operation runs under: the S19
// reservation must be the block the initiation allocates for the handler each
// makes (noexcept_initiation.hpp).
// ---------------------------------------------------------------------------

enum class adapter { bind_executor, bind_cancellation_slot, bind_allocator, consign, consign_allocator, cancel_after };

inline const char* adapter_name(adapter a) {
    const char* names[] = {"bind_executor", "bind_cancellation_slot", "bind_allocator",
                           "consign",       "consign-bind_allocator", "cancel_after"};
    return names[static_cast<int>(a)];
}

/// The adapters this Asio has.
inline std::vector<adapter> adapters() {
    std::vector<adapter> all{adapter::bind_executor, adapter::bind_cancellation_slot, adapter::bind_allocator};
#if TENFERRO_ASIO_HAS_CONSIGN
    all.push_back(adapter::consign);
    all.push_back(adapter::consign_allocator);
#endif
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
    all.push_back(adapter::cancel_after);
#endif
    return all;
}

/// `co_await start(token)`, the token being `a` around `base` (use_awaitable,
/// or a token over it). (This coroutine's frame is the test's allocation: out
/// of memory, it throws at the caller's co_await, as the operation's own
/// failures must.)
template <class T, class Base, class Start>
asio::awaitable<T> await_adapted(adapter a, Base base, Start start) {
    switch (a) {
    case adapter::bind_executor:
        co_return co_await start(asio::bind_executor(co_await asio::this_coro::executor, std::move(base)));
    case adapter::bind_cancellation_slot: {
        asio::cancellation_signal signal;
        co_return co_await start(asio::bind_cancellation_slot(signal.slot(), std::move(base)));
    }
    case adapter::bind_allocator:
        // The handler's own allocator, std::allocator (the heap, where the
        // faults are injected): the op's block comes from it, taken when the
        // operation is made (reserved_own_block).
        co_return co_await start(asio::bind_allocator(std::allocator<void>(), std::move(base)));
    case adapter::consign:
#if TENFERRO_ASIO_HAS_CONSIGN
        co_return co_await start(asio::consign(std::move(base), 7));
#else
        break;
#endif
    case adapter::consign_allocator:
#if TENFERRO_ASIO_HAS_CONSIGN
        // The allocator out of the library's reach before the initiation
        // (consign keeps its token private): asked inside it, where a failure
        // must fall back on the block reserved (reserved_fallback_block).
        co_return co_await start(asio::consign(asio::bind_allocator(std::allocator<void>(), std::move(base)), 7));
#else
        break;
#endif
    case adapter::cancel_after:
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
    {
        // On a timer of this coroutine's executor: the timer's wait and
        // Asio's timed-cancel operation are then freed on this thread, into
        // its recycling cache, where a warm-up run leaves them (warm_up).
        asio::steady_timer timer(co_await asio::this_coro::executor);
        co_return co_await start(asio::cancel_after(timer, std::chrono::hours(1), std::move(base)));
    }
#else
        break;
#endif
    }
    throw std::logic_error("await_adapted: an adapter this Asio lacks");
}

/// Whether `a` makes Asio allocate for itself before the operation's
/// initiation (cancel_after: its timed-cancel operation and its timer's wait).
/// Those are Asio's allocations, not the library's (docs/contract.md, S19): a
/// scenario runs its operation once before the fault window (a warm-up), so
/// that in the window Asio finds the blocks in this thread's recycling cache,
/// and then empties the library's op cache (empty_op_cache), so that the
/// library's own reservation is still made, and failed, in the window. Asio
/// caches two blocks per thread and kind: at most two such operations may be
/// in flight at once.
inline bool needs_warm_up(adapter a) { return a == adapter::cancel_after; }

/// `await_adapted` around use_awaitable itself.
template <class T, class Start>
asio::awaitable<T> await_adapted(adapter a, Start start) {
    return await_adapted<T>(a, asio::use_awaitable, std::move(start));
}

/// The entries, scopes, custom backends and batcher submits (admission_scenarios.cpp).
std::vector<scenario> admission_scenarios();
/// async_read_npy and async_write_npy on both engines (npy_scenarios.cpp).
std::vector<scenario> npy_scenarios();
/// The live corpus's writes (in memory, durable on both engines) and searches (corpus_scenarios.cpp).
std::vector<scenario> corpus_scenarios();

}  // namespace tenferro::test::faults
