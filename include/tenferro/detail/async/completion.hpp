#pragma once
// How every operation of the library completes: its completion is handed to
// the handler's executor (completion_handoff, completion_poster) and, there,
// the one completion routine (complete_op) tears the operation down and calls
// the handler, in one order, written once:
//
//  1. Clear the handler's cancellation slot. Its handler points at the op, so
//     it must go before the op's memory; we are on the handler's executor,
//     where the slot is emitted, so no emit races with the clear; and it must
//     go before the upcall, after which the slot may already carry the
//     caller's next operation. (An op that never connected the slot, one that
//     tracks no work, leaves it alone.)
//  2. Release the tracked work (op_work.hpp). The work is what keeps the
//     caller's context running while any part of the op may still touch it,
//     so it goes last of the caller's things: after the slot, and after what
//     the op destroyed before calling this (a session body and its captures).
//     This function is itself queued work of that context while it runs, so
//     the count cannot reach zero here; and the handler sees no work of ours
//     outstanding.
//  3. Move the handler out (its arguments were moved out by the caller).
//  4. Upcall, pass the hand-off gate, free the op, in the order the op's
//     memory allows:
//     - Asio's order, pass and free first, then call the handler, when the op
//       has no gate (it was posted from a thread of the handler's own context,
//       and nobody else can still touch it) or its handler has an allocator
//       of its own: the handler may start its next operation in the very block
//       it frees.
//     - Call the handler first, then pass and free, when the op has a gate and
//       lives in the per-thread op cache (op_allocator.hpp): the poster may
//       still be inside `post` (returning from the system call that woke this
//       thread), and the caller need not wait for that. Safe because this
//       function runs inside the caller's context (its run loop, a strand's
//       invoker), which cannot be destroyed before we return, and we return
//       only once the poster has left (S16). The block goes back to the cache
//       right after the upcall; everything in the op with a visible
//       destructor is gone before it, as with Asio's own ops.
//     Either way the gate is passed before the op's memory (which holds it)
//     is freed, and before this function returns.

#include <exception>
#include <new>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/async/cancellation.hpp"
#include "tenferro/detail/async/handoff_gate.hpp"
#include "tenferro/detail/async/handoff_retry.hpp"
#include "tenferro/detail/async/op_allocator.hpp"
#include "tenferro/detail/async/op_function.hpp"
#include "tenferro/detail/async/op_work.hpp"

namespace tenferro::detail {

/// complete_op's `work` for an op that tracks none (it never waited: an
/// initiation failure, the inline fast path's completion).
struct no_work {
    void reset() noexcept {}
};

/// complete_op's `gate` for an op posted from a thread of its handler's own
/// context: no other thread can still touch it.
struct no_gate {
    void pass() noexcept {}
};

/// The completion routine (steps 1-4 above), on the handler's executor.
/// `op` lives in a block of type `Block` (`Op` itself unless it reuses a
/// larger op's block) allocated with `handler`'s allocator; `handler` is the
/// op's own member; `work` an op_work or no_work, `gate` a handoff_gate or
/// no_gate, both members of the op; `args` the handler's arguments, already
/// moved out of the op. Whatever the op destroys before the upcall beyond its
/// handler, work and gate (a body, a value moved out) it destroys before
/// calling this. Frees `op`, also when the handler's move or the handler
/// throws.
template <class Block, class Op, class Handler, class Work, class Gate, class... Args>
void complete_op(Op* op, Handler& handler, Work& work, Gate& gate, Args... args) {
    constexpr bool tracks_work = !std::is_same_v<Work, no_work>;
    constexpr bool gated = !std::is_same_v<Gate, no_gate>;
    if constexpr (tracks_work) clear_cancellation(handler);  // 1
    work.reset();                                             // 2
    struct release_op {
        Op* op;
        op_allocator_t<Block, Handler> alloc;
        Gate* gate;
        void operator()() noexcept {
            gate->pass();
            free_op(std::exchange(op, nullptr), alloc);
        }
        ~release_op() {
            if (op != nullptr) (*this)();
        }
    } release{op, op_allocator_for<Block>(handler), &gate};
    Handler h(std::move(handler));  // 3
    if constexpr (!gated || !uses_op_cache_v<Handler>) release();
    std::move(h)(std::move(args)...);  // 4 (with the op cache and a gate: release's destructor, after the upcall)
}

/// The hand-off of an op's completion to its handler's executor: the function
/// handed over is an op_function<Op, completion_handoff<Op>>, which invoked
/// calls `op.upcall()` (which ends in complete_op) and destroyed unrun calls
/// `op.discard()` (which frees the op without calling the handler). `Op`
/// provides `gate()`, `upcall()` and `discard()` (private members are fine:
/// `friend struct completion_handoff<Op>;`).
template <class Op>
struct completion_handoff {
    using function = op_function<Op, completion_handoff>;

    static void run(Op& op) { op.upcall(); }
    static void drop(Op& op) noexcept {
        handoff_gate& gate = op.gate();
        if (gate.in_own_post()) {
            // Dropped by the very post that was handing it over (it took the
            // function, then failed): the poster (try_hand_off) decides what
            // becomes of the op.
            gate.pass();
            gate.note_dropped_in_post();
            return;
        }
        gate.pass();
        op.discard();
    }

    /// Hands `op`'s completion to `ex` (tracked or not) through the op's gate
    /// (hand_off_untracked): a post, or with `may_dispatch` a dispatch.
    /// Returns false when that failed for want of memory (before or after the
    /// executor took the function): the op is untouched, and the caller parks
    /// it for a retry (handoff_retry.hpp, S19). An executor that refuses the
    /// function otherwise has it discarded. Any other exception once the
    /// executor took it can only come from a handler that a dispatch ran
    /// inline, and ends the process, as on any noexcept completion path.
    template <class Executor>
    static bool try_hand_off(Op* op, const Executor& ex, bool may_dispatch) noexcept {
        function fn(op);
        // Once handed off, the op may have run and been freed: after the
        // hand-off only the gate's address is used, unless the function was
        // dropped inside the post (then the op is alive).
        handoff_gate* const gate = &op->gate();
        try {
            hand_off_untracked(ex, *gate, std::move(fn), may_dispatch);
        } catch (const std::bad_alloc&) {
            if (fn.release() != nullptr) return false;
            return !handoff_gate::take_dropped_in_post(gate);
        } catch (...) {
            if (fn.owns()) return true;  // refused before it took the function: discarded by fn
            if (handoff_gate::take_dropped_in_post(gate)) {
                op->discard();
                return true;
            }
            std::terminate();
        }
        if (handoff_gate::take_dropped_in_post(gate)) op->discard();  // refused without a word
        return true;
    }
};

/// Posts an op's completion to the op's executor (completion_handoff), and
/// when that post finds no memory, parks the op and posts it again when memory
/// is back (handoff_retry.hpp, S19): the completion is never lost. `Op`
/// derives from retry_node and gives this class access (`friend struct
/// completion_poster;`) to `completion_executor()`, the executor to post to.
struct completion_poster {
    template <class Op>
    static void post(Op& op) noexcept {
        if (try_post(op)) return;
        retry_node& node = op;
        node.retry = [](retry_node& n) noexcept { return try_post(static_cast<Op&>(n)); };
        retry_handoff_later(node);
    }

private:
    template <class Op>
    static bool try_post(Op& op) noexcept {
        return completion_handoff<Op>::try_hand_off(&op, op.completion_executor(), false);
    }
};

}  // namespace tenferro::detail
