#pragma once
// Operation storage. Every asynchronous operation of the library (a session
// entry, a batch item, a .npy read or write) is one heap block, its "op",
// allocated with the completion handler's associated allocator and freed with
// it, as Asio's own operations are.
//
// A handler that names no allocator gets op_allocator: a small per-thread
// cache of blocks (src/async/op_allocator.cpp). An op is allocated where it is
// initiated and freed where its handler runs: for a coroutine, the same I/O
// thread. Asio's own recycling cache would serve it, but on that thread it is
// shared with the blocks of every hop back from the compute workers (allocated
// on a worker, freed on the I/O thread), which keep evicting the op's larger
// block; a cache used only for ops keeps a steady request loop off malloc.
//
// An op may live in a block sized for another type (`Block`): the completion
// of an entry whose op could not be built reuses the op's block, and the
// inline fast path's completion takes a block large enough for the op it may
// turn into. The block is allocated and freed as a `Block` either way.

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

namespace tenferro::detail {

/// A block of at least `size` bytes, aligned for any standard type: from this
/// thread's cache when one is big enough.
void* allocate_op_memory(std::size_t size);
void deallocate_op_memory(void* p, std::size_t size) noexcept;
/// Makes sure that this thread's next allocate_op_memory of up to `size`
/// bytes is served from the cache, without allocating: throws std::bad_alloc
/// now, where the caller may still throw, instead of there. For a block that
/// may not be asked for (the next hop of a coroutine the library spawns); an
/// initiation's own block is carried instead (reserved_op_block).
void keep_op_block(std::size_t size);

/// A block of `size` bytes for a reservation an initiation carries
/// (reserved_op_block): from this thread's cache when one is big enough, else
/// the heap. Recorded as this thread's reservation (op_cache_record.hpp).
/// Throws std::bad_alloc.
void* take_reserved_op_block(std::size_t size);
/// Puts a carried block of `size` bytes into this thread's cache, where the
/// next allocate_op_memory of up to `size` bytes finds it. Allocates nothing.
void place_reserved_op_block(void* p, std::size_t size) noexcept;

/// The check of an S19 reservation against the block the initiation then
/// allocates: when they differ, the static_assert fails and the compiler's
/// "in instantiation of" line names both sizes.
template <std::size_t Reserved, std::size_t Allocated>
struct s19_reservation {
    static_assert(Reserved == Allocated,
                  "tenferro: the op block reserved before this use_awaitable initiation (S19) is not the block it "
                  "allocates: this Asio lays out the token's completion handler otherwise than "
                  "the library models it (docs/asio-detail-pins.md)");
    static constexpr bool checked = true;
};

/// S19's reservation for an initiation that Asio runs inside a noexcept
/// function (use_awaitable and its adapters): the block its first allocation
/// takes, taken when the operation is made, in the caller's coroutine, where
/// std::bad_alloc still reaches the co_await, and carried by the initiation
/// object until Asio runs it. Carried rather than left in this thread's cache:
/// an awaitable kept and awaited later (on this thread or another, once the
/// coroutine has moved), or awaited beside others (`a && b`, a parallel
/// group), finds its own block whatever initiated on the thread meanwhile.
/// `Size` 0: no reservation (a token whose initiation may throw, or a handler
/// with its own allocator), and no member bytes. Held `mutable` by the
/// initiations (Asio calls them as const or as rvalues, depending on the
/// adapter); an awaitable destroyed unawaited gives the block back to the
/// destroying thread's cache.
template <std::size_t Size>
class reserved_op_block {
public:
    static constexpr bool from_own_allocator = false;
    /// Takes the block (throws std::bad_alloc).
    static reserved_op_block take() { return reserved_op_block(take_reserved_op_block(Size)); }
    reserved_op_block(reserved_op_block&& other) noexcept : block_(std::exchange(other.block_, nullptr)) {}
    reserved_op_block& operator=(reserved_op_block&&) = delete;
    ~reserved_op_block() {
        if (block_ != nullptr) deallocate_op_memory(block_, Size);
    }
    /// Right before the initiation allocates: the block goes to this thread's
    /// cache, where that allocation finds it (and stays there if it does not).
    struct placed {};
    [[nodiscard]] placed place() noexcept {
        if (block_ != nullptr) place_reserved_op_block(std::exchange(block_, nullptr), Size);
        return {};
    }
    /// The check of this reservation against the block the initiation
    /// allocates first (`Allocated` bytes, aligned for `Align`).
    template <std::size_t Allocated, std::size_t Align>
    static constexpr bool check() noexcept {
        return s19_reservation<Size, Allocated>::checked;
    }

private:
    explicit reserved_op_block(void* block) noexcept : block_(block) {}
    void* block_;
};
template <>
class reserved_op_block<0> {
public:
    static constexpr bool from_own_allocator = false;
    static reserved_op_block take() noexcept { return {}; }
    struct placed {};
    [[nodiscard]] placed place() noexcept { return {}; }
    template <std::size_t Allocated, std::size_t Align>
    static constexpr bool check() noexcept {
        return true;
    }
};

/// The allocator of ops whose handler names none: the per-thread cache.
template <class T>
struct op_allocator {
    using value_type = T;
    op_allocator() noexcept = default;
    template <class U>
    op_allocator(const op_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
    T* allocate(std::size_t n) {
        // Over-aligned ops (a handler or body with alignas(64) members)
        // bypass the cache, whose blocks have the default new alignment.
        if constexpr (alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
            return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{alignof(T)}));
        else
            return static_cast<T*>(allocate_op_memory(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if constexpr (alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
            ::operator delete(p, n * sizeof(T), std::align_val_t{alignof(T)});
        else
            deallocate_op_memory(p, n * sizeof(T));
    }
    template <class U>
    bool operator==(const op_allocator<U>&) const noexcept {
        return true;
    }
};

/// The allocator `Handler` is associated with, op_allocator by default.
template <class Handler>
using handler_allocator_t = asio::associated_allocator_t<Handler, op_allocator<void>>;

/// True when `Handler` names no allocator of its own (its op lives in the
/// per-thread cache).
template <class Handler>
inline constexpr bool uses_op_cache_v = std::is_same_v<handler_allocator_t<Handler>, op_allocator<void>>;

/// A block of `Size` bytes aligned for `Align` (its size: `Size` rounded up
/// to a multiple of `Align`): the `Block` of an op that lives in a block
/// sized for more than itself, and the type every op is allocated as from a
/// handler's own allocator (own_op_allocator).
template <std::size_t Size, std::size_t Align = __STDCPP_DEFAULT_NEW_ALIGNMENT__>
struct alignas(Align) op_block {
    unsigned char bytes[Size];
};

/// The block type a `T` is allocated as from a handler's own allocator: `T`'s
/// bytes, then one byte that says where the block came from (own_block_origin),
/// read when it is freed.
template <std::size_t Size, std::size_t Align>
using own_block_for = op_block<Size + 1, Align>;
template <class T>
using own_block_t = own_block_for<sizeof(T), alignof(T)>;

/// Where an own block came from: the handler's allocator, or the reserve an
/// initiation carried for when that allocator throws (reserved_fallback_block).
enum class own_block_origin : unsigned char { allocator, reserve };

/// The origin byte of an own block: its last byte but the alignment padding,
/// just past the `T` it is for, so no object built in the block reaches it.
template <std::size_t Size, std::size_t Align>
own_block_origin& origin_of(op_block<Size, Align>* block) noexcept {
    return reinterpret_cast<own_block_origin&>(block->bytes[Size - 1]);
}

/// The reserve's block (reserved_fallback_block): from this thread's op cache,
/// or the heap where the block is over-aligned for the cache.
template <class Block>
void* take_reserve_block() {
    if constexpr (alignof(Block) > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
        return ::operator new(sizeof(Block), std::align_val_t{alignof(Block)});
    else
        return take_reserved_op_block(sizeof(Block));
}
template <class Block>
void release_reserve_block(void* p) noexcept {
    if constexpr (alignof(Block) > __STDCPP_DEFAULT_NEW_ALIGNMENT__)
        ::operator delete(p, std::align_val_t{alignof(Block)});
    else
        deallocate_op_memory(p, sizeof(Block));
}

/// This thread's block reserved for a handler's own allocator, placed by an
/// initiation right before it allocates (reserved_own_block::place,
/// reserved_fallback_block::place) and taken by that allocation
/// (own_op_allocator::allocate). `kind` names the block type and the
/// allocator's type (own_block_kind), so that only an allocation of exactly
/// that block from that allocator type takes it. `fallback`: the block is the
/// op cache's, to be taken only if the allocator throws.
struct placed_own_block {
    void* block = nullptr;
    const void* kind = nullptr;
    bool fallback = false;
};
inline thread_local placed_own_block placed_own_op_block;
template <class Block, class Alloc>
inline constexpr char own_block_kind = 0;

/// A handler's own allocator (bind_allocator, use_future_t<A>), as the library
/// allocates its ops with it: every `T` as an own_block_t<T>, a type of the
/// library's, so that a block reserved from the allocator before the
/// initiation (S19, reserved_own_block) is of the very type the initiation
/// then allocates and frees, whatever the handler's type. An allocation takes
/// the block this thread's initiation placed for it, if any; where that block
/// is a fallback, the allocator is asked first, and the fallback serves only
/// if it throws (inside Asio's noexcept function, where nothing may escape).
template <class T, class Alloc>
struct own_op_allocator {
    using value_type = T;
    using block = own_block_t<T>;
    using block_allocator = typename std::allocator_traits<Alloc>::template rebind_alloc<block>;
    block_allocator inner;

    explicit own_op_allocator(const Alloc& a) noexcept : inner(a) {}
    template <class U>
    own_op_allocator(const own_op_allocator<U, Alloc>& other) noexcept  // NOLINT(google-explicit-constructor)
        : inner(other.inner) {}

    T* allocate(std::size_t n) {
        placed_own_block& placed = placed_own_op_block;
        if (n == 1 && placed.kind == &own_block_kind<block, Alloc>) {
            placed.kind = nullptr;
            void* p = std::exchange(placed.block, nullptr);
            if (!placed.fallback) return static_cast<T*>(p);
            try {
                block* b = std::allocator_traits<block_allocator>::allocate(inner, 1);
                release_reserve_block<block>(p);
                origin_of(b) = own_block_origin::allocator;
                return reinterpret_cast<T*>(b);
            } catch (...) {
                origin_of(static_cast<block*>(p)) = own_block_origin::reserve;
                return static_cast<T*>(p);
            }
        }
        block* b = std::allocator_traits<block_allocator>::allocate(inner, n);
        for (std::size_t i = 0; i < n; ++i) origin_of(b + i) = own_block_origin::allocator;
        return reinterpret_cast<T*>(b);
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if (n == 1 && origin_of(reinterpret_cast<block*>(p)) == own_block_origin::reserve) {
            release_reserve_block<block>(p);
            return;
        }
        std::allocator_traits<block_allocator>::deallocate(inner, reinterpret_cast<block*>(p), n);
    }
    template <class U>
    bool operator==(const own_op_allocator<U, Alloc>& other) const noexcept {
        return inner == block_allocator(other.inner);
    }
};

/// The allocator a block of type `Block` for `Handler` is allocated with: the
/// op cache's, or the handler's own (own_op_allocator).
template <class Block, class Handler>
using op_allocator_t = std::conditional_t<uses_op_cache_v<Handler>, op_allocator<Block>,
                                          own_op_allocator<Block, handler_allocator_t<Handler>>>;

/// `handler`'s allocator for a `Block`.
template <class Block, class Handler>
op_allocator_t<Block, Handler> op_allocator_for(const Handler& handler) noexcept {
    if constexpr (uses_op_cache_v<Handler>)
        return op_allocator<Block>();
    else
        return op_allocator_t<Block, Handler>(asio::get_associated_allocator(handler, op_allocator<void>()));
}

/// S19's reservation when the handler Asio makes for the token names its own
/// allocator (`bind_allocator(a, use_awaitable)`): the op's block, a `Block`
/// (own_block_t of the op), allocated from `Alloc` (the token's allocator)
/// when the operation is made, in the caller's coroutine, where
/// std::bad_alloc still reaches the co_await, and placed for this thread's
/// next allocation of that block from that allocator type right before the
/// initiation allocates. The allocator sees one allocation and one
/// deallocation of one type, as for any op; the initiation allocates nothing
/// from it. An awaitable destroyed unawaited gives the block back to the
/// allocator, and so does an initiation that did not take it.
template <class Alloc, class Block>
class reserved_own_block {
    using block_allocator = typename std::allocator_traits<Alloc>::template rebind_alloc<Block>;

public:
    static constexpr bool from_own_allocator = true;
    /// Takes the block from `a` (throws what `a` throws).
    static reserved_own_block take(const Alloc& a) {
        block_allocator alloc(a);
        Block* block = std::allocator_traits<block_allocator>::allocate(alloc, 1);
        origin_of(block) = own_block_origin::allocator;
        return reserved_own_block(std::move(alloc), block);
    }
    reserved_own_block(reserved_own_block&& other) noexcept
        : alloc_(other.alloc_), block_(std::exchange(other.block_, nullptr)) {}
    reserved_own_block& operator=(reserved_own_block&&) = delete;
    ~reserved_own_block() { release(block_); }

    /// The block placed while the initiation runs: taken by its allocation,
    /// or given back when the initiation ends without taking it.
    class placed {
    public:
        explicit placed(const reserved_own_block& owner) noexcept : owner_(owner) {}
        placed(const placed&) = delete;
        placed& operator=(const placed&) = delete;
        ~placed() {
            placed_own_block& slot = placed_own_op_block;
            if (slot.kind == &own_block_kind<Block, Alloc>) {
                owner_.release(static_cast<Block*>(slot.block));
                slot = {};
            }
        }

    private:
        const reserved_own_block& owner_;
    };
    [[nodiscard]] placed place() noexcept {
        placed_own_op_block = {std::exchange(block_, nullptr), &own_block_kind<Block, Alloc>, false};
        return placed(*this);
    }
    /// The check of this reservation against the block the initiation
    /// allocates first (`Allocated` bytes aligned for `Align`): the same
    /// own block type.
    template <std::size_t Allocated, std::size_t Align>
    static constexpr bool check() noexcept {
        return s19_reservation<sizeof(Block), sizeof(own_block_for<Allocated, Align>)>::checked &&
               s19_reservation<alignof(Block), Align>::checked;
    }

private:
    reserved_own_block(block_allocator alloc, Block* block) noexcept : alloc_(std::move(alloc)), block_(block) {}
    void release(Block* block) const noexcept {
        if (block == nullptr) return;
        block_allocator alloc(alloc_);
        std::allocator_traits<block_allocator>::deallocate(alloc, block, 1);
    }
    block_allocator alloc_;
    Block* block_;
};

/// S19's reservation when the handler Asio makes for the token names its own
/// allocator but the token does not let the library reach it before the
/// initiation (an allocator bound inside `consign`, which keeps the token it
/// wraps private): the allocator is asked inside the initiation, as for any
/// handler, and a block of the same size, taken from this thread's op cache
/// when the operation is made (where std::bad_alloc still reaches the
/// co_await), is the op's instead if it throws there. The block remembers
/// where it came from (own_block_origin) and goes back there. An initiation
/// that does not take the reserve gives it back to the op cache, and so does
/// an awaitable destroyed unawaited.
template <class Alloc, class Block>
class reserved_fallback_block {
public:
    static constexpr bool from_own_allocator = false;
    /// Takes the reserve (throws std::bad_alloc).
    static reserved_fallback_block take() { return reserved_fallback_block(take_reserve_block<Block>()); }
    reserved_fallback_block(reserved_fallback_block&& other) noexcept : block_(std::exchange(other.block_, nullptr)) {}
    reserved_fallback_block& operator=(reserved_fallback_block&&) = delete;
    ~reserved_fallback_block() {
        if (block_ != nullptr) release_reserve_block<Block>(block_);
    }

    /// The reserve placed while the initiation runs: taken by its allocation
    /// if the allocator throws, else given back.
    class placed {
    public:
        placed() = default;
        placed(const placed&) = delete;
        placed& operator=(const placed&) = delete;
        ~placed() {
            placed_own_block& slot = placed_own_op_block;
            if (slot.kind == &own_block_kind<Block, Alloc>) {
                release_reserve_block<Block>(slot.block);
                slot = {};
            }
        }
    };
    [[nodiscard]] placed place() noexcept {
        placed_own_op_block = {std::exchange(block_, nullptr), &own_block_kind<Block, Alloc>, true};
        return {};
    }
    template <std::size_t Allocated, std::size_t Align>
    static constexpr bool check() noexcept {
        return s19_reservation<sizeof(Block), sizeof(own_block_for<Allocated, Align>)>::checked &&
               s19_reservation<alignof(Block), Align>::checked;
    }

private:
    explicit reserved_fallback_block(void* block) noexcept : block_(block) {}
    void* block_;
};

/// Builds `Op` from `args` in `block`, a `Block` allocated with `alloc`; if
/// that throws, the block is freed and the exception propagates.
template <class Op, class Block, class Alloc, class... Args>
Op* construct_op(Block* block, Alloc alloc, Args&&... args) {
    static_assert(sizeof(Op) <= sizeof(Block) && alignof(Op) <= alignof(Block), "the op fits its block");
    try {
        return ::new (static_cast<void*>(block)) Op(std::forward<Args>(args)...);
    } catch (...) {
        std::allocator_traits<Alloc>::deallocate(alloc, block, 1);
        throw;
    }
}

/// Allocates a `Block` with `handler`'s associated allocator and builds `Op`
/// in it, the handler its constructor's first argument. Nothing leaks if
/// either step throws.
template <class Op, class Block = Op, class Handler, class... Args>
Op* make_op(Handler&& handler, Args&&... args) {
    auto alloc = op_allocator_for<Block>(handler);
    Block* block = std::allocator_traits<decltype(alloc)>::allocate(alloc, 1);
    return construct_op<Op>(block, alloc, std::forward<Handler>(handler), std::forward<Args>(args)...);
}

/// Destroys `op` and frees its block with `alloc` (an allocator of the block's
/// type, taken from the handler before the handler moved out).
template <class Op, class Alloc>
void free_op(Op* op, Alloc alloc) noexcept {
    using block = typename std::allocator_traits<Alloc>::value_type;
    op->~Op();
    std::allocator_traits<Alloc>::deallocate(alloc, reinterpret_cast<block*>(op), 1);
}

}  // namespace tenferro::detail
