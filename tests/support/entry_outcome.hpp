#pragma once
// One entry's outcome, delivered on a test's io_context, with a cancellation
// signal bound to it: how the S20 tests enter a session, stop it and look.

#include <atomic>
#include <exception>
#include <optional>
#include <thread>
#include <utility>

#include <tenferro/session_entry_error.hpp>

#include "test_asio.hpp"

namespace tenferro::test {

template <class R>
struct entry_outcome {
    std::exception_ptr exception;
    std::optional<session_result<R>> result;
};

/// The completion token: `out` is filled on `io`, and `signal` reaches the entry.
template <class R>
auto deliver_to(asio::io_context& io, asio::cancellation_signal& signal, entry_outcome<R>& out) {
    return asio::bind_cancellation_slot(signal.slot(),
                                        asio::bind_executor(io, [&out](std::exception_ptr e, session_result<R> r) {
                                            out.exception = e;
                                            out.result.emplace(std::move(r));
                                        }));
}

/// Spins (yielding) until a body on another thread sets `flag`.
inline void wait_for(const std::atomic<bool>& flag) {
    while (!flag.load(std::memory_order_acquire)) std::this_thread::yield();
}

}  // namespace tenferro::test
