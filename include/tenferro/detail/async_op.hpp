#pragma once
// The toolkit every asynchronous operation of the library is built from: the
// session entry (entry_op.hpp), the .npy operations (io.hpp) and the batcher's
// items (batcher.hpp). Each is one heap object (its "op") that owns the
// completion handler; these are the pieces they share, so that each rule is
// written once:
//
//  * op storage: the op is allocated with the handler's associated allocator
//    (our per-thread entry cache when it names none, entry_memory.hpp) and
//    freed with it, as Asio's own operations are;
//  * the cancellation filter: which cancellation types an op that has not
//    started its work honours (all three: withdrawing it has no side effect);
//  * the hand-off of the op to the handler's executor (handoff.hpp, S16): a
//    function object that owns the op while it is queued there, invokes it, or
//    — if the executor destroys it unrun — passes the gate and discards the op;
//  * the upcall order: release the tracked work and clear the slot before the
//    handler runs, and pass the gate and free the op's memory either before the
//    upcall (a handler with its own allocator, Asio's order) or right after it
//    (our cache), never later.

#include <cstddef>
#include <exception>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/entry_memory.hpp"
#include "tenferro/detail/handoff.hpp"
#include "tenferro/detail/handoff_retry.hpp"

namespace tenferro::detail {

/// One piece of an error's detail text: a string, or a number.
struct detail_piece {
    detail_piece(std::string_view s) noexcept : text(s) {}  // NOLINT(google-explicit-constructor)
    detail_piece(const char* s) noexcept : text(s) {}       // NOLINT(google-explicit-constructor)
    detail_piece(std::size_t n) noexcept;                    // NOLINT(google-explicit-constructor)
    std::string_view text;
    char digits[24] = {};
};

/// The pieces joined, or an empty string when memory runs out: an admission
/// failure is decided on paths that cannot throw (S19), and its code says
/// what happened without the text.
std::string compose_detail(std::initializer_list<detail_piece> pieces) noexcept;

/// True for the cancellation types an op honours before its work has started:
/// terminal, partial and total alike (nothing has happened that withdrawing it
/// could leave half-done).
constexpr bool cancel_requested(asio::cancellation_type_t type) noexcept {
    constexpr auto any =
        asio::cancellation_type::terminal | asio::cancellation_type::partial | asio::cancellation_type::total;
    return (type & any) != asio::cancellation_type::none;
}

/// The allocator an op of type `Op` for `Handler` is stored with.
template <class Op, class Handler>
using op_allocator_t = typename std::allocator_traits<
    asio::associated_allocator_t<Handler, entry_allocator<void>>>::template rebind_alloc<Op>;

/// True when `Handler` names no allocator of its own (the op lives in our
/// per-thread cache, which may be freed after the upcall).
template <class Handler>
inline constexpr bool uses_entry_cache_v =
    std::is_same_v<asio::associated_allocator_t<Handler, entry_allocator<void>>, entry_allocator<void>>;

/// Allocates and constructs `Op` with `handler`'s associated allocator; the
/// handler is the constructor's first argument. Nothing leaks if it throws.
template <class Op, class Handler, class... Args>
Op* make_op(Handler&& handler, Args&&... args) {
    op_allocator_t<Op, std::decay_t<Handler>> alloc(asio::get_associated_allocator(handler, entry_allocator<void>()));
    Op* op = std::allocator_traits<decltype(alloc)>::allocate(alloc, 1);
    try {
        std::allocator_traits<decltype(alloc)>::construct(alloc, op, std::forward<Handler>(handler),
                                                          std::forward<Args>(args)...);
    } catch (...) {
        std::allocator_traits<decltype(alloc)>::deallocate(alloc, op, 1);
        throw;
    }
    return op;
}

/// Destroys and frees an op made by make_op, with the allocator `alloc` (taken
/// from its handler before the handler moved out, or from the handler itself).
template <class Op, class Alloc>
void free_op(Op* op, Alloc alloc) noexcept {
    std::allocator_traits<Alloc>::destroy(alloc, op);
    std::allocator_traits<Alloc>::deallocate(alloc, op, 1);
}

/// The function object an op hands to its handler's executor: owns the op
/// while it is queued. Invoked, it calls `op->upcall()`; destroyed unrun (the
/// executor shut down or refused it), it passes the op's gate and calls
/// `op->discard()`, which must free the op without calling the handler.
/// `Op` provides `gate()`, `upcall()` and `discard()` (private members are
/// fine: `friend class op_handoff<Op>;`).
template <class Op>
class op_handoff {
public:
    explicit op_handoff(Op* op) noexcept : op_(op) {}
    op_handoff(op_handoff&& other) noexcept : op_(std::exchange(other.op_, nullptr)) {}
    op_handoff& operator=(op_handoff&&) = delete;
    ~op_handoff() {
        if (op_ == nullptr) return;
        handoff_gate& gate = op_->gate();
        if (gate.in_own_post()) {
            // Dropped by the very post that was handing it over (it took the
            // function, then failed): the poster (try_hand_off) decides what
            // becomes of the op.
            gate.pass();
            gate.note_dropped_in_post();
            return;
        }
        gate.pass();
        op_->discard();
    }
    void operator()() { std::exchange(op_, nullptr)->upcall(); }

    /// Hands `op`'s completion to `ex` through the op's gate (handoff.hpp),
    /// through an untracked copy of `ex`: a post, or with `may_dispatch` a
    /// dispatch. Returns false when that failed for want of memory (before or
    /// after the executor took the function): the op is untouched, and the
    /// caller parks it for a retry (handoff_retry.hpp, S19). An executor that
    /// refuses the function otherwise has it discarded. Any other exception
    /// once the executor took it can only come from a handler that a dispatch
    /// ran inline, and ends the process, as on any noexcept completion path.
    template <class Executor>
    static bool try_hand_off(Op* op, const Executor& ex, bool may_dispatch) noexcept {
        op_handoff fn(op);
        // Once handed off, the op may have run and been freed: after the
        // hand-off only the gate's address is used, unless the function was
        // dropped inside the post (then the op is alive).
        handoff_gate* const gate = &op->gate();
        try {
            hand_off_untracked(ex, *gate, std::move(fn), may_dispatch);
        } catch (const std::bad_alloc&) {
            if (fn.op_ != nullptr) {
                fn.op_ = nullptr;
                return false;
            }
            return !handoff_gate::take_dropped_in_post(gate);
        } catch (...) {
            if (fn.op_ != nullptr) return true;  // refused before it took the function: discarded below
            if (handoff_gate::take_dropped_in_post(gate)) {
                op->discard();
                return true;
            }
            std::terminate();
        }
        if (handoff_gate::take_dropped_in_post(gate)) op->discard();  // refused without a word
        return true;
    }

private:
    Op* op_;
};

/// Posts an op's completion (an op_handoff<Op>) to the op's executor, and
/// when that post finds no memory, parks the op and posts it again when memory
/// is back (handoff_retry.hpp, S19): the completion is never lost. `Op` derives
/// from retry_node and gives this class access (`friend struct
/// completion_poster;`) to `completion_executor()`, `gate()` and op_handoff's
/// `upcall()` and `discard()`.
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
        return op_handoff<Op>::try_hand_off(&op, op.completion_executor(), false);
    }
};

/// The completion of an operation whose state could not be built (out of
/// memory, S19): the handler, and the exception and results it completes
/// with, in the block that was allocated for the op of type `Op`. It is
/// posted to the handler's executor, never invoked inside the initiating
/// function (S1), and parked for a retry while that post finds no memory.
/// An initiation that Asio runs inside a noexcept function (use_awaitable's)
/// thus never throws once it has its block: the failure arrives where the
/// caller awaits.
template <class Handler, class Op, class... Results>
class initiation_failure : public retry_node {
public:
    /// Builds the completion in `block` (an `Op`'s block, from `Op`'s
    /// allocator for `handler`) and posts it. `handler` must move without
    /// throwing (every completion handler of Asio's does).
    template <class H>
    static void complete_in(Op* block, H&& handler, std::exception_ptr exception, Results... results) noexcept {
        static_assert(sizeof(initiation_failure) <= sizeof(Op) && alignof(initiation_failure) <= alignof(Op),
                      "the failure reuses the op's block");
        auto* self = ::new (static_cast<void*>(block))
            initiation_failure(std::forward<H>(handler), std::move(exception), std::move(results)...);
        completion_poster::post(*self);
    }

private:
    friend class op_handoff<initiation_failure>;
    friend struct completion_poster;
    using executor_type = asio::associated_executor_t<Handler>;
    using allocator_type = op_allocator_t<Op, Handler>;

    template <class H>
    initiation_failure(H&& handler, std::exception_ptr exception, Results&&... results) noexcept
        : handler_(std::forward<H>(handler)),
          executor_(asio::get_associated_executor(handler_)),
          exception_(std::move(exception)),
          results_(std::move(results)...) {}

    const executor_type& completion_executor() const noexcept { return executor_; }
    handoff_gate& gate() noexcept { return gate_; }

    // Asio's order: pass the gate and free the block, then call the handler.
    void upcall() {
        Handler handler(std::move(handler_));
        std::exception_ptr exception = std::move(exception_);
        std::tuple<Results...> results = std::move(results_);
        gate_.pass();
        destroy();
        std::apply([&](Results&... r) { std::move(handler)(std::move(exception), std::move(r)...); }, results);
    }
    void discard() noexcept { destroy(); }

    void destroy() noexcept {
        allocator_type alloc(asio::get_associated_allocator(handler_, entry_allocator<void>()));
        this->~initiation_failure();
        std::allocator_traits<allocator_type>::deallocate(alloc, reinterpret_cast<Op*>(this), 1);
    }

    handoff_gate gate_;
    Handler handler_;
    executor_type executor_;
    std::exception_ptr exception_;
    std::tuple<Results...> results_;
};

}  // namespace tenferro::detail
