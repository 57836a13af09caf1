#pragma once
/// \file
/// `cpu_backend`: the CPU host. Admits session entries through a strict FIFO
/// queue of permits and runs their bodies on an owned pool of compute workers.
/// It is `session_host` (session_host.hpp) over the CPU backend
/// (`detail::cpu_engine`): the admission rules and every entry point are the
/// template's; what this header adds is the CPU's own — its options, the
/// runtime caches (cached entries, `default_cache()`) and the buffer pool.

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenferro/asio.hpp"

#include "tenferro/admission_observer.hpp"
#include "tenferro/admission_timer.hpp"
#include "tenferro/backend_session.hpp"
#include "tenferro/backend_session_host.hpp"
#include "tenferro/buffer_pool.hpp"
#include "tenferro/cpu_runtime_cache.hpp"
#include "tenferro/detail/cpu/cpu_engine.hpp"
#include "tenferro/session_host.hpp"

namespace tenferro {

/// Construction options of `cpu_backend`: `host_options` less
/// `compute_executor` (the CPU host always runs its own workers), plus the
/// byte caps of the buffer pool and the default runtime cache. Its own
/// aggregate rather than one derived from `host_options`, so that designated
/// initializers name every field: `cpu_backend cpu({.permits = 4, .buffer_pool_bytes = 0});`.
struct cpu_backend_options {
    /// Permits, and compute workers; 0 means `std::thread::hardware_concurrency()`.
    std::size_t permits = 0;
    /// Queue bound: a `fifo` entry arriving when this many wait completes with
    /// `contended` (load shedding).
    std::size_t max_waiters = std::numeric_limits<std::size_t>::max();
    /// Pins the compute workers round-robin to these CPUs. A CPU this process
    /// may not run on makes the constructor throw `std::system_error`.
    std::vector<unsigned> cpus = {};
    /// Optional metrics hook; see `admission_observer`.
    std::shared_ptr<admission_observer> observer = nullptr;
    /// Retention cap of the backend's buffer pool: at most this many bytes of
    /// freed session outputs and temporaries are kept for reuse (0: none).
    std::size_t buffer_pool_bytes = std::size_t{64} << 20;
    /// Byte cap of the backend's own runtime cache (`default_cache()`), which
    /// the contractions of plain `with_backend_session` entries share.
    std::size_t runtime_cache_bytes = cpu_runtime_cache::default_capacity_bytes;
    /// Optional start-up hook of the compute workers, called once by each
    /// worker on its own thread before it takes work; exactly as
    /// `host_options::on_worker_start`.
    ///
    /// \code
    /// tenferro::cpu_backend cpu({.on_worker_start = [](std::size_t) { setpriority(PRIO_PROCESS, gettid(), 19); }});
    /// \endcode
    std::function<void(std::size_t worker_index)> on_worker_start = nullptr;
    /// Tenant groups, byte budget and early rejection: exactly as
    /// `host_options::groups`, `memory_budget` and `reject_late` (section 8).
    std::vector<group_options> groups = {};
    std::size_t memory_budget = 0;
    bool reject_late = false;
    /// The deadlines' clock and wake-ups: exactly as `host_options::timer`.
    std::shared_ptr<admission_timer> timer = nullptr;
};

/// The CPU backend host. Models `backend_session_host`.
///
/// A `session_host<detail::cpu_engine>`: `with_backend_session`,
/// `with_execution_scope`, `name()` (`"cpu"`), `permits()` (= compute
/// workers), `stats()`, `poisoned()` and `shutdown()` are the host's, with
/// the host's documentation; bodies receive a `backend_session&`
/// (`session_type`). Added here: entries whose contractions use a runtime
/// cache of the caller's (`with_backend_session_cached`), the backend's own
/// cache (`default_cache()`) and the buffer pool's counters.
///
/// Thread-safety: every member may be called concurrently from any thread.
/// Destruction waits for running sessions: do not destroy the backend from a
/// thread that a running session (or a granted `placement::caller` body)
/// needs in order to finish.
class cpu_backend : public session_host<detail::cpu_engine> {
public:
    using runtime_cache = cpu_runtime_cache;

    /// Starts `options.permits` compute workers (optionally pinned), each of
    /// which runs `options.on_worker_start` (if set) before taking work.
    /// \throws std::system_error for an invalid CPU in `options.cpus`; the
    /// first exception thrown by `options.on_worker_start`.
    explicit cpu_backend(cpu_backend_options options = {});
    /// `shutdown()`, then waits for running sessions, then joins the workers;
    /// the buffer pool and the default cache go last.
    ~cpu_backend();

    /// As `with_backend_session`, but contractions inside consult and fill
    /// `cache`, which must outlive the operation. A cache that a running
    /// session holds makes the entry complete with `contended`, before `f` runs.
    template <class F, class CompletionToken = asio::use_awaitable_t<>>
        requires(!std::is_same_v<std::remove_cvref_t<F>, session_options>)
    auto with_backend_session_cached(runtime_cache& cache, F&& f, CompletionToken&& token = {}) {
        return with_backend_session_cached(cache, session_options{}, std::forward<F>(f),
                                           std::forward<CompletionToken>(token));
    }

    /// As above, with per-entry options (see `with_backend_session`).
    template <class F, class CompletionToken = asio::use_awaitable_t<>>
    auto with_backend_session_cached(runtime_cache& cache, session_options options, F&& f,
                                     CompletionToken&& token = {}) {
        return enter(detail::cached_cpu_opener{&backend(), &cache}, options, std::forward<F>(f),
                     std::forward<CompletionToken>(token));
    }

    /// The backend's own runtime cache, shared by the contractions of every
    /// `with_backend_session` entry (internally synchronised). Mark operands
    /// constant here (`default_cache().mark_constant(weights)`) to let those
    /// sessions keep their packed copies; `stats()` shows its counters.
    runtime_cache& default_cache() noexcept { return backend().default_cache(); }
    const runtime_cache& default_cache() const noexcept { return backend().default_cache(); }

    /// A snapshot of the buffer pool that sessions allocate their outputs and
    /// temporaries from (retention cap: `cpu_backend_options::buffer_pool_bytes`).
    tenferro::buffer_pool_stats buffer_pool_stats() const;
};

static_assert(std::is_same_v<cpu_backend::session_type, backend_session>);
static_assert(backend_session_host<cpu_backend>);

}  // namespace tenferro
