#pragma once
// What a session body is: a function of the session returning R
// (synchronous) or asio::awaitable<R> (asynchronous), and the value its entry
// delivers.

#include <exception>
#include <functional>
#include <type_traits>

#include "tenferro/asio.hpp"

#include "tenferro/session_entry_error.hpp"

namespace tenferro::detail {

template <class T>
struct awaitable_traits {
    static constexpr bool is_awaitable = false;
    using value_type = T;
};
template <class T, class Executor>
struct awaitable_traits<asio::awaitable<T, Executor>> {
    static constexpr bool is_awaitable = true;
    static constexpr bool default_executor = std::is_same_v<Executor, asio::any_io_executor>;
    using value_type = T;
};

template <class F, class Arg>
struct body_traits {
    static_assert(std::is_invocable_v<std::decay_t<F>&, Arg&>,
                  "a tenferro session body must be callable with its host's session_type& (backend_session& "
                  "for cpu_backend; an execution scope body with an execution_scope&)");
    using invoke_result = std::invoke_result_t<std::decay_t<F>&, Arg&>;
    using traits = awaitable_traits<std::remove_cvref_t<invoke_result>>;
    static constexpr bool is_async = traits::is_awaitable;
    /// The value delivered in session_result<value_type>; references decay to values.
    using value_type = std::remove_cvref_t<typename traits::value_type>;
};

template <class R>
using entry_signature = void(std::exception_ptr, session_result<R>);

}  // namespace tenferro::detail
