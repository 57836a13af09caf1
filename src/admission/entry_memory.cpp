#include "tenferro/detail/entry_memory.hpp"

#include "admission/fast_tls.hpp"

#include <cstdlib>

namespace tenferro::detail {
namespace {

// Blocks are rounded up to 16 bytes (malloc's own granule and alignment): one
// cached block then serves every entry type up to its size. (They were cache
// lines once, 64 bytes, aligned: up to ~100 bytes more per parked entry.)
constexpr std::size_t granule = 16;
constexpr std::size_t slots = 8;  // enough for a few outstanding entries per thread

std::size_t rounded(std::size_t size) noexcept { return (size + granule - 1) / granule * granule; }

// The cache is plain data (constant-initialised, no destructor), so that the
// hot path reads it at a fixed offset from the thread pointer. A thread_local
// with a destructor needs a guard, and the guard of such a variable goes
// through __tls_get_addr even with the initial-exec model (~22 instructions per
// entry). The blocks a thread leaves cached are freed by a separate
// thread_local, touched once per thread, when its cache first keeps a block.
struct thread_cache {
    struct block {
        void* p;
        std::size_t size;
    };
    enum class phase : unsigned char { unregistered, caching, closed };
    block blocks[slots];
    phase state;  // closed: the thread is exiting and its cache was emptied
};

TENFERRO_FAST_TLS constinit thread_local thread_cache cache{};

struct thread_cache_cleanup {
    ~thread_cache_cleanup() {
        for (auto& b : cache.blocks) {
            if (b.p != nullptr) ::operator delete(b.p);
            b.p = nullptr;
        }
        // Entries freed later in this thread's exit (other thread_locals'
        // destructors) go straight back to the heap.
        cache.state = thread_cache::phase::closed;
    }
};

[[gnu::noinline]] void register_cleanup() noexcept {
    static thread_local thread_cache_cleanup cleanup;
    (void)cleanup;  // constructing it registers its destructor for this thread's exit
    cache.state = thread_cache::phase::caching;
}

}  // namespace

void* allocate_entry_memory(std::size_t size) {
    const std::size_t want = rounded(size);
    for (auto& b : cache.blocks) {
        if (b.p != nullptr && b.size >= want) {
            void* p = b.p;
            b.p = nullptr;
            return p;
        }
    }
    return ::operator new(want);
}

void deallocate_entry_memory(void* p, std::size_t size) noexcept {
    const std::size_t have = rounded(size);
    if (cache.state != thread_cache::phase::caching) {
        if (cache.state == thread_cache::phase::closed) {
            ::operator delete(p);
            return;
        }
        register_cleanup();
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

}  // namespace tenferro::detail
