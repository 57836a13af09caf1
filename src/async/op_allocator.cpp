// The per-thread op cache of include/tenferro/detail/async/op_allocator.hpp.

#include "tenferro/detail/async/op_allocator.hpp"

#include "async/fast_tls.hpp"
#include "async/op_cache_record.hpp"

#include <pthread.h>

#include <cstdlib>
#include <new>
#include <utility>

namespace tenferro::detail {
namespace {

// Blocks are rounded up to 16 bytes (malloc's own granule and alignment): one
// cached block then serves every op type up to its size, and a parked op pays
// no more than malloc would round to anyway.
constexpr std::size_t granule = 16;
constexpr std::size_t slots = 8;  // enough for a few outstanding ops per thread

std::size_t rounded(std::size_t size) noexcept { return (size + granule - 1) / granule * granule; }

// The cache is plain data (constant-initialised, no destructor), so that the
// hot path reads it at a fixed offset from the thread pointer. A thread_local
// with a destructor needs a guard, and the guard of such a variable goes
// through __tls_get_addr even with the initial-exec model. The blocks a thread
// leaves cached are freed at its exit by the destructor of a pthread key, set
// once per thread, when its cache first keeps a block. (Not by a thread_local
// with a destructor: glibc registers that destructor with an allocation at the
// variable's first use and aborts the process when the allocation fails,
// "failed to register TLS destructor" (S19). pthread_setspecific needs no
// memory for the first 32 keys of a process, and reports ENOMEM instead of
// aborting for the others.)
struct thread_cache {
    struct block {
        void* p;
        std::size_t size;
    };
    enum class phase : unsigned char { unregistered, caching, closed };
    block blocks[slots];
    op_cache_record record;  // op_cache_record.hpp
    phase state;             // closed: the thread is exiting and its cache was emptied
};

TENFERRO_FAST_TLS constinit thread_local thread_cache cache{};

void empty_thread_cache(void*) noexcept {
    empty_op_cache();
    // Ops freed later in this thread's exit (other keys' destructors) go
    // straight back to the heap.
    cache.state = thread_cache::phase::closed;
}

struct cleanup_key {
    pthread_key_t key{};
    bool created = pthread_key_create(&key, &empty_thread_cache) == 0;
};

/// Arranges for this thread's cache to be emptied at its exit; false if that
/// cannot be arranged (then the cache keeps nothing).
[[gnu::noinline]] bool register_cleanup() noexcept {
    static const cleanup_key k;  // pthread_key_create allocates nothing
    if (!k.created || pthread_setspecific(k.key, &cache) != 0) return false;
    cache.state = thread_cache::phase::caching;
    return true;
}

}  // namespace

void* allocate_op_memory(std::size_t size) {
    if (cache.record.asked == 0) cache.record.asked = size;
    cache.record.last_asked = size;
    const std::size_t want = rounded(size);
    for (auto& b : cache.blocks) {
        if (b.p != nullptr && b.size >= want) {
            void* p = b.p;
            b.p = nullptr;
            return p;
        }
    }
    ++cache.record.from_heap;
    return ::operator new(want);
}

void deallocate_op_memory(void* p, std::size_t size) noexcept {
    const std::size_t have = rounded(size);
    if (cache.state != thread_cache::phase::caching) {
        if (cache.state == thread_cache::phase::closed) {
            ::operator delete(p);
            return;
        }
        if (!register_cleanup()) {
            ::operator delete(p);
            return;
        }
    }
    for (auto& b : cache.blocks) {
        if (b.p == nullptr) {
            b.p = p;
            b.size = have;
            return;
        }
    }
    ::operator delete(p);
}

void keep_op_block(std::size_t size) {
    const std::size_t want = rounded(size);
    thread_cache::block* slot = nullptr;
    for (auto& b : cache.blocks) {
        if (b.p != nullptr && b.size >= want) return;  // the common case: a block is ready
        if (slot == nullptr || (slot->p != nullptr && (b.p == nullptr || b.size < slot->size))) slot = &b;
    }
    if (cache.state == thread_cache::phase::closed) return;  // this thread is exiting: nothing can be kept
    if (cache.state != thread_cache::phase::caching && !register_cleanup()) throw std::bad_alloc();
    void* p = ::operator new(want);
    if (slot->p != nullptr) ::operator delete(slot->p);  // the smallest block makes room
    slot->p = p;
    slot->size = want;
}

void* take_reserved_op_block(std::size_t size) {
    cache.record = {size, 0, 0, 0};
    const std::size_t want = rounded(size);
    for (auto& b : cache.blocks) {
        if (b.p != nullptr && b.size >= want) return std::exchange(b.p, nullptr);
    }
    return ::operator new(want);
}

void place_reserved_op_block(void* p, std::size_t size) noexcept {
    // Whatever this thread's cache phase: the initiation's allocation takes
    // the block right after (first fit: this block, or a larger one already
    // cached, which leaves this one cached instead).
    thread_cache::block* slot = &cache.blocks[0];
    for (auto& b : cache.blocks) {
        if (b.p == nullptr) {
            slot = &b;
            break;
        }
        if (b.size < slot->size) slot = &b;
    }
    if (slot->p != nullptr) ::operator delete(slot->p);  // full: the smallest block makes room
    slot->p = p;
    slot->size = rounded(size);
}

op_cache_record last_op_cache_record() noexcept { return cache.record; }

void clear_op_cache_record() noexcept { cache.record = {}; }

void empty_op_cache() noexcept {
    for (auto& b : cache.blocks) {
        if (b.p != nullptr) ::operator delete(b.p);
        b.p = nullptr;
    }
}

}  // namespace tenferro::detail
