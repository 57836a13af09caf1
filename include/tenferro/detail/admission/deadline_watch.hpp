#pragma once
// The timer behind session_options::deadline (P4): one thread per host,
// started by the first entry that has a deadline, asleep until the earliest
// deadline of the host's waiters, then asking the host to expire what is due.
// Entries without a deadline never touch it.
//
// The thread shares its state with the watch, not with the host: the host may
// be destroyed on this very thread (the expired entries drop their references
// to it), and the watch's destructor then only tells the thread to stop.

#include <chrono>
#include <functional>
#include <memory>

namespace tenferro::detail {

class deadline_watch {
public:
    using clock = std::chrono::steady_clock;
    deadline_watch();
    /// Stops the thread: joins it, or lets it finish on its own when called on it.
    ~deadline_watch();
    deadline_watch(const deadline_watch&) = delete;
    deadline_watch& operator=(const deadline_watch&) = delete;

    /// Starts the thread if it is not running, with `expire(now)`, which
    /// removes what is due at `now` and returns the earliest deadline still
    /// waiting (`clock::time_point::max()` when none). \throws
    /// std::system_error or std::bad_alloc when it cannot start (the entry is
    /// then rejected before it queues).
    void start(std::function<clock::time_point(clock::time_point)> expire);
    /// Makes the thread wake at `when` at the latest.
    void arm(clock::time_point when) noexcept;

private:
    struct state;
    std::shared_ptr<state> state_;
};

}  // namespace tenferro::detail
