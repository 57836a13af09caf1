#pragma once
/// \file
/// `buffer_pool`: a thread-safe, size-classed memory resource that keeps freed
/// blocks for reuse up to a retention cap. Each host owns one; its sessions
/// allocate their outputs and temporaries from it, so a steady request loop
/// reuses the same blocks instead of calling `operator new` for every output.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <mutex>

namespace tenferro {

/// A snapshot of a `buffer_pool`'s counters.
struct buffer_pool_stats {
    std::size_t capacity_bytes = 0;     ///< the retention cap
    std::size_t retained_bytes = 0;     ///< bytes held in the free lists (always `<= capacity_bytes`)
    std::size_t retained_blocks = 0;    ///< blocks held in the free lists
    std::size_t outstanding_bytes = 0;  ///< bytes handed out and not yet returned (size-class rounded)
    std::uint64_t allocations = 0;      ///< allocation requests
    std::uint64_t hits = 0;             ///< requests served from a free list
    std::uint64_t misses = 0;           ///< requests that went to `operator new`
    std::uint64_t releases = 0;         ///< blocks given back to the pool
    std::uint64_t discarded = 0;        ///< given-back blocks freed because keeping them would exceed the cap
};

/// A `std::pmr::memory_resource` with power-of-two size classes (four classes
/// per octave, so a block wastes at most a quarter of its request) and
/// per-class free lists that retain at most `capacity_bytes` in total.
///
/// - `allocate(n, align)` serves the smallest class that fits `n` (at least
///   256 bytes) from its free list, or from the global `operator new` with at least
///   64-byte alignment. Alignments above 64 bypass the pool.
/// - `deallocate` puts the block on its class's free list when the retained
///   total stays within the cap, and frees it otherwise (counted as
///   `discarded`). Returning a block never allocates.
/// - Thread-safe: any thread may allocate and deallocate at any time (tensors
///   return their storage from whichever thread drops the last reference).
/// - The destructor frees the retained blocks. Blocks still outstanding must be
///   returned before the pool is destroyed; tensors allocated from it hold a
///   `std::shared_ptr` to it, which guarantees that.
///
/// ```cpp
/// auto pool = std::make_shared<tenferro::buffer_pool>(64 << 20);
/// tenferro::tensor t = tenferro::tensor::empty(tenferro::dtype::f32, {1024}, pool);
/// ```
class buffer_pool final : public std::pmr::memory_resource {
public:
    /// A pool that retains at most `capacity_bytes` of freed blocks (0: none).
    explicit buffer_pool(std::size_t capacity_bytes) noexcept : capacity_(capacity_bytes) {}
    ~buffer_pool() override;

    buffer_pool(const buffer_pool&) = delete;
    buffer_pool& operator=(const buffer_pool&) = delete;

    /// The retention cap in bytes.
    std::size_t capacity() const noexcept { return capacity_; }
    /// A consistent snapshot of the counters.
    buffer_pool_stats stats() const;
    /// Frees every retained block (outstanding blocks are unaffected).
    void trim() noexcept;

    /// The bytes a request of `bytes` occupies: its size class.
    static std::size_t class_size(std::size_t bytes) noexcept;

private:
    void* do_allocate(std::size_t bytes, std::size_t alignment) override;
    void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

    struct free_block {
        free_block* next;
    };
    static constexpr std::size_t class_count = 256;

    const std::size_t capacity_;
    mutable std::mutex mutex_;
    std::array<free_block*, class_count> free_{};  // guarded by mutex_
    buffer_pool_stats stats_{};                    // guarded by mutex_ (capacity_bytes filled on read)
};

}  // namespace tenferro
