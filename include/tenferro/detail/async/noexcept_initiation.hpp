#pragma once
// The completion tokens whose initiation Asio runs inside a noexcept function,
// and the handler Asio makes for each: what an operation's S19 reservation
// (the reserved_op_block its initiation carries) is computed from. Shared by the
// session entry (entry_awaitable.hpp), batcher::submit (batch_item_op.hpp) and
// the .npy operations (io.hpp).

#include <cstddef>
#include <tuple>
#include <type_traits>

#include <memory>

#include "tenferro/asio.hpp"
#include "tenferro/detail/async/op_allocator.hpp"

#if TENFERRO_ASIO_BOOST
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#if TENFERRO_ASIO_HAS_CONSIGN
#include <boost/asio/consign.hpp>
#endif
#if TENFERRO_ASIO_HAS_IMMEDIATE_EXECUTOR
#include <boost/asio/bind_immediate_executor.hpp>
#endif
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
#include <boost/asio/cancel_after.hpp>
#include <boost/asio/cancel_at.hpp>
#endif
#else
#include <asio/bind_allocator.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#if TENFERRO_ASIO_HAS_CONSIGN
#include <asio/consign.hpp>
#endif
#if TENFERRO_ASIO_HAS_IMMEDIATE_EXECUTOR
#include <asio/bind_immediate_executor.hpp>
#endif
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
#include <asio/cancel_after.hpp>
#include <asio/cancel_at.hpp>
#endif
#endif

namespace tenferro::detail {

/// Tokens whose initiation Asio runs inside a noexcept function: use_awaitable
/// (the initiation runs in the awaiting frame's await_suspend; from Asio 1.23
/// just after it, where a throw escapes to whoever resumed the coroutine), and
/// every adapter of it. Such an initiation must not throw (S19): the
/// operation's block is taken before it and carried (reserved_op_block), and must be
/// exactly the block it then allocates: the op for the handler Asio makes for
/// the token.
///
/// `handler<Signature>` is that handler for an operation completing with
/// `Signature`, or a model of it with the same size, alignment and associated
/// executor, allocator and cancellation slot. It is named from public
/// declarations, never from asio::detail:
///  - use_awaitable: `async_result<use_awaitable_t<Executor>, Sig>::handler_type`
///    (a member of that specialisation on every Asio from 1.22 to 1.38);
///  - the binders (`bind_executor`, `bind_cancellation_slot`,
///    `bind_immediate_executor`, `bind_allocator`): their public binder types
///    around the inner token's handler;
///  - the adapters whose wrapper Asio keeps in asio::detail (`as_tuple`,
///    `redirect_error`, `consign`, `cancel_after`, `cancel_at`): a layout model
///    below, on the inner token's handler for the signature the adapter
///    derives from ours as Asio documents it.
/// The initiation checks the model against the handler it is actually given,
/// at compile time (s19_reservation, in initiate_entry, initiate_submit and
/// initiate_prepared_npy), and tests/admission/op_reservation_test.cpp checks
/// the sizes asked of the op cache (docs/asio-detail-pins.md).
template <class Token>
struct noexcept_initiation : std::false_type {
    // (Named, never used: an adapter of another token derives from this.)
    template <class Signature>
    using handler = void;
};
template <class Executor>
struct noexcept_initiation<asio::use_awaitable_t<Executor>> : std::true_type {
    template <class Signature>
    using handler = typename asio::async_result<asio::use_awaitable_t<Executor>, Signature>::handler_type;
};

/// The layout of an adapter's handler that Asio keeps in asio::detail: the
/// handler it wraps (`Inner`) and what the adapter adds (`Before`, `After`),
/// with every associator forwarded to `Inner`, as Asio's adapters do. Never
/// built: only its size, alignment and associated types are used.
template <class Inner, class Before, class After>
struct handler_layout {
    [[no_unique_address]] Before before;
    Inner inner;
    [[no_unique_address]] After after;
};
struct nothing_before {};
struct nothing_after {};

/// as_tuple's signature: the arguments, decayed, as one tuple.
template <class Signature>
struct as_tuple_signature;
template <class... Args>
struct as_tuple_signature<void(Args...)> {
    using type = void(std::tuple<std::decay_t<Args>...>);
};

/// redirect_error's signature: a leading error code is taken out (into the
/// caller's variable); any other signature goes through unchanged (an entry's
/// first argument is its exception_ptr).
template <class Signature>
struct redirect_error_signature {
    using type = Signature;
};
template <class... Args>
struct redirect_error_signature<void(asio_error_code, Args...)> {
    using type = void(Args...);
};

#if TENFERRO_ASIO_TOKENS_EXPERIMENTAL
template <class Token>
struct noexcept_initiation<asio::experimental::as_tuple_t<Token>> : noexcept_initiation<Token> {
#else
template <class Token>
struct noexcept_initiation<asio::as_tuple_t<Token>> : noexcept_initiation<Token> {
#endif
    // as_tuple_handler<H>: { H handler_; }, laid out as H itself.
    template <class Signature>
    using handler = typename noexcept_initiation<Token>::template handler<typename as_tuple_signature<Signature>::type>;
};

template <class Token>
struct noexcept_initiation<asio::redirect_error_t<Token>> : noexcept_initiation<Token> {
    // redirect_error_handler<H>: { error_code& ec_; H handler_; }
    template <class Signature>
    using handler = handler_layout<
        typename noexcept_initiation<Token>::template handler<typename redirect_error_signature<Signature>::type>,
        asio_error_code*, nothing_after>;
};

template <class Token, class Executor>
struct noexcept_initiation<asio::executor_binder<Token, Executor>> : noexcept_initiation<Token> {
    template <class Signature>
    using handler = asio::executor_binder<typename noexcept_initiation<Token>::template handler<Signature>, Executor>;
};

template <class Token, class Slot>
struct noexcept_initiation<asio::cancellation_slot_binder<Token, Slot>> : noexcept_initiation<Token> {
    template <class Signature>
    using handler =
        asio::cancellation_slot_binder<typename noexcept_initiation<Token>::template handler<Signature>, Slot>;
};

template <class Token, class Allocator>
struct noexcept_initiation<asio::allocator_binder<Token, Allocator>> : noexcept_initiation<Token> {
    // (The op then comes from `Allocator`, not from the op cache: nothing
    // can be reserved in it; reserved_op_bytes says 0.)
    template <class Signature>
    using handler = asio::allocator_binder<typename noexcept_initiation<Token>::template handler<Signature>, Allocator>;
};

#if TENFERRO_ASIO_HAS_IMMEDIATE_EXECUTOR
template <class Token, class Executor>
struct noexcept_initiation<asio::immediate_executor_binder<Token, Executor>> : noexcept_initiation<Token> {
    template <class Signature>
    using handler =
        asio::immediate_executor_binder<typename noexcept_initiation<Token>::template handler<Signature>, Executor>;
};
#endif

#if TENFERRO_ASIO_HAS_CONSIGN
template <class Token, class... Values>
struct noexcept_initiation<asio::consign_t<Token, Values...>> : noexcept_initiation<Token> {
    // consign_handler<H, V...>: { H handler_; std::tuple<V...> values_; }
    template <class Signature>
    using handler = handler_layout<typename noexcept_initiation<Token>::template handler<Signature>, nothing_before,
                                   std::tuple<Values...>>;
};
#endif

#if TENFERRO_ASIO_HAS_CANCEL_AFTER
/// The layout of cancel_after's and cancel_at's handler: one pointer to the
/// timed-cancel operation Asio allocated before the inner initiation (which
/// holds the inner token's handler). Its cancellation slot is that
/// operation's own (a connected cancellation_slot); its other associators
/// forward to the handler it holds.
template <class Inner>
struct timed_cancel_layout {
    void* op;
    using cancellation_slot_type = asio::cancellation_slot;
    cancellation_slot_type get_cancellation_slot() const noexcept;
};
template <class Token, class Clock, class WaitTraits>
struct noexcept_initiation<asio::cancel_after_t<Token, Clock, WaitTraits>> : noexcept_initiation<Token> {
    template <class Signature>
    using handler = timed_cancel_layout<typename noexcept_initiation<Token>::template handler<Signature>>;
};
template <class Token, class Clock, class WaitTraits, class Executor>
struct noexcept_initiation<asio::cancel_after_timer<Token, Clock, WaitTraits, Executor>> : noexcept_initiation<Token> {
    template <class Signature>
    using handler = timed_cancel_layout<typename noexcept_initiation<Token>::template handler<Signature>>;
};
template <class Token, class Clock, class WaitTraits>
struct noexcept_initiation<asio::cancel_at_t<Token, Clock, WaitTraits>> : noexcept_initiation<Token> {
    template <class Signature>
    using handler = timed_cancel_layout<typename noexcept_initiation<Token>::template handler<Signature>>;
};
template <class Token, class Clock, class WaitTraits, class Executor>
struct noexcept_initiation<asio::cancel_at_timer<Token, Clock, WaitTraits, Executor>> : noexcept_initiation<Token> {
    template <class Signature>
    using handler = timed_cancel_layout<typename noexcept_initiation<Token>::template handler<Signature>>;
};
#endif

/// Tokens whose handler should rather complete inside the initiating function
/// than be destroyed uncalled when the op's block cannot be had: use_future.
/// Its handler's promise, destroyed unsatisfied, stores a broken_promise
/// error, whose message libstdc++ allocates inside a noexcept destructor (the
/// process ends when memory is out). Completed with the exception_ptr of the
/// bad_alloc in flight (no allocation: the exception runtime already holds
/// it), the promise is satisfied and the future reports the failure (S19).
/// use_future's executor runs handlers inline anyway, so nobody can observe
/// that the completion ran inside the initiating function.
template <class Token>
struct fails_inline : std::false_type {};
template <class Allocator>
struct fails_inline<asio::use_future_t<Allocator>> : std::true_type {};
template <class Token>
inline constexpr bool fails_inline_v = fails_inline<std::decay_t<Token>>::value;

}  // namespace tenferro::detail

// The models forward every associator to the handler they wrap, as Asio's
// wrappers do (timed_cancel_layout's own cancellation slot, a member type,
// takes precedence). Declared, never defined: the models are never built.
#if TENFERRO_ASIO_BOOST
namespace boost::asio {
#else
namespace asio {
#endif
template <template <class, class> class Associator, class Inner, class Before, class After, class Default>
struct associator<Associator, ::tenferro::detail::handler_layout<Inner, Before, After>, Default>
    : Associator<Inner, Default> {
    static typename Associator<Inner, Default>::type get(
        const ::tenferro::detail::handler_layout<Inner, Before, After>&, const Default& = Default()) noexcept;
};
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
template <template <class, class> class Associator, class Inner, class Default>
struct associator<Associator, ::tenferro::detail::timed_cancel_layout<Inner>, Default> : Associator<Inner, Default> {
    static typename Associator<Inner, Default>::type get(const ::tenferro::detail::timed_cancel_layout<Inner>&,
                                                         const Default& = Default()) noexcept;
};
#endif
}  // namespace asio (or boost::asio)

namespace tenferro::detail {

/// Whether an op for `Handler` is allocated from this thread's op cache (the
/// handler names no allocator of its own), where a reservation serves it.
template <class Handler>
inline constexpr bool allocates_from_op_cache =
    std::is_same_v<asio::associated_allocator_t<Handler, op_allocator<void>>, op_allocator<void>>;

/// The bytes to reserve before initiating with `Token` an operation whose op,
/// for the handler `H`, is `Op<H>`, completing with `Signature` (0 for a token
/// of no noexcept_initiation, or whose handler names its own allocator).
template <class Token, template <class> class Op, class Signature>
constexpr std::size_t reserved_op_bytes() noexcept {
    using token = std::decay_t<Token>;
    if constexpr (noexcept_initiation<token>::value) {
        using handler = typename noexcept_initiation<token>::template handler<Signature>;
        if constexpr (allocates_from_op_cache<handler>)
            return sizeof(Op<handler>);
        else
            return 0;
    } else {
        return 0;
    }
}

}  // namespace tenferro::detail
