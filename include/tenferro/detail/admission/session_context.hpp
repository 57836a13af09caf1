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
#include <memory>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/running_deadlines.hpp"
#include "tenferro/detail/async/executor_target.hpp"

namespace tenferro::detail {

enum class context_kind : unsigned char { session, scope };

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

/// The executor an asynchronous session body or scope body runs on: `inner`
/// plus the session context. Forwards every property to `inner`.
class session_executor {
public:
    session_executor(asio::any_io_executor inner, std::shared_ptr<session_context> ctx) noexcept
        : inner_(std::move(inner)), ctx_(std::move(ctx)) {}

    const asio::any_io_executor& inner() const noexcept { return inner_; }
    session_context* context() const noexcept { return ctx_.get(); }

    template <class F>
    void execute(F&& f) const {
        inner_.execute(std::forward<F>(f));
    }

    template <class Property>
        requires asio::can_query<const asio::any_io_executor&, const Property&>::value
    decltype(auto) query(const Property& p) const {
        return asio::query(inner_, p);
    }

    template <class Property>
        requires asio::can_require<const asio::any_io_executor&, const Property&>::value
    session_executor require(const Property& p) const {
        return session_executor(asio::require(inner_, p), ctx_);
    }

    template <class Property>
        requires asio::can_prefer<const asio::any_io_executor&, const Property&>::value
    session_executor prefer(const Property& p) const {
        return session_executor(asio::prefer(inner_, p), ctx_);
    }

    friend bool operator==(const session_executor& a, const session_executor& b) noexcept {
        return a.ctx_ == b.ctx_ && a.inner_ == b.inner_;
    }
    friend bool operator!=(const session_executor& a, const session_executor& b) noexcept { return !(a == b); }

private:
    asio::any_io_executor inner_;
    std::shared_ptr<session_context> ctx_;
};

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

/// Strips a session_executor so a nested body never wraps a wrapper.
inline asio::any_io_executor unwrap_executor(const asio::any_io_executor& ex) {
    if (const auto* se = as_session_executor(ex)) return se->inner();
    return ex;
}

}  // namespace tenferro::detail
