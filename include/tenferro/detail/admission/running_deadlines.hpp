#pragma once
// The running bodies whose deadline asks them to stop (S20, P4 with
// session_options::stop_at_deadline): the second half of the host's deadline
// timer. A waiting entry's deadline is the permit queue's (it leaves the
// queue); a running body's is here (it is asked to stop, and ends when its
// operations see it).
//
// Each node lives in the body's session context (session_context.hpp: on the
// runner's stack for a synchronous body, in the shared state of an
// asynchronous one), linked from the body's start to its end, so a body with
// a deadline costs no allocation here, and an entry without one pays nothing.
//
// The timer's thread asks under this list's lock only what is one byte of the
// entry (its phase, entry_phase.hpp), and copies the entry's stop state (a
// reference count); the stop itself, which runs the token's callbacks, is
// asked after the lock is released, on that copy. The entry unlinks its node
// before its permits go back, so it is alive whenever the timer finds it.

#include <chrono>

#include "tenferro/detail/admission/brief_mutex.hpp"
#include "tenferro/detail/async/intrusive_list.hpp"

namespace tenferro::detail {

class entry_base;

/// A running body's deadline, in its session context.
struct running_deadline {
    std::chrono::steady_clock::time_point when = std::chrono::steady_clock::time_point::max();
    entry_base* entry = nullptr;  // the entry whose body this is
    running_deadline* prev_ = nullptr;
    running_deadline* next_ = nullptr;
    bool linked = false;  // under the list's lock
};

class running_deadlines {
public:
    running_deadlines() = default;
    running_deadlines(const running_deadlines&) = delete;
    running_deadlines& operator=(const running_deadlines&) = delete;

    /// Links `d` (its `when` and `entry` set), earliest deadline first.
    void watch(running_deadline& d) noexcept;
    /// Unlinks `d` if the timer has not taken it yet; after this returns, the
    /// timer no longer touches `d` or its entry.
    void unwatch(running_deadline& d) noexcept;
    /// Asks every body whose deadline is at or before `now` to stop (each
    /// once: its node leaves the list); returns the earliest deadline left
    /// (max() when none).
    std::chrono::steady_clock::time_point stop_due(std::chrono::steady_clock::time_point now) noexcept;

private:
    brief_mutex mutex_;
    intrusive_list<running_deadline, &running_deadline::next_, &running_deadline::prev_> list_;
};

}  // namespace tenferro::detail
