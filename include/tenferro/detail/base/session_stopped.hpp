#pragma once
// `session_stopped`, the exception of S20, in the base layer: the operations
// and the kernels throw it, and may not depend on admission. The contract's
// header for it, <tenferro/session_entry_error.hpp>, includes this one.

#include <exception>

namespace tenferro {

/// What an operation of a session throws when it finds the session asked to
/// stop (S20): `backend_session::throw_if_stop_requested()`, and every
/// operation at its start and between chunks of its work.
class session_stopped : public std::exception {
public:
    const char* what() const noexcept override { return "tenferro: session stopped"; }
};

}  // namespace tenferro
