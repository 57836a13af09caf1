#pragma once
// Coroutine-local session context: how an entry knows it was started inside a
// running session (S7) or inside an execution scope (S8).
//
// Two carriers, and nothing else writes them:
//  * A synchronous body runs start to finish on one thread, so a thread-local
//    pointer set for exactly the duration of the call marks it
//    (`sync_context_marker`). Nothing else runs on that thread meanwhile, so an
//    unrelated coroutine can never observe it.
//  * An asynchronous body (and an execution scope's body) may suspend and resume
//    on any thread, so a thread-local would leak onto whatever runs on that
//    thread in between. Instead the body runs on a `session_executor`: a thin
//    wrapper around the executor it would otherwise run on, carrying the
//    context. Every coroutine awaited in that body's chain inherits its
//    executor, so an entry initiated anywhere in the chain finds the context
//    through its completion handler's associated executor.
//
// The context is reference counted because a copy of the executor may outlive
// the session (a body that spawns detached work): such a copy then carries an
// inactive context, which no check flags.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/compute_pool.hpp"
#include "tenferro/detail/admission/running_deadlines.hpp"
#include "tenferro/detail/async/executor_target.hpp"

namespace tenferro::detail {

enum class context_kind : unsigned char { session, scope };

struct session_context;

/// The stop_callback that carries an entry's stop into its asynchronous
/// body's own awaits (session_context::forward_stop).
struct body_stop_forwarder {
    session_context* ctx;
    void operator()() const noexcept;
};

struct session_context : std::enable_shared_from_this<session_context> {
    session_context(context_kind k, const void* h) noexcept : kind(k), host(h) {}
    session_context(const session_context&) = delete;
    session_context& operator=(const session_context&) = delete;
    virtual ~session_context() = default;

    /// The body has finished: destroy what it used (an asynchronous body's
    /// backend session) now, although executor copies that carry this context
    /// may keep the object itself alive a little longer.
    virtual void close() noexcept {}

    const context_kind kind;
    /// Identity of the host whose session or scope this is.
    const void* const host;
    /// False once the session or scope has finished.
    std::atomic<bool> active{true};
    /// Scopes only: a session of this scope is running (S8: a second one is contended).
    std::atomic<bool> scope_busy{false};
    /// Sessions that stop at their deadline (S20): linked in the host's
    /// running_deadlines while the body runs.
    running_deadline deadline;

    /// An asynchronous body's or scope's executors (session_executor): the
    /// inner executor, indexed by session_executor's bits: [0] possibly
    /// blocking, [1] never blocking, [2] and [3] the same, tracked. Made
    /// before the body starts; throws (out of memory) with nothing changed.
    void set_executors(const asio::any_io_executor& ex);
    /// The session is over: its own hold on the tracked executors goes
    /// (nothing when it had none: a synchronous body's context).
    void release_tracked() noexcept {
        if (has_executors_) unhold_tracked();
        has_executors_ = false;
    }
    /// One hold on the tracked executors goes (the session's, or a tracked
    /// session_executor's); the last one drops them.
    void unhold_tracked() noexcept {
        if (tracked_refs.fetch_sub(1, std::memory_order_acq_rel) == 1) drop_tracked();
    }
    /// The last hold on the tracked executors went: the caller's work ends.
    void drop_tracked() noexcept;

    asio::any_io_executor inner[4];
    /// Tracked session_executors alive, plus one while the session runs;
    /// zero: the tracked executors are gone for good.
    std::atomic<std::size_t> tracked_refs{0};

    // ---- S20: an asynchronous body's own awaits are cancelled with it ----
    //
    // The body (or scope body) of an entry that can be asked to stop runs
    // under co_spawn with this signal's slot as its completion's slot, so the
    // coroutine's awaits see what is emitted here. A slot is not
    // thread-safe, and the body's executor may have several threads (the
    // compute pool), so the emit is serialised with the body's turns: every
    // function the body's executor runs is one turn (session_executor wraps
    // it), and `terminal` is emitted only when no turn runs, either by the
    // last turn to end, or by a function posted to the body's executor when
    // the request finds the body suspended. Each stop is emitted once.

    /// Before co_spawn: the body's turns are counted from now, and the
    /// entry's stop (`token`) is forwarded into `body_signal`. Allocates
    /// nothing; a stop already requested is emitted when the spawning turn
    /// ends (end_turn).
    void forward_stops(std::stop_token token) noexcept {
        forwards_stop = true;
        stop_forward.emplace(std::move(token), body_stop_forwarder{this});
    }
    /// The body is over: its stop goes nowhere more (waits for a request
    /// that is forwarding right now on another thread).
    void stop_forwarding() noexcept { stop_forward.reset(); }

    /// A turn of the body begins (waits while an emit runs on another thread).
    void begin_turn() noexcept;
    /// A turn ends: the last one emits a stop asked meanwhile.
    void end_turn() noexcept;
    /// The stop_callback's work, on the requesting thread: marks the emit
    /// due, and unless a turn is running (whose end emits), hands it to the
    /// body's executor.
    void forward_stop() noexcept;
    /// Emits `terminal` when it is due and no turn runs; false when a turn
    /// runs (its end emits).
    void try_emit() noexcept;

    /// The asynchronous body's cancellation signal (co_spawn's completion's slot).
    asio::cancellation_signal body_signal;
    /// Read by session_executor::execute: the body's functions run as turns.
    /// Written before co_spawn, never after.
    bool forwards_stop = false;

private:
    bool has_executors_ = false;  // set_executors ran; written before the body, read at its end
    // Turns running (from bit 2 up), an emit due (bit 1), an emit running (bit 0).
    static constexpr std::uint32_t emitting = 1, emit_due = 2, one_turn = 4;
    std::atomic<std::uint32_t> turns_{0};
    std::optional<std::stop_callback<body_stop_forwarder>> stop_forward;
};

/// The context of the synchronous body running on this thread, if any.
session_context* current_sync_context() noexcept;

/// Marks the calling thread as running a synchronous body for its lifetime.
class sync_context_marker {
public:
    explicit sync_context_marker(session_context& ctx) noexcept;
    ~sync_context_marker();
    sync_context_marker(const sync_context_marker&) = delete;
    sync_context_marker& operator=(const sync_context_marker&) = delete;

private:
    session_context* previous_;
};

/// The executor an asynchronous session body or scope body runs on: the
/// context's inner executor (the compute pool's, or the caller's) plus the
/// context itself.
///
/// Small on purpose (S19): 24 bytes, a context pointer and the property bits,
/// so that `any_io_executor` keeps it inline, and every `require`/`prefer`
/// Asio makes of it (co_spawn's work guards, each post's `blocking.never`)
/// is a bit flip, not a heap allocation that could fail inside Asio's
/// noexcept machinery. The inner executors it forwards to (never-blocking,
/// tracked) are made once, by the context, when the body starts, where a
/// failure can still complete the entry (session_context::set_executors).
///
/// Outstanding work: a tracked copy counts in the context; the context holds
/// the tracked inner executors while the session runs or any tracked copy is
/// alive, and releases them (the caller's work) when both are over. A copy
/// made tracked after that is tracked no more (the session is over and its
/// context's executors stay only for the copies a body left behind).
/// `relationship` is kept for queries and not passed on (a hint).
class session_executor {
public:
    session_executor(std::shared_ptr<session_context> ctx) noexcept : ctx_(std::move(ctx)) {}
    session_executor(const session_executor& other) noexcept : ctx_(other.ctx_), bits_(other.bits_) {
        if (tracked()) ctx_->tracked_refs.fetch_add(1, std::memory_order_relaxed);
    }
    session_executor(session_executor&& other) noexcept
        : ctx_(std::move(other.ctx_)), bits_(std::exchange(other.bits_, 0)) {}
    session_executor& operator=(const session_executor& other) noexcept {
        if (this != &other) *this = session_executor(other);
        return *this;
    }
    session_executor& operator=(session_executor&& other) noexcept {
        if (this != &other) {
            release();
            ctx_ = std::move(other.ctx_);
            bits_ = std::exchange(other.bits_, 0);
        }
        return *this;
    }
    ~session_executor() { release(); }

    /// The compute pool's task block for one of Asio's type-erased functions
    /// run as a turn of a body whose stop is forwarded (the block co_spawn's
    /// next hop to the pool needs then; keep_op_block).
    static constexpr std::size_t turn_task_bytes() noexcept;

    /// The executor it forwards to (untracked, possibly blocking).
    const asio::any_io_executor& inner() const noexcept { return ctx_->inner[0]; }
    session_context* context() const noexcept { return ctx_.get(); }

    template <class F>
    void execute(F&& f) const {
        // A body whose stop reaches its awaits (S20): each function is a turn.
        if (ctx_->forwards_stop) return execute_inner(body_turn<std::decay_t<F>>{ctx_, std::forward<F>(f)});
        execute_inner(std::forward<F>(f));
    }

    asio::execution_context& query(asio::execution::context_t) const noexcept {
        return asio::query(ctx_->inner[0], asio::execution::context);
    }
    asio::execution::blocking_t query(asio::execution::blocking_t) const noexcept {
        return (bits_ & never_bit) != 0 ? asio::execution::blocking_t(asio::execution::blocking.never)
                                        : asio::execution::blocking_t(asio::execution::blocking.possibly);
    }
    asio::execution::outstanding_work_t query(asio::execution::outstanding_work_t) const noexcept {
        return tracked() ? asio::execution::outstanding_work_t(asio::execution::outstanding_work.tracked)
                         : asio::execution::outstanding_work_t(asio::execution::outstanding_work.untracked);
    }
    asio::execution::relationship_t query(asio::execution::relationship_t) const noexcept {
        return (bits_ & continuation_bit) != 0
                   ? asio::execution::relationship_t(asio::execution::relationship.continuation)
                   : asio::execution::relationship_t(asio::execution::relationship.fork);
    }

    session_executor require(asio::execution::blocking_t::never_t) const noexcept { return with(never_bit, true); }
    session_executor require(asio::execution::blocking_t::possibly_t) const noexcept { return with(never_bit, false); }
    session_executor require(asio::execution::outstanding_work_t::tracked_t) const noexcept {
        if (tracked()) return *this;
        // Counted only while the context still holds the tracked executors
        // (a count above zero); once they are gone, the copy stays untracked.
        std::size_t n = ctx_->tracked_refs.load(std::memory_order_relaxed);
        while (n != 0)
            if (ctx_->tracked_refs.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel,
                                                         std::memory_order_relaxed))
                return session_executor(ctx_, static_cast<std::uint8_t>(bits_ | tracked_bit));
        return *this;
    }
    session_executor require(asio::execution::outstanding_work_t::untracked_t) const noexcept {
        return session_executor(ctx_, static_cast<std::uint8_t>(bits_ & ~tracked_bit));
    }
    session_executor require(asio::execution::relationship_t::fork_t) const noexcept {
        return with(continuation_bit, false);
    }
    session_executor require(asio::execution::relationship_t::continuation_t) const noexcept {
        return with(continuation_bit, true);
    }
    template <class Alloc>
    session_executor require(const asio::execution::allocator_t<Alloc>&) const noexcept {
        return *this;
    }

    friend bool operator==(const session_executor& a, const session_executor& b) noexcept {
        return a.ctx_ == b.ctx_ && a.bits_ == b.bits_;
    }
    friend bool operator!=(const session_executor& a, const session_executor& b) noexcept { return !(a == b); }

private:
    /// One function of a body whose stop is forwarded, run as a turn
    /// (session_context::begin_turn). Holds the context: the function may end
    /// the body and drop every other hold on it.
    template <class F>
    struct body_turn {
        std::shared_ptr<session_context> ctx;
        F f;
        void operator()() {
            struct end_guard {
                session_context& c;
                ~end_guard() { c.end_turn(); }
            };
            ctx->begin_turn();
            const end_guard end{*ctx};
            f();
        }
    };

    template <class F>
    void execute_inner(F&& f) const {
        const asio::any_io_executor& inner = ctx_->inner[bits_ & (never_bit | tracked_bit)];
        // The compute pool's executor is called as itself: through the
        // any_io_executor it would wrap `f` (already Asio's type-erased
        // function) in a second block.
        if constexpr (executor_target_available) {
            if (const auto* pool = executor_target<compute_pool::executor_type>(inner))
                return pool->execute(std::forward<F>(f));
        }
        asio_execute(inner, std::forward<F>(f));
    }

    static constexpr std::uint8_t never_bit = 1;
    static constexpr std::uint8_t tracked_bit = 2;
    static constexpr std::uint8_t continuation_bit = 4;

    // Adopts one count of the context's tracked_refs when `bits` say tracked.
    session_executor(std::shared_ptr<session_context> ctx, std::uint8_t bits) noexcept
        : ctx_(std::move(ctx)), bits_(bits) {}
    bool tracked() const noexcept { return (bits_ & tracked_bit) != 0; }
    session_executor with(std::uint8_t bit, bool on) const noexcept {
        const auto bits = static_cast<std::uint8_t>(on ? bits_ | bit : bits_ & ~bit);
        if ((bits & tracked_bit) != 0) ctx_->tracked_refs.fetch_add(1, std::memory_order_relaxed);
        return session_executor(ctx_, bits);
    }
    void release() noexcept {
        if (tracked()) ctx_->unhold_tracked();
        bits_ = 0;
    }

    std::shared_ptr<session_context> ctx_;
    std::uint8_t bits_ = 0;
};

constexpr std::size_t session_executor::turn_task_bytes() noexcept {
    struct one_pointer_function {
        void* target;
        void operator()() const noexcept {}
    };
    return compute_pool::executor_type::task_bytes<body_turn<one_pointer_function>>();
}

/// The session_executor inside `ex`, if that is what it wraps.
inline const session_executor* as_session_executor(const asio::any_io_executor& ex) noexcept {
    return executor_target<session_executor>(ex);
}

/// The active session context an executor carries, if any.
template <class Executor>
session_context* context_of(const Executor& ex) noexcept {
    session_context* ctx = nullptr;
    if constexpr (std::is_same_v<Executor, session_executor>) {
        ctx = ex.context();
    } else if constexpr (std::is_same_v<Executor, asio::any_io_executor>) {
        if (const auto* se = as_session_executor(ex)) ctx = se->context();
    }
    return ctx != nullptr && ctx->active.load(std::memory_order_acquire) ? ctx : nullptr;
}

/// Strips a session_executor so a nested body never wraps a wrapper (and a
/// tracked one's work is not lost: the inner executor is asked again).
inline asio::any_io_executor unwrap_executor(const asio::any_io_executor& ex) {
    if (const auto* se = as_session_executor(ex)) return se->inner();
    return ex;
}

}  // namespace tenferro::detail
