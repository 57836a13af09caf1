#include "tenferro/cpu_backend.hpp"

#include <utility>

namespace tenferro {

namespace {

// The host's share of `cpu_backend_options`. A conversion rather than
// inheritance: users build the options with designated initializers
// (`{.permits = 2, .buffer_pool_bytes = 0}`), which cannot name a base class's
// fields, so `cpu_backend_options` repeats the host's fields and this is the
// one place they meet. Both structs are split into structured bindings below:
// a field added to either one stops this compiling until it is mapped here.
host_options host_share(cpu_backend_options& options) {
    auto& [permits, max_waiters, cpus, observer, buffer_pool_bytes, runtime_cache_bytes, on_worker_start, groups,
           memory_budget, reject_late, timer] = options;
    (void)buffer_pool_bytes;    // the engine's, passed to its constructor
    (void)runtime_cache_bytes;  // likewise
    host_options host{.permits = permits,
                      .max_waiters = max_waiters,
                      .cpus = std::move(cpus),
                      .observer = std::move(observer),
                      .on_worker_start = std::move(on_worker_start),
                      .compute_executor = {},  // the CPU host runs its own workers
                      .groups = std::move(groups),
                      .memory_budget = memory_budget,
                      .reject_late = reject_late,
                      .timer = std::move(timer)};
    [[maybe_unused]] auto& [h_permits, h_max_waiters, h_cpus, h_observer, h_on_worker_start, h_compute_executor,
                            h_groups, h_memory_budget, h_reject_late, h_timer] = host;
    return host;
}

}  // namespace

cpu_backend::cpu_backend(cpu_backend_options options)
    : session_host(host_share(options), options.buffer_pool_bytes, options.runtime_cache_bytes) {
    backend().use_pool(core().pool());
}

// session_host's destructor: shutdown(), wait for running sessions, join the
// workers, then the backend (buffer pool, default cache).
cpu_backend::~cpu_backend() = default;

tenferro::buffer_pool_stats cpu_backend::buffer_pool_stats() const { return backend().buffers()->stats(); }

}  // namespace tenferro
