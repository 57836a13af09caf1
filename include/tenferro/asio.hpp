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

///
/// It also checks that the Asio a program compiles against is the one the
/// library was built with (tenferro/asio_build.hpp), and names the version
/// differences the library's code branches on (docs/asio-versions.md):
///  - `TENFERRO_ASIO_VERSION`: `ASIO_VERSION` or `BOOST_ASIO_VERSION`
///    (major * 100000 + minor * 100 + patch; Boost 1.80 carries Asio 1.24);
///  - `TENFERRO_ASIO_TOKENS_EXPERIMENTAL`: 1 before Asio 1.24, where `as_tuple`
///    and `deferred` live in `asio::experimental` (from 1.24 in `asio`; the
///    experimental aliases are deprecated, and gone from 1.33);
///  - `TENFERRO_ASIO_HAS_CONSIGN`: 1 from Asio 1.26 (`consign`);
///  - `TENFERRO_ASIO_HAS_IMMEDIATE_EXECUTOR`: 1 from Asio 1.28
///    (`bind_immediate_executor`);
///  - `TENFERRO_ASIO_HAS_CANCEL_AFTER`: 1 from Asio 1.31 (`cancel_after`,
///    `cancel_at`).
///  - `TENFERRO_ASIO_MEMBER_EXECUTE`: 1 from Asio 1.26, where every standard
///    executor's member `execute` is public; `execution::execute` is
///    deprecated there and gone from 1.29. Before 1.26 some executors (the
///    system executor) make the member private, reachable only through
///    `execution::execute`.

#include <system_error>
#include <utility>

#ifndef TENFERRO_ASIO_BOOST
#define TENFERRO_ASIO_BOOST 0
#endif

#if TENFERRO_ASIO_BOOST
#include <boost/asio/version.hpp>
#include "tenferro/asio_build_boost.hpp"
#define TENFERRO_ASIO_VERSION BOOST_ASIO_VERSION
#else
#include <asio/version.hpp>
#include "tenferro/asio_build.hpp"
#define TENFERRO_ASIO_VERSION ASIO_VERSION
#endif

#if TENFERRO_ASIO_VERSION < 102200
#error "tenferro needs Asio 1.22 or later (Boost 1.80 or later)"
#endif
#define TENFERRO_ASIO_TOKENS_EXPERIMENTAL (TENFERRO_ASIO_VERSION < 102400)
#define TENFERRO_ASIO_HAS_CONSIGN (TENFERRO_ASIO_VERSION >= 102600)
#define TENFERRO_ASIO_HAS_IMMEDIATE_EXECUTOR (TENFERRO_ASIO_VERSION >= 102800)
#define TENFERRO_ASIO_HAS_CANCEL_AFTER (TENFERRO_ASIO_VERSION >= 103100)
#define TENFERRO_ASIO_MEMBER_EXECUTE (TENFERRO_ASIO_VERSION >= 102600)

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
#if !TENFERRO_ASIO_MEMBER_EXECUTE
#include <boost/asio/execution/execute.hpp>
#endif
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
#include <boost/asio/use_future.hpp>
// For BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE's value (the check below):
// its default is defined there, in a header of asio/detail (a pinned use,
// docs/asio-detail-pins.md).
#include <boost/asio/detail/thread_info_base.hpp>
#if !defined(BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE)
#error "tenferro: BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE is no longer defined there (docs/asio-detail-pins.md)"
#endif
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
}  // namespace detail
}  // namespace tenferro

#else

#include <asio/any_io_executor.hpp>
#if TENFERRO_ASIO_TOKENS_EXPERIMENTAL
#include <asio/experimental/as_tuple.hpp>
#else
#include <asio/as_tuple.hpp>
#endif
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
#if !TENFERRO_ASIO_MEMBER_EXECUTE
#include <asio/execution/execute.hpp>
#endif
#include <asio/execution/relationship.hpp>
#include <asio/execution_context.hpp>
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
#include <asio/use_future.hpp>
// For ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE's value (the check below): its
// default is defined there, in a header of asio/detail (a pinned use,
// docs/asio-detail-pins.md).
#include <asio/detail/thread_info_base.hpp>
#if !defined(ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE)
#error "tenferro: ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE is no longer defined there (docs/asio-detail-pins.md)"
#endif

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
}  // namespace detail
}  // namespace tenferro

#endif

namespace tenferro::detail {
/// Submits `f` to a standard executor: its member `execute` from Asio 1.26
/// (where `execution::execute` is deprecated; gone from 1.29), the
/// `execution::execute` customisation point before (where the system
/// executor's member is private).
template <class Executor, class F>
void asio_execute(const Executor& ex, F&& f) {
#if TENFERRO_ASIO_MEMBER_EXECUTE
    ex.execute(std::forward<F>(f));
#else
    asio::execution::execute(ex, std::forward<F>(f));
#endif
}
}  // namespace tenferro::detail

// The program's values of the macros tenferro/asio_build.hpp records.
#if TENFERRO_ASIO_BOOST
#define TENFERRO_DETAIL_ASIO_CACHE_SIZE BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE
#if defined(BOOST_ASIO_NO_TYPEID)
#define TENFERRO_DETAIL_ASIO_NO_TYPEID 1
#endif
#if defined(BOOST_ASIO_ENABLE_HANDLER_TRACKING)
#define TENFERRO_DETAIL_ASIO_ENABLE_HANDLER_TRACKING 1
#endif
#if defined(BOOST_ASIO_DISABLE_SMALL_BLOCK_RECYCLING)
#define TENFERRO_DETAIL_ASIO_DISABLE_SMALL_BLOCK_RECYCLING 1
#endif
#if defined(BOOST_ASIO_DISABLE_THREADS)
#define TENFERRO_DETAIL_ASIO_DISABLE_THREADS 1
#endif
#if defined(BOOST_ASIO_NO_EXCEPTIONS)
#define TENFERRO_DETAIL_ASIO_NO_EXCEPTIONS 1
#endif
#if defined(BOOST_ASIO_VERSION_NAMESPACE)
#define TENFERRO_DETAIL_ASIO_VERSION_NAMESPACE 1
#endif
#else
#define TENFERRO_DETAIL_ASIO_CACHE_SIZE ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE
#if defined(ASIO_NO_TYPEID)
#define TENFERRO_DETAIL_ASIO_NO_TYPEID 1
#endif
#if defined(ASIO_ENABLE_HANDLER_TRACKING)
#define TENFERRO_DETAIL_ASIO_ENABLE_HANDLER_TRACKING 1
#endif
#if defined(ASIO_DISABLE_SMALL_BLOCK_RECYCLING)
#define TENFERRO_DETAIL_ASIO_DISABLE_SMALL_BLOCK_RECYCLING 1
#endif
#if defined(ASIO_DISABLE_THREADS)
#define TENFERRO_DETAIL_ASIO_DISABLE_THREADS 1
#endif
#if defined(ASIO_NO_EXCEPTIONS)
#define TENFERRO_DETAIL_ASIO_NO_EXCEPTIONS 1
#endif
#if defined(ASIO_VERSION_NAMESPACE)
#define TENFERRO_DETAIL_ASIO_VERSION_NAMESPACE 1
#endif
#endif
#ifndef TENFERRO_DETAIL_ASIO_NO_TYPEID
#define TENFERRO_DETAIL_ASIO_NO_TYPEID 0
#endif
#ifndef TENFERRO_DETAIL_ASIO_ENABLE_HANDLER_TRACKING
#define TENFERRO_DETAIL_ASIO_ENABLE_HANDLER_TRACKING 0
#endif
#ifndef TENFERRO_DETAIL_ASIO_DISABLE_SMALL_BLOCK_RECYCLING
#define TENFERRO_DETAIL_ASIO_DISABLE_SMALL_BLOCK_RECYCLING 0
#endif
#ifndef TENFERRO_DETAIL_ASIO_DISABLE_THREADS
#define TENFERRO_DETAIL_ASIO_DISABLE_THREADS 0
#endif
#ifndef TENFERRO_DETAIL_ASIO_NO_EXCEPTIONS
#define TENFERRO_DETAIL_ASIO_NO_EXCEPTIONS 0
#endif
#ifndef TENFERRO_DETAIL_ASIO_VERSION_NAMESPACE
#define TENFERRO_DETAIL_ASIO_VERSION_NAMESPACE 0
#endif

namespace tenferro::detail::asio_build_check {
// One class template per recorded value, instantiated with the library's
// value and the program's: when they differ, its static_assert fails and the
// compiler's "in instantiation of" line names both, as
// `asio_version<LibraryBuiltWith, ProgramCompilesWith>`. Library and program
// must agree: the library's functions take Asio types, and Asio's inline code
// in both must lay them out alike (an ODR violation otherwise, found, if ever,
// at run time). The remedy is to build tenferro against the program's Asio
// (docs/asio-versions.md).
#define TENFERRO_DETAIL_ASIO_BUILD_CHECK(name, built, here)                                                    \
    template <long LibraryBuiltWith, long ProgramCompilesWith>                                                 \
    struct name {                                                                                              \
        static_assert(LibraryBuiltWith == ProgramCompilesWith,                                                 \
                      "tenferro was built against another Asio, or with other Asio macros, than this program " \
                      "compiles with: " #name "<library, program> names both (docs/asio-versions.md)");        \
        static constexpr bool checked = true;                                                                  \
    };                                                                                                         \
    static_assert(name<(built), (here)>::checked);
TENFERRO_DETAIL_ASIO_BUILD_CHECK(asio_version, TENFERRO_BUILT_ASIO_VERSION, TENFERRO_ASIO_VERSION)
TENFERRO_DETAIL_ASIO_BUILD_CHECK(asio_no_typeid, TENFERRO_BUILT_ASIO_NO_TYPEID, TENFERRO_DETAIL_ASIO_NO_TYPEID)
TENFERRO_DETAIL_ASIO_BUILD_CHECK(asio_enable_handler_tracking, TENFERRO_BUILT_ASIO_ENABLE_HANDLER_TRACKING,
                                 TENFERRO_DETAIL_ASIO_ENABLE_HANDLER_TRACKING)
TENFERRO_DETAIL_ASIO_BUILD_CHECK(asio_disable_small_block_recycling, TENFERRO_BUILT_ASIO_DISABLE_SMALL_BLOCK_RECYCLING,
                                 TENFERRO_DETAIL_ASIO_DISABLE_SMALL_BLOCK_RECYCLING)
TENFERRO_DETAIL_ASIO_BUILD_CHECK(asio_disable_threads, TENFERRO_BUILT_ASIO_DISABLE_THREADS,
                                 TENFERRO_DETAIL_ASIO_DISABLE_THREADS)
TENFERRO_DETAIL_ASIO_BUILD_CHECK(asio_no_exceptions, TENFERRO_BUILT_ASIO_NO_EXCEPTIONS,
                                 TENFERRO_DETAIL_ASIO_NO_EXCEPTIONS)
TENFERRO_DETAIL_ASIO_BUILD_CHECK(asio_version_namespace, TENFERRO_BUILT_ASIO_VERSION_NAMESPACE,
                                 TENFERRO_DETAIL_ASIO_VERSION_NAMESPACE)
TENFERRO_DETAIL_ASIO_BUILD_CHECK(asio_recycling_allocator_cache_size,
                                 TENFERRO_BUILT_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE, TENFERRO_DETAIL_ASIO_CACHE_SIZE)
#undef TENFERRO_DETAIL_ASIO_BUILD_CHECK
}  // namespace tenferro::detail::asio_build_check
