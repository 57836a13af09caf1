#pragma once
// The library's one timer thread. Every timer of the library that the user
// has not given a timer of their own (host_options::timer,
// batch_options::timer) is served here: the hosts' deadlines (P4) and their
// running bodies' deadlines (S20), the batchers' delays (B6), and the retries
// of hand-offs that found no memory (S19). A server that embeds 50 hosts and
// 100 batchers gets one thread for all of them, started by the first that
// needs it.
//
// A client is a `timer_node` it embeds: arming relinks it in the timer's
// list under one mutex, so it never allocates (an entry arms its deadline at
// its initiation, and a parked hand-off arms the retry when memory is out).
// The thread wakes at the earliest node's time, takes it off the list and
// calls its `fire`, one node at a time, with no lock held; `fire` returns
// the next time it wants.

#include <chrono>

namespace tenferro::detail {

class timer_node {
public:
    using clock = std::chrono::steady_clock;

protected:
    timer_node() = default;
    // Not virtual: a client cancels its node before destroying it.
    ~timer_node() = default;
    timer_node(const timer_node&) = delete;
    timer_node& operator=(const timer_node&) = delete;

private:
    friend class library_timer;
    /// On the timer thread, no lock held: the time asked for has come (`now`
    /// is at or past it). Returns the next time this node wants to fire, or
    /// `clock::time_point::max()` for none. May cancel any node, its own too
    /// (then the timer forgets it: the node may be gone when this returns).
    virtual clock::time_point fire(clock::time_point now) noexcept = 0;

    clock::time_point when_ = clock::time_point::max();  // while linked: when it fires
    timer_node* next_ = nullptr;
    timer_node* prev_ = nullptr;
    bool linked_ = false;
};

/// Starts the timer thread if it is not running. \throws std::system_error
/// (or std::bad_alloc) when it cannot start: the client then refuses what
/// needed it, as it would refuse a thread of its own.
void start_library_timer();

/// `node` fires at `when` at the latest: a wake-up asked for earlier and not
/// yet fired stands. Never allocates, never blocks for long (one mutex).
/// Call start_library_timer() first (once per client).
void arm_library_timer(timer_node& node, timer_node::clock::time_point when) noexcept;

/// `node` fires no more. If it is firing on another thread, waits until that
/// returns; inside its own fire() (or any fire on the timer thread), returns
/// at once.
void cancel_library_timer(timer_node& node) noexcept;

/// Whether the calling thread is the library's timer thread (tests).
bool on_library_timer_thread() noexcept;

}  // namespace tenferro::detail
