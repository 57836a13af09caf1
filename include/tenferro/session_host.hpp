#pragma once
/// \file
/// `session_host<Backend>`: the admission machinery — strict FIFO permits,
/// re-entry detection, execution scopes, poisoning, shutdown, placement, the
/// observer, stats and every Asio completion token — as one class template
/// over a backend that only says what its sessions are. `cpu_backend` is one
/// such host; a GPU stream pool, a set of BLAS handles or a rate-limited
/// service is another, with the same rules (docs/contract.md, S1–S20).

#include <concepts>
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenferro/asio.hpp"

#include "tenferro/admission_observer.hpp"
#include "tenferro/admission_timer.hpp"
#include "tenferro/detail/admission/entry_awaitable.hpp"
#include "tenferro/detail/admission/entry_op.hpp"
#include "tenferro/detail/admission/host_core.hpp"
#include "tenferro/execution_scope.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_grant.hpp"
#include "tenferro/session_options.hpp"

namespace tenferro {

/// What a backend supplies: the type its bodies receive, a name, and how to
/// open a session for an admitted entry.
///
/// `open_session(grant)` is called once per admitted entry, after admission
/// and before the body, on the thread the body will run on. It returns the
/// session object (`session_type`, or a type derived from it), or a
/// `session_result` of one; a `session_result` holding an error completes the
/// entry with that error before the body runs, and the permits return at once.
/// An exception from it completes the entry with `executor` (its message in
/// `detail()`); it does not poison the host. The session object lives until
/// the body (or its awaitable) has finished, and is destroyed before the
/// permits are released.
template <class B>
concept session_backend = requires(B& b, const session_grant& g) {
    typename B::session_type;
    { b.name() } -> std::convertible_to<std::string_view>;
    { b.open_session(g) };
};

/// Construction options of `session_host`.
struct host_options {
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
    /// Optional: bring your own compute pool. When set, the host starts no
    /// compute workers (`cpus` and `on_worker_start` are ignored): every
    /// `placement::compute` body is posted to this executor (never run inline
    /// in the initiating function or in another entry's release), an
    /// asynchronous body's steps run there too, and `session_grant::executor`
    /// is an executor that posts to it. `permits` still counts permits: at
    /// most that many permits are held at once, however many threads the
    /// executor has. A body posted here that the executor destroys unrun (its
    /// context shut down) completes with `executor` and returns its permits
    /// (S12). The executor must outlive the host's last session. The host
    /// counts no outstanding work on it: an `io_context` that serves as one
    /// needs a work guard to keep `run()` from returning while idle.
    ///
    /// \code
    /// asio::thread_pool gpu_feeders(2);
    /// tenferro::session_host<stream_pool> gpu({.permits = 4, .compute_executor = gpu_feeders.get_executor()});
    /// \endcode
    ///
    /// The deterministic simulation (tests/sim/) sets it to a simulated
    /// executor, so that one seeded scheduler owns every hop of the host.
    asio::any_io_executor compute_executor = {};
    /// Tenant groups (P1-P3): FIFO within each, weighted shares of permit-time
    /// between them; an entry names its group in `session_options::group`.
    /// Empty: one group, `{"default", 1}`. \throws std::invalid_argument
    /// (from the constructor) for a weight of 0 or more than 65535 groups.
    std::vector<group_options> groups = {};
    /// Bytes the host's sessions may declare together (`session_options::bytes`,
    /// P6); 0: no byte budget.
    std::size_t memory_budget = 0;
    /// P5: reject at once an arriving `fifo` entry whose predicted wait exceeds
    /// the time left to its deadline.
    bool reject_late = false;
    /// Optional: the clock of deadlines, early rejection and permit-time, and
    /// the wake-ups at deadlines (admission_timer.hpp). Null: the steady clock
    /// and the library's one timer thread (shared by every host and batcher),
    /// started by the first entry with a deadline. The deterministic simulation (tests/sim/) sets a virtual one.
    std::shared_ptr<admission_timer> timer = nullptr;
};

namespace detail {
/// Opens a `session_host<B>` session: calls `B::open_session` with the grant.
template <class B>
struct backend_opener {
    using session_type = typename B::session_type;
    B* backend;
    decltype(auto) operator()(const session_grant& g) const { return backend->open_session(g); }
};
}  // namespace detail

/// The admission core over backend `B`. Models the admission part of
/// `backend_session_host`: every rule of docs/contract.md holds for any `B`.
///
/// Thread-safety: every member may be called concurrently from any thread.
/// Destruction waits for running sessions: do not destroy the host from a
/// thread that a running session (or a granted `placement::caller` body)
/// needs in order to finish. The backend is destroyed after the last session.
///
/// \code
/// struct stream_pool {
///     using session_type = stream_session;
///     std::string_view name() const { return "gpu"; }
///     stream_session open_session(const tenferro::session_grant& g) { return stream_session(take_stream()); }
/// };
/// tenferro::session_host<stream_pool> gpu({.permits = 4});
/// auto r = co_await gpu.with_backend_session([](stream_session& s) { return s.launch(kernel); });
/// \endcode
template <session_backend B>
class session_host {
public:
    using backend_type = B;
    using session_type = typename B::session_type;

    /// Constructs the backend in place from `backend_args`, then starts
    /// `options.permits` compute workers (none with `options.compute_executor`).
    /// \throws std::system_error for an invalid CPU in `options.cpus`; the
    /// first exception of `options.on_worker_start`; what `B`'s constructor throws.
    template <class... A>
    explicit session_host(host_options options, A&&... backend_args)
        : backend_(std::forward<A>(backend_args)...),
          core_(std::make_shared<detail::host_core>(
              std::string(backend_.name()), detail::resolve_permits(options.permits), options.max_waiters, options.cpus,
              std::move(options.observer), std::move(options.on_worker_start), std::move(options.compute_executor),
              detail::admission_policy{std::move(options.groups), options.memory_budget, options.reject_late,
                                       std::move(options.timer)})) {}

    /// `shutdown()`, then waits for running sessions, then joins the workers;
    /// the backend is destroyed last.
    ~session_host() {
        core_->shut_down();
        core_->stop_pool();
    }

    session_host(const session_host&) = delete;
    session_host& operator=(const session_host&) = delete;

    /// Runs `f` in a session of the backend once one permit is admitted.
    ///
    /// `f` is `R(session_type&)` (a synchronous body) or
    /// `asio::awaitable<R>(session_type&)` (an asynchronous body that holds
    /// its permits until its awaitable completes); `R` may be `void`.
    ///
    /// - Completion signature: `void(std::exception_ptr, session_result<R>)`.
    ///   With the default `asio::use_awaitable`:
    ///   `session_result<R> r = co_await host.with_backend_session(f);` —
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
    ///   Once granted, cancellation is S20's: before the body starts, it never
    ///   starts; while it runs, `terminal` or `partial` asks it to stop at its
    ///   stop points and awaits (`total` alone does not). A running body is
    ///   never abandoned: the entry completes when it has returned.
    /// - Lifetime: `f` is moved into the operation and lives until the
    ///   completion; the `session_type&` is valid only while `f` runs.
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
        return enter(detail::backend_opener<B>{&backend_}, options, std::forward<F>(f),
                     std::forward<CompletionToken>(token));
    }

    /// Admits once (one permit, FIFO) and runs `body(scope)`, an
    /// `asio::awaitable<R>(execution_scope&)`, on the caller's executor while
    /// holding that permit. Sessions of this host entered inside the body
    /// reuse the permit without queueing (see `execution_scope`); each opens
    /// its own backend session with the scope's grant. Completion signature,
    /// resumption and cancellation as for `with_backend_session`.
    template <class F, class CompletionToken = asio::use_awaitable_t<>>
        requires(!std::is_same_v<std::remove_cvref_t<F>, session_options>)
    auto with_execution_scope(F&& body, CompletionToken&& token = {}) {
        return with_execution_scope(session_options{}, std::forward<F>(body), std::forward<CompletionToken>(token));
    }

    /// As above, admitted with `options`' wait policy, group, deadline and
    /// bytes (section 8). A scope holds one permit and runs on the caller's
    /// executor: `options.permits` must be 1 and `options.where` is not used.
    /// The sessions inside declare no bytes of their own.
    template <class F, class CompletionToken = asio::use_awaitable_t<>>
    auto with_execution_scope(session_options options, F&& body, CompletionToken&& token = {}) {
        using R = typename detail::body_traits<F, execution_scope>::value_type;
        using token_type = std::decay_t<CompletionToken>;
        options.where = placement::caller;
        return asio::async_initiate<CompletionToken, detail::entry_signature<R>>(
            detail::initiate_entry<
                detail::entry_kind::scope, detail::no_opener, true,
                detail::entry_reservation_t<token_type, detail::entry_kind::scope, detail::no_opener, F>,
                detail::fails_inline_v<token_type>>{
                core_,
                options,
                {},
                detail::reserved_initiation_block<token_type, detail::entry_kind::scope, detail::no_opener, F>(token)},
            token, std::forward<F>(body));
    }

    B& backend() noexcept { return backend_; }
    const B& backend() const noexcept { return backend_; }
    /// `backend().name()`, as it was when the host was built.
    std::string_view name() const noexcept { return core_->name(); }
    /// Total permits (compute workers start with them, unless `compute_executor`
    /// was given); `set_permits` changes it.
    std::size_t permits() const noexcept { return core_->queue().permits(); }
    /// A consistent snapshot of the admission counters.
    admission_stats stats() const { return core_->stats(); }
    /// True once an observer hook threw (S11); the host then admits nothing.
    bool poisoned() const noexcept { return core_->queue().poisoned(); }
    /// Stops admitting: queued and later entries complete with `executor`;
    /// running sessions finish normally. Idempotent.
    void shutdown() { core_->shut_down(); }

    /// The number of tenant groups (`host_options::groups`, at least 1).
    std::size_t groups() const noexcept { return core_->queue().groups(); }
    /// A consistent snapshot of group `group`'s counters (P8).
    /// \throws std::out_of_range for `group >= groups()`.
    tenferro::group_stats group_stats(std::size_t group) const { return core_->queue().group_counters(group); }
    /// P7: the host has `n` permits from now on. Growing grants waiters at
    /// once, in policy order (and starts compute workers up to `n`); shrinking
    /// preempts no running session: new grants wait until the permits held
    /// drop below `n`. Waiters asking for more than `n` complete with
    /// `incompatible_context`. \throws std::invalid_argument for `n == 0`.
    void set_permits(std::size_t n) { core_->set_permits(n); }
    /// P7 for bytes: the budget is `bytes` from now on (0: none); waiters
    /// declaring more complete with `incompatible_context`.
    void set_memory_budget(std::size_t bytes) { core_->set_memory_budget(bytes); }

protected:
    /// One entry, whose session `opener` opens: how a host derived from this
    /// one offers entries that open their sessions differently (as
    /// `cpu_backend`'s cached ones). `Opener` is a callable
    /// `(const session_grant&)` with a nested `session_type`, as
    /// `detail::backend_opener<B>`.
    template <class Opener, class F, class CompletionToken>
    auto enter(Opener opener, session_options options, F&& f, CompletionToken&& token) {
        using R = typename detail::body_traits<F, typename Opener::session_type>::value_type;
        using token_type = std::decay_t<CompletionToken>;
        if constexpr (detail::awaitable_entry_applies<token_type, F, Opener>) {
            // co_await with the default token, an entry likely admitted at
            // once: an entry of its own that can return in place
            // (entry_awaitable.hpp). One likely to wait takes the plain
            // operation below, and parks without that coroutine's frame.
            if (detail::inline_session<std::decay_t<F>, Opener>::worth_awaitable_entry(*core_, options, opener))
                return detail::awaitable_entry<typename detail::awaitable_token_executor<token_type>::type>(
                    core_, options, std::move(opener),
                    std::optional<std::decay_t<F>>(std::in_place, std::forward<F>(f)));
        }
        return asio::async_initiate<CompletionToken, detail::entry_signature<R>>(
            detail::initiate_entry<detail::entry_kind::session, Opener, true,
                                   detail::entry_reservation_t<token_type, detail::entry_kind::session, Opener, F>,
                                   detail::fails_inline_v<token_type>>{
                core_, options, std::move(opener),
                detail::reserved_initiation_block<token_type, detail::entry_kind::session, Opener, F>(token)},
            token, std::forward<F>(f));
    }

    /// The admission core: the permit queue, the compute pool, the counters.
    /// For a derived host that hands its backend the pool (as `cpu_backend`),
    /// and for test hosts that inspect it.
    detail::host_core& core() noexcept { return *core_; }

private:
    B backend_;  // declared first: destroyed after the core has stopped
    std::shared_ptr<detail::host_core> core_;
};

}  // namespace tenferro
