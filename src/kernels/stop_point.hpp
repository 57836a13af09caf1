#pragma once
// Where the kernels look for a stop (S20): the stop token of the session whose
// operation runs on this thread. The ops layer sets it for the duration of an
// operation on the calling thread, and the CPU session's parallel_for for each
// range on the thread that runs it (stop_scope); a kernel calls stop_point()
// between chunks of its work (a GEMM micro-panel, a search tile, a block of
// about 32k element-operations), which throws session_stopped once the
// session was asked to stop. With no session, or one that cannot be asked
// (no stop state), the pointer is null and a check is one thread-local load.

#include <stop_token>

#include "tenferro/detail/base/session_stopped.hpp"

namespace tenferro::kernels {

namespace stop_detail {
/// The token of the operation running on this thread; null when it cannot stop.
extern thread_local const std::stop_token* current;
}  // namespace stop_detail

/// Whether an operation that can be stopped runs on this thread.
inline bool stop_possible() noexcept { return stop_detail::current != nullptr; }

/// Whether the operation running on this thread was asked to stop.
inline bool stop_requested() noexcept {
    const std::stop_token* t = stop_detail::current;
    return t != nullptr && t->stop_requested();
}

/// Throws session_stopped when the operation running on this thread was asked to stop.
inline void stop_point() {
    if (stop_requested()) throw session_stopped();
}

/// Marks this thread as running an operation under `token` for its lifetime
/// (restoring the previous mark: an op may run another). `token` must outlive it.
class stop_scope {
public:
    explicit stop_scope(const std::stop_token& token) noexcept : previous_(stop_detail::current) {
        stop_detail::current = token.stop_possible() ? &token : nullptr;
    }
    ~stop_scope() { stop_detail::current = previous_; }
    stop_scope(const stop_scope&) = delete;
    stop_scope& operator=(const stop_scope&) = delete;

private:
    const std::stop_token* previous_;
};

}  // namespace tenferro::kernels
