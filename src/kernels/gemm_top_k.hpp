#pragma once
// Fused GEMM + top-k: for each row i of C = A·B, the `count` largest C[i, j] and their column
// indices j, without materialising C (the kernel under matmul_top_k, src/cpu/ops/search.cpp).
//
//     kernels::gemm_top_k_plan plan = kernels::plan_gemm_top_k(kernels::gemm_type::f32, m, n, k, count, threads);
//     kernels::gemm_top_k(kernels::gemm_type::f32, op, plan, packed_b /* or nullptr */, scratch, run);
//
// * Exactness: every score is computed by gemm's own micro-kernel with gemm's K slices, so
//   score (i, j) has the bits gemm gives C[i, j] (alpha = 1, beta = 0) on the same Highway target,
//   and the result is exactly that of rowwise's top_k over the row of C: NaN ranks above every
//   number, +0 and -0 tie, equal values go to the lower index.
// * The product is computed in score tiles (`plan.tile_rows` x `plan.tile_cols`, a few hundred
//   KiB, in L2); each tile is folded into per-row top-k state as soon as it is complete. The
//   columns of C (the rows of a search corpus) are split over the tasks, each keeping its own
//   top-k state per row; the states are merged at the end. A is packed once for all tasks.
// * B may come prepacked: `pack_b(plan.gemm, ...)` (gemm.hpp) makes it, and any matmul plan of
//   the same packed_b_key can share it (plan.gemm is a plain, unswapped gemm plan).
// * Design and measurements: docs/gemm.md ("Fused top-k").

#include <cstddef>
#include <cstdint>

#include "kernels/gemm.hpp"

namespace tenferro::kernels {

/// One fused product: A (m x k) times B (k x n), strides in elements as in gemm_operands; the
/// `count` best of each row of the product go to values (row i at values + i * values_row_stride,
/// entries values_col_stride apart; same for indices). Pointers are float / double per gemm_type.
struct gemm_top_k_operands {
    std::int64_t m = 0, n = 0, k = 0, count = 0;
    const void* a = nullptr;
    std::int64_t a_row_stride = 0, a_col_stride = 0;
    const void* b = nullptr;
    std::int64_t b_row_stride = 0, b_col_stride = 0;
    void* values = nullptr;
    std::int64_t values_row_stride = 0, values_col_stride = 0;
    std::int64_t* indices = nullptr;
    std::int64_t indices_row_stride = 0, indices_col_stride = 0;
    /// Optional: the columns of B each row of A may return (a live corpus's visible rows that pass
    /// a query's filter). allowed[i] is row i's bitmap (column j: bit j % 64 of word j / 64), or
    /// null for every column; `allowed` itself null: every column of every row. The other columns
    /// are scored but never enter the top k. A row with fewer than `count` allowed columns gets all
    /// of them, then index -1 (value NaN) in its remaining places.
    const std::uint64_t* const* allowed = nullptr;
};

/// Bits [start, start + len) of `mask` (len <= 64), bit 0 the column `start`.
inline std::uint64_t mask_bits(const std::uint64_t* mask, std::int64_t start, std::int64_t len) noexcept {
    const std::int64_t w = start >> 6, s = start & 63;
    std::uint64_t bits = mask[w] >> s;
    if (s != 0 && s + len > 64) bits |= mask[w + 1] << (64 - s);
    return len >= 64 ? bits : bits & ((std::uint64_t{1} << len) - 1);
}

struct gemm_top_k_plan {
    /// The GEMM blocking (mr, nr, kc, target) and the packed-B layout; never swapped.
    /// gemm.tasks_n is the number of column tasks.
    gemm_plan gemm;
    std::int64_t count = 0;
    std::int32_t tile_rows = 0, tile_cols = 0;  ///< one score tile
    std::size_t scratch_bytes = 0;              ///< packed A, per-task tiles, B panels and top-k state
};

/// The plan of an m x n x k product keeping `count` (<= n) per row, for up to `threads` tasks.
gemm_top_k_plan plan_gemm_top_k(gemm_type type, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count,
                                int threads);

/// Runs it. `packed_b`: B made by pack_b(plan.gemm, ...) (op.b is then not read), or nullptr.
/// `scratch`: plan.scratch_bytes bytes, any alignment, or nullptr (allocated here). `run` as gemm's.
void gemm_top_k(gemm_type type, const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed_b,
                void* scratch, gemm_runner run);
void gemm_top_k(gemm_type type, const gemm_top_k_operands& op, const gemm_top_k_plan& plan,
                const void* packed_b = nullptr, void* scratch = nullptr);

}  // namespace tenferro::kernels
