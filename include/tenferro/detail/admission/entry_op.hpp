#pragma once
// The operation state of one session entry (or execution scope entry): the
// `async_initiate` machinery that ties the permit queue, the compute pool and
// the session context together.
//
// Life of an entry (every arrow one way):
//
//   initiate ── context check ── queue: granted / queued / rejected
//                                  │ (later, on the releasing thread)
//                                  ▼
//            on_granted: observer hook, then the runner is submitted to the
//            compute pool (placement::compute) or posted to the caller's
//            executor (placement::caller) — never run inline
//                                  ▼
//            run: the body, under the thread-local marker (sync) or on a
//            session_executor (async)
//                                  ▼
//            body_finished: permits released (the grant loop starts the next
//            waiters, resuming nobody inline), then the completion is
//            dispatched to the handler's associated executor.
//
// Exactly-once: the queue decides, under its lock, whether a waiter is granted,
// cancelled or drained; only the winner goes on, and every path ends in
// exactly one `complete()`. The typed half (`entry_op`) owns the handler, the
// body, the result and the backend's opener (which opens the session for the
// grant: `B::open_session` for session_host<B>); everything else lives in
// `entry_base`, compiled once in the library and ignorant of backends.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/body_traits.hpp"
#include "tenferro/detail/admission/compose_detail.hpp"
#include "tenferro/detail/admission/entry_base.hpp"
#include "tenferro/detail/admission/host_core.hpp"
#include "tenferro/detail/admission/inline_completion.hpp"
#include "tenferro/detail/admission/inline_session.hpp"
#include "tenferro/detail/admission/session_context.hpp"
#include "tenferro/detail/admission/session_opener.hpp"
#include "tenferro/detail/async/cancellation.hpp"
#include "tenferro/detail/async/completion.hpp"
#include "tenferro/detail/async/executor_target.hpp"
#include "tenferro/detail/async/handoff_reserve.hpp"
#include "tenferro/detail/async/initiation_failure.hpp"
#include "tenferro/detail/async/inline_executor.hpp"
#include "tenferro/detail/async/op_allocator.hpp"
#include "tenferro/detail/async/op_function.hpp"
#include "tenferro/detail/async/op_work.hpp"
#include "tenferro/execution_scope.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_options.hpp"

namespace tenferro::detail {

template <class Handler, class F, entry_kind Kind, class Opener>
class entry_op final : public entry_base {
    using session_type = typename Opener::session_type;
    using arg_type = std::conditional_t<Kind == entry_kind::session, session_type, execution_scope>;
    using traits = body_traits<F, arg_type>;
    using R = typename traits::value_type;
    using result_type = session_result<R>;
    using here = inline_session<F, Opener>;
    using handler_executor = handler_executor_t<Handler>;

public:
    /// The result of an entry whose op could not be allocated.
    static result_type out_of_memory_result() noexcept {
        return result_type(tl::unexpected<session_entry_error>(entry_base::out_of_memory_error()));
    }

    static_assert(Kind == entry_kind::session || traits::is_async,
                  "an execution scope body must return asio::awaitable<R>");

    /// Allocates the operation with the handler's associated allocator (our
    /// per-thread op cache by default) and starts admission.
    ///
    /// What can fail here is memory (S19). The op's own block: the initiating
    /// function throws, nothing done (with `use_awaitable`, whose initiation
    /// Asio runs inside a noexcept function, the initiation carries that
    /// block, taken beforehand: reserved_op_block). Building the op in it (copying
    /// the body, preferring tracked work on a wrapped executor) or installing
    /// its cancellation handler: the entry completes with the exception or
    /// with `executor`, by post, never inside this call (S1).
    template <class H, class G>
    static void launch(H&& handler, G&& body, std::shared_ptr<host_core> core, session_options options, Opener opener) {
        auto alloc = op_allocator_for<entry_op>(handler);
        entry_op* op = std::allocator_traits<decltype(alloc)>::allocate(alloc, 1);
        try {
            // The handler is the last member built: if anything throws, it
            // has not moved, and goes to initiation_failure below instead.
            ::new (static_cast<void*>(op))
                entry_op(std::forward<H>(handler), std::forward<G>(body), std::move(core), options, std::move(opener));
        } catch (...) {
            initiation_failure<Handler, entry_op, result_type>::complete_in(
                op, std::forward<H>(handler), std::current_exception(),
                result_type(tl::unexpected<session_entry_error>(entry_base::out_of_memory_error())));
            return;
        }
        if (!op->install_cancellation_handler()) return;
        // The context of the initiating side: a synchronous body running on
        // this thread, or the coroutine-local context of the handler's executor.
        session_context* ctx = current_sync_context();
        if (ctx == nullptr) ctx = context_of(handler_executor_of(op->handler_));
        op->start(ctx);
    }

    /// Whether entries of this type may take the inline fast path at all: a
    /// synchronous session body, a handler with no allocator of its own whose
    /// executor is (or may hold) an io_context's, and a value that moves into
    /// the posted completion without throwing (it moves after the permits
    /// went back). (Not result_type's own trait: tl::expected<void, E> does
    /// not declare its move noexcept, although nothing in it can throw.)
    /// TENFERRO_MEASURE_NO_INLINE_PATH turns it off, in a build of the
    /// admission benchmark that measures what it buys (docs/benchmarks.md).
    static constexpr bool inline_candidate =
#ifdef TENFERRO_MEASURE_NO_INLINE_PATH
        false &&
#endif
        Kind == entry_kind::session && !traits::is_async && uses_op_cache_v<Handler> &&
        (std::is_same_v<handler_executor, asio::io_context::executor_type> ||
         (executor_target_available && std::is_same_v<handler_executor, asio::any_io_executor>)) &&
        (std::is_void_v<R> || std::is_nothrow_move_constructible_v<R>);

    /// The alignment of the inline fast path's block: its completion's or
    /// this entry's op's, whichever is larger.
    static constexpr std::size_t inline_block_align() noexcept {
        return std::max(alignof(inline_completion_for<Handler, result_type, entry_op>), alignof(entry_op));
    }
    /// The size of the inline fast path's block (try_run_inline): the
    /// completion's or the op's, whichever is larger (the block may become
    /// the op's), rounded up to that alignment only: when the op is the
    /// larger, exactly the op's size.
    static constexpr std::size_t inline_block_size() noexcept {
        return sizeof(
            op_block<std::max(sizeof(inline_completion_for<Handler, result_type, entry_op>), sizeof(entry_op)),
                     inline_block_align()>);
    }
    /// The block this entry's initiation allocates first: the inline fast
    /// path's where it may take it, else the op's. What the S19 reservation
    /// reserves (entry_reservation_t), and all it reserves: an entry that
    /// goes the general way after all allocates its op, of inline_block_size()
    /// too while the op is the larger of the two.
    static constexpr std::size_t initiation_block_size() noexcept {
        return inline_candidate ? inline_block_size() : sizeof(entry_op);
    }

    /// The inline fast path: an entry admitted at once, in its initiating
    /// function, whose body runs right here, on the caller's thread inside
    /// the caller's io_context, costs no operation state at all. Everything
    /// the general path would do with it happens in the same order, on the
    /// stack: the copies of the handler and the body that make_op would make
    /// (what throws there throws out of the initiating function before
    /// admission, as there), the same grant (permit_queue::try_acquire_inline,
    /// S4 and S17 checked in the same critical section), the session opened
    /// and the body run under the same marker (S7), the permits released and
    /// the granted waiters started, the body's copy destroyed, then the
    /// completion posted to the caller's executor (S1: never invoked inside
    /// the initiating function).
    ///
    /// Returns false, having touched neither `handler` nor `body`, when the
    /// entry cannot take the fast path: another placement, no io_context
    /// behind the handler or not on one of its threads, a body running on
    /// this thread (re-entry, S7), an observer (its hooks run between grant
    /// and start), permits out of range or a busy resource (the general path
    /// rejects those). When the queue then refuses the inline grant (somebody
    /// waits, too few permits, an earlier grant not started yet), the entry
    /// goes the general way from the start, launched with those copies, and
    /// this returns true as well.
    ///
    /// Neither the hand-off gate nor tracked work is needed: the posting
    /// thread is inside the caller's io_context (running_in_this_thread), so
    /// the context cannot be destroyed before it returns (S16), and the posted
    /// completion counts as the context's work while it is queued.
    template <class H, class G>
    static bool try_run_inline(H&& handler, G&& body, const std::shared_ptr<host_core>& core_ptr,
                               const session_options& options, const Opener& opener) {
        host_core& core = *core_ptr;
        // `ex` outlives `io`, which may point into it (any_io_executor::target).
        const handler_executor ex = handler_executor_of(handler);
        const asio::io_context::executor_type* io = here::eligible(ex, core, options, opener);
        if (io == nullptr) return false;

        Handler own_handler(std::forward<H>(handler));
        // The completion's block, taken before the body runs (once it has
        // run, its outcome must reach the handler, S19), and large enough for
        // this entry's op as well: if the queue refuses the inline grant, the
        // block goes back to this thread's cache whole, and launch() finds it
        // there (a block reserved for a use_awaitable initiation stays one).
        using block_type = op_block<inline_block_size(), inline_block_align()>;
        static_assert(sizeof(block_type) == inline_block_size());
        using completion = inline_completion_for<Handler, result_type, block_type>;
        static_assert(alignof(completion) <= alignof(block_type), "the inline completion comes from the op cache");
        auto alloc = op_allocator_for<block_type>(own_handler);
        block_type* block = std::allocator_traits<decltype(alloc)>::allocate(alloc, 1);
        // The body is invoked as the general path's own copy is, and lives as
        // long: until the permits are back (finish() destroys that copy after
        // the release). A capture holding the last reference to the host must
        // not destroy it while this entry still holds permits: its destructor
        // waits for them (wait_until_idle), on this very thread.
        std::optional<std::decay_t<F>> fn(std::in_place, std::forward<G>(body));
        std::exception_ptr exception;
        std::optional<result_type> result = here::admit_and_run(*fn, core, options, opener, *io, exception);
        if (!result) {
            std::allocator_traits<decltype(alloc)>::deallocate(alloc, block, 1);
            launch(std::move(own_handler), std::move(*fn), core_ptr, options, opener);
            return true;
        }
        // From here on neither the host nor its queue is touched: the body's
        // captures may destroy the host right now.
        fn.reset();
        inline_completion* c = nullptr;
        try {
            c = construct_op<completion>(block, alloc, std::move(own_handler), std::move(exception),
                                         std::move(*result));
        } catch (...) {
            // The handler's move threw: as on the general path, nobody can be told.
            return true;
        }
        post_inline_completion(*io, c);
        return true;
    }

    template <class H, class G>
    entry_op(H&& handler, G&& body, std::shared_ptr<host_core> core, session_options options, Opener opener)
        : entry_base(std::move(core), options, Kind),
          opener_(std::move(opener)),
          work_(handler),
          body_(std::in_place, std::forward<G>(body)),
          handler_(std::forward<H>(handler)) {}

private:
    /// Installed before the entry is queued, so a grant racing with us on
    /// another thread never finds the slot half-built; cleared by the
    /// completion routine (cancellation.hpp). Typed on entry_base: one
    /// cancellation handler type for every entry. An entry that can be
    /// cancelled, or that stops at its deadline, also gets its stop state
    /// here (S20: a running body is asked to stop through it); any other
    /// entry pays for neither. Out of memory
    /// for either, the entry completes with `executor` without queueing
    /// (false): waiting with no way to be cancelled is not what the caller
    /// asked for.
    bool install_cancellation_handler() noexcept {
        try {
            auto slot = asio::get_associated_cancellation_slot(handler_);
            const bool connected = slot.is_connected();
            // A batch session: its batcher stops it when nobody waits (B7).
            constexpr bool batch = requires(const Handler& h, entry_base* e) { h.bind_entry(e); };
            if (!connected && !stops_at_deadline() && !batch) return true;
            make_stoppable();
            if constexpr (batch) handler_.bind_entry(static_cast<entry_base*>(this));
            if (connected) connect_cancellation<&entry_base::cancel>(std::move(slot), static_cast<entry_base*>(this));
            return true;
        } catch (...) {
            reject_counted(session_entry_errc::executor,
                           "out of memory for the entry's stop state or cancellation handler; the entry did not "
                           "queue");
            return false;
        }
    }

    // The completion's upcall and its disposal unrun (entry_base's
    // completion_handoff calls them).
    void upcall() override {
        phase_.advance(entry_phase::done);
        finish();
    }
    void discard() noexcept override {
        phase_.advance(entry_phase::done);
        // Destroyed unrun by its executor: the slot's handler points here.
        clear_cancellation(handler_);
        destroy();
    }

    /// co_spawn's completion for an asynchronous body: stores the body's
    /// outcome and finishes the entry; dropped unrun (co_spawn destroyed the
    /// coroutine), it finishes the entry with `executor`.
    struct async_completion_policy {
        static void run(entry_op& op, std::exception_ptr e) {
            if (op.ended_by_stop(e))
                op.stopped_while_running();
            else if (e)
                op.exception_ = std::move(e);
            else if constexpr (std::is_void_v<R>)
                op.value_ = true;
            op.body_finished();
        }
        template <class V>
        static void run(entry_op& op, std::exception_ptr e, V&& value) {
            if (op.ended_by_stop(e))
                op.stopped_while_running();
            else if (e)
                op.exception_ = std::move(e);
            else
                op.value_.emplace(std::forward<V>(value));
            op.body_finished();
        }
        static void drop(entry_op& op) noexcept { op.body_dropped(); }
    };
    /// Runs where co_spawn hands it over (inline_executor.hpp): co_spawn's
    /// last step then allocates nothing (S19).
    /// Its slot is the body's own (S20): an entry that can be stopped emits
    /// `terminal` there, and co_spawn passes it to the body's awaits.
    struct async_completion : op_function<entry_op, async_completion_policy> {
        using op_function<entry_op, async_completion_policy>::op_function;
        using executor_type = inline_executor;
        executor_type get_executor() const noexcept { return {}; }
        using cancellation_slot_type = asio::cancellation_slot;
        cancellation_slot_type get_cancellation_slot() const noexcept {
            const entry_op* op = this->get();
            session_context* ctx = op != nullptr ? op->body_context() : nullptr;
            return ctx != nullptr && ctx->forwards_stop ? ctx->body_signal.slot() : cancellation_slot_type();
        }
    };

    /// Hands `fn` to the caller's executor, from any thread, through the op's
    /// hand-off gate (op_work::hand_off): `fn` passes the gate before it may
    /// reach the handler, so this thread has finished touching the caller's
    /// executor and context before the caller can see its completion (S16).
    template <class Function>
    void hop(bool may_dispatch, Function&& fn) {
        work_.hand_off(gate_, std::forward<Function>(fn), may_dispatch);
    }

    /// Hands `fn` over, or parks the entry when that failed for want of
    /// memory. A refusal of any other kind is reported by `fn`'s destructor
    /// (the runner's drop(), the completion's discard()).
    template <class Function>
    bool hand_off_or_park(bool may_dispatch, Function fn, parked_handoff what) noexcept {
        if (try_hand_off(fn, [&](Function&& f) { hop(may_dispatch, std::move(f)); })) return true;
        (void)fn.release();
        retry_later(what);
        return false;
    }

    void run_on_caller(bool may_dispatch) noexcept override {
        hand_off_or_park(may_dispatch, caller_runner(this), parked_handoff::runner);
    }

    bool retry_handoff(parked_handoff what) noexcept override {
        // The phase moves on before the hand-off (whose receiver may run the
        // entry at once), and back when memory is still short.
        if (what == parked_handoff::completion) {
            phase_.advance(entry_phase::completing);
            if (completion_handoff<entry_base>::try_hand_off(this, work_.executor(), /*may_dispatch=*/false))
                return true;
            phase_.advance(entry_phase::parked_completion);
            return false;
        }
        phase_.advance(entry_phase::handed_off);
        caller_runner fn(this);
        if (try_hand_off(fn, [&](caller_runner&& f) { hop(false, std::move(f)); })) return true;
        (void)fn.release();
        phase_.advance(entry_phase::parked_runner);
        return false;
    }

    asio::any_io_executor caller_executor() const override {
        if constexpr (std::is_constructible_v<asio::any_io_executor, const handler_executor&>) {
            return unwrap_executor(asio::any_io_executor(work_.untracked()));
        } else {
            // Executors that cannot be type-erased as an I/O executor (such as
            // use_future's, which runs everything inline) have no thread of
            // their own for a coroutine body: run it in the library's
            // completion context (library_context.hpp).
            return asio::any_io_executor(library_executor());
        }
    }

    void run_session(session_grant grant, std::chrono::steady_clock::time_point stop_at) noexcept override {
        if constexpr (Kind == entry_kind::session) {
            using opened_type = std::invoke_result_t<const Opener&, const session_grant&>;
            static_assert(!std::is_reference_v<opened_type>,
                          "open_session must return the session by value, or a session_result of it");
            static_assert(
                std::is_convertible_v<
                    std::remove_cvref_t<decltype(opened_session<session_type>(std::declval<opened_type&>()))>&,
                    session_type&>,
                "open_session must return session_type, a type derived from it, or a session_result of one");
            if constexpr (traits::is_async) {
                std::shared_ptr<async_session_state<opened_type>> state;
                try {
                    state = std::make_shared<async_session_state<opened_type>>(core().get(), opener_, grant);
                } catch (...) {
                    return open_threw();
                }
                if (const session_entry_error* e = open_error(state->opened())) {
                    const session_entry_error error = *e;  // (the state and its result go first)
                    state.reset();
                    return opened_rejected(error);
                }
                try {
                    state->set_executors(grant.executor);
                } catch (...) {
                    state.reset();  // (the session goes before the permits)
                    return could_not_start();
                }
                session_type& session = opened_session<session_type>(state->opened());
                set_body_context(state);
                watch_running(*state, stop_at);
                spawn(session_executor(std::move(state)), session);
            } else {
                // The session lives in this frame; it is destroyed before the
                // permits are released (body_finished, below or in the handlers).
                session_context ctx(context_kind::session, core().get());
                watch_running(ctx, stop_at);  // unwatched by body_finished(), below or in the handlers
                try {
                    opened_type opened = opener_(std::as_const(grant));
                    if (const session_entry_error* e = open_error(opened)) return opened_rejected(*e);
                    const sync_context_marker marker(ctx);
                    invoke_sync(opened_session<session_type>(opened));  // stores the value or the exception
                } catch (...) {
                    // Only opening the session can throw here.
                    return open_threw();
                }
                body_finished();
            }
        }
    }

    void invoke_sync(session_type& session) noexcept {
        if constexpr (Kind == entry_kind::session && !traits::is_async) {
            try {
                if constexpr (std::is_void_v<R>) {
                    std::invoke(*body_, session);
                    value_ = true;
                } else {
                    value_.emplace(std::invoke(*body_, session));
                }
            } catch (const session_stopped&) {
                // The stop asked of this entry (S20) completes it as a value;
                // one nobody asked for is the body's own exception (S2).
                if (stop_requested())
                    stopped_while_running();
                else
                    exception_ = std::current_exception();
            } catch (...) {
                exception_ = std::current_exception();
            }
        }
    }

    template <class Arg>
    void spawn(session_executor ex, Arg& arg) noexcept {
        if constexpr (traits::is_async) {
            static_assert(traits::traits::default_executor,
                          "an asynchronous session body must return asio::awaitable<R> "
                          "(with the default any_io_executor)");
            // The completion is built first and handed over by name, so that
            // a throw is finished exactly once (S1, S19): making the awaitable
            // throws with `done` still here (the body never started), and so
            // does co_spawn before it takes `done`; once co_spawn has taken it,
            // a throw destroys it there, which finishes the entry
            // (body_dropped), and the entry may be gone when we get here.
            async_completion done(this);
            // S20: the stop of an entry that can be stopped also cancels the
            // body's own awaits (session_context::forward_stops). Spawning is
            // a turn of the body: a stop asked meanwhile is emitted when it
            // ends, once co_spawn has connected the body to the slot. The
            // context is held here, since the body may end (and the entry
            // go) inside co_spawn.
            std::optional<session_executor> forwarding;
            if (can_stop()) {
                forwarding.emplace(ex);
                forwarding->context()->begin_turn();
                forwarding->context()->forward_stops(stop_token());
            }
            struct end_spawning_turn {
                std::optional<session_executor>& held;
                ~end_spawning_turn() {
                    if (held) held->context()->end_turn();
                }
            } const end_turn{forwarding};
            try {
                // body_ lives in this op until finish(), so a lambda coroutine's
                // captures outlive its frame.
                auto body = std::invoke(*body_, arg);
                // co_spawn's first hand-offs take their blocks from this
                // thread's cache, filled here, where a failure still reaches
                // the catch below (S19; handoff_reserve.hpp).
                reserve_handoff_blocks();
                // And the block of its next hop to the compute pool (a post
                // when the body ends without suspending).
                keep_op_block(forwarding ? session_executor::turn_task_bytes()
                                         : compute_pool::executor_type::type_erased_task_bytes());
                asio::co_spawn(std::move(ex), std::move(body), std::move(done));
            } catch (...) {
                if (done.release() == nullptr) return;
                exception_ = std::current_exception();
                body_finished();
            }
        }
    }

    void spawn_scope(session_executor ex, execution_scope& scope) noexcept override {
        if constexpr (Kind == entry_kind::scope) spawn(std::move(ex), scope);
    }

    const char* busy_before_admission() const noexcept override {
        if constexpr (requires(const Opener& o) { o.busy_before_admission(); })
            return opener_.busy_before_admission();
        else
            return nullptr;
    }

    void complete(bool may_dispatch) noexcept override {
        // The function object owns the op, so even an executor that discards
        // it frees the op; out of memory, the entry is parked and the
        // completion posted again later (S19). The posted function itself
        // counts as work while it is queued.
        phase_.advance(entry_phase::completing);
        if (!completion_handoff<entry_base>::try_hand_off(this, work_.executor(), may_dispatch))
            retry_later(parked_handoff::completion);
    }

    /// On the handler's executor: destroys the body (and its captures) and
    /// the value's husk, then completes (complete_op: the slot, the tracked
    /// work, the upcall, the gate and the op's memory, in that routine's order).
    void finish() {
        std::exception_ptr exception = std::move(exception_);
        result_type result = take_result();
        body_.reset();
        if constexpr (std::is_void_v<R>)
            value_ = false;
        else
            value_.reset();  // (not `= {}`: GCC 12 at -O1 warns maybe-uninitialized on that)
        complete_op<entry_op>(this, handler_, work_, gate_, std::move(exception), std::move(result));
    }

    result_type take_result() {
        // (tl::expected<void, E> lacks the in-place unexpect constructor; go through unexpected.)
        if (has_error()) return result_type(tl::unexpected<session_entry_error>(take_error()));
        if constexpr (std::is_void_v<R>) {
            if (value_) return result_type();
        } else {
            if (value_) return result_type(std::move(*value_));
        }
        // The body threw: the second argument must be a valid object, and this
        // one says plainly that it carries no value.
        return result_type(tl::unexpected<session_entry_error>(body_threw_error(core()->name())));
    }

    void destroy() noexcept { free_op(this, op_allocator_for<entry_op>(handler_)); }

    [[no_unique_address]] Opener opener_;
    // The handler's executor, tracked: it keeps the caller's context running
    // while the entry waits or runs elsewhere (op_work.hpp).
    op_work<Handler> work_;
    // In an optional so that finish() can destroy the body (and its captures)
    // before the upcall, even when the op itself is freed after it.
    std::optional<std::decay_t<F>> body_;
    /// The body's value once it returned (void bodies: whether it did).
    std::conditional_t<std::is_void_v<R>, bool, std::optional<R>> value_{};
    std::exception_ptr exception_;
    // Built last (launch: whatever throws while building the op leaves the
    // handler where it was).
    Handler handler_;
};

/// session_options as an initiation keeps them (with use_awaitable, for as
/// long as the entry is parked): 24 bytes instead of 40. Asking for 2^32
/// permits or naming group 2^16 saturates, and is rejected as out of range all
/// the same (no host has that many).
struct packed_options {
    packed_options(const session_options& o) noexcept  // NOLINT(google-explicit-constructor)
        : deadline(o.deadline),
          bytes(o.bytes),
          permits(static_cast<std::uint32_t>(std::min<std::size_t>(o.permits, UINT32_MAX))),
          group(static_cast<std::uint16_t>(std::min<std::size_t>(o.group, UINT16_MAX))),
          wait(static_cast<std::uint8_t>(o.wait)),
          where(static_cast<std::uint8_t>(o.where)),
          stop_at_deadline(o.stop_at_deadline) {}
    session_options unpack() const noexcept {
        return {permits,         static_cast<wait_policy>(wait), static_cast<placement>(where), group, deadline, bytes,
                stop_at_deadline};
    }
    std::chrono::steady_clock::time_point deadline;
    std::size_t bytes;
    std::uint32_t permits;
    std::uint16_t group;
    std::uint8_t wait : 2, where : 2;
    bool stop_at_deadline : 1;
};
static_assert(sizeof(packed_options) == 24);

/// The initiation object handed to `asio::async_initiate`. `TryInline` is
/// false when the caller has just asked the queue for an inline grant and was
/// refused (awaitable_entry): not asking again saves a lock. A template
/// parameter, not a member: with use_awaitable, Asio's initiation frame holds
/// this object for as long as the entry is parked, and a flag would add a word
/// to every parked entry. `Reservation`: the initiation's first block, taken
/// beforehand and carried in `reserved` (S19, entry_reservation_t: from the
/// op cache, from the token's bound allocator, or none), computed from the
/// token, which this checks against the handler Asio actually passes
/// (noexcept_initiation.hpp). `FailsInline`: a token whose handler completes
/// here, rather than being destroyed uncalled, when the op's block cannot be
/// had (use_future, fails_inline).
template <entry_kind Kind, class Opener, bool TryInline = true, class Reservation = reserved_op_block<0>,
          bool FailsInline = false>
struct initiate_entry {
    std::shared_ptr<host_core> core;
    packed_options packed;
    Opener opener;
    [[no_unique_address]] mutable Reservation reserved;

    /// The executor the entry exposes, as Asio's operations do: where a
    /// handler with no executor of its own completes, and where Asio's
    /// adapters put theirs (cancel_after's timer): the library's completion
    /// context, which the host's constructor started (library_context.hpp).
    using executor_type = library_executor_type;
    executor_type get_executor() const noexcept { return library_executor(); }

    template <class Handler, class F>
    void operator()(Handler&& handler, F&& body) const {
        using op = entry_op<std::decay_t<Handler>, std::decay_t<F>, Kind, Opener>;
        static_assert(Reservation::template check<op::initiation_block_size(), alignof(op)>());
        [[maybe_unused]] const auto placed = reserved.place();  // the first allocation below takes it
        const session_options options = packed.unpack();
        if constexpr (op::inline_candidate && TryInline) {
            if (op::try_run_inline(std::forward<Handler>(handler), std::forward<F>(body), core, options, opener))
                return;
        }
        if constexpr (FailsInline) {
            try {
                op::launch(std::forward<Handler>(handler), std::forward<F>(body), core, options, opener);
            } catch (const std::bad_alloc&) {
                // Thrown with the handler untouched (launch moves it only
                // into a block it has): it completes now, with this bad_alloc.
                std::forward<Handler>(handler)(std::current_exception(), op::out_of_memory_result());
            }
        } else {
            op::launch(std::forward<Handler>(handler), std::forward<F>(body), core, options, opener);
        }
    }
};

}  // namespace tenferro::detail
