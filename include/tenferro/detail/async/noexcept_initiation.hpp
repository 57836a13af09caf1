#pragma once
// The completion tokens whose initiation Asio runs inside a noexcept function,
// and the handler Asio makes for each: what an operation's S19 reservation
// (reserve_op_memory before the initiation) is computed from. Shared by the
// session entry (entry_awaitable.hpp) and batcher::submit (batch_item_op.hpp).

#include <cstddef>
#include <tuple>
#include <type_traits>

#include "tenferro/asio.hpp"

namespace tenferro::detail {

/// Tokens whose initiation Asio runs inside a noexcept function: use_awaitable
/// (the initiation runs in the awaiting frame's await_suspend), and the
/// adapters of it that keep that initiation. Such an initiation must not throw
/// (S19): the entry's block is reserved before it (reserve_for_initiation),
/// and must be exactly the block it then allocates: the op of an entry whose
/// handler is the one Asio makes for the token.
///
/// That handler is named from public declarations, never from asio::detail:
/// `handler<Sig>` is `async_result<use_awaitable_t<Executor>, Sig>::handler_type`
/// (a member of that specialisation on every Asio from 1.22 to 1.38) for the
/// signature the innermost token completes with, which each adapter derives
/// from ours as Asio documents it. An adapter's handler wraps that one in a
/// type Asio keeps in asio::detail: `wrapper_bytes` is what the wrappers add,
/// modelled on their layout. The initiation checks the model against the
/// handler it is actually given, at compile time (the initiations'
/// `Reserved`: initiate_entry, initiate_submit), and
/// tests/admission/op_reservation_test.cpp checks the sizes asked of the op
/// cache (docs/asio-detail-pins.md).
template <class Token>
struct noexcept_initiation : std::false_type {};
template <class Executor>
struct noexcept_initiation<asio::use_awaitable_t<Executor>> : std::true_type {
    template <class Signature>
    using handler = typename asio::async_result<asio::use_awaitable_t<Executor>, Signature>::handler_type;
    static constexpr std::size_t wrapper_bytes = 0;
};

/// as_tuple's signature: the arguments, decayed, as one tuple.
template <class Signature>
struct as_tuple_signature;
template <class... Args>
struct as_tuple_signature<void(Args...)> {
    using type = void(std::tuple<std::decay_t<Args>...>);
};

#if TENFERRO_ASIO_TOKENS_EXPERIMENTAL
template <class Token>
struct noexcept_initiation<asio::experimental::as_tuple_t<Token>> : noexcept_initiation<Token> {
#else
template <class Token>
struct noexcept_initiation<asio::as_tuple_t<Token>> : noexcept_initiation<Token> {
#endif
    template <class Signature>
    using handler = typename noexcept_initiation<Token>::template handler<typename as_tuple_signature<Signature>::type>;
    // as_tuple_handler<H>: { H handler_; }
    static constexpr std::size_t wrapper_bytes = noexcept_initiation<Token>::wrapper_bytes;
};
template <class Token>
struct noexcept_initiation<asio::redirect_error_t<Token>> : noexcept_initiation<Token> {
    // An entry's signature has no error_code to redirect (its first argument
    // is the exception_ptr): it goes through unchanged.
    template <class Signature>
    using handler = typename noexcept_initiation<Token>::template handler<Signature>;
    // redirect_error_handler<H>: { error_code& ec_; H handler_; }
    static constexpr std::size_t wrapper_bytes = noexcept_initiation<Token>::wrapper_bytes + sizeof(asio_error_code*);
};

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

/// The bytes to reserve before initiating with `Token` an operation whose op,
/// for the handler `H`, is `Op<H>`, completing with `Signature` (0 for a token
/// of no noexcept_initiation).
template <class Token, template <class> class Op, class Signature>
constexpr std::size_t reserved_op_bytes() noexcept {
    using token = std::decay_t<Token>;
    if constexpr (noexcept_initiation<token>::value) {
        using handler = typename noexcept_initiation<token>::template handler<Signature>;
        return sizeof(Op<handler>) + noexcept_initiation<token>::wrapper_bytes;
    } else {
        return 0;
    }
}

}  // namespace tenferro::detail
