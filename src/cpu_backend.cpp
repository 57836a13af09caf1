#include "tenferro/cpu_backend.hpp"

#include <thread>

namespace tenferro {

namespace {
std::size_t resolve_permits(std::size_t requested) {
    if (requested != 0) return requested;
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : hw;
}
}  // namespace

cpu_backend::cpu_backend(cpu_backend_options options)
    : core_(std::make_shared<detail::host_core>("cpu", resolve_permits(options.permits), options.max_waiters,
                                                options.cpus, std::move(options.observer), options.buffer_pool_bytes,
                                                options.runtime_cache_bytes, std::move(options.on_worker_start))) {}

cpu_backend::~cpu_backend() {
    core_->shut_down();
    core_->stop_pool();
}

admission_stats cpu_backend::stats() const {
    const detail::permit_counters c = core_->queue().counters();
    return {c.permits, c.available, c.waiting, c.admitted, c.completed, c.rejected, c.cancelled};
}

tenferro::buffer_pool_stats cpu_backend::buffer_pool_stats() const { return core_->buffers()->stats(); }

bool cpu_backend::poisoned() const noexcept { return core_->queue().poisoned(); }

void cpu_backend::shutdown() { core_->shut_down(); }

}  // namespace tenferro
