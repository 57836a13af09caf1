#pragma once
// The shared state behind one host: its permit queue, compute pool and
// observer. Reference counted: every entry keeps the core alive until it has
// completed, so a cancellation that fires after the host is gone still finds a
// valid queue. The compute pool is stopped by the host's destructor, after the
// last running session released its permits.

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tenferro/admission_observer.hpp"
#include "tenferro/buffer_pool.hpp"
#include "tenferro/cpu_runtime_cache.hpp"
#include "tenferro/detail/compute_pool.hpp"
#include "tenferro/detail/permit_queue.hpp"

namespace tenferro::detail {

class entry_base;

class host_core {
public:
    host_core(std::string name, std::size_t permits, std::size_t max_waiters, std::span<const unsigned> cpus,
              std::shared_ptr<admission_observer> observer, std::size_t buffer_pool_bytes = 0,
              std::size_t runtime_cache_bytes = cpu_runtime_cache::default_capacity_bytes,
              std::function<void(std::size_t)> on_worker_start = {});

    std::string_view name() const noexcept { return name_; }
    permit_queue& queue() noexcept { return queue_; }
    compute_pool& pool() noexcept { return *pool_; }
    admission_observer* observer() const noexcept { return observer_.get(); }
    /// The pool that sessions allocate outputs and temporaries from.
    const std::shared_ptr<buffer_pool>& buffers() const noexcept { return buffers_; }
    /// The cache that sessions without a caller-owned cache share.
    cpu_runtime_cache& default_cache() noexcept { return default_cache_; }
    const cpu_runtime_cache& default_cache() const noexcept { return default_cache_; }

    /// Poisons the queue and rejects every queued entry with `resource_poisoned`.
    void poison(std::string_view why) noexcept;
    /// Stops admitting; queued entries complete with `executor`.
    void shut_down() noexcept;
    /// Waits for running sessions, then joins the compute workers.
    void stop_pool() noexcept;

    /// Starts every entry in `granted` (FIFO order), after handing off the
    /// ready chain `handoffs` that a release or cancel gave this thread.
    static void start_granted(waiter_list granted, permit_waiter* handoffs = nullptr) noexcept;

private:
    std::string name_;
    permit_queue queue_;
    std::unique_ptr<compute_pool> pool_;
    std::shared_ptr<admission_observer> observer_;
    std::shared_ptr<buffer_pool> buffers_;
    cpu_runtime_cache default_cache_;
};

}  // namespace tenferro::detail
