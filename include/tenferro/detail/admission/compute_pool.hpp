#pragma once
// The compute workers that a host's permits stand for.
//
//  * One worker per permit. Admission guarantees that the threads a session
//    keeps busy (its body plus its parallel-for helpers) never exceed the
//    permits it holds, so a submitted task never waits for another task to
//    finish: at worst it waits for a worker to walk back to the queue.
//  * Tasks are intrusive (`pool_task`): an admitted entry submits its own
//    operation state, so the hop onto the pool allocates nothing.
//  * A worker that runs out of work spins briefly (at most one spinner at a
//    time) before it parks. A request loop therefore finds a hot worker and
//    pays one thread wake per entry (the return to the caller) instead of two.
//  * The pool is an `asio::execution_context` with a standard executor, so an
//    `asio::awaitable` session body can run on it.
//  * Or it has no workers of its own (host_options::compute_executor): every
//    task is posted to the user's executor, which runs it as one of the
//    pool's (running_in_this_thread() holds while it runs). The admission
//    code does not know the difference: it submits to the pool either way,
//    which is what lets a single-threaded simulation (tests/sim/) own every
//    compute hop while running the production paths.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "tenferro/asio.hpp"

#include "tenferro/detail/async/intrusive_list.hpp"
#include "tenferro/detail/async/op_allocator.hpp"
#include "tenferro/detail/base/function_ref.hpp"

namespace tenferro::detail {

/// A unit of work for the pool, embedded in its owner.
class pool_task {
public:
    /// Runs the task on a worker. The pool does not touch the task afterwards.
    virtual void run() noexcept = 0;
    /// The pool discards the task without running it (pool stopped, or the
    /// test hook that simulates an executor losing work).
    virtual void drop() noexcept = 0;

protected:
    pool_task() = default;
    ~pool_task() = default;
    pool_task(const pool_task&) = default;
    pool_task& operator=(const pool_task&) = default;

private:
    friend class compute_pool;
    pool_task* next_task_ = nullptr;
};

class compute_pool : public asio::execution_context {
public:
    class executor_type;

    /// Starts `threads` workers, pinned round-robin to `cpus` when it is not
    /// empty. Throws `std::system_error` (EINVAL) for a CPU this process may not
    /// run on, before any thread starts.
    ///
    /// When `on_worker_start` is set, each worker calls it once with its index
    /// (0 .. threads - 1), after it has been pinned and before it takes any
    /// task; the constructor returns only when every worker has done so. If a
    /// call throws, the workers are stopped and joined and the constructor
    /// rethrows the first exception.
    compute_pool(std::size_t threads, std::span<const unsigned> cpus,
                 std::function<void(std::size_t)> on_worker_start = {});
    /// Starts no workers: `submit` posts each task to `external` (never runs
    /// it inline), and a task posted there that is destroyed unrun gets
    /// `drop()`. `parallel_for` then runs every range on its calling thread:
    /// the pool cannot know how many of the executor's threads are free.
    explicit compute_pool(asio::any_io_executor external);
    /// Drops the tasks still queued (each gets `drop()`), then joins the workers.
    ~compute_pool();

    compute_pool(const compute_pool&) = delete;
    compute_pool& operator=(const compute_pool&) = delete;

    std::size_t threads() const noexcept { return thread_count_.load(std::memory_order_acquire); }
    /// Starts workers until there are `threads` (P7: a host grown by
    /// set_permits keeps a worker per permit); each new one is pinned as the
    /// first ones were and runs the start-up hook before this returns. A
    /// no-op with an external executor or when there are enough. \throws the
    /// first exception of a new worker's hook (that worker runs all the same).
    void grow_to(std::size_t threads);
    /// The user's executor that runs the tasks, or an empty one (own workers).
    const asio::any_io_executor& external_executor() const noexcept { return external_; }
    executor_type get_executor() noexcept;

    /// Queues `task`; a worker will call `task.run()` (or `task.drop()`).
    void submit(pool_task& task) noexcept;

    /// True on one of this pool's workers.
    bool running_in_this_thread() const noexcept;

    /// Splits [0, count) into ranges of at least `grain` elements and runs
    /// `body(begin, end)` on the calling thread plus up to `workers - 1` pool
    /// workers. Ranges are fixed by (count, grain, workers) alone, so a caller
    /// that needs deterministic results gets them. Returns when every range is
    /// done; the first exception thrown by `body` is rethrown here.
    void parallel_for(std::size_t workers, std::int64_t count, std::int64_t grain,
                      function_ref<void(std::int64_t, std::int64_t)> body);

    /// Test hook: the next `n` submitted tasks are dropped instead of run, as
    /// an executor that loses work would.
    void drop_next_for_testing(std::size_t n) noexcept { drop_next_.store(n, std::memory_order_relaxed); }

private:
    std::thread start_worker(std::size_t index);
    void worker_main(std::size_t index);
    void pin(std::thread& worker, std::size_t index);
    void submit_external(pool_task& task) noexcept;
    void run_start_hook(std::size_t index) noexcept;
    pool_task* try_pop() noexcept;

    std::mutex mutex_;
    std::condition_variable wake_;
    using task_list = intrusive_list<pool_task, &pool_task::next_task_>;
    task_list queue_;                    // guarded by mutex_
    std::size_t sleepers_ = 0;           // guarded by mutex_
    bool stopping_ = false;              // guarded by mutex_
    std::atomic<std::size_t> queued_hint_{0};  // queue_.size(), readable without the lock by spinners
    std::atomic<std::size_t> spinners_{0};
    std::atomic<std::size_t> drop_next_{0};
    // Start-up hook (see the constructor); the fields below are guarded by mutex_.
    std::function<void(std::size_t)> on_worker_start_;
    std::condition_variable start_cv_;
    bool start_released_ = false;  // workers are pinned; they may run the hook
    std::size_t started_ = 0;      // workers that have run the hook
    std::exception_ptr start_error_;
    std::vector<std::thread> workers_;   // guarded by mutex_ once the constructor returned
    // One per worker, which runs its loop inside it (start_worker). Guarded
    // by mutex_ as workers_; destroyed after the workers were joined.
    std::vector<std::unique_ptr<asio::io_context>> contexts_;
    std::vector<unsigned> cpus_;         // what the workers are pinned to, round-robin
    std::atomic<std::size_t> thread_count_{0};
    std::mutex grow_mutex_;              // one grow_to at a time
    asio::any_io_executor external_;  // set: no workers, tasks go here
};

/// A standard (P0443-style, as Asio 1.22 models them) executor for the pool.
/// `blocking.possibly` (the default) runs a function inline when the caller is
/// already on one of the pool's workers, like `io_context`'s executor does.
class compute_pool::executor_type {
public:
    explicit executor_type(compute_pool& pool, bool never_blocking = false) noexcept
        : pool_(&pool), never_blocking_(never_blocking) {}

    template <class F>
    void execute(F&& f) const {
        if (!never_blocking_ && pool_->running_in_this_thread()) {
            std::forward<F>(f)();
            return;
        }
        using task_t = function_task<std::decay_t<F>>;
        pool_->submit(*task_t::make(std::forward<F>(f)));
    }

    /// The block of a task holding one of Asio's type-erased functions (one
    /// pointer), the function every hop through an any_io_executor hands
    /// on: what a coroutine's next hop to the pool needs, reserved with
    /// keep_op_block before co_spawn (entry_op::spawn, S19).
    static constexpr std::size_t type_erased_task_bytes() noexcept;
    /// The block of a task holding an `F`.
    template <class F>
    static constexpr std::size_t task_bytes() noexcept;

    compute_pool& context() const noexcept { return *pool_; }

    asio::execution_context& query(asio::execution::context_t) const noexcept { return *pool_; }
    asio::execution::blocking_t query(asio::execution::blocking_t) const noexcept {
        return never_blocking_ ? asio::execution::blocking_t(asio::execution::blocking.never)
                               : asio::execution::blocking_t(asio::execution::blocking.possibly);
    }
    static constexpr asio::execution::relationship_t query(asio::execution::relationship_t) noexcept {
        return asio::execution::relationship.fork;
    }
    static constexpr asio::execution::outstanding_work_t query(asio::execution::outstanding_work_t) noexcept {
        return asio::execution::outstanding_work.untracked;
    }

    executor_type require(asio::execution::blocking_t::never_t) const noexcept { return executor_type(*pool_, true); }
    executor_type require(asio::execution::blocking_t::possibly_t) const noexcept {
        return executor_type(*pool_, false);
    }
    // The pool outlives every session (the host joins it last), so tracking
    // outstanding work and the relationship/allocator hints need no state.
    executor_type require(asio::execution::outstanding_work_t::tracked_t) const noexcept { return *this; }
    executor_type require(asio::execution::outstanding_work_t::untracked_t) const noexcept { return *this; }
    executor_type require(asio::execution::relationship_t::fork_t) const noexcept { return *this; }
    executor_type require(asio::execution::relationship_t::continuation_t) const noexcept { return *this; }
    template <class Alloc>
    executor_type require(const asio::execution::allocator_t<Alloc>&) const noexcept {
        return *this;
    }

    friend bool operator==(const executor_type& a, const executor_type& b) noexcept {
        return a.pool_ == b.pool_ && a.never_blocking_ == b.never_blocking_;
    }
    friend bool operator!=(const executor_type& a, const executor_type& b) noexcept { return !(a == b); }

private:
    // A task's block comes from this thread's op cache (op_allocator.hpp):
    // a hop that a coroutine makes inside Asio's machinery finds the block
    // its spawn reserved there, and a steady stream of hops stays off malloc.
    template <class F>
    class function_task final : public pool_task {
    public:
        template <class G>
        static function_task* make(G&& g) {
            static_assert(alignof(function_task) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
            void* block = allocate_op_memory(sizeof(function_task));
            try {
                return ::new (block) function_task(std::forward<G>(g));
            } catch (...) {
                deallocate_op_memory(block, sizeof(function_task));
                throw;
            }
        }
        void run() noexcept override {
            // Asio handlers do not throw across executors; an escaping exception is a bug.
            F f(std::move(f_));
            destroy();
            f();
        }
        void drop() noexcept override { destroy(); }

    private:
        template <class G>
        explicit function_task(G&& g) : f_(std::forward<G>(g)) {}
        void destroy() noexcept {
            this->~function_task();
            deallocate_op_memory(this, sizeof(function_task));
        }
        F f_;
    };
    struct one_pointer_function {
        void* target;
        void operator()() const noexcept {}
    };

    compute_pool* pool_;
    bool never_blocking_;
};

inline compute_pool::executor_type compute_pool::get_executor() noexcept { return executor_type(*this); }

constexpr std::size_t compute_pool::executor_type::type_erased_task_bytes() noexcept {
    return sizeof(function_task<one_pointer_function>);
}

template <class F>
constexpr std::size_t compute_pool::executor_type::task_bytes() noexcept {
    return sizeof(function_task<F>);
}

}  // namespace tenferro::detail
