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

template <class Executor>
struct is_system_executor : std::false_type {};
template <class Blocking, class Relationship, class Allocator>
struct is_system_executor<asio::basic_system_executor<Blocking, Relationship, Allocator>> : std::true_type {};

/// Whether a completion for `Handler` would go to Asio's system executor: the
/// handler's associated executor (`Fallback` when it names none) is one. Such
/// a completion goes to the library's context instead (completion_executor_t):
/// the system executor promises nothing about the thread a function runs on,
/// so one of the library's threads keeps its semantics, while Asio makes the
/// system context (its threads and scheduler) inside pthread_once at its first
/// use, where an allocation failure ends the process whatever the caller does
/// (S19).
template <class Handler, class Fallback>
inline constexpr bool binds_system_executor_v =
    is_system_executor<asio::associated_executor_t<Handler, Fallback>>::value;

/// The executor an operation's completion for `Handler` goes to: the handler's
/// associated executor (`Fallback` when it names none), the library's for
/// Asio's system executor (binds_system_executor_v).
template <class Handler, class Fallback>
using completion_executor_t = std::conditional_t<binds_system_executor_v<Handler, Fallback>, library_executor_type,
                                                 asio::associated_executor_t<Handler, Fallback>>;

/// The executor of a completion for `Handler` whose handler names none is the
/// library's (its completion context).
template <class Handler>
using handler_executor_t = completion_executor_t<Handler, library_executor_type>;

/// Whether `Handler` names an executor of its own, other than Asio's system
/// executor: then the library's executor is never asked for, which saves an
/// out-of-line call on every hot-path entry.
template <class Handler>
inline constexpr bool names_own_executor_v =
    std::is_same_v<asio::associated_executor_t<Handler, asio::system_executor>, handler_executor_t<Handler>>;

/// `handler`'s completion executor (completion_executor_t), `fallback` when it
/// names none. start_library_context() must have returned first where that is
/// the library's.
template <class Handler, class Fallback>
completion_executor_t<Handler, Fallback> completion_executor_of(const Handler& handler,
                                                                const Fallback& fallback) noexcept {
    if constexpr (binds_system_executor_v<Handler, Fallback>)
        return library_executor();
    else
        return asio::get_associated_executor(handler, fallback);
}

template <class Handler>
handler_executor_t<Handler> handler_executor_of(const Handler& handler) noexcept {
    if constexpr (names_own_executor_v<Handler>)
        return asio::get_associated_executor(handler);
    else
        return completion_executor_of(handler, library_executor());
}

}  // namespace tenferro::detail
