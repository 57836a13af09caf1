#include "tenferro/buffer_pool.hpp"

#include <bit>
#include <new>

namespace tenferro {
namespace {

constexpr std::size_t min_class_bytes = 256;  // 2^8
constexpr std::size_t min_alignment = 64;
// Requests above this bypass the classes (their class size would overflow).
constexpr std::size_t max_class_request = std::size_t{1} << 62;

// Class 0 is 256 bytes; above that, four classes per octave: 2^k + j * 2^(k-2), j = 1..4.
std::size_t class_index(std::size_t bytes) noexcept {
    if (bytes <= min_class_bytes) return 0;
    const int k = std::bit_width(bytes - 1) - 1;  // 2^k < bytes <= 2^(k+1)
    const std::size_t quarter = std::size_t{1} << (k - 2);
    const std::size_t j = (bytes - (std::size_t{1} << k) + quarter - 1) / quarter;  // 1..4
    return 1 + static_cast<std::size_t>(k - 8) * 4 + (j - 1);
}

std::size_t index_size(std::size_t index) noexcept {
    if (index == 0) return min_class_bytes;
    const std::size_t k = 8 + (index - 1) / 4;
    const std::size_t j = (index - 1) % 4 + 1;
    return (std::size_t{1} << k) + j * (std::size_t{1} << (k - 2));
}

bool pooled(std::size_t bytes, std::size_t alignment) noexcept {
    return alignment <= min_alignment && bytes <= max_class_request;
}

void* allocate_raw(std::size_t bytes, std::size_t alignment) {
    return ::operator new(bytes, std::align_val_t(alignment < min_alignment ? min_alignment : alignment));
}

void free_raw(void* p, std::size_t alignment) noexcept {
    ::operator delete(p, std::align_val_t(alignment < min_alignment ? min_alignment : alignment));
}

}  // namespace

std::size_t buffer_pool::class_size(std::size_t bytes) noexcept {
    return bytes > max_class_request ? bytes : index_size(class_index(bytes));
}

buffer_pool::~buffer_pool() { trim(); }

buffer_pool_stats buffer_pool::stats() const {
    std::lock_guard lock(mutex_);
    buffer_pool_stats s = stats_;
    s.capacity_bytes = capacity_;
    return s;
}

void buffer_pool::trim() noexcept {
    std::array<free_block*, class_count> lists;
    {
        std::lock_guard lock(mutex_);
        lists = free_;
        free_.fill(nullptr);
        stats_.retained_bytes = 0;
        stats_.retained_blocks = 0;
    }
    // Free outside the lock: operator delete may take its own locks.
    for (free_block* head : lists) {
        while (head != nullptr) {
            free_block* next = head->next;
            free_raw(head, min_alignment);
            head = next;
        }
    }
}

void* buffer_pool::do_allocate(std::size_t bytes, std::size_t alignment) {
    if (!pooled(bytes, alignment)) {
        void* p = allocate_raw(bytes, alignment);
        std::lock_guard lock(mutex_);
        ++stats_.allocations;
        ++stats_.misses;
        stats_.outstanding_bytes += bytes;
        return p;
    }
    const std::size_t index = class_index(bytes);
    const std::size_t size = index_size(index);
    {
        std::lock_guard lock(mutex_);
        ++stats_.allocations;
        stats_.outstanding_bytes += size;
        if (free_block* b = free_[index]) {
            free_[index] = b->next;
            ++stats_.hits;
            stats_.retained_bytes -= size;
            --stats_.retained_blocks;
            return b;
        }
        ++stats_.misses;
    }
    try {
        return allocate_raw(size, min_alignment);
    } catch (...) {
        std::lock_guard lock(mutex_);
        --stats_.allocations;
        --stats_.misses;
        stats_.outstanding_bytes -= size;
        throw;
    }
}

void buffer_pool::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) {
    if (p == nullptr) return;
    if (!pooled(bytes, alignment)) {
        {
            std::lock_guard lock(mutex_);
            ++stats_.releases;
            ++stats_.discarded;
            stats_.outstanding_bytes -= bytes;
        }
        free_raw(p, alignment);
        return;
    }
    const std::size_t index = class_index(bytes);
    const std::size_t size = index_size(index);
    {
        std::lock_guard lock(mutex_);
        ++stats_.releases;
        stats_.outstanding_bytes -= size;
        if (size <= capacity_ && stats_.retained_bytes <= capacity_ - size) {
            auto* b = ::new (p) free_block{free_[index]};
            free_[index] = b;
            stats_.retained_bytes += size;
            ++stats_.retained_blocks;
            return;
        }
        ++stats_.discarded;
    }
    free_raw(p, min_alignment);
}

}  // namespace tenferro
