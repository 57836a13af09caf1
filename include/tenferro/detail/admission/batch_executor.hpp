#pragma once
// The executor of a batch session's completion handler, and that handler.
// With placement::caller the session's body must run on the executor of the
// batch's first item, which is known only at the grant; the host needs an
// executor when the entry is initiated. batch_executor is that executor: its
// first use takes the batch, and it forwards to the first item's executor.

#include <exception>
#include <memory>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/batch_run.hpp"
#include "tenferro/detail/admission/batcher_core.hpp"
#include "tenferro/session_entry_error.hpp"

namespace tenferro::detail {

/// The executor a batch session's completion (and, with placement::caller,
/// its body) is handed to. With placement::caller it forwards to the executor
/// of the batch's first item, which is known only at the grant: its first use
/// takes the batch. Otherwise it runs everything inline, where the host hands
/// it over (the compute worker that ran the body), and each item's completion
/// is then posted to that item's own executor — one hop, as for a plain entry.
class batch_executor {
public:
    batch_executor(batch_run_base* run, bool never_blocking) noexcept : run_(run), never_(never_blocking) {}

    template <class F>
    void execute(F&& f) const {
        const asio::any_io_executor* target = run_->core->target_of(*run_);
        if (target == nullptr || !*target) {
            std::forward<F>(f)();
        } else if (never_) {
            asio_execute(asio::prefer(asio::require(*target, asio::execution::blocking.never),
                                      asio::execution::relationship.continuation),
                         std::forward<F>(f));
        } else {
            asio_execute(asio::prefer(*target, asio::execution::blocking.possibly), std::forward<F>(f));
        }
    }

    asio::execution_context& query(asio::execution::context_t) const noexcept {
        const asio::any_io_executor* target = run_->taken.load(std::memory_order_acquire) ? &run_->target : nullptr;
        if (target != nullptr && *target) return asio::query(*target, asio::execution::context);
        return run_->core->fallback_context();
    }
    asio::execution::blocking_t query(asio::execution::blocking_t) const noexcept {
        return never_ ? asio::execution::blocking_t(asio::execution::blocking.never)
                      : asio::execution::blocking_t(asio::execution::blocking.possibly);
    }
    batch_executor require(asio::execution::blocking_t::never_t) const noexcept { return {run_, true}; }
    batch_executor require(asio::execution::blocking_t::possibly_t) const noexcept { return {run_, false}; }
    // The run outlives every use (the session's completion holds it); work is
    // tracked by the items themselves, on their own executors.
    batch_executor require(asio::execution::outstanding_work_t::tracked_t) const noexcept { return *this; }
    batch_executor require(asio::execution::outstanding_work_t::untracked_t) const noexcept { return *this; }
    batch_executor require(asio::execution::relationship_t::fork_t) const noexcept { return *this; }
    batch_executor require(asio::execution::relationship_t::continuation_t) const noexcept { return *this; }
    template <class Alloc>
    batch_executor require(const asio::execution::allocator_t<Alloc>&) const noexcept {
        return *this;
    }

    friend bool operator==(const batch_executor& a, const batch_executor& b) noexcept {
        return a.run_ == b.run_ && a.never_ == b.never_;
    }
    friend bool operator!=(const batch_executor& a, const batch_executor& b) noexcept { return !(a == b); }

private:
    batch_run_base* run_;
    bool never_;
};

/// A batch session's completion handler: its executor is the run's.
struct batch_session_done {
    std::shared_ptr<batch_run_base> run;
    using executor_type = batch_executor;
    executor_type get_executor() const noexcept { return executor_type(run.get(), false); }
    /// B7: the batch session's entry makes itself stoppable and tells the
    /// run where it is (entry_op::install_cancellation_handler).
    void bind_entry(entry_base* e) const noexcept { run->entry = e; }
    void operator()(std::exception_ptr e, session_result<batch_done> r) {
        run->core->session_finished(*run, std::move(e), std::move(r));
    }
};

}  // namespace tenferro::detail
