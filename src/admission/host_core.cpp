#include "tenferro/detail/admission/host_core.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "tenferro/detail/admission/entry_op.hpp"
#include "tenferro/detail/async/handoff_retry.hpp"
#include "tenferro/detail/async/library_context.hpp"

namespace tenferro::detail {

namespace {

queue_policy queue_policy_of(admission_policy policy) {
    // The clock is read (twice per session) only where something uses it:
    // charging groups for permit-time (P2), predicting waits (P5).
    const bool measure = policy.groups.size() > 1 || policy.reject_late;
    return {std::move(policy.groups), policy.memory_budget, measure, policy.reject_late, std::move(policy.timer)};
}

}  // namespace

host_core::host_core(std::string name, std::size_t permits, std::size_t max_waiters, std::span<const unsigned> cpus,
                     std::shared_ptr<admission_observer> observer, std::function<void(std::size_t)> on_worker_start,
                     asio::any_io_executor compute_executor, admission_policy policy)
    : name_(std::move(name)),
      queue_(permits, max_waiters, queue_policy_of(policy)),
      pool_(compute_executor ? std::make_unique<compute_pool>(std::move(compute_executor))
                             : std::make_unique<compute_pool>(permits, cpus, std::move(on_worker_start))),
      observer_(std::move(observer)),
      deadlines_(std::move(policy.timer)) {
    // The thread that retries hand-offs which failed for want of memory
    // (S19): started here, where throwing is allowed, so that no entry ever
    // needs to start it while memory is short.
    prepare_handoff_retry();
    // The library's completion context, which every entry exposes as its
    // executor (library_context.hpp): started here for the same reason.
    start_library_context();
    load_libc_unwinder();
}

void load_libc_unwinder() noexcept {
    // glibc's C frames that an exception may unwind through (pthread_once,
    // inside which Asio creates its global services) have cleanups, and glibc
    // loads the unwinder for them (libgcc_s) at the first such exception,
    // with an allocation: out of memory there, glibc aborts the process
    // ("libgcc_s.so.1 must be installed for unwinding to work"). One
    // exception through pthread_once, here and once per process, loads it
    // while memory is fine (S19).
    static std::atomic<bool> loaded{false};
    if (loaded.load(std::memory_order_acquire)) return;
    try {
        std::once_flag once;
        std::call_once(once, [] { throw 0; });
    } catch (...) {
    }
    loaded.store(true, std::memory_order_release);
}

admission_stats host_core::stats() const {
    const permit_counters c = queue_.counters();
    return {c.permits,   c.available, c.waiting, c.admitted,      c.completed,       c.rejected,
            c.cancelled, c.stopped,   c.expired, c.memory_budget, c.memory_available};
}

std::size_t resolve_permits(std::size_t requested) noexcept {
    if (requested != 0) return requested;
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : hw;
}

void host_core::start_granted(waiter_list granted, entry_node* handoffs) noexcept {
    // The chain first: it holds the earliest grants that were ready at once.
    // The entries of `granted` that start on their caller join the hand-off
    // behind them (this thread holds the role until the chain is done).
    entry_base::hand_off_in_grant_order(handoffs);
    // Unlink each before starting it: a started entry may complete and free
    // its node before we would read its `next_`. A waiter the queue removed
    // instead of granting it had reached its deadline first (P4).
    while (permit_waiter* w = granted.pop_front()) {
        auto* e = static_cast<entry_base*>(w);
        if (w->phase() == entry_phase::rejected)
            e->reject(session_entry_errc::deadline_exceeded,
                      "not admitted by its deadline (session_options::deadline); the body did not run");
        else
            e->on_granted();
    }
}

void host_core::poison(std::string_view why) noexcept {
    waiter_list drained = queue_.poison();
    while (permit_waiter* w = drained.pop_front())
        static_cast<entry_base*>(w)->reject(session_entry_errc::resource_poisoned,
                                            compose_detail({why, " before this entry was admitted"}));
}

void host_core::shut_down() noexcept {
    waiter_list drained = queue_.shut_down();
    while (permit_waiter* w = drained.pop_front())
        static_cast<entry_base*>(w)->reject(session_entry_errc::executor,
                                            "the host was shut down while the entry waited");
}

void host_core::settle(waiter_list granted, waiter_list rejected, entry_node* handoffs,
                       std::string_view what) noexcept {
    start_granted(std::move(granted), handoffs);
    while (permit_waiter* w = rejected.pop_front())
        static_cast<entry_base*>(w)->reject(session_entry_errc::incompatible_context,
                                            compose_detail({what, " while the entry waited; it can no longer fit"}));
}

void host_core::set_permits(std::size_t n) {
    if (n == 0) throw std::invalid_argument("set_permits: a host needs at least 1 permit");
    pool_->grow_to(n);  // a worker per permit before the permits exist
    waiter_list granted, rejected;
    entry_node* handoffs = nullptr;
    queue_.set_permits(n, granted, rejected, &handoffs);
    settle(std::move(granted), std::move(rejected), handoffs, "set_permits shrank the host");
}

void host_core::set_memory_budget(std::size_t bytes) {
    waiter_list granted, rejected;
    entry_node* handoffs = nullptr;
    queue_.set_memory_budget(bytes, granted, rejected, &handoffs);
    settle(std::move(granted), std::move(rejected), handoffs, "set_memory_budget shrank the budget");
}

void host_core::watch_deadlines() {
    // The thread holds the host only while it expires entries: the host is
    // not kept alive by its own timer.
    deadlines_.start([weak = weak_from_this()](std::chrono::steady_clock::time_point now) {
        const std::shared_ptr<host_core> core = weak.lock();
        return core ? core->expire_due(now) : std::chrono::steady_clock::time_point::max();
    });
}

std::chrono::steady_clock::time_point host_core::expire_due(std::chrono::steady_clock::time_point now) noexcept {
    waiter_list expired, granted;
    entry_node* handoffs = nullptr;
    const auto next = queue_.expire_due(now, expired, granted, &handoffs);
    start_granted(std::move(granted), handoffs);
    while (permit_waiter* w = expired.pop_front())
        static_cast<entry_base*>(w)->reject(session_entry_errc::deadline_exceeded,
                                            "not admitted by its deadline (session_options::deadline); the body "
                                            "did not run");
    return std::min(next, running_.stop_due(now));
}

void host_core::stop_pool() noexcept {
    queue_.wait_until_idle();
    pool_.reset();
}

}  // namespace tenferro::detail
