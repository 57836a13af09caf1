#include "tenferro/detail/admission/session_context.hpp"

#include <utility>

#include "async/cpu_relax.hpp"
#include "async/fast_tls.hpp"

namespace tenferro::detail {
namespace {
// Set only while a synchronous session body runs on this thread.
TENFERRO_FAST_TLS thread_local session_context* sync_context = nullptr;
// The context whose body's stop this thread is emitting: a turn that the emit
// itself runs (an operation completing inside its cancellation handler, on
// a possibly-blocking executor) may begin.
TENFERRO_FAST_TLS thread_local const session_context* emitting_here = nullptr;
}  // namespace

session_context* current_sync_context() noexcept { return sync_context; }

sync_context_marker::sync_context_marker(session_context& ctx) noexcept : previous_(sync_context) {
    sync_context = &ctx;
}

sync_context_marker::~sync_context_marker() { sync_context = previous_; }

void session_context::set_executors(const asio::any_io_executor& ex) {
    asio::any_io_executor made[4] = {
        ex, asio::require(ex, asio::execution::blocking.never),
        asio::prefer(ex, asio::execution::outstanding_work.tracked),
        asio::prefer(asio::require(ex, asio::execution::blocking.never), asio::execution::outstanding_work.tracked)};
    for (int i = 0; i < 4; ++i) inner[i] = std::move(made[i]);
    tracked_refs.store(1, std::memory_order_release);  // the session's own hold
    has_executors_ = true;
}

void session_context::drop_tracked() noexcept {
    // Nobody executes through them any more (every tracked copy is gone): the
    // copies left behind use inner[0] and inner[1] only.
    inner[2] = asio::any_io_executor();
    inner[3] = asio::any_io_executor();
}

void body_stop_forwarder::operator()() const noexcept { ctx->forward_stop(); }

void session_context::begin_turn() noexcept {
    std::uint32_t s = turns_.load(std::memory_order_relaxed);
    for (;;) {
        // An emit is a few handler calls: wait it out rather than let the
        // body touch its slot meanwhile.
        if ((s & emitting) != 0 && emitting_here != this) {
            cpu_relax();
            s = turns_.load(std::memory_order_relaxed);
            continue;
        }
        if (turns_.compare_exchange_weak(s, s + one_turn, std::memory_order_acquire, std::memory_order_relaxed)) return;
    }
}

void session_context::end_turn() noexcept {
    if (turns_.fetch_sub(one_turn, std::memory_order_acq_rel) - one_turn == emit_due) try_emit();
}

void session_context::forward_stop() noexcept {
    if (turns_.fetch_or(emit_due, std::memory_order_acq_rel) >= one_turn) return;  // that turn's end emits
    // The body is suspended in an await: the emit goes to its executor
    // (never blocking, untracked: the session's own work keeps it running).
    try {
        asio_execute(inner[1], [self = shared_from_this()] { self->try_emit(); });
    } catch (...) {
        // Out of memory for the hop (S19): emit from here, still between
        // turns, rather than lose the stop.
        try_emit();
    }
}

void session_context::try_emit() noexcept {
    std::uint32_t expected = emit_due;  // due, and no turn, no emit running
    if (!turns_.compare_exchange_strong(expected, emitting, std::memory_order_acquire, std::memory_order_relaxed))
        return;
    if (active.load(std::memory_order_acquire)) {
        const session_context* const previous = std::exchange(emitting_here, this);
        try {
            // (From Asio 1.30, co_spawn's handler in the slot dispatches the
            // emit to the body's executor: here, inline, as a turn let in.)
            body_signal.emit(asio::cancellation_type::terminal);
        } catch (...) {
            // Only a hop that found no memory can throw here (the requesting
            // thread's emit, S19): the awaits are not cancelled, and the
            // session's operations still stop.
        }
        emitting_here = previous;
    }
    turns_.fetch_and(~emitting, std::memory_order_release);
}

}  // namespace tenferro::detail
