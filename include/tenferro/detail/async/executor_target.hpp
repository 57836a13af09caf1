#pragma once
// What a type-erased executor holds. The library looks inside an
// `any_io_executor` in three places: the hand-off unwraps an io_context's
// executor to post on its concrete type (op_work.hpp), the inline fast path
// asks whether the caller runs on an io_context (entry admission), and re-entry
// detection finds the session context a session_executor carries (S7). All
// three ask this one function.

#include <typeinfo>

#include "tenferro/asio.hpp"

namespace tenferro::detail {

#if !defined(ASIO_NO_TYPEID) && !defined(BOOST_ASIO_NO_TYPEID)
/// Whether executor_target can look inside a type-erased executor (Asio
/// built with typeid).
inline constexpr bool executor_target_available = true;

/// The executor of type `T` that `ex` holds, or null when it holds another
/// type (or nothing). Asio 1.22's `any_executor::target<T>()` does not check
/// the type itself: this checks `target_type()` first.
template <class T, class AnyExecutor>
const T* executor_target(const AnyExecutor& ex) noexcept {
    if (!ex || ex.target_type() != typeid(T)) return nullptr;
    return ex.template target<T>();
}
#else
inline constexpr bool executor_target_available = false;
#endif

}  // namespace tenferro::detail
