#pragma once
// Runs one coroutine to completion from synchronous code (the demo's set-up
// steps, the integration test's checks).

#include <future>

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

namespace embedding_search {

/// Runs `task` on a fresh single-threaded io_context and returns its value
/// (or rethrows its exception). Blocks the calling thread: never call it
/// from inside an io_context's handlers.
template <class T>
T run_blocking(asio::awaitable<T> task) {
    asio::io_context io(1);
    std::future<T> result = asio::co_spawn(io, std::move(task), asio::use_future);
    io.run();
    return result.get();
}

}  // namespace embedding_search
