#pragma once
// The inline fast path: an entry admitted at once on the caller's thread,
// inside the caller's io_context, runs its body right there and costs no
// operation state. Shared by entry_op::try_run_inline and awaitable_entry
// (entry_awaitable.hpp).

#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/body_traits.hpp"
#include "tenferro/detail/admission/entry_base.hpp"
#include "tenferro/detail/admission/host_core.hpp"
#include "tenferro/detail/admission/permit_queue.hpp"
#include "tenferro/detail/admission/session_context.hpp"
#include "tenferro/detail/admission/session_opener.hpp"
#include "tenferro/detail/async/executor_target.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_grant.hpp"
#include "tenferro/session_options.hpp"

namespace tenferro::detail {

/// What the inline fast path does that does not depend on how the entry
/// completes: whether an entry may take it, and the grant, session, body and
/// release themselves. Its two users differ only in the completion:
/// entry_op::try_run_inline posts it to the handler's executor;
/// awaitable_entry (entry_awaitable.hpp) returns the value to the awaiting
/// coroutine, which is already running on that executor.
template <class F, class Opener>
struct inline_session {
    using session_type = typename Opener::session_type;
    using traits = body_traits<F, session_type>;
    using R = typename traits::value_type;
    using result_type = session_result<R>;
    using io_executor = asio::io_context::executor_type;

    /// The io_context executor the body would run on inline, or null when the
    /// entry cannot take the fast path: another placement, no io_context
    /// behind `ex` or not on one of its threads, a body running on this thread
    /// (re-entry, S7), an observer (its hooks run between grant and start),
    /// permits out of range or a busy resource (the general path rejects
    /// those). `ex` is the handler's associated executor (the awaiting
    /// coroutine's, for use_awaitable).
    template <class Executor>
    static const io_executor* eligible(const Executor& ex, host_core& core, const session_options& options,
                                       const Opener& opener) noexcept {
        if (!eligible_but_for_executor(core, options, opener)) return nullptr;
        const io_executor* io = nullptr;
        if constexpr (std::is_same_v<Executor, io_executor>) {
            io = &ex;
        } else if constexpr (executor_target_available) {
            io = executor_target<io_executor>(ex);
            if (io == nullptr) return nullptr;
        } else {
            return nullptr;
        }
        return io->running_in_this_thread() ? io : nullptr;
    }

    /// Whether an entry awaited with use_awaitable is worth the coroutine of
    /// its own (awaitable_entry) that returning its value in place needs:
    /// eligible()'s checks that need no executor, and the queue's hint that it
    /// would admit the entry at once. An entry that will wait takes the plain
    /// operation instead, so that, parked, it holds no coroutine frame more
    /// than the same coroutine parked on an Asio timer (parked_memory_test).
    /// Only a guess (the awaitable is lazy, the queue moves): awaitable_entry
    /// decides again when it runs, and a wrong guess costs a frame or a post,
    /// never order.
    static bool worth_awaitable_entry(host_core& core, const session_options& options, const Opener& opener) noexcept {
        return eligible_but_for_executor(core, options, opener) && core.queue().likely_admits_at_once(options.permits);
    }

    /// Grants the entry its permits if the queue would admit it at once and
    /// let it start inline (permit_queue::try_acquire_inline: S4 and S17 in
    /// one critical section), runs `fn` in a session on this thread, gives the
    /// permits back and starts the waiters that now fit. Returns the outcome
    /// (an exception of the body in `exception`), or nothing, having changed
    /// nothing at all, when the queue refused: the entry then goes the general
    /// way from the start. `fn` stays alive: its owner destroys it after this
    /// returns, before the completion (the host may die with its captures).
    static std::optional<result_type> admit_and_run(std::decay_t<F>& fn, host_core& core,
                                                    const session_options& options, const Opener& opener,
                                                    const io_executor& io, std::exception_ptr& exception) noexcept {
        permit_queue& queue = core.queue();
        permit_waiter waiter;
        waiter.permits_ = static_cast<std::uint32_t>(options.permits);  // eligible: at most the host's permits
        if (!queue.try_acquire_inline(waiter)) return std::nullopt;
        // Admitted: from here on the entry completes by this path, and its
        // body starts now (the queue did not count it as unstarted).
        std::optional<result_type> result(std::in_place, run(fn, core, opener, io, options.permits, exception));
        entry_node* handoffs = nullptr;
        waiter_list granted = queue.release(options.permits, &handoffs);
        host_core::start_granted(std::move(granted), handoffs);
        return result;
    }

private:
    /// eligible()'s checks that need no executor.
    static bool eligible_but_for_executor(host_core& core, const session_options& options,
                                          const Opener& opener) noexcept {
        if (options.where != placement::caller || core.observer() != nullptr) return false;
        if (current_sync_context() != nullptr) return false;
        if (options.permits == 0 || options.permits > core.queue().permits()) return false;
        // Entries with an admission policy (a group, bytes, a deadline) and
        // hosts that measure permit-time go the general way; the fast path
        // stays what it is for the default entry on the default host.
        if (options.group != 0 || options.bytes != 0 ||
            options.deadline != std::chrono::steady_clock::time_point::max() || core.queue().measures_time())
            return false;
        if constexpr (requires { opener.busy_before_admission(); }) {
            if (opener.busy_before_admission() != nullptr) return false;
        }
        return true;
    }

    /// The inline fast path's session: opened for the grant and closed before
    /// the permits go back; a rejection or an exception from open_session is
    /// counted and reported, and the body's outcome delivered, exactly as on
    /// the general path (run_session, invoke_sync, take_result).
    static result_type run(std::decay_t<F>& fn, host_core& core, const Opener& opener,
                           const asio::io_context::executor_type& io, std::size_t permits,
                           std::exception_ptr& exception) noexcept {
        using opened_type = std::invoke_result_t<const Opener&, const session_grant&>;
        using failure = tl::unexpected<session_entry_error>;
        session_context ctx(context_kind::session, &core);
        try {
            const session_grant grant{permits, asio::any_io_executor(io)};
            opened_type opened = opener(grant);
            if (const session_entry_error* e = open_error(opened)) {
                core.queue().note_rejected();
                return result_type(failure(entry_base::backend_rejection(core.name(), *e)));
            }
            const sync_context_marker marker(ctx);
            try {
                if constexpr (std::is_void_v<R>) {
                    std::invoke(fn, opened_session<session_type>(opened));
                    return result_type();
                } else {
                    return result_type(tl::in_place, std::invoke(fn, opened_session<session_type>(opened)));
                }
            } catch (...) {
                exception = std::current_exception();
                return result_type(failure(entry_base::body_threw_error(core.name())));
            }
        } catch (...) {
            // Only opening the session can throw here.
            core.queue().note_rejected();
            return result_type(failure(entry_base::open_threw_error(core.name())));
        }
    }
};

}  // namespace tenferro::detail
