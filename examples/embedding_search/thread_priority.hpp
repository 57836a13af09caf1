#pragma once
// Per-thread scheduling priority (Linux; elsewhere it does nothing).

namespace embedding_search {

/// Sets the calling thread's nice value (Linux: per thread). Best effort: a
/// refusal leaves the thread as it was.
void set_thread_nice(int nice) noexcept;

}  // namespace embedding_search
