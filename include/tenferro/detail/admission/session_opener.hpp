#pragma once
// Openers: how an entry opens its backend's session for a grant, what
// `open_session` returned (a session, or a session_result of one), and the
// state that keeps an asynchronous body's session alive across suspensions.

#include <new>
#include <type_traits>

#include "tenferro/detail/admission/session_context.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_grant.hpp"

namespace tenferro::detail {

/// The opener of scope entries, which open no session themselves.
struct no_opener {
    struct no_session {};
    using session_type = no_session;
};

template <class T>
struct is_session_result : std::false_type {};
template <class T>
struct is_session_result<tl::expected<T, session_entry_error>> : std::true_type {};

/// The backend's rejection in what `open_session` returned, or null.
template <class Opened>
const session_entry_error* open_error(const Opened& opened) noexcept {
    if constexpr (is_session_result<Opened>::value)
        return opened.has_value() ? nullptr : &opened.error();
    else
        return nullptr;
}

/// The session in what `open_session` returned (which did not reject).
template <class Session, class Opened>
Session& opened_session(Opened& opened) noexcept {
    if constexpr (is_session_result<Opened>::value)
        return *opened;
    else
        return opened;
}

/// What an asynchronous body needs to outlive its suspensions: its context
/// (which its session_executor carries) and the backend's session, built in
/// place from open_session's result (sessions need not be movable) and
/// destroyed when the body finishes (close), before the permits return.
template <class Opened>
struct async_session_state final : session_context {
    template <class Opener>
    async_session_state(const void* host, const Opener& open, const session_grant& grant)
        : session_context(context_kind::session, host) {
        ::new (static_cast<void*>(storage_)) Opened(open(grant));
        alive_ = true;
    }
    ~async_session_state() override { close(); }
    void close() noexcept override {
        if (alive_) {
            alive_ = false;
            opened().~Opened();
        }
    }
    Opened& opened() noexcept { return *std::launder(reinterpret_cast<Opened*>(storage_)); }

private:
    alignas(Opened) unsigned char storage_[sizeof(Opened)];
    bool alive_ = false;
};

}  // namespace tenferro::detail
