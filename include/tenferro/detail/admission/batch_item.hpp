#pragma once
// One item of a batcher: an intrusive node of the batcher's waiting list and
// the outcome of its `submit`. The half that knows neither In nor Out
// (batch_item_base) is all the compiled batcher core (batcher_core.hpp) sees;
// batch_item<In, Out> adds the input and the result; the handler's half is
// batch_item_op (batch_item_op.hpp).

#include <chrono>
#include <exception>
#include <optional>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/async/handoff_gate.hpp"
#include "tenferro/session_entry_error.hpp"

namespace tenferro::detail {

class batch_run_base;

/// The part of an item the batcher core works on: the waiting list's links
/// and where the item stands.
class batch_item_base {
public:
    enum class stage : unsigned char { waiting, taken, finished };

    batch_item_base(const batch_item_base&) = delete;
    batch_item_base& operator=(const batch_item_base&) = delete;

    /// Where a caller-placed batch led by this item runs its body.
    virtual asio::any_io_executor executor() const = 0;

    /// Completes the item with an admission error (and `e`, the batch body's
    /// exception, when there is one): records the outcome and hands the
    /// completion to the item's executor (always a post: never inside
    /// `submit`, never inside a cancellation's emit).
    virtual void fail(std::exception_ptr e, session_entry_error error) noexcept = 0;

    // The waiting list's links (guarded by the batcher core's mutex).
    batch_item_base* prev = nullptr;
    batch_item_base* next = nullptr;
    stage where = stage::waiting;
    // Under the core's mutex: the batch that took it, until that batch's
    // session has finished (B7 counts the items still waited for), and
    // whether it was cancelled once taken.
    bool cancelled_in_batch = false;
    batch_run_base* run = nullptr;
    std::chrono::steady_clock::time_point submitted_at;

protected:
    batch_item_base() = default;
    ~batch_item_base() = default;
};

/// An item with its input (until a batch takes it) and its outcome.
template <class In, class Out>
class batch_item : public batch_item_base {
public:
    /// Records the outcome and hands the completion to the item's executor
    /// (always a post, as `fail`).
    void finish(std::exception_ptr e, session_result<Out> r) noexcept {
        exception_ = std::move(e);
        result_.emplace(std::move(r));
        deliver();
    }

    std::optional<In> input;

protected:
    batch_item() = default;
    ~batch_item() = default;
    virtual void deliver() noexcept = 0;

    handoff_gate gate_;
    std::exception_ptr exception_;
    std::optional<session_result<Out>> result_;
};

}  // namespace tenferro::detail
