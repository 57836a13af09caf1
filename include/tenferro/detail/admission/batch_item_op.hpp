#pragma once
// The operation state of `batcher::submit`: an item (batch_item.hpp) with the
// handler and its tracked work, built from the library's operation toolkit
// (detail/async/), and the initiation that creates it and hands it to the
// batcher core.

#include <exception>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/batch_item.hpp"
#include "tenferro/detail/admission/batcher_core.hpp"
#include "tenferro/detail/admission/compose_detail.hpp"
#include "tenferro/detail/admission/session_context.hpp"
#include "tenferro/detail/async/cancellation.hpp"
#include "tenferro/detail/async/completion.hpp"
#include "tenferro/detail/async/handoff_gate.hpp"
#include "tenferro/detail/async/handoff_retry.hpp"
#include "tenferro/detail/async/initiation_failure.hpp"
#include "tenferro/detail/async/library_context.hpp"
#include "tenferro/detail/async/noexcept_initiation.hpp"
#include "tenferro/detail/async/op_allocator.hpp"
#include "tenferro/detail/async/op_work.hpp"
#include "tenferro/session_entry_error.hpp"

namespace tenferro::detail {

template <class Handler, class In, class Out>
class batch_item_op;

/// batch_item_op as a template of the handler alone.
template <class In, class Out>
struct item_op_for {
    template <class Handler>
    using type = batch_item_op<Handler, In, Out>;
};

/// The typed half of an item: the handler and its tracked work.
template <class Handler, class In, class Out>
class batch_item_op final : public batch_item<In, Out>, public retry_node {
    using handler_executor = handler_executor_t<Handler>;
    friend struct completion_handoff<batch_item_op>;
    friend struct completion_poster;

public:
    /// Builds the item. The handler is the last member built (S19): when
    /// tracking work on its executor throws, it has not moved yet, and
    /// launch() completes it with the exception instead.
    template <class H>
    batch_item_op(H&& handler, std::shared_ptr<batcher_core> core, In&& input)
        : work_(handler), core_(std::move(core)), handler_(std::forward<H>(handler)) {
        this->input.emplace(std::move(input));
    }

    /// The result of an item that memory did not allow to submit (the
    /// exception, `std::bad_alloc`, is the handler's first argument); its
    /// detail text only if memory allows (compose_detail).
    static session_result<Out> out_of_memory_result() noexcept {
        return session_result<Out>(tl::unexpected<session_entry_error>(
            session_entry_error(session_entry_errc::executor, {},
                                compose_detail({"out of memory while submitting the item; it was not queued (the "
                                                "exception is the first argument)"}))));
    }

    /// Allocates the item with the handler's allocator and builds it. Out of
    /// memory for the block, the initiating function throws, nothing done;
    /// building it failed (tracking work on a type-erased executor may
    /// allocate), the handler completes with the exception, by post, in the
    /// block (initiation_failure). Returns null then.
    template <class H>
    static batch_item_op* launch(H&& handler, std::shared_ptr<batcher_core> core, In&& input) {
        auto alloc = op_allocator_for<batch_item_op>(handler);
        batch_item_op* op = std::allocator_traits<decltype(alloc)>::allocate(alloc, 1);
        try {
            ::new (static_cast<void*>(op)) batch_item_op(std::forward<H>(handler), std::move(core), std::move(input));
        } catch (...) {
            initiation_failure<Handler, batch_item_op, session_result<Out>>::complete_in(
                op, std::forward<H>(handler), std::current_exception(), out_of_memory_result());
            return nullptr;
        }
        return op;
    }

    /// Installs the cancellation handler; called once the item is about to
    /// enter the waiting list, before anyone else sees it.
    void connect_cancellation() {
        detail::connect_cancellation<&batch_item_op::cancel>(asio::get_associated_cancellation_slot(handler_), this);
    }

    handler_executor handler_ex() const noexcept { return handler_executor_of(handler_); }

    asio::any_io_executor executor() const override {
        if constexpr (std::is_constructible_v<asio::any_io_executor, const handler_executor&>)
            return unwrap_executor(asio::any_io_executor(work_.untracked()));
        else
            return asio::any_io_executor(library_executor());
    }

    void fail(std::exception_ptr e, session_entry_error error) noexcept override {
        // A taken item whose batch could not be gathered still holds its
        // input: it goes now, as a gathered batch's inputs leave their items.
        if (this->where == batch_item_base::stage::taken) this->input.reset();
        this->exception_ = std::move(e);
        this->result_.emplace(tl::unexpected(std::move(error)));
        deliver();
    }

    /// The executor dropped the completion unrun (its context shut down), or
    /// the submit failed before the item was queued.
    void discard() noexcept {
        // Destroyed unrun by its executor: the slot's handler points here.
        clear_cancellation(handler_);
        free_op(this, op_allocator_for<batch_item_op>(handler_));
    }

private:
    /// The slot's handler: withdraws the item if it still waits (B4).
    static void cancel(batch_item_op* op, asio::cancellation_type_t type) noexcept { op->core_->cancel(*op, type); }

    // Out of memory for the post, the item is parked and posted again when
    // memory is back (S19).
    void deliver() noexcept override { completion_poster::post(*this); }

    handoff_gate& gate() noexcept { return this->gate_; }
    const auto& completion_executor() const noexcept { return work_.executor(); }

    /// On the item's executor: the completion routine (completion.hpp).
    void upcall() {
        complete_op<batch_item_op>(this, handler_, work_, this->gate_, std::move(this->exception_),
                                   std::move(*this->result_));
    }

    op_work<Handler> work_;
    std::shared_ptr<batcher_core> core_;  // the cancellation handler's way back
    Handler handler_;                     // built last (the constructor)
};

/// The signature `batcher::submit` completes with.
template <class Out>
using submit_signature = void(std::exception_ptr, session_result<Out>);

/// What `batcher::submit` reserves before initiating with `Token` (S19): the
/// item's block for the handler Asio makes (op_reservation_t), nothing when
/// the initiation may throw.
template <class Token, class In, class Out>
using submit_reservation_t = op_reservation_t<Token, item_op_for<In, Out>::template type, submit_signature<Out>>;

/// `batcher::submit`'s initiation. `Reservation`: the item's block, taken
/// beforehand and carried in `reserved` (submit_reservation_t), checked
/// against the handler Asio actually passes. `FailsInline`: a token whose
/// handler completes here when the item's block cannot be had (use_future,
/// fails_inline).
template <class In, class Out, class Reservation = reserved_op_block<0>, bool FailsInline = false>
struct initiate_submit {
    std::shared_ptr<batcher_core> core;
    [[no_unique_address]] mutable Reservation reserved;

    /// The executor the operation exposes, as Asio's operations do: where a
    /// handler with no executor of its own completes, and where Asio's
    /// adapters (cancel_after's timer) put theirs (library_context.hpp).
    using executor_type = library_executor_type;
    executor_type get_executor() const noexcept { return library_executor(); }

    template <class Handler>
    void operator()(Handler&& handler, In item) const {
        using op_type = batch_item_op<std::decay_t<Handler>, In, Out>;
        static_assert(Reservation::template check<sizeof(op_type), alignof(op_type)>());
        [[maybe_unused]] const auto placed = reserved.place();  // launch's allocation takes it
        op_type* op = nullptr;
        if constexpr (FailsInline) {
            try {
                op = op_type::launch(std::forward<Handler>(handler), core, std::move(item));
            } catch (const std::bad_alloc&) {
                // Thrown with the handler untouched: it completes now.
                std::forward<Handler>(handler)(std::current_exception(), op_type::out_of_memory_result());
                return;
            }
        } else {
            op = op_type::launch(std::forward<Handler>(handler), core, std::move(item));
        }
        if (op == nullptr) return;  // completes with the failure (launch)
        // S7: submit is an entry. Inside a running session (a synchronous body
        // on this thread, or an asynchronous one whose executor the handler
        // carries) it is re-entry; inside an execution scope the batch's
        // session could not be the scope's.
        session_context* ctx = current_sync_context();
        if (ctx == nullptr) ctx = context_of(op->handler_ex());
        if (ctx != nullptr && ctx->kind == context_kind::session)
            return core->reject_at_submit(*op, session_entry_errc::reentered,
                                          "batcher::submit inside a running session (its batch would wait for "
                                          "the session it is called from)");
        if (ctx != nullptr)
            return core->reject_at_submit(*op, session_entry_errc::incompatible_context,
                                          "batcher::submit inside an execution scope: a batch session is not "
                                          "one of the scope's sessions");
        try {
            op->connect_cancellation();
        } catch (...) {
            // Out of memory for the slot's handler: rejected (counted), not
            // queued, completed by post; never a throw here, which Asio may
            // run inside a noexcept function (S19).
            return core->reject_at_submit(*op, session_entry_errc::executor,
                                          compose_detail({"out of memory for the item's cancellation handler; it "
                                                          "was not queued"}));
        }
        core->enqueue(*op);
    }
};

}  // namespace tenferro::detail
