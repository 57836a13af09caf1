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
    std::size_t permits_ = 1;
    state state_ = state::idle;
};

/// A FIFO list of waiters threaded through their own nodes.
using waiter_list = intrusive_list<permit_waiter, &permit_waiter::next_, &permit_waiter::prev_>;

}  // namespace tenferro::detail
