#pragma once
// The Asio headers the tests use, for either flavour (include/tenferro/asio.hpp,
// docs/boost-asio.md); with Boost.Asio, `::asio` is an alias of `boost::asio`, so
// that the tests' `asio::...` reads the same in both. Asio's error code is
// `tenferro::asio_error_code` (`asio::error_code` exists only in standalone Asio).
// `tenferro::test::as_tuple` and `deferred` name the tokens that Asio before
// 1.24 has in `asio::experimental` and later ones (Boost 1.80 on) in `asio`
// (the `experimental` aliases are deprecated, gone under ASIO_NO_DEPRECATED).

#include "tenferro/asio.hpp"

#if TENFERRO_ASIO_BOOST

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#if TENFERRO_ASIO_HAS_CONSIGN
#include <boost/asio/consign.hpp>
#endif
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
#include <boost/asio/cancel_after.hpp>
#include <boost/asio/cancel_at.hpp>
#endif
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_future.hpp>

namespace asio = ::boost::asio;

namespace tenferro::test {
using ::boost::asio::as_tuple;
using ::boost::asio::deferred;
}  // namespace tenferro::test

#else

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/experimental/parallel_group.hpp>
#if TENFERRO_ASIO_HAS_CONSIGN
#include <asio/consign.hpp>
#endif
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
#include <asio/cancel_after.hpp>
#include <asio/cancel_at.hpp>
#endif
#if TENFERRO_ASIO_TOKENS_EXPERIMENTAL
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/deferred.hpp>
#else
#include <asio/as_tuple.hpp>
#include <asio/deferred.hpp>
#endif
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_future.hpp>

namespace tenferro::test {
#if TENFERRO_ASIO_TOKENS_EXPERIMENTAL
using ::asio::experimental::as_tuple;
using ::asio::experimental::deferred;
#else
using ::asio::as_tuple;
using ::asio::deferred;
#endif
}  // namespace tenferro::test

#endif
