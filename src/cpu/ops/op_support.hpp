#pragma once
// What every session operation shares: argument validation with messages that
// name the op, the operand and the offending shapes / dtypes / axes; numpy
// broadcasting; `_into` output checks; the planning of kernel loops over
// strided operands; and the fixed chunking used for intra-op parallelism.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kernels/nd_loop.hpp"
#include "tenferro/backend_session.hpp"
#include "tenferro/buffer_pool.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro::detail::ops {

using kernels::make_loop;  // kernels/nd_loop.hpp
using kernels::nd_loop;

/// Throws `tensor_error` with `op + ": " + what`.
[[noreturn]] void fail(std::string_view op, const std::string& what);

/// `op: operand NAME has dtype i32, but OP needs f32 or f64`.
void require_float(std::string_view op, std::string_view operand, dtype t);

/// `op: operand B has dtype f64, which differs from A's dtype f32`.
void require_same_dtype(std::string_view op, std::string_view a_name, dtype a, std::string_view b_name, dtype b);

/// The numpy broadcast of two shapes; throws
/// `op: operand B has shape [2, 4], which does not broadcast with A's shape [2, 3]`.
extents broadcast_shapes(std::string_view op, std::string_view a_name, std::span<const std::int64_t> a,
                         std::string_view b_name, std::span<const std::int64_t> b);

/// Strides that read `v` broadcast to `shape` (0 on stretched and new axes).
/// `v`'s shape must broadcast to `shape` (checked by the caller).
extents broadcast_strides(const const_tensor_view& v, std::span<const std::int64_t> shape);

/// `axis` in [-rank, rank) made non-negative; throws
/// `op: axis 2 is out of range for operand x of shape [2, 3] (rank 2)`.
std::int64_t normalize_axis(std::string_view op, std::int64_t axis, std::string_view operand,
                            std::span<const std::int64_t> shape);

/// A bit per axis of `shape` named in `axes` (negative axes count from the end;
/// empty = all axes). Throws for out-of-range axes and for repeated axes
/// (`op: axis -1 is repeated in axes [1, -1] of operand x with shape [2, 3]`).
std::uint32_t axes_mask(std::string_view op, std::span<const std::int64_t> axes, std::string_view operand,
                        std::span<const std::int64_t> shape);

/// Checks an `_into` output against the result it must hold: dtype and shape
/// equal, and no stride-0 axis of extent > 1 (an output must not alias its
/// own elements).
void check_out(std::string_view op, std::string_view out_name, const tensor_view& out, dtype type,
               std::span<const std::int64_t> shape);

/// Throws `op: out overlaps operand a (...)` when `overlaps(out, input)`.
void check_no_overlap(std::string_view op, std::string_view out_name, const tensor_view& out,
                      std::string_view input_name, const const_tensor_view& input);

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
void for_range(backend_session& session, std::int64_t count, std::int64_t cost,
               function_ref<void(std::int64_t, std::int64_t)> body);

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

/// `f32` or `f64`.
inline bool is_float(dtype t) noexcept { return t == dtype::f32 || t == dtype::f64; }

/// The element count of a shape (1 for rank 0).
std::int64_t element_count(std::span<const std::int64_t> shape) noexcept;

/// `"[2, 3]"`.
inline std::string str(std::span<const std::int64_t> v) { return to_string(v); }

/// One call's scratch memory from the session's buffer pool (64-byte aligned,
/// nullptr for 0 bytes), given back on scope exit, whatever the exit.
class pooled_scratch {
public:
    pooled_scratch(buffer_pool& pool, std::size_t bytes) : pool_(pool), bytes_(bytes) {
        data_ = bytes_ ? pool_.allocate(bytes_, 64) : nullptr;
    }
    ~pooled_scratch() {
        if (data_) pool_.deallocate(data_, bytes_, 64);
    }
    pooled_scratch(const pooled_scratch&) = delete;
    pooled_scratch& operator=(const pooled_scratch&) = delete;
    void* get() const noexcept { return data_; }

private:
    buffer_pool& pool_;
    std::size_t bytes_;
    void* data_;
};

}  // namespace tenferro::detail::ops
