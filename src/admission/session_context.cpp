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

}  // namespace tenferro::detail
