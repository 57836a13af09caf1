#pragma once
// Per-thread recycling of entry operation states.
//
// An entry's state is allocated where it is initiated and freed where its
// handler runs: for a coroutine, the same I/O thread. Asio's own recycling
// cache would serve it, but on that thread it is shared with the blocks of
// every hop back from the compute workers (allocated on a worker, freed on the
// I/O thread), which keep evicting the entry's larger block. A small cache of
// our own, used only for entries, keeps a steady request loop off malloc.
// Handlers with an allocator of their own still get it.

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>

namespace tenferro::detail {

/// A block of at least `size` bytes, aligned for any standard type (blocks
/// from the per-thread cache when one is big enough).
void* allocate_entry_memory(std::size_t size);
void deallocate_entry_memory(void* p, std::size_t size) noexcept;
/// Makes sure that this thread's next allocate_entry_memory of up to `size`
/// bytes is served from the cache, without allocating: throws std::bad_alloc
/// now, where the caller may still throw, instead of there (an initiation
/// that Asio runs inside a noexcept function, S19).
void reserve_entry_memory(std::size_t size);

/// The allocator entry states use when the handler names none.
template <class T>
struct entry_allocator {
    using value_type = T;
    entry_allocator() noexcept = default;
    template <class U>
    entry_allocator(const entry_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
    T* allocate(std::size_t n) {
        // Over-aligned states (a handler or body with alignas(64) members)
        // bypass the cache, whose blocks have the default new alignment.
        if constexpr (alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
            return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{alignof(T)}));
        else
            return static_cast<T*>(allocate_entry_memory(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if constexpr (alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
            ::operator delete(p, n * sizeof(T), std::align_val_t{alignof(T)});
        else
            deallocate_entry_memory(p, n * sizeof(T));
    }
    template <class U>
    bool operator==(const entry_allocator<U>&) const noexcept {
        return true;
    }
};

}  // namespace tenferro::detail
