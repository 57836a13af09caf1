#pragma once
// A node of the permit queue (permit_queue.hpp): a waiter for some permits,
// and where it stands. Embedded in every entry's operation state (as part of
// its entry_node, start_order.hpp), so that waiting allocates nothing and
// leaving the queue is an O(1) unlink.

#include <cstddef>
#include <cstdint>

#include "tenferro/detail/async/intrusive_list.hpp"

namespace tenferro::detail {

struct permit_waiter {
    enum class state : std::uint8_t {
        idle,     // not yet offered to the queue
        waiting,  // linked in the queue
        granted,  // owns `permits` permits
        removed,  // left the queue without permits (cancelled, shut down, poisoned)
    };

    permit_waiter* prev_ = nullptr;
    permit_waiter* next_ = nullptr;
    // What it asks for, packed into one word beside the links: every byte
    // here is paid by each parked entry. (An entry asking for more than 2^32
    // permits is rejected before it reaches the queue.)
    std::uint32_t permits_ = 1;
    std::uint16_t group_ = 0;  // its tenant group (P1); a host has at most 2^16 groups
    state state_ = state::idle;
    std::size_t bytes_ = 0;  // its declared workspace (P6)
};

/// A FIFO list of waiters threaded through their own nodes.
using waiter_list = intrusive_list<permit_waiter, &permit_waiter::next_, &permit_waiter::prev_>;

}  // namespace tenferro::detail
