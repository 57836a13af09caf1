#pragma once
/// \file
/// `admission_timer`: the clock and the wake-ups behind a host's deadlines
/// (P4), its early rejection (P5) and its groups' permit-time (P2), and behind
/// a batcher's `max_delay` (B6), for a program that wants to drive them
/// itself. Without one, each reads `std::chrono::steady_clock` and is woken by
/// the library's one timer thread (shared by every host and batcher of the
/// process, started only when first needed). Given one, that thread is not
/// used and every reading of the time goes through `now()`: the
/// decisions are taken by the same code either way, only the clock and the
/// waiting differ. Uses: an event loop that has timers already (an
/// `asio::steady_timer` on the server's io_context), and the deterministic
/// simulation (tests/sim/), whose clock is virtual.

#include <chrono>
#include <functional>

namespace tenferro {

class admission_timer {
public:
    virtual ~admission_timer() = default;
    /// The time on the timer's clock. Called from any thread, sometimes under
    /// the host's queue lock: it must not block or enter sessions.
    virtual std::chrono::steady_clock::time_point now() = 0;
    /// Calls `fire` once, at `when` (on `now()`'s clock) or soon after, on any
    /// thread, never inside this call. It may replace a call asked for before
    /// that has not happened yet, or let both happen: the caller finds nothing
    /// due at a stale call. `fire` is cheap and does not block; it may start
    /// and complete entries.
    virtual void wake_at(std::chrono::steady_clock::time_point when, std::function<void()> fire) = 0;
};

}  // namespace tenferro
