#include "tenferro/cpu_backend.hpp"

#include <thread>

namespace tenferro {

cpu_backend::cpu_backend(cpu_backend_options options)
    : host_(host_options{options.permits, options.max_waiters, std::move(options.cpus), std::move(options.observer),
                         std::move(options.on_worker_start)},
            options.buffer_pool_bytes, options.runtime_cache_bytes) {
    host_.backend().use_pool(detail::host_access::core(host_).pool());
}

// session_host's destructor: shutdown(), wait for running sessions, join the
// workers, then the backend (buffer pool, default cache).
cpu_backend::~cpu_backend() = default;

admission_stats cpu_backend::stats() const { return host_.stats(); }

tenferro::buffer_pool_stats cpu_backend::buffer_pool_stats() const { return host_.backend().buffers()->stats(); }

bool cpu_backend::poisoned() const noexcept { return host_.poisoned(); }

void cpu_backend::shutdown() { host_.shutdown(); }

}  // namespace tenferro
