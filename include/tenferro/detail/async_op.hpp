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

#include <memory>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/entry_memory.hpp"
#include "tenferro/detail/handoff.hpp"

namespace tenferro::detail {

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
        if (op_ != nullptr) {
            op_->gate().pass();
            op_->discard();
        }
    }
    void operator()() { std::exchange(op_, nullptr)->upcall(); }

    /// Hands `op` to `ex`: a post through the op's gate (handoff.hpp). If the
    /// executor throws, nobody can be told; the destructor above frees the op.
    template <class Executor>
    static void post(const Executor& ex, Op* op) noexcept {
        try {
            hand_off(ex, op->gate(), op_handoff(op), false);
        } catch (...) {
        }
    }

private:
    Op* op_;
};

}  // namespace tenferro::detail
