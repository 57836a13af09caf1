#pragma once
// co_spawn for tests: a coroutine's escaping exception is rethrown out of the
// io_context's run()/poll(), so that it fails the test case instead of being
// dropped.

#include <exception>
#include <utility>

#include "test_asio.hpp"

namespace tenferro::test {

/// co_spawn onto `ex` (an executor or an execution context such as an
/// io_context) that rethrows a coroutine's escaping exception out of
/// run()/poll().
template <class Executor, class F>
void spawn(Executor&& ex, F f) {
    asio::co_spawn(std::forward<Executor>(ex), std::move(f), [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    });
}

}  // namespace tenferro::test
