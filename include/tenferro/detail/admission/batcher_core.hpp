#pragma once
// The shared state of a batcher: the waiting list, the session count, the
// counters and the delay's timer. It knows neither the host nor In and Out:
// it works on type-erased items (batch_item.hpp) and sessions
// (batch_run.hpp), and enters a session through one virtual hook, `enter`,
// which the typed half (typed_batcher_core.hpp) implements. Compiled once in
// the library (src/admission/batcher_core.cpp).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/batch_item.hpp"
#include "tenferro/detail/admission/batch_run.hpp"
#include "tenferro/detail/async/intrusive_list.hpp"
#include "tenferro/detail/async/library_timer.hpp"
#include "tenferro/session_entry_error.hpp"

namespace tenferro {

class admission_timer;
struct batch_options;
struct batch_stats;

namespace detail {

/// What a batch session's body returns to the host (the outcome stays in the run).
struct batch_done {};

/// Reference counted: items and sessions in flight keep it (and the body)
/// alive after the batcher itself is gone.
class batcher_core : public std::enable_shared_from_this<batcher_core>, private timer_node {
public:
    using item = batch_item_base;
    using item_list = intrusive_list<item, &item::next, &item::prev>;

    batcher_core(const batcher_core&) = delete;
    batcher_core& operator=(const batcher_core&) = delete;
    virtual ~batcher_core();

    /// A new item: into the waiting list, then enter the sessions it calls for.
    void enqueue(item& it);

    /// An item rejected at submission (re-entry): counted, then completed.
    void reject_at_submit(item& it, session_entry_errc code, std::string detail);

    /// The item's cancellation slot fired: removed if it still waits (B4);
    /// taken, and `type` has terminal or partial, it no longer counts as
    /// waited for, and the last such item of a running batch stops it (B7).
    void cancel(item& it, asio::cancellation_type_t type) noexcept;

    /// placement::caller: the executor a session's hand-offs go to, taking
    /// the batch at the first one. Otherwise null (run inline).
    const asio::any_io_executor* target_of(batch_run_base& run);

    /// Where a session's completion handler says its executor's context is
    /// when the batch has no target (yet).
    asio::execution_context& fallback_context() noexcept { return fallback_context_; }

    /// The session completed (on the run's executor): every item it took
    /// completes, exactly once (B3), then the sessions still needed are entered.
    void session_finished(batch_run_base& run, std::exception_ptr e, session_result<batch_done> r) noexcept;

    /// The batcher is being destroyed: every waiting item completes with
    /// `executor`; sessions in flight finish what they took.
    void close() noexcept;

    batch_stats stats() const;

    /// B6 with a user's timer (batch_options::timer): it fired. The same
    /// decision as the library timer's (fire): a partial batch whose first
    /// item has waited max_delay is entered; then the timer is set for the next.
    void timer_fired() noexcept;

    /// B6 with no user's timer (max_delay > 0): the delay is a node of the
    /// library's timer thread, started here. \throws std::system_error when
    /// the thread cannot start (the batcher is then not built).
    void use_library_timer();

protected:
    /// `host_name` and `host_permits`: the host's; `options` as given to the
    /// batcher (max_batch 0 is taken as 1).
    batcher_core(std::string_view host_name, std::size_t host_permits, const batch_options& options);

    /// Enters one session of the host for a new run (the typed half): sets
    /// `run` to the run's state, then hands the session to the host, with
    /// batch_session_done (batch_executor.hpp) as its completion. Throws when
    /// it could not (out of memory); `run` says how far it got.
    virtual void enter(std::shared_ptr<batch_run_base>& run) = 0;

    /// Takes the batch: up to max_batch waiting items, in submission order
    /// (B2). Once per session.
    void take(batch_run_base& run);

    /// A body is about to run with `n` items (counters).
    void note_batch(std::size_t n);

    const std::string& host_name() const noexcept { return host_name_; }

private:
    std::size_t plan_locked(bool aged = false) noexcept;
    std::optional<std::chrono::steady_clock::time_point> delay_deadline_locked() const noexcept;

    std::chrono::steady_clock::time_point now() const;
    /// The library timer's call (use_library_timer): enters a partial batch
    /// that is due, and returns when the next one is.
    clock::time_point fire(clock::time_point now) noexcept override;
    void enter_if_due(clock::time_point at) noexcept;
    void delay_news() noexcept;
    void rearm() noexcept;

    void enter_sessions(std::size_t n) noexcept;
    std::size_t enter_session() noexcept;
    std::size_t fail_batch_without_session() noexcept;
    std::size_t fail_next_batch(bool ends_session, const std::string& detail) noexcept;

    std::string host_name_;
    // From batch_options (the typed half keeps the whole).
    std::size_t max_batch_ = 1;
    std::chrono::microseconds max_delay_{0};
    bool caller_placed_ = false;
    std::shared_ptr<admission_timer> timer_;
    std::size_t max_sessions_ = 1;
    asio::execution_context fallback_context_;

    bool library_timer_ = false;  // the delay is the library timer's (set before any item)

    mutable std::mutex mutex_;
    std::optional<std::chrono::steady_clock::time_point> armed_;  // the user's timer is set for this
    item_list waiting_;
    std::size_t sessions_ = 0;   // entered and not yet completed (B5)
    std::size_t unclaimed_ = 0;  // entered and not yet taken their batch
    bool closed_ = false;
    std::uint64_t submitted_ = 0, completed_ = 0, cancelled_ = 0, rejected_ = 0, batches_ = 0;
    std::size_t largest_ = 0;
};

}  // namespace detail
}  // namespace tenferro
