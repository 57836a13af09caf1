#pragma once
/// \file
/// `session_options`: how one entry asks for admission — its weight, whether
/// it waits, and where its body runs. The same for every host.

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
};

}  // namespace tenferro
