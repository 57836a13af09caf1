#include "tenferro/detail/entry_memory.hpp"

#include "admission/fast_tls.hpp"

#include <array>
#include <cstdlib>

namespace tenferro::detail {
namespace {

// Blocks are rounded up to 16 bytes (malloc's own granule and alignment): one
// cached block then serves every entry type up to its size. (They were cache
// lines once, 64 bytes, aligned: up to ~100 bytes more per parked entry.)
constexpr std::size_t granule = 16;
constexpr std::size_t slots = 8;  // enough for a few outstanding entries per thread

std::size_t rounded(std::size_t size) noexcept { return (size + granule - 1) / granule * granule; }

struct thread_cache {
    struct block {
        void* p = nullptr;
        std::size_t size = 0;
    };
    std::array<block, slots> blocks{};

    ~thread_cache() {
        for (block& b : blocks)
            if (b.p != nullptr) ::operator delete(b.p);
    }
};

TENFERRO_FAST_TLS thread_local thread_cache cache;

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
