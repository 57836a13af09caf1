#pragma once
// What every CPU operation shares beyond the operand checks of the op interface
// (ops/operand_checks.hpp, included): the planning of kernel loops over strided
// operands, the fixed chunking used for intra-op parallelism, the contiguous
// fast path's tests and scratch memory from the session's buffer pool.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kernels/nd_loop.hpp"
#include "kernels/stop_point.hpp"
#include "ops/operand_checks.hpp"
#include "tenferro/backend_session.hpp"
#include "tenferro/buffer_pool.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro::detail::ops {

using kernels::make_loop;  // kernels/nd_loop.hpp
using kernels::nd_loop;

/// Strides that read `v` broadcast to `shape` (0 on stretched and new axes).
/// `v`'s shape must broadcast to `shape` (checked by the caller).
extents broadcast_strides(const const_tensor_view& v, std::span<const std::int64_t> shape);

/// As make_loop<1>, for reductions whose visiting order is free: negative
/// strides are flipped (moving `base_offset` to the lowest element) and axes
/// sorted by decreasing |stride| before merging, so any permuted or reversed
/// dense view becomes one unit-stride run.
nd_loop<1> make_memory_order_loop(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                                  std::int64_t& base_offset);

/// Element counts from which an op splits its work over the session's workers,
/// and the work unit it hands each worker (fixed, so results never depend on
/// the parallelism).
inline constexpr std::int64_t parallel_threshold = std::int64_t{1} << 16;
inline constexpr std::int64_t parallel_grain = std::int64_t{1} << 15;

/// Runs `body(begin, end)` over [0, count): inline when `count * cost <
/// parallel_threshold` or the session has one worker, otherwise through
/// `session.parallel_for` with ranges of at least `parallel_grain / cost` items.
/// In an operation that can be stopped (S20), each range is run in steps of
/// `parallel_grain / cost` items with a stop check before each, so that a stop
/// is seen within one step whatever the operation's size. (The bodies' results
/// do not depend on where a range ends: they are bitwise the same whatever the
/// parallelism.)
void for_range(backend_session& session, std::int64_t count, std::int64_t cost,
               function_ref<void(std::int64_t, std::int64_t)> body);

/// One operation of a session (S20): marks the calling thread with the
/// session's stop token for the kernels (kernels/stop_point.hpp) and checks it
/// once at the start (throws session_stopped).
class op_stop_scope {
public:
    explicit op_stop_scope(const std::stop_token& token) : scope_(token) { kernels::stop_point(); }

private:
    kernels::stop_scope scope_;
};

// ---- the contiguous fast path ---------------------------------------------------
//
// An `_into` call whose operands and output all have one shape, are row-major
// dense and do not overlap passes every check by construction; it skips the
// general validation and loop planning and calls the kernels' dense entry
// points (pointers and a count; copy_into a memcpy), whose results are bitwise
// those of the general path over the one-axis loop make_loop would build.
// Anything else, including every invalid call, takes the general path, which
// throws the same errors as before.

/// Whether `first` and every view of `rest` have one shape and are row-major
/// dense (C-contiguous; strides of extent-1 axes ignored). Sets `n` to the
/// element count when true.
inline bool dense_alike(std::int64_t& n, const auto& first, const auto&... rest) noexcept {
    const std::size_t rank = first.rank();
    if (((rest.rank() != rank) || ...)) return false;
    const std::int64_t* shape = first.shape().data();
    const std::int64_t* strides = first.strides().data();
    std::int64_t expected = 1;
    for (std::size_t d = rank; d-- > 0;) {
        const std::int64_t e = shape[d];
        if (((rest.shape()[d] != e) || ...)) return false;
        if (e == 1) continue;
        if (strides[d] != expected || ((rest.strides()[d] != expected) || ...)) return false;
        expected *= e;
    }
    n = expected;
    return true;
}

/// Whether the byte ranges [p, p + p_bytes) and [q, q + q_bytes) are disjoint
/// (`overlaps` for dense views).
inline bool disjoint(const void* p, std::int64_t p_bytes, const void* q, std::int64_t q_bytes) noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(q);
    return a + static_cast<std::uintptr_t>(p_bytes) <= b || b + static_cast<std::uintptr_t>(q_bytes) <= a;
}

/// One call's scratch memory from the session's buffer pool (64-byte aligned,
/// nullptr for 0 bytes), given back on scope exit, whatever the exit.
class pooled_scratch {
public:
    pooled_scratch(std::pmr::memory_resource& pool, std::size_t bytes) : pool_(pool), bytes_(bytes) {
        data_ = bytes_ ? pool_.allocate(bytes_, 64) : nullptr;
    }
    ~pooled_scratch() {
        if (data_) pool_.deallocate(data_, bytes_, 64);
    }
    pooled_scratch(const pooled_scratch&) = delete;
    pooled_scratch& operator=(const pooled_scratch&) = delete;
    void* get() const noexcept { return data_; }

private:
    std::pmr::memory_resource& pool_;
    std::size_t bytes_;
    void* data_;
};

}  // namespace tenferro::detail::ops
