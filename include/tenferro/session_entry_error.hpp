#pragma once
/// \file
/// Typed admission failures of a session entry and the `session_result<T>` every
/// entry completes with.
///
/// An entry can fail *before* the session body runs (it was re-entered, contended,
/// mismatched, poisoned, shut down or cancelled). Those failures are values of
/// `session_entry_error`, carried in the error half of `session_result<T>`; the
/// body's own value — even its own `tl::expected` or `std::error_code` — always
/// travels in the value half, so the two are never confused.

#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <tl/expected.hpp>

#include "tenferro/detail/base/session_stopped.hpp"  // session_stopped (S20)

namespace tenferro {

namespace detail {
class entry_base;
}

/// Why an entry completed without a value. Every code but two is decided
/// before the body starts (rule S3); `cancelled` and `deadline_exceeded` also
/// end an entry whose body was stopped while running (S20), and its detail
/// then says so.
enum class session_entry_errc : int {
    reentered = 1,         ///< a nested entry inside a running session (any backend)
    contended,             ///< a busy resource that admission cannot (or was told not to) wait for
    incompatible_context,  ///< mismatched execution scope / executor / cache declaration
    resource_poisoned,     ///< admission state poisoned by an earlier failure inside admission
    executor,              ///< the compute executor cannot be entered (stopped, shut down, lost work)
    cancelled,             ///< cancelled while waiting (the body did not run), or stopped while running (S20)
    deadline_exceeded,  ///< not admitted by `session_options::deadline` (or predicted not to be), or stopped at it
                        ///< (S20)
};

/// The category of `session_entry_errc`; `name()` is `"tenferro.session_entry"`.
const std::error_category& session_entry_category() noexcept;

/// Wraps `e` in a `std::error_code` of `session_entry_category()`.
std::error_code make_error_code(session_entry_errc e) noexcept;

/// An admission failure: the code, the backend that rejected the entry, and what
/// exactly was busy, mismatched or poisoned.
///
/// Two words wide (the code, and a pointer to an immutable, reference-counted
/// record of the two texts), because every `session_result<T>` carries room for
/// one: in the operation state of each entry and in the frame of each coroutine
/// awaiting one, waiting or not. Copies share the record (copying never
/// allocates and never throws); building one allocates it once. Should that
/// allocation fail, the error keeps its code and reads empty texts.
class session_entry_error {
public:
    /// \param code    why the entry was rejected
    /// \param backend the rejecting backend's name, e.g. `"cpu"` (copied)
    /// \param detail  free text naming the busy / mismatched resource
    session_entry_error(session_entry_errc code, std::string_view backend, std::string detail = {}) noexcept;
    session_entry_error(const session_entry_error& other) noexcept;
    session_entry_error(session_entry_error&& other) noexcept
        : code_(other.code_), texts_(std::exchange(other.texts_, nullptr)) {}
    session_entry_error& operator=(const session_entry_error& other) noexcept;
    session_entry_error& operator=(session_entry_error&& other) noexcept;
    ~session_entry_error();

    session_entry_errc code() const noexcept { return code_; }
    /// The backend's name; empty in a moved-from error (or one built out of memory).
    std::string_view backend() const noexcept;
    std::string_view detail() const noexcept;
    /// `make_error_code(code())`.
    std::error_code error_code() const noexcept { return make_error_code(code_); }
    /// `"<backend>: session entry rejected because <reason>[: <detail>]"`.
    std::string message() const;

private:
    struct texts;  // the backend's name, the detail, a reference count
    // A parked entry keeps its failure as a code byte and the texts' pointer
    // (detail/admission/entry_base.hpp), and rebuilds the error from them.
    // (The tag keeps `session_entry_error(code, {})` meaning an empty backend name.)
    friend class detail::entry_base;
    struct adopt_texts {};
    session_entry_error(adopt_texts, session_entry_errc code, texts* adopted) noexcept : code_(code), texts_(adopted) {}

    session_entry_errc code_;
    texts* texts_;
};

/// True when `e.code() == c`: `if (r.error() == session_entry_errc::contended)`.
inline bool operator==(const session_entry_error& e, session_entry_errc c) noexcept { return e.code() == c; }

/// What every session entry completes with: the body's value (`T` may be `void`),
/// or the admission failure that kept the body from running.
template <class T>
using session_result = tl::expected<T, session_entry_error>;

}  // namespace tenferro

template <>
struct std::is_error_code_enum<tenferro::session_entry_errc> : std::true_type {};
