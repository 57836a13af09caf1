#pragma once
// The handler's executor, as an operation holds it while it is pending: with
// its outstanding work tracked, as Asio's handler_work does, so that the
// caller's io_context keeps running (`run()` does not return) while the
// operation waits or runs elsewhere. An operation keeps no second, plain copy
// (an executor is up to seven words, paid by every parked operation): a
// hand-off makes its untracked copy inside the hand-off (hand_off_untracked),
// and a body that runs on the executor gets one from untracked().
//
// The work is released by the completion routine (completion.hpp), before the
// upcall: once the handler has run, nothing of the operation touches its
// executor again (S16).
//
// Type-erased executors: an io_context's executor behind `any_io_executor`
// (the common case: a coroutine on an io_context) is unwrapped once, in
// hand_off_untracked, so that the untracked copy, the blocking and
// relationship properties and the post are done on its concrete type, where
// they are compiled in; through the type erasure each property builds another
// any_io_executor on every hop.

#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/async/executor_target.hpp"
#include "tenferro/detail/async/handoff_gate.hpp"
#include "tenferro/detail/async/library_context.hpp"

namespace tenferro::detail {

/// Posts (or, with `may_dispatch`, dispatches) `fn` to the executor `ex`
/// under `gate` (handoff_gate.hpp), through an untracked copy of `ex` made
/// after the gate closes and destroyed before it opens: an executor copy may
/// hold a reference into the caller's context (a strand's implementation,
/// owned by a service of the context), so destroying it after the gate opened
/// would race with a caller that destroys its context as soon as the
/// handed-off function ran (S16). `fn` must pass the gate when invoked and
/// when destroyed unrun.
///
/// `ex` may be tracked or not. An io_context's tracked executor behind
/// `any_io_executor` is unwrapped to its concrete type (the file comment):
/// the same executor, so the same semantics (one nuance: a dispatch on the
/// concrete type would use the function's associated allocator, which the
/// type-erased one ignores; the library's hand-off functions have none).
template <class Executor, class Function>
void hand_off_untracked(const Executor& ex, handoff_gate& gate, Function&& fn, bool may_dispatch) {
    const handoff_scope scope(gate);
    if constexpr (std::is_same_v<Executor, asio::any_io_executor> && executor_target_available) {
        using tracked_io = std::decay_t<decltype(asio::prefer(std::declval<asio::io_context::executor_type>(),
                                                              asio::execution::outstanding_work.tracked))>;
        if (const tracked_io* io = executor_target<tracked_io>(ex)) {
            hand_off_unguarded(asio::prefer(*io, asio::execution::outstanding_work.untracked),
                               std::forward<Function>(fn), may_dispatch);
            return;
        }
    }
    const auto untracked = asio::prefer(ex, asio::execution::outstanding_work.untracked);
    hand_off_unguarded(untracked, std::forward<Function>(fn), may_dispatch);
}

/// The tracked executor of an operation for `Handler`: the handler's
/// associated executor (`Fallback` when it names none: the library's
/// completion context, library_context.hpp, unless the operation has an I/O
/// executor of its own), the library's for Asio's system executor
/// (completion_executor_t).
template <class Handler, class Fallback = library_executor_type>
class op_work {
public:
    using executor_type = completion_executor_t<Handler, Fallback>;
    using tracked_type = std::decay_t<decltype(asio::prefer(std::declval<const executor_type&>(),
                                                            asio::execution::outstanding_work.tracked))>;

    /// Tracks work on `handler`'s executor. Throws what preferring tracked
    /// work throws (a type-erased executor may copy itself to the heap).
    explicit op_work(const Handler& handler)
        requires std::is_same_v<Fallback, library_executor_type>
        : tracked_(asio::prefer(handler_executor_of(handler), asio::execution::outstanding_work.tracked)) {}
    op_work(const Handler& handler, const Fallback& fallback)
        : tracked_(asio::prefer(completion_executor_of(handler, fallback), asio::execution::outstanding_work.tracked)) {
    }
    op_work(const op_work&) = delete;
    op_work& operator=(const op_work&) = delete;

    /// The tracked executor: where the operation's completion goes.
    const tracked_type& executor() const noexcept { return tracked_; }
    /// A copy that tracks no work, for what runs there and may outlive the
    /// operation (a body).
    auto untracked() const { return asio::prefer(tracked_, asio::execution::outstanding_work.untracked); }

    /// Hands `fn` to the executor through `gate` (hand_off_untracked).
    template <class Function>
    void hand_off(handoff_gate& gate, Function&& fn, bool may_dispatch) const {
        hand_off_untracked(tracked_, gate, std::forward<Function>(fn), may_dispatch);
    }

    /// Releases the work (the completion routine, before the upcall).
    void reset() noexcept {
        // ([[maybe_unused]]: Boost.Asio's system executor is trivially
        // destructible, and clang then calls the variable unused.)
        [[maybe_unused]] const tracked_type released(std::move(tracked_));
    }

private:
    tracked_type tracked_;
};

}  // namespace tenferro::detail
