#pragma once
/// \file
/// `session_grant`: what admission hands a backend when it opens a session.

#include <cstddef>
#include <stop_token>

#include "tenferro/asio.hpp"

namespace tenferro {

/// The permits an admitted entry holds, and where its body runs. Passed to a
/// backend's `open_session` (see `session_host`).
struct session_grant {
    /// How many permits were granted together (`session_options::permits`;
    /// 1 for a session inside an execution scope, which reuses the scope's).
    std::size_t permits;
    /// The executor the body runs on: a compute worker of the host
    /// (`placement::compute`) or the caller's associated executor.
    asio::any_io_executor executor;
    /// The workspace granted with the permits (`session_options::bytes`; 0 for
    /// a session inside an execution scope, which declares none of its own).
    std::size_t bytes = 0;
    /// The tenant group it was admitted in (`session_options::group`).
    std::size_t group = 0;
    /// Stopped when the session is asked to stop (S20). A session that cannot
    /// be asked gets a token with no stop state (`stop_possible()` false).
    std::stop_token stop{};
};

}  // namespace tenferro
