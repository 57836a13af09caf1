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
    // (The op then comes from `Allocator`, not from the op cache: the
    // reservation takes its block from it, op_reservation.)
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

/// The allocator a token binds (bind_allocator), where the reservation takes
/// the op's block from it before the initiation (reserved_own_block):
/// `reachable` when the token is an allocator_binder, or wraps one under
/// adapters that expose the token they wrap: the binders (`get()`) and
/// `as_tuple`, `redirect_error`, `cancel_after`, `cancel_at` (their public
/// `token_`). `consign` keeps its token private: an allocator bound inside it
/// is not reached, and is asked for the op inside the initiation, with a
/// block of the op cache reserved for when it throws there
/// (reserved_fallback_block; docs/contract.md, S19).
template <class Token>
struct bound_allocator : std::false_type {};
template <class Token, class Allocator>
struct bound_allocator<asio::allocator_binder<Token, Allocator>> : std::true_type {
    static Allocator get(const asio::allocator_binder<Token, Allocator>& t) { return t.get_allocator(); }
};
/// An adapter whose wrapped token is `t.get()` (the binders).
template <class Token, class Inner>
struct bound_allocator_via_get : bound_allocator<Inner> {
    static auto get(const Token& t) { return bound_allocator<Inner>::get(t.get()); }
};
/// An adapter whose wrapped token is its public member `t.token_`.
template <class Token, class Inner>
struct bound_allocator_via_member : bound_allocator<Inner> {
    static auto get(const Token& t) { return bound_allocator<Inner>::get(t.token_); }
};
template <class Token, class Executor>
struct bound_allocator<asio::executor_binder<Token, Executor>>
    : bound_allocator_via_get<asio::executor_binder<Token, Executor>, Token> {};
template <class Token, class Slot>
struct bound_allocator<asio::cancellation_slot_binder<Token, Slot>>
    : bound_allocator_via_get<asio::cancellation_slot_binder<Token, Slot>, Token> {};
#if TENFERRO_ASIO_HAS_IMMEDIATE_EXECUTOR
template <class Token, class Executor>
struct bound_allocator<asio::immediate_executor_binder<Token, Executor>>
    : bound_allocator_via_get<asio::immediate_executor_binder<Token, Executor>, Token> {};
#endif
#if TENFERRO_ASIO_TOKENS_EXPERIMENTAL
template <class Token>
struct bound_allocator<asio::experimental::as_tuple_t<Token>>
    : bound_allocator_via_member<asio::experimental::as_tuple_t<Token>, Token> {};
#else
template <class Token>
struct bound_allocator<asio::as_tuple_t<Token>> : bound_allocator_via_member<asio::as_tuple_t<Token>, Token> {};
#endif
template <class Token>
struct bound_allocator<asio::redirect_error_t<Token>>
    : bound_allocator_via_member<asio::redirect_error_t<Token>, Token> {};
#if TENFERRO_ASIO_HAS_CANCEL_AFTER
template <class Token, class Clock, class WaitTraits>
struct bound_allocator<asio::cancel_after_t<Token, Clock, WaitTraits>>
    : bound_allocator_via_member<asio::cancel_after_t<Token, Clock, WaitTraits>, Token> {};
template <class Token, class Clock, class WaitTraits, class Executor>
struct bound_allocator<asio::cancel_after_timer<Token, Clock, WaitTraits, Executor>>
    : bound_allocator_via_member<asio::cancel_after_timer<Token, Clock, WaitTraits, Executor>, Token> {};
template <class Token, class Clock, class WaitTraits>
struct bound_allocator<asio::cancel_at_t<Token, Clock, WaitTraits>>
    : bound_allocator_via_member<asio::cancel_at_t<Token, Clock, WaitTraits>, Token> {};
template <class Token, class Clock, class WaitTraits, class Executor>
struct bound_allocator<asio::cancel_at_timer<Token, Clock, WaitTraits, Executor>>
    : bound_allocator_via_member<asio::cancel_at_timer<Token, Clock, WaitTraits, Executor>, Token> {};
#endif

/// The size of the first block an initiation allocates for an op `T`: its
/// initiation_block_size() where it has one (an entry, whose inline fast path
/// takes a block large enough for the op too), else the op's own size.
template <class T>
constexpr std::size_t first_block_size() noexcept {
    if constexpr (requires { T::initiation_block_size(); })
        return T::initiation_block_size();
    else
        return sizeof(T);
}

/// The S19 reservation of an operation initiated with `Token`, whose first
/// block, for the handler `H` Asio makes, is a `Block<H>`, from the op cache
/// or from `H`'s own allocator:
///  - nothing (reserved_op_block<0>) for a token of no noexcept_initiation,
///    whose initiation may throw;
///  - reserved_op_block of the first block's size (`Block<H>`'s, or its
///    initiation_block_size() where it has one: an entry's inline fast path
///    takes a larger block) when the handler names no allocator;
///  - reserved_own_block from the token's bound allocator when it names one
///    (bind_allocator), or, where that allocator is not reachable
///    (bound_allocator: under `consign`), reserved_fallback_block: a block
///    of the same size from the op cache, which the op takes only if the
///    allocator throws inside the initiation.
/// take_reservation<R>(token) takes it.
template <class Token, template <class> class Block, class Signature,
          bool = noexcept_initiation<std::decay_t<Token>>::value>
struct op_reservation {
    using type = reserved_op_block<0>;
};
template <class Token, template <class> class Block, class Signature>
struct op_reservation<Token, Block, Signature, true> {
    using handler = typename noexcept_initiation<std::decay_t<Token>>::template handler<Signature>;
    using type = std::conditional_t<
        allocates_from_op_cache<handler>, reserved_op_block<first_block_size<Block<handler>>()>,
        std::conditional_t<
            bound_allocator<std::decay_t<Token>>::value,
            reserved_own_block<asio::associated_allocator_t<handler, op_allocator<void>>, own_block_t<Block<handler>>>,
            reserved_fallback_block<asio::associated_allocator_t<handler, op_allocator<void>>,
                                    own_block_t<Block<handler>>>>>;
};
template <class Token, template <class> class Block, class Signature>
using op_reservation_t = typename op_reservation<Token, Block, Signature>::type;

/// Takes the reservation `Reservation` (op_reservation_t) for an operation
/// initiated with `token`: throws std::bad_alloc (or what the token's
/// allocator throws) here, where the caller may still throw.
template <class Reservation, class Token>
Reservation take_reservation(const Token& token) {
    if constexpr (Reservation::from_own_allocator)
        return Reservation::take(bound_allocator<std::decay_t<Token>>::get(token));
    else
        return Reservation::take();
}

}  // namespace tenferro::detail
