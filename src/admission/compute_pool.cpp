#include "tenferro/detail/admission/compute_pool.hpp"

#include "async/cpu_relax.hpp"
#include "async/fast_tls.hpp"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <system_error>
#include <utility>

#include "tenferro/asio.hpp"
#include "tenferro/detail/async/op_function.hpp"

namespace tenferro::detail {
namespace {

// How long an idle worker polls for new work before it parks. Long enough to
// cover the caller's hop back to its io_context and its next admission (a
// request loop), short enough that an idle host stops burning a core at once.
constexpr auto spin_budget = std::chrono::microseconds(200);
// At most this many workers spin at a time; the rest park at once. On a small
// machine a second spinner would only steal the core the I/O thread needs.
constexpr std::size_t max_spinners = 1;

TENFERRO_FAST_TLS thread_local const compute_pool* current_pool = nullptr;

}  // namespace

compute_pool::compute_pool(std::size_t threads, std::span<const unsigned> cpus,
                           std::function<void(std::size_t)> on_worker_start)
    : on_worker_start_(std::move(on_worker_start)) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (!cpus.empty()) {
        if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
            throw std::system_error(errno, std::system_category(), "tenferro: sched_getaffinity");
        for (unsigned cpu : cpus) {
            if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed))
                throw std::system_error(EINVAL, std::system_category(),
                                        "tenferro: cpu_backend_options.cpus names CPU " + std::to_string(cpu) +
                                            ", which this process may not run on");
        }
    }
    cpus_.assign(cpus.begin(), cpus.end());
    workers_.reserve(threads);
    contexts_.reserve(threads);
    try {
        for (std::size_t i = 0; i < threads; ++i) {
            workers_.push_back(start_worker(i));
            thread_count_.store(workers_.size(), std::memory_order_release);
            pin(workers_.back(), i);
        }
        if (on_worker_start_) {
            // Every worker is pinned: let them run the hook, and wait for all.
            std::unique_lock lock(mutex_);
            start_released_ = true;
            start_cv_.notify_all();
            start_cv_.wait(lock, [&] { return started_ == workers_.size(); });
            if (start_error_) std::rethrow_exception(std::exchange(start_error_, nullptr));
        }
    } catch (...) {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        start_cv_.notify_all();  // workers still waiting to run the hook
        for (auto& t : workers_) t.join();
        throw;
    }
}

compute_pool::compute_pool(asio::any_io_executor external) : external_(std::move(external)) {}

std::thread compute_pool::start_worker(std::size_t index) {
    // The worker's io_context and its loop, posted there, are made here,
    // where running out of memory throws to the caller (S19), not on the
    // worker, where it would end the process. contexts_ has room already.
    auto context = std::make_unique<asio::io_context>(1);
    asio::post(*context, [this, index] { worker_main(index); });
    asio::io_context& c = *context;
    std::thread worker([&c] { c.run(); });
    std::lock_guard lock(mutex_);
    contexts_.push_back(std::move(context));
    return worker;
}

void compute_pool::pin(std::thread& worker, std::size_t index) {
    if (cpus_.empty()) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus_[index % cpus_.size()], &one);
    if (int rc = pthread_setaffinity_np(worker.native_handle(), sizeof(one), &one); rc != 0)
        throw std::system_error(rc, std::system_category(), "tenferro: pthread_setaffinity_np");
}

void compute_pool::grow_to(std::size_t threads) {
    if (external_) return;
    std::lock_guard grow(grow_mutex_);
    const std::size_t first = thread_count_.load(std::memory_order_acquire);
    if (threads <= first) return;
    {
        // Room first: a joinable thread that could not be stored would end
        // the process (S19: out of memory here, set_permits throws instead).
        std::lock_guard lock(mutex_);
        workers_.reserve(threads);
        contexts_.reserve(threads);
    }
    for (std::size_t i = first; i < threads; ++i) {
        std::thread worker = start_worker(i);
        std::exception_ptr pin_error;
        try {
            pin(worker, i);
        } catch (...) {
            pin_error = std::current_exception();  // it runs unpinned; reported below
        }
        {
            std::lock_guard lock(mutex_);
            workers_.push_back(std::move(worker));
        }
        thread_count_.store(i + 1, std::memory_order_release);
        if (pin_error) std::rethrow_exception(pin_error);
    }
    if (on_worker_start_) {
        // start_released_ is set: the new workers run the hook at once.
        std::unique_lock lock(mutex_);
        start_cv_.wait(lock, [&] { return started_ == threads || stopping_; });
        if (start_error_) std::rethrow_exception(std::exchange(start_error_, nullptr));
    }
}

compute_pool::~compute_pool() {
    task_list orphans;
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        orphans = std::move(queue_);
        queued_hint_.store(0, std::memory_order_relaxed);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
    while (pool_task* orphan = orphans.pop_front()) orphan->drop();
    // asio::execution_context's destructor shuts down and destroys services.
    shutdown();
    destroy();
}

bool compute_pool::running_in_this_thread() const noexcept { return current_pool == this; }

void compute_pool::submit(pool_task& task) noexcept {
    for (std::size_t n = drop_next_.load(std::memory_order_relaxed); n > 0;) {
        if (drop_next_.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
            task.drop();
            return;
        }
    }
    if (external_) return submit_external(task);
    {
        std::lock_guard lock(mutex_);
        if (!stopping_) {
            queue_.push_back(task);
            queued_hint_.store(queue_.size(), std::memory_order_release);
            // A spinner will take one task; wake a sleeper for each task beyond
            // what the spinners absorb. A spinner that gives up re-checks the
            // queue under this lock before it parks, so no wake-up is lost.
            if (sleepers_ > 0 && queue_.size() > spinners_.load(std::memory_order_acquire)) wake_.notify_one();
            return;
        }
    }
    // Only reachable when work is submitted while the pool is being destroyed
    // (a session body leaking work past its host); the owner learns via drop().
    task.drop();
}

namespace {

// A task on its way through the user's executor (host_options::compute_executor),
// in an op_function: destroyed unrun (the executor shut down, or the post
// failed), it drops the task, so the entry completes with `executor` (S12).
struct external_run {
    const compute_pool* pool;
    void run(pool_task& task) const {
        // While it runs, the task is on the pool (running_in_this_thread):
        // the pool's executor then runs a coroutine's next step inline, as
        // on a worker of its own.
        const compute_pool* previous = current_pool;
        current_pool = pool;
        task.run();
        current_pool = previous;
    }
    static void drop(pool_task& task) noexcept { task.drop(); }
};
using external_runner = op_function<pool_task, external_run>;

}  // namespace

void compute_pool::submit_external(pool_task& task) noexcept {
    try {
        asio::post(external_, external_runner(&task, external_run{this}));
    } catch (...) {
        // Out of memory, or an executor that refuses work: the runner was
        // destroyed unrun and dropped the task.
    }
}

pool_task* compute_pool::try_pop() noexcept {
    pool_task* task = queue_.pop_front();
    if (task != nullptr) queued_hint_.store(queue_.size(), std::memory_order_relaxed);
    return task;
}

void compute_pool::run_start_hook(std::size_t index) noexcept {
    std::unique_lock lock(mutex_);
    // Wait until the constructor has pinned every worker (or gave up).
    start_cv_.wait(lock, [&] { return start_released_ || stopping_; });
    if (!start_released_) return;
    lock.unlock();
    std::exception_ptr error;
    try {
        on_worker_start_(index);
    } catch (...) {
        error = std::current_exception();
    }
    lock.lock();
    if (error && !start_error_) start_error_ = std::move(error);
    ++started_;
    start_cv_.notify_all();
}

void compute_pool::worker_main(std::size_t index) {
    // Runs as the one handler of the worker's own io_context (start_worker),
    // for the thread's whole life: the thread is then one "running an
    // io_context", on which Asio's recycling allocator caches small blocks
    // (asio::recycling_allocator, as documented; the coroutine frames of an
    // asynchronous body and the handler memory of what it awaits, allocated
    // and freed here, then reuse their blocks instead of malloc's). Nothing
    // else ever runs in that io_context, and nobody holds its executor.
    if (on_worker_start_) run_start_hook(index);
    current_pool = this;
    for (;;) {
        pool_task* task = nullptr;
        {
            std::lock_guard lock(mutex_);
            task = try_pop();
            if (task == nullptr && stopping_) return;
        }
        if (task == nullptr && spinners_.fetch_add(1, std::memory_order_acq_rel) < max_spinners) {
            const auto deadline = std::chrono::steady_clock::now() + spin_budget;
            unsigned round = 0;
            while (queued_hint_.load(std::memory_order_acquire) == 0) {
                cpu_relax();
                if ((++round & 63) == 0) {
                    if (std::chrono::steady_clock::now() >= deadline) break;
                    // The thread we just woke (the caller's I/O thread) is often
                    // placed on this very CPU (wake-affine scheduling); without
                    // a yield it would wait for the whole spin budget.
                    sched_yield();
                }
            }
            spinners_.fetch_sub(1, std::memory_order_acq_rel);
        } else if (task == nullptr) {
            spinners_.fetch_sub(1, std::memory_order_acq_rel);
        }
        if (task == nullptr) {
            std::unique_lock lock(mutex_);
            while ((task = try_pop()) == nullptr) {
                if (stopping_) return;
                ++sleepers_;
                wake_.wait(lock);
                --sleepers_;
            }
        }
        task->run();
    }
}

namespace {

// The shared state of one parallel_for; lives on the caller's stack.
struct parallel_region {
    parallel_region(function_ref<void(std::int64_t, std::int64_t)> b, std::int64_t n, std::int64_t parts) noexcept
        : body(b), count(n), chunk((n + parts - 1) / parts), chunks((n + chunk - 1) / chunk) {}

    function_ref<void(std::int64_t, std::int64_t)> body;
    const std::int64_t count;
    const std::int64_t chunk;
    const std::int64_t chunks;
    std::atomic<std::int64_t> next_chunk{0};
    std::atomic<std::size_t> helpers_out{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;

    void work() noexcept {
        for (;;) {
            const std::int64_t c = next_chunk.fetch_add(1, std::memory_order_relaxed);
            if (c >= chunks || failed.load(std::memory_order_relaxed)) return;
            const std::int64_t begin = c * chunk;
            const std::int64_t end = begin + chunk < count ? begin + chunk : count;
            try {
                body(begin, end);
            } catch (...) {
                if (!failed.exchange(true, std::memory_order_acq_rel)) error = std::current_exception();
                return;
            }
        }
    }

    void helper_done() noexcept {
        // Release: the caller reads `error` and the body's writes after this.
        if (helpers_out.fetch_sub(1, std::memory_order_acq_rel) == 1) helpers_out.notify_one();
    }
};

class region_helper final : public pool_task {
public:
    region_helper() = default;
    explicit region_helper(parallel_region& r) : region_(&r) {}
    void run() noexcept override {
        region_->work();
        region_->helper_done();
    }
    void drop() noexcept override { region_->helper_done(); }  // the caller covers its chunks

private:
    parallel_region* region_ = nullptr;
};

}  // namespace

void compute_pool::parallel_for(std::size_t workers, std::int64_t count, std::int64_t grain,
                                function_ref<void(std::int64_t, std::int64_t)> body) {
    if (count <= 0) return;
    if (external_) {
        // No workers of our own: helpers posted to the user's executor could
        // wait behind this very call (a single-threaded executor would never
        // run them), so the calling thread covers every range.
        body(0, count);
        return;
    }
    if (grain < 1) grain = 1;
    const std::int64_t max_chunks = (count + grain - 1) / grain;
    const std::int64_t parts =
        static_cast<std::int64_t>(workers) < max_chunks ? static_cast<std::int64_t>(workers) : max_chunks;
    if (parts <= 1) {
        body(0, count);
        return;
    }
    parallel_region region(body, count, parts);
    const std::size_t helpers = static_cast<std::size_t>(region.chunks - 1);
    region.helpers_out.store(helpers, std::memory_order_relaxed);

    constexpr std::size_t inline_helpers = 16;
    region_helper local[inline_helpers];
    std::unique_ptr<region_helper[]> heap;
    region_helper* slots = local;
    if (helpers > inline_helpers) {
        heap = std::make_unique<region_helper[]>(helpers);
        slots = heap.get();
    }
    for (std::size_t i = 0; i < helpers; ++i) {
        slots[i] = region_helper(region);
        submit(slots[i]);
    }
    region.work();
    // Helpers cannot be recalled from the queue (their nodes live here), so
    // wait for every one to check in; admission guarantees each has a worker.
    for (std::size_t out = region.helpers_out.load(std::memory_order_acquire); out != 0;
         out = region.helpers_out.load(std::memory_order_acquire))
        region.helpers_out.wait(out, std::memory_order_acquire);
    if (region.error) std::rethrow_exception(region.error);
}

}  // namespace tenferro::detail
