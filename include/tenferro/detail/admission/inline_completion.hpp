#pragma once
// The completion of an entry that took the inline fast path
// (entry_op::try_run_inline): its handler and two arguments in one block of
// the per-thread op cache, posted as one function type compiled in the
// library (src/admission/entry.cpp).

#include <exception>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/async/completion.hpp"
#include "tenferro/detail/async/handoff_retry.hpp"
#include "tenferro/detail/async/op_allocator.hpp"

namespace tenferro::detail {

/// The inline fast path's completion (entry_op::try_run_inline): the handler
/// and its two arguments in one block of the per-thread op cache, posted
/// through post_inline_completion as one function type compiled once in the
/// library (a function object of its own per handler and value type would
/// make Asio instantiate its posting machinery again for every entry type).
class inline_completion : private retry_node {
public:
    /// Calls the handler (the completion routine, complete_op).
    virtual void invoke() = 0;
    /// Destroys the completion unrun: its io_context was destroyed, or the
    /// executor refused it.
    virtual void discard() noexcept = 0;

protected:
    inline_completion() noexcept = default;
    ~inline_completion() = default;

private:
    friend void post_inline_completion(const asio::io_context::executor_type& io, inline_completion* c) noexcept;
    // The context a post that found no memory is retried on (S19).
    asio::io_context* parked_on_ = nullptr;
};

/// Posts `c` to `io` as a continuation (never runs it inline). Out of memory
/// for the post, `c` is parked and posted again when memory is back
/// (handoff_retry.hpp); an executor that refuses it otherwise discards it.
void post_inline_completion(const asio::io_context::executor_type& io, inline_completion* c) noexcept;

/// An inline_completion for a handler of type Handler taking (exception_ptr,
/// Result), in a block of type `Block` (sized for the entry's op as well,
/// entry_op::try_run_inline), which it is freed as, so that the cache hands
/// the whole block to the next entry. It has neither a gate nor tracked work:
/// it is posted from a thread of its handler's io_context, which cannot be
/// destroyed before that thread returns, and the posted function is the
/// context's work while it is queued.
template <class Handler, class Result, class Block>
class inline_completion_for final : public inline_completion {
public:
    inline_completion_for(Handler&& handler, std::exception_ptr exception, Result&& result)
        : handler_(std::move(handler)), exception_(std::move(exception)), result_(std::move(result)) {}
    ~inline_completion_for() = default;

    void invoke() override {
        no_work none;
        no_gate direct;
        // (Result's move is nothrow: entry_op::inline_candidate.)
        complete_op<Block>(this, handler_, none, direct, std::move(exception_), std::move(result_));
    }
    void discard() noexcept override { free_op(this, op_allocator_for<Block>(handler_)); }

private:
    Handler handler_;
    std::exception_ptr exception_;
    Result result_;
};

}  // namespace tenferro::detail
