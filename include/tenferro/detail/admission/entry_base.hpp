#pragma once
// The handler-independent half of a session entry (or execution scope
// entry): admission, the grant, the runner and the release, compiled once in
// the library (src/admission/entry.cpp) and ignorant of backends and
// handlers. The typed half is entry_op (entry_op.hpp), which describes an
// entry's life.

#include <chrono>
#include <exception>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/compute_pool.hpp"
#include "tenferro/detail/admission/host_core.hpp"
#include "tenferro/detail/admission/permit_queue.hpp"
#include "tenferro/detail/admission/session_context.hpp"
#include "tenferro/detail/async/completion.hpp"
#include "tenferro/detail/async/handoff_gate.hpp"
#include "tenferro/detail/async/op_function.hpp"
#include "tenferro/execution_scope.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_grant.hpp"
#include "tenferro/session_options.hpp"

namespace tenferro::detail {

enum class entry_kind : unsigned char { session, scope };

/// The handler-independent half of an entry.
class entry_base : public entry_node, public pool_task {
public:
    /// Admission: the context checks, then the queue. Called once, from the
    /// initiating function, with the context found on the initiating side.
    void start(session_context* caller_context) noexcept;

    /// The queue granted this entry its permits (any thread). `at_initiation`:
    /// granted inside the initiating function, on the caller's thread.
    void on_granted(bool at_initiation = false) noexcept;

    /// The caller's cancellation slot fired: a waiting entry leaves the queue
    /// (S13); a granted one whose body has not started never starts, and a
    /// running body is asked to stop when `type` has terminal or partial (S20).
    void cancel(asio::cancellation_type_t type) noexcept;

    /// Completes with an admission failure decided by the queue (drained on
    /// shutdown or poisoning); always by post.
    void reject(session_entry_errc code, std::string_view detail) noexcept;

    /// Hands each entry of `chain` (a ready chain of the hand-off list, S17)
    /// to its caller's executor, then the chains that became ready meanwhile,
    /// until the queue says none is left. The thread calling this holds the
    /// hand-off role; the host stays alive because whoever granted the
    /// entries is up this thread's stack.
    static void hand_off_in_grant_order(entry_node* chain) noexcept;

    /// Runs the body (a pool worker, or the caller's executor).
    void run() noexcept override;
    /// The executor dropped the runner without running it.
    void drop() noexcept override;

    /// The host's deadline timer found this entry's running body past its
    /// deadline (S20; called under running_deadlines' lock): records the
    /// request, and returns the stop state to ask, or none when the body is
    /// no longer running or a stop was asked before (the first cause stands).
    std::stop_source stop_for_deadline() noexcept;
    /// A batch nobody waits for (B7; called under the batcher's lock, which
    /// keeps the entry alive): as a terminal cancellation, a body not started
    /// never starts, and a running one is asked to stop through the returned
    /// stop state (none when there is nothing to ask).
    std::stop_source stop_for_cancellation() noexcept;

protected:
    entry_base(std::shared_ptr<host_core> core, session_options options, entry_kind kind) noexcept;
    ~entry_base();

    /// Hands `run()` to the caller's associated executor (placement::caller):
    /// `dispatch` when admitted inside the initiating function (the body may
    /// then run at once, on the caller's thread), `post` otherwise.
    virtual void run_on_caller(bool may_dispatch) noexcept = 0;
    /// Opens the backend's session for `grant` and runs the body in it (a
    /// synchronous body here; an asynchronous one spawned on the grant's
    /// executor); ends in `body_finished()` one way or another, the session
    /// destroyed before it. A rejection by the backend goes through
    /// `opened_rejected`, an exception from it through `open_threw`.
    /// `stop_at`: the deadline at which the running body is asked to stop
    /// (S20), or max(); run_session watches it once the body's context
    /// exists (watch_running).
    virtual void run_session(session_grant grant, std::chrono::steady_clock::time_point stop_at) noexcept = 0;
    /// Spawns a scope's body on `ex`; its completion calls `body_finished()`.
    virtual void spawn_scope(session_executor ex, execution_scope& scope) noexcept = 0;
    /// Why the entry must be rejected (`contended`) before it queues, or null:
    /// a resource its session will claim is busy now (a cached CPU entry's cache).
    virtual const char* busy_before_admission() const noexcept { return nullptr; }
    /// The caller's executor, for bodies with placement::caller and for scopes.
    virtual asio::any_io_executor caller_executor() const = 0;
    /// Delivers the outcome to the handler: `dispatch` when the caller may be
    /// resumed inline (we are on its executor, after a body), `post` otherwise.
    virtual void complete(bool may_dispatch) noexcept = 0;

    /// The two function objects an entry hands to its caller's executor: the
    /// runner of a caller-placed body, and the completion
    /// (completion_handoff<entry_base>, which calls upcall(), or discard()
    /// when it is destroyed unrun). They are typed on entry_base, not on the
    /// entry_op instantiation: Asio instantiates its posting machinery once
    /// per function type, not once per handler and body.
    struct runner_policy {
        // The gate is passed when the body is done (body_finished), not
        // here: the poster is most likely still inside post (waking this
        // thread) and the body need not wait for it; only the completion,
        // which may let the caller destroy its context, must.
        static void run(entry_base& op) { op.run(); }
        static void drop(entry_base& op) noexcept {
            op.gate_.pass();
            op.drop();
        }
    };
    using caller_runner = op_function<entry_base, runner_policy>;
    friend struct completion_handoff<entry_base>;
    handoff_gate& gate() noexcept { return gate_; }
    /// What a hand-off to the caller's executor that failed for want of
    /// memory was carrying: the runner of a caller-placed body, or the
    /// completion. The entry is parked (handoff_retry.hpp) and hands it off
    /// again, by post, when memory is back (S19).
    enum class parked_handoff : unsigned char { runner, completion };
    void retry_later(parked_handoff what) noexcept;
    /// Tries the parked hand-off `what` again, on the retrying thread: true
    /// when it went through or the executor refused it for good, false when
    /// memory is still short (the entry's phase says which one is parked).
    virtual bool retry_handoff(parked_handoff what) noexcept = 0;
    /// retry_handoff for the entry whose queue node is `w` (its retry lane's
    /// function: a parked entry is threaded through its queue node).
    static bool retry_parked(permit_waiter& w) noexcept;

    /// Hands `fn` (a caller_runner or a completion) to the caller's executor
    /// through `hop`; returns false when that failed for want of memory with
    /// `fn` still owning the entry (the caller then parks it). Out of memory
    /// after the executor took `fn` (a dispatch wraps it before it allocates),
    /// the executor destroyed it unrun, and its destructor reported that (the
    /// runner's drop(), the completion's discard()). Any other failure before
    /// the executor took `fn` is the executor refusing it: `fn` disposes of
    /// it. Any other exception after that can only come from a handler that a
    /// dispatch ran inline, and ends the process, as it would leave any other
    /// noexcept completion path.
    template <class Function, class Hop>
    static bool try_hand_off(Function& fn, Hop&& hop) noexcept {
        try {
            hop(std::move(fn));
            return true;
        } catch (const std::bad_alloc&) {
            return !fn.owns();
        } catch (...) {
            if (!fn.owns()) std::terminate();
            return true;
        }
    }

    /// The completion runs: deliver the outcome to the handler.
    virtual void upcall() = 0;
    /// The completion was destroyed unrun: free the op without calling the handler.
    virtual void discard() noexcept = 0;

    /// The body is done: release the permits, then complete.
    void body_finished() noexcept;
    /// Records that the body's frame was destroyed without completing.
    void body_dropped() noexcept;
    /// The backend declined to open a session: complete with its error.
    void opened_rejected(const session_entry_error& error) noexcept;
    /// Opening the session threw: complete with `executor`, the message kept.
    void open_threw() noexcept;
    /// The runtime's own set-up for the body failed (out of memory for its
    /// context or its executors): complete with `executor`; the body never ran.
    void could_not_start() noexcept;
    /// Gives the entry the stop state its body's session will see (S20): for
    /// an entry that can be cancelled, made at initiation. Throws bad_alloc.
    void make_stoppable() {
        stop_ = std::stop_source();
        phase_.make_stoppable();
    }
    /// True when the body's exit `e` is the stop it was asked for: a stop was
    /// requested and `e` is session_stopped, or Asio's operation_aborted from
    /// an asynchronous body's own awaits (S20).
    bool ended_by_stop(const std::exception_ptr& e) const noexcept;
    /// The body ended by the stop asked of it: the entry completes with
    /// `cancelled`, counted as stopped (S20).
    void stopped_while_running() noexcept;
    /// The entry has a stop state (S20): it can be asked to stop.
    bool can_stop() const noexcept { return stop_.stop_possible(); }
    /// Its stop state's token (S20; one with no state when it has none).
    std::stop_token stop_token() const noexcept { return stop_.get_token(); }
    /// The running body's context (an asynchronous body's or a scope's), or null.
    session_context* body_context() const noexcept { return body_context_.get(); }
    /// A stop was asked of this entry (S20).
    bool stop_requested() const noexcept { return phase_.stop_requested(); }
    /// A running body of this entry is asked to stop at its deadline (S20).
    bool stops_at_deadline() const noexcept { return phase_.stops_at_deadline(); }
    /// The body whose context is `ctx` runs: from now until body_finished(),
    /// the host's timer asks it to stop at `stop_at` (none when max()).
    void watch_running(session_context& ctx, std::chrono::steady_clock::time_point stop_at) noexcept;
    /// An asynchronous body's context (with its session): closed at the end.
    void set_body_context(std::shared_ptr<session_context> ctx) noexcept { body_context_ = std::move(ctx); }

    const std::shared_ptr<host_core>& core() const noexcept { return core_; }

    /// An admission failure of host `host`, its code checked: a code outside
    /// the enumeration (only a backend's open_session can bring one) becomes
    /// `executor`, and the detail says so.
    static session_entry_error make_error(std::string_view host, session_entry_errc code, std::string detail) noexcept;
    /// The failure that a backend's rejection from open_session stands for.
    static session_entry_error backend_rejection(std::string_view host, const session_entry_error& error) noexcept;
    /// Called inside a catch block: the failure for what open_session threw.
    static session_entry_error open_threw_error(std::string_view host) noexcept;
    /// The second argument of a completion whose body threw (it carries no value).
    static session_entry_error body_threw_error(std::string_view host) noexcept;
    template <class F, class Opener>
    friend struct inline_session;

    /// The failure of an entry that could not be built for want of memory.
    static session_entry_error out_of_memory_error() noexcept;
    void reject_counted(session_entry_errc code, std::string_view detail) noexcept;
    /// P1: rejects (counted, `incompatible_context`) an entry whose group the
    /// host does not have; false when the group is in range.
    bool rejected_for_group(const permit_queue& queue) noexcept;

    /// Records an admission failure, decided now (built here: two words, so
    /// that completing needs no host).
    void set_error(session_entry_errc code, std::string_view detail) noexcept;
    void adopt_error(session_entry_error error) noexcept;
    bool has_error() const noexcept { return error_code_ != 0; }
    /// The recorded failure (once: its texts move out).
    session_entry_error take_error() noexcept {
        return session_entry_error(session_entry_error::adopt_texts{}, static_cast<session_entry_errc>(error_code_),
                                   std::exchange(error_texts_, nullptr));
    }

private:
    void schedule(bool at_initiation) noexcept;
    /// A granted entry that will not start gives its permits back.
    void give_back_grant() noexcept;
    void release_permits() noexcept;

    void discard_error() noexcept;

    // The members are ordered so that the one-byte ones share a word: every
    // byte here is paid by each parked entry (docs/design/session-entry.md).
    std::shared_ptr<host_core> core_;
    // The options, packed: the permits are permit_waiter's; the rest is two flags.
    entry_kind kind_;
    bool may_wait_;        // wait_policy::fifo
    bool compute_placed_;  // placement::compute
    // The admission failure's code (0: none). Its texts are error_texts_: a
    // session_entry_error split in two, since std::optional of one would take
    // three words where these take one (the code fits in this word's padding).
    unsigned char error_code_ = 0;

protected:
    /// One hop at a time: the runner's (passed in body_finished), then the
    /// completion's (passed by the completion function).
    handoff_gate gate_;

private:
    std::shared_ptr<session_context> scope_;         // the scope whose permit this entry reuses
    std::shared_ptr<session_context> body_context_;  // an async body's own context
    session_entry_error::texts* error_texts_ = nullptr;  // shared, immutable; null when out of memory
    // S20: what the body's session sees (grant.stop). No state (nothing
    // allocated) for an entry nobody can cancel.
    std::stop_source stop_{std::nostopstate};
};

}  // namespace tenferro::detail
