#pragma once
// The timer behind session_options::deadline (P4) and the running bodies'
// deadlines (S20): asleep until the earliest deadline of the host, then asking
// the host to expire what is due. By default a node of the library's one timer
// thread (library_timer.hpp), started by the first entry that has a deadline;
// with a host_options::timer, the wake-ups are asked of that timer, on its
// clock. Entries without a deadline never touch it.
//
// The timer's call shares the watch's state, not the host: the host may be
// destroyed inside that call (the expired entries drop their references to
// it), and the watch's destructor then only cancels the node.

#include <chrono>
#include <functional>
#include <memory>

#include "tenferro/admission_timer.hpp"

namespace tenferro::detail {

class deadline_watch {
public:
    using clock = std::chrono::steady_clock;
    /// `timer`: the host's (host_options::timer), or null for the library's.
    explicit deadline_watch(std::shared_ptr<admission_timer> timer = nullptr);
    /// No call comes after this returns (one running on another thread is
    /// waited for). A user timer's pending call then finds nothing to do.
    ~deadline_watch();
    deadline_watch(const deadline_watch&) = delete;
    deadline_watch& operator=(const deadline_watch&) = delete;

    /// Installs `expire(now)`, which removes what is due at `now` and returns
    /// the earliest deadline still waiting (`clock::time_point::max()` when
    /// none), and starts the library's timer thread if there is no user
    /// timer. \throws std::system_error or std::bad_alloc when it cannot
    /// start (the entry is then rejected before it queues).
    void start(std::function<clock::time_point(clock::time_point)> expire);
    /// Makes the watch wake at `when` at the latest. With a timer, what the
    /// timer's `wake_at` throws is swallowed here: the deadline is then kept
    /// at the next wake-up that succeeds, or at the entry's grant.
    void arm(clock::time_point when) noexcept;

private:
    struct state;
    std::shared_ptr<state> state_;
};

}  // namespace tenferro::detail
