#pragma once
// Hand-offs retried when memory is back (rule S19, docs/contract.md).
//
// An operation completes by handing a function to its caller's executor
// (handoff.hpp), and that post allocates: Asio wraps the function in an
// operation of its own, and through any_io_executor the executor itself may
// be copied to the heap. When memory runs out there, the operation has its
// outcome ready and nobody to give it to: the handler must run on its own
// executor (S6), the calling thread is a compute worker, an I/O engine thread
// or a cancellation, none of which may throw, and dropping the completion
// would lose it (S1) and, with its tracked work, keep the caller's io_context
// running forever. Spinning on the post would hang a thread.
//
// So the operation parks itself here, in an intrusive list that needs no
// memory, and one thread of the library's own retries the parked hand-offs
// with a growing pause (1 ms, doubling to 64 ms) until each goes through. The
// thread is started, once per process, by the initiating functions that may
// need it (a host's constructor, the .npy operations), where throwing is
// still allowed, so that starting it never has to happen while memory is short.

#include <cstdint>

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

struct permit_waiter;

/// Parks a session entry, threaded through its permit-queue node: an entry
/// parks only once it is out of the queue (granted, or rejected), so the
/// node's links are free, and a parked entry costs no memory of its own (a
/// parked entry's size is a figure the admission benchmark watches). `retry`
/// is the same function for every entry.
void retry_waiter_later(permit_waiter& waiter, bool (*retry)(permit_waiter&) noexcept) noexcept;

/// How many hand-offs were parked since the process started (tests, stats).
std::uint64_t handoffs_retried() noexcept;

}  // namespace tenferro::detail
