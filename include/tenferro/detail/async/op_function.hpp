#pragma once
// The one function object the library hands to someone else's machinery (an
// executor's queue, co_spawn's completion) on behalf of an operation: it owns
// the operation while it is out there. Invoked, it gives the operation to
// `Policy::run`; destroyed while it still owns it (the executor shut down,
// refused it, or failed to take it; co_spawn dropped the coroutine), to
// `Policy::drop`. Exactly one of the two happens, whichever copies and moves
// the machinery makes (S1): a moved-from function owns nothing.
//
// Its uses: the completion of every operation (completion_handoff,
// completion.hpp), the runner of a caller-placed session body, the completion
// of an asynchronous body's coroutine, the inline fast path's completion, a
// compute task on its way through a user's executor.
//
// A policy has `run(Op&, Args...)` (any arguments the invocation passes) and
// `drop(Op&) noexcept`, static or not: the function keeps a copy of the policy
// (empty policies cost nothing). Typed on the op's untyped base where there is
// one: Asio instantiates its posting machinery once per function type.

#include <utility>

namespace tenferro::detail {

template <class Op, class Policy>
class op_function {
public:
    explicit op_function(Op* op, Policy policy = Policy()) noexcept : policy_(policy), op_(op) {}
    op_function(op_function&& other) noexcept : policy_(other.policy_), op_(std::exchange(other.op_, nullptr)) {}
    op_function& operator=(op_function&&) = delete;
    ~op_function() {
        if (op_ != nullptr) policy_.drop(*op_);
    }

    template <class... Args>
    void operator()(Args&&... args) {
        policy_.run(*std::exchange(op_, nullptr), std::forward<Args>(args)...);
    }

    /// Whether this function still owns its op (it was neither invoked, nor
    /// moved from, nor released).
    bool owns() const noexcept { return op_ != nullptr; }
    /// The op it owns (null when it owns none).
    Op* get() const noexcept { return op_; }
    /// Gives the op back to the caller, which then decides its fate.
    Op* release() noexcept { return std::exchange(op_, nullptr); }

private:
    [[no_unique_address]] Policy policy_;
    Op* op_;
};

}  // namespace tenferro::detail
