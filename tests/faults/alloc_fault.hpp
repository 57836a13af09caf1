#pragma once
// Allocation-failure injection for a whole process (S19, docs/testing.md):
// every form of the global operator new (plain, array, aligned, nothrow) is
// replaced, and outside a sanitizer the malloc family as well, by forwarders
// that count each allocation made while the injector is armed and fail the
// chosen one: operator new throws std::bad_alloc, the nothrow forms and malloc
// and its kin return null (as libstdc++'s operator new would then throw, and
// Asio's aligned_new does on a null aligned_alloc).
//
// Why the malloc family too: Asio allocates its coroutine frames, its
// recycled operations and cancellation handlers with aligned_alloc (through
// asio::aligned_new), not with operator new, and those are on the paths of
// every entry awaited with use_awaitable. Under a sanitizer, whose runtime
// owns malloc, only operator new is replaced (TENFERRO_ALLOC_FAULT_MALLOC is
// 0): the loops there explore the operator new sites, the release build all.
//
// This header is the injector's state and its controls; the replacements are
// definitions, in alloc_fault.cpp, which the program links once.

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_HWADDRESS__)
#define TENFERRO_ALLOC_FAULT_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(hwaddress_sanitizer)
#define TENFERRO_ALLOC_FAULT_MALLOC 0
#endif
#endif
#ifndef TENFERRO_ALLOC_FAULT_MALLOC
#define TENFERRO_ALLOC_FAULT_MALLOC 1
#endif

#if TENFERRO_ALLOC_FAULT_MALLOC
extern "C" {
void* __libc_malloc(std::size_t) noexcept;
void __libc_free(void*) noexcept;
void* __libc_calloc(std::size_t, std::size_t) noexcept;
void* __libc_realloc(void*, std::size_t) noexcept;
void* __libc_memalign(std::size_t, std::size_t) noexcept;
}
#else
#include <cstdlib>
#endif

namespace tenferro::test::alloc_fault {

namespace state {
inline constinit std::atomic<bool> armed{false};
inline constinit std::atomic<std::uint64_t> count{0};    // allocations seen while armed
inline constinit std::atomic<std::uint64_t> fail_at{0};  // the one to fail (1-based)
inline constinit std::atomic<std::uint64_t> failed{0};   // allocations failed
inline constinit std::atomic<std::int64_t> persist_ns{0};     // persistent: how long to keep failing
inline constinit std::atomic<std::int64_t> fail_until_ns{0};  // persistent: until when (monotonic)
inline constinit std::atomic<int> users{0};  // open users_own scopes: nothing counts, nothing fails

inline std::int64_t now_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace state

/// Whether the allocation being made now must fail. Never allocates.
inline bool should_fail() noexcept {
    using namespace state;
    if (!armed.load(std::memory_order_relaxed)) return false;
    if (users.load(std::memory_order_acquire) != 0) return false;
    const std::uint64_t n = count.fetch_add(1, std::memory_order_relaxed) + 1;
    const std::uint64_t at = fail_at.load(std::memory_order_relaxed);
    if (n < at) return false;
    if (n == at) {
        const std::int64_t persist = persist_ns.load(std::memory_order_relaxed);
        if (persist > 0) fail_until_ns.store(now_ns() + persist, std::memory_order_release);
        failed.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    if (persist_ns.load(std::memory_order_relaxed) > 0 && now_ns() < fail_until_ns.load(std::memory_order_acquire)) {
        failed.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    return false;
}

/// While one lives, the allocations made (on any thread) are the user's own,
/// not the library's: an asynchronous body's own awaits (issue 45: "a failure
/// inside the user's own awaits within a body is the user's"). They are
/// neither counted nor failed. Global, not per thread: an await's
/// allocations happen on the thread that initiates it and on the one that
/// resumes the body; the scenarios that use it run one entry at a time.
struct users_own {
    users_own() noexcept { state::users.fetch_add(1, std::memory_order_acq_rel); }
    ~users_own() { state::users.fetch_sub(1, std::memory_order_acq_rel); }
    users_own(const users_own&) = delete;
    users_own& operator=(const users_own&) = delete;
};

/// Starts counting; the `fail_at`-th allocation from now (any thread) fails;
/// with `persist_ms` > 0 every allocation fails from then on for that long.
inline void arm(std::uint64_t fail_at, std::int64_t persist_ms = 0) noexcept {
    using namespace state;
    count.store(0, std::memory_order_relaxed);
    failed.store(0, std::memory_order_relaxed);
    state::fail_at.store(fail_at, std::memory_order_relaxed);
    persist_ns.store(persist_ms * 1'000'000, std::memory_order_relaxed);
    fail_until_ns.store(0, std::memory_order_relaxed);
    armed.store(true, std::memory_order_seq_cst);
}

/// Stops counting and failing; returns the allocations seen since arm().
inline std::uint64_t disarm() noexcept {
    state::armed.store(false, std::memory_order_seq_cst);
    return state::count.load(std::memory_order_relaxed);
}

inline std::uint64_t allocations() noexcept { return state::count.load(std::memory_order_relaxed); }
inline std::uint64_t failures() noexcept { return state::failed.load(std::memory_order_relaxed); }
/// Persistent mode: true once the failing window has closed (or never opened).
inline bool window_closed() noexcept {
    return state::failed.load(std::memory_order_relaxed) == 0 ||
           state::now_ns() >= state::fail_until_ns.load(std::memory_order_acquire);
}

inline void* raw_malloc(std::size_t n) noexcept {
#if TENFERRO_ALLOC_FAULT_MALLOC
    return __libc_malloc(n);
#else
    return std::malloc(n);
#endif
}
inline void* raw_aligned(std::size_t al, std::size_t n) noexcept {
#if TENFERRO_ALLOC_FAULT_MALLOC
    return __libc_memalign(al, n);
#else
    void* p = nullptr;
    return posix_memalign(&p, al < sizeof(void*) ? sizeof(void*) : al, n) == 0 ? p : nullptr;
#endif
}
inline void raw_free(void* p) noexcept {
#if TENFERRO_ALLOC_FAULT_MALLOC
    __libc_free(p);
#else
    std::free(p);
#endif
}

inline void* new_or_null(std::size_t n) noexcept {
    if (should_fail()) {
        errno = ENOMEM;
        return nullptr;
    }
    return raw_malloc(n == 0 ? 1 : n);
}
inline void* aligned_new_or_null(std::size_t n, std::align_val_t al) noexcept {
    if (should_fail()) {
        errno = ENOMEM;
        return nullptr;
    }
    return raw_aligned(static_cast<std::size_t>(al), n == 0 ? 1 : n);
}

}  // namespace tenferro::test::alloc_fault
