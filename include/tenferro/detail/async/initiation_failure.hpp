#pragma once
// The completion of an operation whose state could not be built (out of
// memory, S19): the handler, and the exception and results it completes with,
// in the block that was allocated for the op. It is posted to the handler's
// executor, never invoked inside the initiating function (S1), and parked for
// a retry while that post finds no memory. An initiation that Asio runs inside
// a noexcept function (use_awaitable's) thus never throws once it has its
// block: the failure arrives where the caller awaits.

#include <exception>
#include <new>
#include <tuple>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/async/completion.hpp"
#include "tenferro/detail/async/handoff_gate.hpp"
#include "tenferro/detail/async/handoff_retry.hpp"
#include "tenferro/detail/async/library_context.hpp"
#include "tenferro/detail/async/op_allocator.hpp"

namespace tenferro::detail {

/// The failed initiation of an op of type `Op` for `Handler`, completing with
/// `(exception, results...)`.
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
    friend struct completion_handoff<initiation_failure>;
    friend struct completion_poster;
    using executor_type = handler_executor_t<Handler>;

    template <class H>
    initiation_failure(H&& handler, std::exception_ptr exception, Results&&... results) noexcept
        : handler_(std::forward<H>(handler)),
          executor_(handler_executor_of(handler_)),
          exception_(std::move(exception)),
          results_(std::move(results)...) {}

    // (The op never waited: it tracks no work and connected no slot.)
    const executor_type& completion_executor() const noexcept { return executor_; }
    handoff_gate& gate() noexcept { return gate_; }

    void upcall() {
        no_work none;
        std::apply(
            [&](Results&... r) {
                complete_op<Op>(this, handler_, none, gate_, std::move(exception_), std::move(r)...);
            },
            results_);
    }
    void discard() noexcept { free_op(this, op_allocator_for<Op>(handler_)); }

    handoff_gate gate_;
    Handler handler_;
    executor_type executor_;
    std::exception_ptr exception_;
    std::tuple<Results...> results_;
};

}  // namespace tenferro::detail
