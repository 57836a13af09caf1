#pragma once
// What the admission tests share: the options of an entry by placement, and
// an async body that holds its permits until the test releases them.

#include <atomic>
#include <cstddef>

#include <tenferro/session_options.hpp>
#include "test_asio.hpp"
#include "test_host.hpp"

namespace tenferro::test {

/// Options of a caller-placed FIFO entry of `k` permits.
inline constexpr session_options on_caller(std::size_t k = 1) { return {k, wait_policy::fifo, placement::caller}; }
/// Options of a compute-placed FIFO entry of `k` permits.
inline constexpr session_options on_compute(std::size_t k = 1) { return {k, wait_policy::fifo, placement::compute}; }
/// Options of a FIFO entry of `k` permits placed at `where`.
inline constexpr session_options placed(placement where, std::size_t k = 1) { return {k, wait_policy::fifo, where}; }
/// Options of a caller-placed try-entry (`wait_policy::never`) of `k` permits.
inline constexpr session_options try_on_caller(std::size_t k = 1) { return {k, wait_policy::never, placement::caller}; }

/// An async body that sets `started` and then holds its permits until
/// `release` is cancelled or expires.
inline auto holder(asio::steady_timer& release, std::atomic<bool>& started) {
    return [&](test_session&) -> asio::awaitable<int> {
        started = true;
        tenferro::asio_error_code ec;
        co_await release.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        co_return 1;
    };
}

}  // namespace tenferro::test
