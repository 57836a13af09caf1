#pragma once
// The shared state behind one host, whatever its backend: its permit queue,
// compute pool and observer. Reference counted: every entry keeps the core
// alive until it has completed, so a cancellation that fires after the host is
// gone still finds a valid queue. The compute pool is stopped by the host's
// destructor, after the last running session released its permits. Nothing
// here knows what a session is (see session_host.hpp, cpu_backend.hpp).
// With a compute executor of the user's (host_options::compute_executor) the
// pool has no workers and posts every compute hop there; nothing else changes.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tenferro/admission_observer.hpp"
#include "tenferro/detail/admission/compute_pool.hpp"
#include "tenferro/detail/admission/deadline_watch.hpp"
#include "tenferro/detail/admission/permit_queue.hpp"
#include "tenferro/detail/admission/running_deadlines.hpp"

namespace tenferro::detail {

class entry_base;

/// A host's admission policies (host_options' section 8 fields).
struct admission_policy {
    std::vector<group_options> groups = {};
    std::size_t memory_budget = 0;
    bool reject_late = false;
    std::shared_ptr<admission_timer> timer = nullptr;  // null: the steady clock, a thread for deadlines
};

/// Permits for a host asked for `requested`: 0 means the machine's hardware
/// threads (at least 1).
std::size_t resolve_permits(std::size_t requested) noexcept;

/// Makes glibc load its unwinder now, once per process (host_core.cpp).
void load_libc_unwinder() noexcept;

class host_core : public std::enable_shared_from_this<host_core> {
public:
    host_core(std::string name, std::size_t permits, std::size_t max_waiters, std::span<const unsigned> cpus,
              std::shared_ptr<admission_observer> observer, std::function<void(std::size_t)> on_worker_start = {},
              asio::any_io_executor compute_executor = {}, admission_policy policy = {});

    std::string_view name() const noexcept { return name_; }
    permit_queue& queue() noexcept { return queue_; }
    compute_pool& pool() noexcept { return *pool_; }
    admission_observer* observer() const noexcept { return observer_.get(); }
    /// A consistent snapshot of the admission counters.
    admission_stats stats() const;

    /// Poisons the queue and rejects every queued entry with `resource_poisoned`.
    void poison(std::string_view why) noexcept;
    /// Stops admitting; queued entries complete with `executor`.
    void shut_down() noexcept;
    /// Waits for running sessions, then joins the compute workers.
    void stop_pool() noexcept;

    /// P7: resizes the permits (growing the compute workers first) and starts
    /// or rejects the waiters that the new size grants or excludes.
    void set_permits(std::size_t n);
    /// P7 for the byte budget.
    void set_memory_budget(std::size_t bytes);
    /// P4: starts the deadline timer if it is not running (the first entry
    /// with a deadline does, before it queues). \throws when it cannot start.
    void watch_deadlines();
    /// P4: an entry that waits until `when` queued, or a body that stops at
    /// `when` started (S20); the timer wakes by then.
    void arm_deadline(std::chrono::steady_clock::time_point when) noexcept { deadlines_.arm(when); }
    /// S20: the running bodies asked to stop at their deadline.
    running_deadlines& running() noexcept { return running_; }

    /// Starts every entry in `granted` (grant order; one the queue removed at
    /// its deadline instead is rejected), after handing off the
    /// ready chain `handoffs` that a release or cancel gave this thread.
    static void start_granted(waiter_list granted, entry_node* handoffs = nullptr) noexcept;

private:
    std::string name_;
    permit_queue queue_;
    std::unique_ptr<compute_pool> pool_;
    std::shared_ptr<admission_observer> observer_;
    running_deadlines running_;
    /// Rejects, with deadline_exceeded, the waiters whose deadline is at or
    /// before `now`, and asks the bodies whose deadline it is to stop (S20);
    /// returns the next deadline of either.
    std::chrono::steady_clock::time_point expire_due(std::chrono::steady_clock::time_point now) noexcept;
    deadline_watch deadlines_;  // last: its thread stops first
    /// Starts the waiters a resize granted and rejects those it excluded.
    static void settle(waiter_list granted, waiter_list rejected, entry_node* handoffs, std::string_view what) noexcept;
};

}  // namespace tenferro::detail
