#pragma once
/// \file
/// `cpu_backend`: the CPU host. Admits session entries through a strict FIFO
/// queue of permits and runs their bodies on an owned pool of compute workers.
/// Built on `session_host` (session_host.hpp) with the CPU backend
/// (`detail::cpu_engine`): the admission rules are the template's, the
/// sessions, buffer pool and runtime caches are the CPU's.

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenferro/asio.hpp"

#include "tenferro/admission_observer.hpp"
#include "tenferro/backend_session.hpp"
#include "tenferro/backend_session_host.hpp"
#include "tenferro/buffer_pool.hpp"
#include "tenferro/cpu_runtime_cache.hpp"
#include "tenferro/detail/cpu_engine.hpp"
#include "tenferro/execution_scope.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_host.hpp"

namespace tenferro {

namespace detail {
struct testing_access;  // the tests' seam (tests/support/testing_access.hpp)
}

/// Construction options of `cpu_backend`.
struct cpu_backend_options {
    /// Permits, and compute workers; 0 means `std::thread::hardware_concurrency()`.
    std::size_t permits = 0;
    /// Queue bound: a `fifo` entry arriving when this many wait completes with
    /// `contended` (load shedding).
    std::size_t max_waiters = std::numeric_limits<std::size_t>::max();
    /// Pins the compute workers round-robin to these CPUs. A CPU this process
    /// may not run on makes the constructor throw `std::system_error`.
    std::vector<unsigned> cpus = {};
    /// Optional metrics hook; see `admission_observer`.
    std::shared_ptr<admission_observer> observer = nullptr;
    /// Retention cap of the backend's buffer pool: at most this many bytes of
    /// freed session outputs and temporaries are kept for reuse (0: none).
    std::size_t buffer_pool_bytes = std::size_t{64} << 20;
    /// Byte cap of the backend's own runtime cache (`default_cache()`), which
    /// the contractions of plain `with_backend_session` entries share.
    std::size_t runtime_cache_bytes = cpu_runtime_cache::default_capacity_bytes;
    /// Optional start-up hook of the compute workers: each worker calls it
    /// once, on its own thread, with its index (0 .. permits - 1; worker `i` is
    /// pinned to `cpus[i % cpus.size()]`), after it has been pinned and before
    /// it takes any work — the place to set a per-thread priority, a name or a
    /// thread-local. The constructor returns after every worker has run it
    /// (the calls run concurrently, on different threads). If a call throws,
    /// the constructor stops the workers and rethrows the first exception.
    ///
    /// \code
    /// tenferro::cpu_backend cpu({.on_worker_start = [](std::size_t) { setpriority(PRIO_PROCESS, gettid(), 19); }});
    /// \endcode
    std::function<void(std::size_t worker_index)> on_worker_start = nullptr;
};

/// The CPU backend host. Models `backend_session_host`.
///
/// Thread-safety: every member may be called concurrently from any thread.
/// Destruction waits for running sessions: do not destroy the backend from a
/// thread that a running session (or a granted `placement::caller` body)
/// needs in order to finish.
class cpu_backend {
public:
    using runtime_cache = cpu_runtime_cache;
    /// What bodies receive (as for `session_host<B>::session_type`).
    using session_type = backend_session;
    /// The backend behind the admission core (see session_host.hpp).
    using backend_type = detail::cpu_engine;

    /// Starts `options.permits` compute workers (optionally pinned), each of
    /// which runs `options.on_worker_start` (if set) before taking work.
    /// \throws std::system_error for an invalid CPU in `options.cpus`; the
    /// first exception thrown by `options.on_worker_start`.
    explicit cpu_backend(cpu_backend_options options = {});
    /// `shutdown()`, then waits for running sessions, then joins the workers.
    ~cpu_backend();

    cpu_backend(const cpu_backend&) = delete;
    cpu_backend& operator=(const cpu_backend&) = delete;

    /// Runs `f` in a session once one permit is admitted.
    ///
    /// `f` is `R(backend_session&)` (a synchronous body) or
    /// `asio::awaitable<R>(backend_session&)` (an asynchronous body that holds
    /// its permits until its awaitable completes); `R` may be `void`.
    ///
    /// - Completion signature: `void(std::exception_ptr, session_result<R>)`.
    ///   With the default `asio::use_awaitable`:
    ///   `session_result<R> r = co_await cpu.with_backend_session(f);` —
    ///   admission failures are values in `r`, `f`'s exception is rethrown at
    ///   the `co_await`, `f`'s value arrives unchanged in `r.value()`.
    /// - Admission: strict FIFO in initiation order, no barging; waiting
    ///   suspends, never blocks a thread. `f` runs exactly once if admitted,
    ///   never if rejected.
    /// - Resumption: the completion runs on the handler's associated executor
    ///   (the awaiting coroutine's executor), never inline inside another
    ///   entry's release.
    /// - Cancellation (terminal, partial, total) removes a waiting entry; it
    ///   completes with `cancelled` and the other waiters keep their order.
    ///   Once admitted, the body runs to completion.
    /// - Lifetime: `f` is moved into the operation and lives until the
    ///   completion; the `backend_session&` is valid only while `f` runs.
    ///
    /// \code
    /// session_result<float> r = co_await cpu.with_backend_session(
    ///     [&](backend_session& s) { return score(s, query); });
    /// if (!r) log(r.error().message());
    /// \endcode
    template <class F, class CompletionToken = asio::use_awaitable_t<>>
        requires(!std::is_same_v<std::remove_cvref_t<F>, session_options>)
    auto with_backend_session(F&& f, CompletionToken&& token = {}) {
        return with_backend_session(session_options{}, std::forward<F>(f), std::forward<CompletionToken>(token));
    }

    /// As above, with per-entry options: `permits` (weighted entry, granted
    /// together), `wait` (`never`: admit now or `contended`) and `where`
    /// (`compute` or `caller` placement).
    template <class F, class CompletionToken = asio::use_awaitable_t<>>
    auto with_backend_session(session_options options, F&& f, CompletionToken&& token = {}) {
        return host_.with_backend_session(options, std::forward<F>(f), std::forward<CompletionToken>(token));
    }

    /// As `with_backend_session`, but contractions inside consult and fill
    /// `cache`, which must outlive the operation. A cache that a running
    /// session holds makes the entry complete with `contended`, before `f` runs.
    template <class F, class CompletionToken = asio::use_awaitable_t<>>
        requires(!std::is_same_v<std::remove_cvref_t<F>, session_options>)
    auto with_backend_session_cached(runtime_cache& cache, F&& f, CompletionToken&& token = {}) {
        return with_backend_session_cached(cache, session_options{}, std::forward<F>(f),
                                           std::forward<CompletionToken>(token));
    }

    /// As above, with per-entry options (see `with_backend_session`).
    template <class F, class CompletionToken = asio::use_awaitable_t<>>
    auto with_backend_session_cached(runtime_cache& cache, session_options options, F&& f,
                                     CompletionToken&& token = {}) {
        return detail::host_access::enter(host_, detail::cached_cpu_opener{&host_.backend(), &cache}, options,
                                          std::forward<F>(f), std::forward<CompletionToken>(token));
    }

    /// The backend's own runtime cache, shared by the contractions of every
    /// `with_backend_session` entry (internally synchronised). Mark operands
    /// constant here (`default_cache().mark_constant(weights)`) to let those
    /// sessions keep their packed copies; `stats()` shows its counters.
    runtime_cache& default_cache() noexcept { return host_.backend().default_cache(); }
    const runtime_cache& default_cache() const noexcept { return host_.backend().default_cache(); }

    /// Admits once (one permit, FIFO) and runs `body(scope)`, an
    /// `asio::awaitable<R>(execution_scope&)`, on the caller's executor while
    /// holding that permit. Sessions of this host entered inside the body reuse
    /// the permit without queueing (see `execution_scope`). Completion
    /// signature, resumption and cancellation as for `with_backend_session`.
    template <class F, class CompletionToken = asio::use_awaitable_t<>>
    auto with_execution_scope(F&& body, CompletionToken&& token = {}) {
        return host_.with_execution_scope(std::forward<F>(body), std::forward<CompletionToken>(token));
    }

    /// `"cpu"`.
    std::string_view name() const noexcept { return host_.name(); }
    /// Total permits (= compute workers).
    std::size_t permits() const noexcept { return host_.permits(); }
    /// A consistent snapshot of the admission counters.
    admission_stats stats() const;
    /// A snapshot of the buffer pool that sessions allocate their outputs and
    /// temporaries from (retention cap: `cpu_backend_options::buffer_pool_bytes`).
    tenferro::buffer_pool_stats buffer_pool_stats() const;
    /// True once an observer hook threw (S11); the host then admits nothing.
    bool poisoned() const noexcept;
    /// Stops admitting: queued and later entries complete with `executor`;
    /// running sessions finish normally. Idempotent.
    void shutdown();

private:
    friend struct detail::testing_access;

    session_host<detail::cpu_engine> host_;
};

static_assert(backend_session_host<cpu_backend>);

}  // namespace tenferro
