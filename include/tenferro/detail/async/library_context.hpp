#pragma once
// The library's own completion context: one asio::io_context, run by one
// thread of the library's, for the operations whose caller named no executor.
//
// Asio's convention for an operation with no I/O object of its own: the
// initiation exposes an executor (`executor_type`, `get_executor()`); a
// handler with no associated executor completes there, and Asio's adapters
// put what they need there (`cancel_after`'s timer, partial tokens' default
// completion token). Which executor an admission entry exposes decides both,
// and each candidate fails one way (docs/asio-versions.md, "The executor an
// operation exposes"):
//  - Asio's system executor: Asio creates its context lazily, inside
//    pthread_once, with threads of its own; out of memory there the process
//    ends (S19), and a fork after it is unsafe.
//  - the compute pool: not an io_context, so a timer on it makes Asio start a
//    scheduler thread of its own inside the pool's context.
//  - the caller's executor: not known to the initiation (only the handler
//    knows it, and Asio asks the initiation).
// So the library runs an io_context of its own on one thread, started by the
// first host's constructor (where throwing is allowed), never at load (no
// thread in a process that builds no host, nothing to break a fork before
// that), and kept until exit. Its executor is an io_context's, so a handler
// completed there takes the same concrete, compiled-in paths as any
// io_context caller's.

#include <type_traits>

#include "tenferro/asio.hpp"

namespace tenferro::detail {

/// The executor of the library's completion context.
using library_executor_type = asio::io_context::executor_type;

/// Starts the library's completion context if it is not running yet. Throws
/// what making an io_context and a thread throws; cheap once it runs.
void start_library_context();

/// Its executor. start_library_context() must have returned first (every host
/// constructor calls it, so every entry initiated on a host finds it).
library_executor_type library_executor() noexcept;

/// Whether the library's completion context runs the calling thread.
bool in_library_context() noexcept;

/// The executor an operation's completion for `Handler` goes to: the
/// handler's associated executor, the library's when it names none.
template <class Handler>
using handler_executor_t = asio::associated_executor_t<Handler, library_executor_type>;

/// Whether `Handler` names an executor of its own (its associated executor
/// does not depend on the fallback): then the library's executor is never
/// asked for, which saves an out-of-line call on every hot-path entry.
template <class Handler>
inline constexpr bool names_own_executor_v =
    std::is_same_v<asio::associated_executor_t<Handler, asio::system_executor>, handler_executor_t<Handler>>;

template <class Handler>
handler_executor_t<Handler> handler_executor_of(const Handler& handler) noexcept {
    if constexpr (names_own_executor_v<Handler>)
        return asio::get_associated_executor(handler);
    else
        return asio::get_associated_executor(handler, library_executor());
}

}  // namespace tenferro::detail
