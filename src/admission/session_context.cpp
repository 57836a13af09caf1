#include "tenferro/detail/admission/session_context.hpp"

#include "async/fast_tls.hpp"

namespace tenferro::detail {
namespace {
// Set only while a synchronous session body runs on this thread.
TENFERRO_FAST_TLS thread_local session_context* sync_context = nullptr;
}  // namespace

session_context* current_sync_context() noexcept { return sync_context; }

sync_context_marker::sync_context_marker(session_context& ctx) noexcept : previous_(sync_context) {
    sync_context = &ctx;
}

sync_context_marker::~sync_context_marker() { sync_context = previous_; }

void session_context::set_executors(const asio::any_io_executor& ex) {
    asio::any_io_executor made[4] = {
        ex, asio::require(ex, asio::execution::blocking.never),
        asio::prefer(ex, asio::execution::outstanding_work.tracked),
        asio::prefer(asio::require(ex, asio::execution::blocking.never), asio::execution::outstanding_work.tracked)};
    for (int i = 0; i < 4; ++i) inner[i] = std::move(made[i]);
    tracked_refs.store(1, std::memory_order_release);  // the session's own hold
    has_executors_ = true;
}

void session_context::drop_tracked() noexcept {
    // Nobody executes through them any more (every tracked copy is gone): the
    // copies left behind use inner[0] and inner[1] only.
    inner[2] = asio::any_io_executor();
    inner[3] = asio::any_io_executor();
}

}  // namespace tenferro::detail
