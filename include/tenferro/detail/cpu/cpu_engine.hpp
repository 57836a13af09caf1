#pragma once
// The CPU backend as a `session_backend` (session_host.hpp): what a CPU
// session is — the compute pool's parallel-for, the buffer pool, a runtime
// cache — and nothing of admission. `cpu_backend` is
// `session_host<cpu_engine>` plus the CPU's own entry points (cached
// sessions, the default cache, buffer-pool stats).

#include <cstddef>
#include <memory>
#include <string_view>

#include "tenferro/backend_session.hpp"
#include "tenferro/buffer_pool.hpp"
#include "tenferro/cpu_runtime_cache.hpp"
#include "tenferro/detail/admission/compute_pool.hpp"
#include "tenferro/detail/cpu/cpu_session.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_grant.hpp"

namespace tenferro::detail {

class cpu_engine {
public:
    using session_type = backend_session;

    cpu_engine(std::size_t buffer_pool_bytes, std::size_t runtime_cache_bytes);

    std::string_view name() const noexcept { return "cpu"; }

    /// The host's compute workers, which run the sessions' parallel loops;
    /// set by cpu_backend once its host exists, before any entry.
    void use_pool(compute_pool& pool) noexcept { pool_ = &pool; }

    /// A session sharing the backend's own runtime cache.
    cpu_session open_session(const session_grant& grant) const noexcept {
        return cpu_session(*pool_, grant.permits, buffers_, default_cache_, grant.bytes, grant.stop);
    }
    /// A session of `with_backend_session_cached`: claims `cache` for the
    /// session's lifetime, or rejects with `contended` when a running session
    /// holds it (S9).
    session_result<cpu_session> open_session(const session_grant& grant, cpu_runtime_cache& cache) const;

    const std::shared_ptr<buffer_pool>& buffers() const noexcept { return buffers_; }
    cpu_runtime_cache& default_cache() const noexcept { return default_cache_; }

private:
    compute_pool* pool_ = nullptr;
    std::shared_ptr<buffer_pool> buffers_;
    mutable cpu_runtime_cache default_cache_;  // internally synchronised
};

/// Opens `with_backend_session_cached`'s sessions.
struct cached_cpu_opener {
    using session_type = backend_session;
    const cpu_engine* engine;
    cpu_runtime_cache* cache;
    session_result<cpu_session> operator()(const session_grant& g) const { return engine->open_session(g, *cache); }
    /// Checked at initiation, before the entry queues: a cache that a running
    /// session holds now rejects at once (S9), without waiting for permits.
    const char* busy_before_admission() const noexcept;
};

}  // namespace tenferro::detail
