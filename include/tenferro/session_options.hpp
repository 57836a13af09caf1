#pragma once
/// \file
/// `session_options`: how one entry asks for admission — its weight, whether
/// it waits, and where its body runs. The same for every host.

#include <chrono>
#include <cstddef>

namespace tenferro {

/// How an entry waits for its permits.
enum class wait_policy {
    fifo,   ///< queue in initiation order behind earlier waiters
    never,  ///< admit at once or complete with `contended`
};

/// Where the body runs once admitted.
enum class placement {
    compute,  ///< on the host's compute executor (an I/O thread never runs kernels)
    caller,   ///< on the caller's associated executor
};

/// Per-entry options.
struct session_options {
    std::size_t permits = 1;               ///< weighted entry: this many permits, granted together
    wait_policy wait = wait_policy::fifo;  ///< `never`: admit now or fail with `contended`
    placement where = placement::compute;  ///< where the body runs
    /// The tenant group it is admitted in: an index into `host_options::groups`
    /// (out of range: `incompatible_context`). FIFO within a group, weighted
    /// shares between groups (docs/contract.md, P1-P3).
    std::size_t group = 0;
    /// Admitted by then, or completed with `deadline_exceeded` (P4); `max()`:
    /// no deadline. A body granted in time but not started by then never
    /// starts; one that runs when it passes is asked to stop (S20), unless
    /// `stop_at_deadline` is false.
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    /// Workspace the session declares, granted from `host_options::memory_budget`
    /// together with its permits (P6); `cpu_backend` caps the session's
    /// buffer-pool and scratch allocations at it when non-zero.
    std::size_t bytes = 0;
    /// S20: a deadline that passes while the body runs asks it to stop (its
    /// operations throw `session_stopped`; the entry then completes with
    /// `deadline_exceeded`, counted as stopped). False: the deadline bounds
    /// admission only, and a started body runs to its end.
    bool stop_at_deadline = true;
};

}  // namespace tenferro
