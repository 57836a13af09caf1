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
    /// no deadline. Bounds admission only: a granted body runs to its end.
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    /// Workspace the session declares, granted from `host_options::memory_budget`
    /// together with its permits (P6); `cpu_backend` caps the session's
    /// buffer-pool and scratch allocations at it when non-zero.
    std::size_t bytes = 0;
};

}  // namespace tenferro
