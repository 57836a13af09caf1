#pragma once
// Handing a function to the caller's executor from another thread, such that
// the caller may destroy its execution context the moment the function has run
// (contract rule S16, docs/contract.md).
//
// The hazard: `asio::post(ex, fn)` enqueues `fn` and *then* wakes a thread of
// the target context (a condition variable signal after the unlock, an eventfd
// write, a strand's bookkeeping) and destroys its temporary executor copies.
// Between the enqueue and the return of `post`, another thread may already run
// `fn`, which invokes the user's handler; the user may then destroy the
// io_context (its `run_one()` loop sees the handler done), and the posting
// thread's remaining touches land on freed memory. Holding a tracked executor
// copy across the post does not help: its release is itself such a touch.
//
// The cure is a rendezvous. The posting thread closes a gate before the post
// and opens it as its very last action, after `post` returned. The function,
// when it runs (or is destroyed unrun), passes the gate: it waits until the
// poster has left. It must pass before it frees the gate's storage, and before
// the caller's context could be destroyed: a function that calls the user's
// handler may call it first and pass afterwards, still inside its own
// invocation (the context cannot be destroyed while one of its handlers runs),
// which keeps the poster's remaining time out of the caller's latency; a
// function that runs a session body passes when the body is done, before the
// entry's completion is handed over the same gate (the body itself may run
// while the poster finishes its post: only the completion lets the caller
// tear its context down). The wait is bounded by a few instructions of the
// poster (the rest of `post`), so it spins, then yields; it never waits on
// user code. A function that runs inline inside the `post`/`dispatch` call
// itself (dispatch onto the current executor, or an executor that runs
// everything inline) is on the poster's own thread: it passes at once, and the
// poster then leaves the gate alone, since its storage may already be gone.
//
// Every asynchronous operation of the library hands its completion over this
// way (completion.hpp), and a session entry its caller-placed body's runner.

#include <atomic>
#include <utility>

#include "tenferro/asio.hpp"

namespace tenferro::detail {

/// The rendezvous of one hand-off at a time; lives in the operation state.
class handoff_gate {
public:
    handoff_gate() noexcept = default;
    handoff_gate(const handoff_gate&) = delete;
    handoff_gate& operator=(const handoff_gate&) = delete;

    /// Called by the handed-off function, whether it is invoked or destroyed
    /// unrun, before the gate's storage is freed and before the function
    /// returns: returns once the posting thread no longer touches the target
    /// executor, its context or this gate.
    void pass() noexcept;

    /// True when called inside this gate's own post or dispatch, on the
    /// posting thread: a function destroyed there was dropped by the post
    /// that was handing it over (it failed after taking the function).
    bool in_own_post() const noexcept;
    /// What such a function leaves for its poster, who decides what becomes
    /// of the operation (out of memory: parked for a retry; otherwise
    /// discarded). Kept by the posting thread, not in the gate: after a
    /// hand-off the poster may not touch the gate, whose operation may have
    /// run and been freed already; it asks by address whether this gate's
    /// function was dropped (and the operation is therefore still alive).
    void note_dropped_in_post() noexcept;
    static bool take_dropped_in_post(const handoff_gate* gate) noexcept;

private:
    friend class handoff_scope;
    enum : unsigned char { open, closed, closed_with_waiter };
    std::atomic<unsigned char> state_{open};
};

/// The posting side's half: closes the gate on construction and opens it on
/// destruction, unless the function already ran (or was destroyed) inline on
/// this thread, in which case the gate's storage may be gone and is not touched.
class handoff_scope {
public:
    explicit handoff_scope(handoff_gate& gate) noexcept;
    ~handoff_scope();
    handoff_scope(const handoff_scope&) = delete;
    handoff_scope& operator=(const handoff_scope&) = delete;

private:
    handoff_gate* gate_;
    handoff_gate* previous_;  // an outer hand-off on this thread (a handler run inline)
};

/// The post or dispatch of a hand-off itself, without a gate: the caller
/// holds one around it (hand_off_untracked, op_work.hpp), or needs none (it
/// posts from a thread of the target context, which cannot be destroyed
/// before that thread returns).
///
/// A post is marked as a continuation (Asio's `relationship.continuation`):
/// what we hand over continues the flow of the thread that hands it over (a
/// body that released its permits, an initiation). When that thread runs
/// inside the target context, Asio then queues `fn` on the thread's private
/// queue, to run after the current handler, instead of taking the context's
/// lock and waking another of its threads; from any other thread the hint
/// changes nothing.
template <class Executor, class Function>
void hand_off_unguarded(const Executor& ex, Function&& fn, bool may_dispatch) {
    if (may_dispatch) {
        asio::dispatch(ex, std::forward<Function>(fn));
    } else if constexpr (asio::execution::is_executor<Executor>::value) {
        asio_execute(asio::prefer(ex, asio::execution::blocking.never, asio::execution::relationship.continuation),
                     std::forward<Function>(fn));
    } else {
        asio::post(ex, std::forward<Function>(fn));
    }
}

}  // namespace tenferro::detail
