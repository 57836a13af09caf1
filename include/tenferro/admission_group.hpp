#pragma once
/// \file
/// A host's tenant groups: how each is configured (`group_options`, in
/// `host_options::groups`) and what it has been through (`group_stats`).
/// An entry names its group in `session_options::group`.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace tenferro {

/// One tenant group of a host. FIFO within the group; between groups, the
/// permit-time is shared by weight (start-time fair queuing, docs/contract.md
/// P1-P3).
struct group_options {
    /// For stats, metrics and error details.
    std::string name;
    /// Share of the host's permit-time, relative to the other groups' (>= 1).
    unsigned weight = 1;
    /// This group's queue bound: a `fifo` entry arriving when this many of the
    /// group wait completes with `contended`.
    std::size_t max_waiters = std::numeric_limits<std::size_t>::max();
};

/// A consistent snapshot of one group's counters. At quiescence
/// `admitted == completed`; `rejected` counts every admission error but
/// `cancelled`, `expired` (`deadline_exceeded`) included.
struct group_stats {
    std::string_view name;  ///< valid as long as the host
    unsigned weight;
    std::size_t waiting;
    std::uint64_t admitted, completed, rejected, cancelled, expired;
    /// Permits x seconds held by the group's sessions, from each body's start
    /// to its release. Measured when the host has more than one group or
    /// `reject_late` (the clock is read only then); 0 otherwise.
    double busy_permit_seconds;
    std::uint64_t stopped;  ///< its bodies stopped while running (S20); also in admitted and completed
};

}  // namespace tenferro
