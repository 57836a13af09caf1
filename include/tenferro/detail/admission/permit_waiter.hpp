#pragma once
// A node of the permit queue (permit_queue.hpp): a waiter for some permits,
// and where it stands. Embedded in every entry's operation state (as part of
// its entry_node, start_order.hpp), so that waiting allocates nothing and
// leaving the queue is an O(1) unlink.

#include <cstddef>
#include <cstdint>

#include "tenferro/detail/admission/entry_phase.hpp"
#include "tenferro/detail/async/intrusive_list.hpp"

namespace tenferro::detail {

struct permit_waiter {
    /// Where the entry stands (entry_phase.hpp). The queue moves it from idle
    /// to waiting, and from idle or waiting to granted, or to rejected when it
    /// leaves the queue without permits (cancelled, expired, shut down,
    /// poisoned, resized away); the entry moves it on from there.
    entry_phase phase() const noexcept { return phase_.get(); }

    permit_waiter* prev_ = nullptr;
    permit_waiter* next_ = nullptr;
    // What it asks for, packed into one word beside the links: every byte
    // here is paid by each parked entry. (An entry asking for more than 2^32
    // permits is rejected before it reaches the queue.)
    std::uint32_t permits_ = 1;
    std::uint16_t group_ = 0;  // its tenant group (P1); a host has at most 2^16 groups
    entry_phase_cell phase_;
    std::size_t bytes_ = 0;  // its declared workspace (P6)
};

/// A FIFO list of waiters threaded through their own nodes.
using waiter_list = intrusive_list<permit_waiter, &permit_waiter::next_, &permit_waiter::prev_>;

}  // namespace tenferro::detail
