#pragma once
/// \file
/// Admission metrics: the optional observer hook and the counters snapshot.

#include <cstddef>
#include <cstdint>

namespace tenferro {

/// An optional metrics hook, called during admission bookkeeping.
///
/// `on_admitted(k)` runs after an entry is granted `k` permits and before its
/// body is scheduled; `on_released(k)` runs when a session gives its `k`
/// permits back, before they are offered to the next waiter. Hooks run on
/// whatever thread admits or releases (an I/O thread or a compute worker),
/// concurrently with each other, never under an internal lock; they must be
/// thread-safe and should be cheap. Sessions that reuse an execution scope's
/// permit do not call them.
///
/// An exception escaping a hook poisons the host (rule S11): the entry being
/// admitted and every queued entry complete with `resource_poisoned`, every
/// later entry is rejected with it, running sessions finish normally.
class admission_observer {
public:
    virtual ~admission_observer() = default;
    virtual void on_admitted(std::size_t /*permits*/) {}
    virtual void on_released(std::size_t /*permits*/) {}
};

/// A snapshot of a host's admission counters.
///
/// `admitted` counts entries whose body was (or is about to be) started,
/// `completed` those whose body finished (at quiescence the two are equal and
/// `available == permits`); `rejected` counts entries completed with any
/// admission error but `cancelled`, which has its own counter; `expired`
/// counts those of them completed with `deadline_exceeded`. `stopped` counts
/// bodies that ran and ended by the stop their entry's cancellation asked
/// for (S20: they complete with `cancelled`, and are counted in neither
/// `rejected` nor `cancelled`, which count bodies that never ran). `available` is
/// `permits` minus the permits held, floored at 0 (after `set_permits` shrank
/// the host below what running sessions hold). `memory_budget` and
/// `memory_available` are 0 without a byte budget.
struct admission_stats {
    std::size_t permits, available, waiting;
    std::uint64_t admitted, completed, rejected, cancelled;
    std::uint64_t stopped;  ///< bodies stopped while running (S20); also in admitted and completed
    std::uint64_t expired;
    std::size_t memory_budget, memory_available;
};

}  // namespace tenferro
