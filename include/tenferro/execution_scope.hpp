#pragma once
/// \file
/// `execution_scope`: one admission held across a sequence of sessions.

#include <cstddef>
#include <string_view>

namespace tenferro {

/// Handed to the body of `host.with_execution_scope(body)`.
///
/// The scope holds one permit of its host for the whole body. Sessions of the
/// same host entered inside the body (anywhere in its coroutine chain) reuse
/// that permit without queueing; one runs at a time (a second concurrent one
/// completes with `contended`). Sessions or scopes of another host complete
/// with `incompatible_context`; a nested scope of the same host with
/// `reentered`. The reference is valid until the body's awaitable completes.
class execution_scope {
public:
    explicit execution_scope(std::string_view backend) noexcept : backend_(backend) {}
    execution_scope(const execution_scope&) = delete;
    execution_scope& operator=(const execution_scope&) = delete;

    /// The host's backend name, e.g. `"cpu"`.
    std::string_view backend() const noexcept { return backend_; }
    /// Permits the scope holds (always 1).
    static constexpr std::size_t permits() noexcept { return 1; }

private:
    std::string_view backend_;
};

}  // namespace tenferro
