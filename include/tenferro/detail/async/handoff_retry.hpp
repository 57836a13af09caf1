#pragma once
// Hand-offs retried when memory is back (rule S19, docs/contract.md).
//
// An operation completes by handing a function to its caller's executor
// (completion.hpp), and that post allocates: Asio wraps the function in an
// operation of its own, and through any_io_executor the executor itself may
// be copied to the heap. When memory runs out there, the operation has its
// outcome ready and nobody to give it to: the handler must run on its own
// executor (S6), the calling thread is a compute worker, an I/O engine thread
// or a cancellation, none of which may throw, and dropping the completion
// would lose it (S1) and, with its tracked work, keep the caller's io_context
// running forever. Spinning on the post would hang a thread.
//
// So the operation parks itself here, in an intrusive list that needs no
// memory, and the library's timer thread (library_timer.hpp) retries the
// parked hand-offs with a growing pause (1 ms, doubling to 64 ms) until each
// goes through. The thread is started, once per process, by the initiating
// functions that may need it (a host's constructor, the .npy operations),
// where throwing is still allowed, so that starting it never has to happen
// while memory is short; arming it allocates nothing.
//
// Two ways to park. An operation that embeds a retry_node parks that (its
// retry function in the node). An operation that cannot spare the node's two
// words parks in a retry_lane: a list of operations of one kind, threaded
// through a link the operation has anyway and does not use while it is
// parked, with one retry function for the whole lane (a session entry parks
// through its permit-queue node, so that a parked entry costs no memory of its
// own).

#include <cstdint>
#include <mutex>

#include "tenferro/detail/async/intrusive_list.hpp"

namespace tenferro::detail {

/// A hand-off waiting to be tried again; embedded in the operation.
struct retry_node {
    /// Tries the hand-off again, on the retrying thread: returns true when it
    /// went through (the operation may be gone by then), false when it failed
    /// for want of memory again (the node stays parked).
    bool (*retry)(retry_node& self) noexcept = nullptr;
    retry_node* next_retry = nullptr;
};

/// Starts the retrying thread if it is not running yet. Throws what starting
/// a thread throws; cheap once it runs.
void prepare_handoff_retry();

/// Parks `node` (whose `retry` is set) until the retrying thread hands it
/// off. Never allocates. The operation must keep the node alive and untouched
/// until `retry` returned true.
void retry_handoff_later(retry_node& node) noexcept;

/// The untyped half of a retry_lane: what the retrying thread sees.
class retry_lane_base {
public:
    retry_lane_base(const retry_lane_base&) = delete;
    retry_lane_base& operator=(const retry_lane_base&) = delete;

protected:
    constexpr retry_lane_base() noexcept = default;
    // Not virtual: lanes have static storage and are never destroyed through
    // this base; trivially destructible, so the retrying thread may still use
    // them while the process exits.
    ~retry_lane_base() = default;

    /// The retrying thread's mutex: guards every lane's list.
    static std::mutex& mutex() noexcept;
    /// Called with mutex() held, after an operation joined this lane's list:
    /// registers the lane with the retrying thread (once) and counts the park.
    void parked_locked() noexcept;
    /// Called after mutex() was released: wakes the retrying thread.
    static void wake() noexcept;

private:
    friend class handoff_retrier;
    /// On the retrying thread, mutex() not held: tries every operation parked
    /// in this lane once, in order; those that fail again stay parked, ahead
    /// of any parked meanwhile. Returns true when some failed.
    virtual bool retry_parked() noexcept = 0;
    /// With mutex() held: whether anything is parked here.
    virtual bool empty_locked() const noexcept = 0;

    retry_lane_base* next_lane_ = nullptr;  // the retrying thread's lanes; guarded by mutex()
    bool registered_ = false;               // guarded by mutex()
};

/// Parked operations of type `T`, threaded through `T::*Next`, retried by
/// `Retry` (which returns as retry_node::retry does). Give a lane static
/// storage duration (`constinit`): the retrying thread keeps it.
template <class T, T* T::*Next, bool (*Retry)(T&) noexcept>
class retry_lane final : public retry_lane_base {
public:
    constexpr retry_lane() noexcept = default;

    /// Parks `op` until the retrying thread hands it off. Never allocates.
    /// `op` keeps its `Next` link untouched until `Retry` returned true.
    void park(T& op) noexcept {
        {
            const std::lock_guard<std::mutex> lock(mutex());
            parked_.push_back(op);
            parked_locked();
        }
        wake();
    }

private:
    bool retry_parked() noexcept override {
        intrusive_list<T, Next> taken;
        {
            const std::lock_guard<std::mutex> lock(mutex());
            taken = std::move(parked_);
        }
        intrusive_list<T, Next> failed;
        // Popped before the retry: a hand-off that goes through may free the op.
        while (T* op = taken.pop_front())
            if (!Retry(*op)) failed.push_back(*op);
        if (failed.empty()) return false;
        const std::lock_guard<std::mutex> lock(mutex());
        failed.splice_back(parked_);
        parked_ = std::move(failed);
        return true;
    }
    bool empty_locked() const noexcept override { return parked_.empty(); }

    intrusive_list<T, Next> parked_;  // guarded by mutex()
};

}  // namespace tenferro::detail
