#pragma once
// Per-operation cancellation through the handler's cancellation slot, as every
// operation of the library supports it. An operation connects its cancellation
// handler to the slot once it is built and before anyone else can see it, and
// the completion routine clears the slot (completion.hpp); the slot itself is
// not kept: the handler hands out the same slot again.

#include <functional>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

namespace tenferro::detail {

/// The cancellation filter: true for the cancellation types an operation
/// honours before its work has started: terminal, partial and total alike
/// (nothing has happened that withdrawing it could leave half-done).
constexpr bool cancel_requested(asio::cancellation_type_t type) noexcept {
    constexpr auto any =
        asio::cancellation_type::terminal | asio::cancellation_type::partial | asio::cancellation_type::total;
    return (type & any) != asio::cancellation_type::none;
}

/// The handler an operation installs in the slot: forwards every requested
/// cancellation to `Cancel(target)` (a member function of the target, or a
/// function taking it), or to `Cancel(target, type)` where that is how
/// `Cancel` is called (an entry, whose answer depends on the type once its
/// body runs, S20). `Target` is the operation's pointer, or a smart pointer.
template <class Target, auto Cancel>
class cancel_forwarder {
public:
    // (A constructor, not an aggregate: clang 14 has no parenthesised
    // aggregate initialisation, which the slot's emplace uses.)
    explicit cancel_forwarder(Target target) noexcept : target_(std::move(target)) {}
    void operator()(asio::cancellation_type_t type) const {
        if (!cancel_requested(type)) return;
        if constexpr (std::is_invocable_v<decltype(Cancel), const Target&, asio::cancellation_type_t>)
            std::invoke(Cancel, target_, type);
        else
            std::invoke(Cancel, target_);
    }

private:
    Target target_;
};

/// Connects `Cancel(target)` to `slot` (a handler's associated slot), if it is
/// connected. Throws what installing the handler throws (the slot allocates
/// its handler's storage); then nothing was installed.
template <auto Cancel, class Slot, class Target>
void connect_cancellation(Slot slot, Target target) {
    if (slot.is_connected()) slot.template emplace<cancel_forwarder<Target, Cancel>>(std::move(target));
}

/// Clears `handler`'s cancellation slot (the completion routine).
template <class Handler>
void clear_cancellation(const Handler& handler) noexcept {
    if (auto slot = asio::get_associated_cancellation_slot(handler); slot.is_connected()) slot.clear();
}

}  // namespace tenferro::detail
