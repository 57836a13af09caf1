#pragma once
// The executor of co_spawn's completion for a body the library spawns: it
// runs what it is given at once, on the calling thread.
//
// co_spawn hands its completion handler to the handler's associated executor
// after the body ends (a dispatch, or a post when the body never suspended).
// With the session's executor there, that hand-off wraps the handler in a
// type-erased block and may queue a task: allocations made inside Asio, where
// a failure cannot reach anyone (S19). With this one it is a plain
// call: co_spawn's last step allocates nothing. The completion itself (the
// entry's body_finished) then hands the outcome to the caller's executor the
// library's own way, which parks and retries when memory is short.
//
// Every property it is asked for it accepts and ignores: a "post" to it runs
// inline, which is what co_spawn's completion of a library body may do (the
// entry's own completion is never delivered inside an initiating function).

#include "tenferro/asio.hpp"

namespace tenferro::detail {

class inline_executor {
public:
    template <class F>
    void execute(F&& f) const {
        static_cast<F&&>(f)();
    }

    asio::execution_context& query(asio::execution::context_t) const noexcept { return context(); }
    static constexpr asio::execution::blocking_t query(asio::execution::blocking_t) noexcept {
        return asio::execution::blocking.possibly;
    }
    inline_executor require(asio::execution::blocking_t::never_t) const noexcept { return *this; }
    inline_executor require(asio::execution::blocking_t::possibly_t) const noexcept { return *this; }
    inline_executor require(asio::execution::outstanding_work_t::tracked_t) const noexcept { return *this; }
    inline_executor require(asio::execution::outstanding_work_t::untracked_t) const noexcept { return *this; }
    inline_executor require(asio::execution::relationship_t::fork_t) const noexcept { return *this; }
    inline_executor require(asio::execution::relationship_t::continuation_t) const noexcept { return *this; }
    template <class Alloc>
    inline_executor require(const asio::execution::allocator_t<Alloc>&) const noexcept {
        return *this;
    }

    friend constexpr bool operator==(const inline_executor&, const inline_executor&) noexcept { return true; }
    friend constexpr bool operator!=(const inline_executor&, const inline_executor&) noexcept { return false; }

private:
    // The context it reports (Asio asks executors for one); nothing runs in it.
    static asio::execution_context& context() noexcept {
        static asio::execution_context ctx;
        return ctx;
    }
};

}  // namespace tenferro::detail
