#pragma once
/// \file
/// `backend_session`: what a session body receives. Every operation is a
/// virtual member, so one body can run against any backend.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tenferro/detail/function_ref.hpp"

namespace tenferro {

/// A non-owning, two-word reference to a callable.
using detail::function_ref;

/// The session a host hands to a session body.
///
/// Users never construct one: `host.with_backend_session(f)` passes a
/// `backend_session&` to `f`, valid only while `f` runs (for an asynchronous
/// body, until its awaitable completes). A session is used by one thread at a
/// time; the parallelism it holds is exercised through `parallel_for`.
class backend_session {
public:
    backend_session(const backend_session&) = delete;
    backend_session& operator=(const backend_session&) = delete;

    /// The backend's name, e.g. `"cpu"`.
    virtual std::string_view backend() const noexcept = 0;

    /// How many permits this session holds; its kernels may run on up to this
    /// many threads at once.
    virtual std::size_t parallelism() const noexcept = 0;

    /// Splits `[0, count)` into at most `parallelism()` contiguous ranges of at
    /// least `grain` elements and calls `body(begin, end)` for each, on the
    /// calling thread and on up to `parallelism() - 1` workers whose permits
    /// this session holds (so it never waits for a busy worker). The ranges
    /// depend only on `count`, `grain` and `parallelism()`. Returns when all
    /// ranges are done; the first exception `body` throws is rethrown here
    /// (the remaining ranges are skipped).
    virtual void parallel_for(std::int64_t count, std::int64_t grain,
                              function_ref<void(std::int64_t begin, std::int64_t end)> body) = 0;

protected:
    backend_session() = default;
    virtual ~backend_session() = default;
};

}  // namespace tenferro
