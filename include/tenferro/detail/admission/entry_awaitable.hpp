#pragma once
// The default token's entry: `co_await host.with_backend_session(f)`.
//
// With `asio::use_awaitable`, an entry is a coroutine of its own
// (awaitable_entry) instead of the plain `async_initiate`. The difference is
// one case: an entry admitted at once whose synchronous body runs inline on
// the caller's thread (the inline fast path, admission/inline_session.hpp). A handler must be
// posted there — Asio never invokes a handler inside its initiating function
// — but an awaiting coroutine is already running on its executor, so the
// value is simply returned to it, as any awaitable that finishes without
// suspending does: no trip through the executor's queue, which was most of
// such an entry's cost. Every other entry (queued, compute-placed,
// asynchronous body, observer) awaits the general operation, exactly as
// before.
//
// Fairness: a coroutine that enters sessions in a loop would otherwise never
// give its thread back while permits are free. Every 32nd inline return on a
// thread goes through the executor instead (the handler path's posted
// completion), so other handlers of that thread get their turn, as tokio's
// cooperative budget makes a task yield after a bounded amount of work.

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/entry_op.hpp"
#include "tenferro/detail/async/noexcept_initiation.hpp"

namespace tenferro::detail {

/// Whether this thread's next inline fast-path entry may return its value to
/// its coroutine directly (true), or must go through the executor once
/// (false: the fairness budget of this thread ran out, and is renewed).
bool take_inline_return_budget() noexcept;
/// Gives this thread its whole budget again (tests that count inline returns
/// start from a known state with it).
void renew_inline_return_budget() noexcept;

/// Entries with this token may take awaitable_entry: `use_awaitable` on an
/// executor that can be an io_context's, a synchronous session body, and a
/// value that moves without throwing (as for the handler fast path).
template <class Token, class F, class Opener>
inline constexpr bool awaitable_entry_applies = false;

/// (TENFERRO_MEASURE_NO_AWAITABLE_PATH: off, in a build of the admission
/// benchmark that measures what this path buys, docs/benchmarks.md.)
template <class Executor, class F, class Opener>
inline constexpr bool awaitable_entry_applies<asio::use_awaitable_t<Executor>, F, Opener> =
#ifdef TENFERRO_MEASURE_NO_AWAITABLE_PATH
    false &&
#endif
    !body_traits<F, typename Opener::session_type>::is_async &&
    (std::is_same_v<Executor, asio::io_context::executor_type>
#if !defined(ASIO_NO_TYPEID) && !defined(BOOST_ASIO_NO_TYPEID)
     || std::is_same_v<Executor, asio::any_io_executor>
#endif
     )&&(std::is_void_v<typename body_traits<F, typename Opener::session_type>::value_type> ||
         std::is_nothrow_move_constructible_v<typename body_traits<F, typename Opener::session_type>::value_type>);

/// The entry's op for the handler `H`, as a one-parameter template
/// (op_reservation_t's `Block`).
template <entry_kind Kind, class Opener, class F>
struct entry_op_for {
    template <class H>
    using type = entry_op<H, std::decay_t<F>, Kind, Opener>;
};

/// What an entry with this token reserves before its initiation (S19,
/// op_reservation_t): the first block its initiation allocates
/// (entry_op::initiation_block_size) for the handler Asio makes, from the op
/// cache or from the token's bound allocator; nothing for a token whose
/// initiation may throw.
template <class Token, entry_kind Kind, class Opener, class F>
using entry_reservation_t =
    op_reservation_t<Token, entry_op_for<Kind, Opener, F>::template type,
                     entry_signature<typename body_traits<
                         F, std::conditional_t<Kind == entry_kind::session, typename Opener::session_type,
                                               execution_scope>>::value_type>>;

/// For a token of noexcept_initiation, the op block of the entry about to be
/// initiated, which its initiation object carries (entry_reservation_t;
/// empty for any other token). Throws std::bad_alloc (or what the token's
/// allocator throws) here, in the caller's coroutine, where the exception
/// reaches the co_await.
template <class Token, entry_kind Kind, class Opener, class F>
auto reserved_initiation_block(const Token& token) {
    return take_reservation<entry_reservation_t<Token, Kind, Opener, F>>(token);
}

/// The executor type of a use_awaitable_t token.
template <class Token>
struct awaitable_token_executor;
template <class Executor>
struct awaitable_token_executor<asio::use_awaitable_t<Executor>> {
    using type = Executor;
};

/// The general operation of an entry awaited with `use_awaitable_t<Executor>`
/// (awaitable_entry's way when it does not return in place); `TryInline`:
/// whether the initiation may still try the inline fast path.
template <bool TryInline, class Executor, class R, class Opener, class F>
asio::awaitable<session_result<R>, Executor> general_entry(std::shared_ptr<host_core> core, session_options options,
                                                           Opener opener, F&& fn) {
    using token = asio::use_awaitable_t<Executor>;
    return asio::async_initiate<const token&, entry_signature<R>>(
        initiate_entry<entry_kind::session, Opener, TryInline,
                       entry_reservation_t<token, entry_kind::session, Opener, F>>{
            std::move(core), options, std::move(opener),
            reserved_initiation_block<token, entry_kind::session, Opener, F>(token{})},
        token{}, std::forward<F>(fn));
}

// GCC 12 gives a coroutine's frame the linkage of the function template, and
// then warns that a frame holding a body type from an anonymous namespace
// (a test's lambda) "uses the anonymous namespace" — a false alarm for a type
// no other translation unit can name (GCC bug 107288-style, frames only).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsubobject-linkage"
#endif

/// One session entry awaited with `use_awaitable_t<Executor>`. `fn` holds the
/// body (engaged): it is destroyed once the permits are back, before the
/// value is returned, as the general path destroys its copy before the upcall.
template <class Executor, class Opener, class F>
asio::awaitable<session_result<typename inline_session<F, Opener>::R>, Executor> awaitable_entry(
    std::shared_ptr<host_core> core, session_options options, Opener opener, std::optional<F> fn) {
    using here = inline_session<F, Opener>;
    using R = typename here::R;
    bool queue_asked = false;
    {
        const Executor ex = co_await asio::this_coro::executor;
        const asio::io_context::executor_type* io = here::eligible(ex, *core, options, opener);
        if (io != nullptr && take_inline_return_budget()) {
            std::exception_ptr exception;
            std::optional<typename here::result_type> result =
                here::admit_and_run(*fn, *core, options, opener, *io, exception);
            if (result) {
                // The host is not touched again: the body's captures may
                // destroy it right now.
                fn.reset();
                if (exception) std::rethrow_exception(std::move(exception));
                co_return std::move(*result);
            }
            queue_asked = true;
        }
    }
    // Built by a plain function, not as temporaries of the co_await
    // expression: GCC 12 destroys some temporaries of a co_await
    // full-expression twice (here the initiation's shared_ptr, a
    // use-after-free of the host core).
    auto operation =
        queue_asked ? general_entry<false, Executor, R>(std::move(core), options, std::move(opener), std::move(*fn))
                    : general_entry<true, Executor, R>(std::move(core), options, std::move(opener), std::move(*fn));
    co_return co_await std::move(operation);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace tenferro::detail
