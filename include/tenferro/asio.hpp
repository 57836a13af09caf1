#pragma once
/// \file
/// The Asio that tenferro is built against: standalone Asio (the default) or
/// Boost.Asio (`-Dasio=boost`, docs/boost-asio.md). The one place that chooses.
///
/// The choice is the macro `TENFERRO_ASIO_BOOST`: defined to 1 for the Boost
/// flavour (the installed `tenferro-boost` package's pkg-config Cflags and CMake
/// target define it), 0 or undefined (this header then defines it to 0) for
/// standalone Asio. It must match the library the program links
/// (`libtenferro-boost.so` or `libtenferro.so`): the library's functions that
/// take Asio types name them in their symbols, so most mismatches fail to link,
/// but not all; use the package files, which set both together.
///
/// This header includes the Asio headers that tenferro's public headers use
/// and declares `tenferro::asio` as an alias of `boost::asio` or of standalone `asio`, so
/// that the API reads `asio::awaitable<R>`, `asio::use_awaitable_t<>` and
/// `asio::any_io_executor` in either flavour, and `tenferro::asio_error_code`,
/// `tenferro::asio_system_error` for the error types of Asio's completion
/// signatures (`std::error_code` / `std::system_error` with standalone Asio,
/// `boost::system::error_code` / `boost::system::system_error` with Boost).

#include <system_error>
#include <utility>

#ifndef TENFERRO_ASIO_BOOST
#define TENFERRO_ASIO_BOOST 0
#endif

#if TENFERRO_ASIO_BOOST

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/execution/execute.hpp>
#include <boost/asio/execution/relationship.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/is_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/require.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

namespace tenferro {
// (Hidden from Doxygen, which takes the alias for a recursive one.)
/// \cond
namespace asio = ::boost::asio;
/// \endcond
/// The error code of Asio's completion signatures.
using asio_error_code = ::boost::system::error_code;
/// What Asio (and tenferro, for `use_awaitable`) throws for an `asio_error_code`.
using asio_system_error = ::boost::system::system_error;

namespace detail {
/// The library reports errors as `std::error_code`; Boost.Asio's handlers take
/// `boost::system::error_code`. System and generic codes become Boost's own
/// categories (so that `ec == boost::asio::error::operation_aborted` and
/// `ec.category() == boost::system::system_category()` hold as for Boost.Asio's
/// operations); others (`npy_errc`) are carried as the std code they are.
inline asio_error_code to_asio_error_code(const std::error_code& ec) noexcept {
    if (ec.category() == std::system_category()) return {ec.value(), ::boost::system::system_category()};
    if (ec.category() == std::generic_category()) return {ec.value(), ::boost::system::generic_category()};
    return ec;
}
/// The reverse, for code that keeps `std::error_code` (src/io).
inline std::error_code from_asio_error_code(const asio_error_code& ec) noexcept { return ec; }
/// Submits `f` to a standard executor: its `execute` member (Boost 1.81's Asio
/// deprecates `execution::execute`, and BOOST_ASIO_NO_DEPRECATED removes it).
template <class Executor, class F>
void asio_execute(const Executor& ex, F&& f) {
    ex.execute(std::forward<F>(f));
}
}  // namespace detail
}  // namespace tenferro

#else

#include <asio/any_io_executor.hpp>
#include <asio/associated_allocator.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/co_spawn.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/execution.hpp>
#include <asio/execution/blocking.hpp>
#include <asio/execution/execute.hpp>
#include <asio/execution/relationship.hpp>
#include <asio/execution_context.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/is_executor.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/query.hpp>
#include <asio/recycling_allocator.hpp>
#include <asio/redirect_error.hpp>
#include <asio/require.hpp>
#include <asio/system_executor.hpp>
#include <asio/use_awaitable.hpp>

namespace tenferro {
// (Hidden from Doxygen, which takes the alias for a recursive one.)
/// \cond
namespace asio = ::asio;
/// \endcond
/// The error code of Asio's completion signatures.
using asio_error_code = std::error_code;
/// What Asio (and tenferro, for `use_awaitable`) throws for an `asio_error_code`.
using asio_system_error = std::system_error;

namespace detail {
/// Identity with standalone Asio (see the Boost flavour above).
inline asio_error_code to_asio_error_code(const std::error_code& ec) noexcept { return ec; }
inline std::error_code from_asio_error_code(const asio_error_code& ec) noexcept { return ec; }
/// Submits `f` to a standard executor (`execution::execute`).
template <class Executor, class F>
void asio_execute(const Executor& ex, F&& f) {
    asio::execution::execute(ex, std::forward<F>(f));
}
}  // namespace detail
}  // namespace tenferro

#endif
