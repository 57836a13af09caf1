#pragma once
// GEMM kernel: C = alpha * A·B + beta * C over strided f32/f64 matrices.
//
// The ops layer (src/cpu/ops/contraction.cpp) reduces dot_general / matmul to calls of this kernel, one
// per batch position (or one per batch range). Usage:
//
//     kernels::gemm_operands op{m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c, c_rs, c_cs, alpha, beta};
//     const kernels::gemm_plan plan = kernels::plan_gemm(kernels::gemm_type::f32, m, n, k, threads);
//     // scratch: plan.scratch_bytes bytes, any alignment (or nullptr: gemm allocates it itself)
//     kernels::gemm(kernels::gemm_type::f32, op, plan, scratch,
//                   [&](std::int64_t count, kernels::gemm_body body) { session.parallel_for(count, 1, body); });
//
// * Strides are in elements, of any sign; A and B strides may be 0 (broadcast). C must not
//   overlap A or B, and distinct (i, j) of C must be distinct elements (no zero C stride unless
//   that extent is 1).
// * `beta == 0`: C is never read (NaN/garbage in C does not leak). `k == 0`: C = beta * C (C = 0
//   when beta == 0). `m == 0 || n == 0`: nothing is touched.
// * The kernel does not validate shapes: the ops layer does (it throws tensor_error).
// * Determinism and batch invariance: every element of C is computed by the same sequence of
//   operations, whatever the thread count, the split, the path (packed, small, streaming,
//   prepacked), the number of rows of A or columns of B, or the position of the element in a
//   tile: the products A[i,p]·B[p,j] are accumulated by FMA from zero in increasing p within
//   each K slice of `plan.kc` (a per-target constant), and each slice is stored as
//   `alpha·acc + beta'·C` (beta' = beta for the first slice, 1 after). A row of C therefore has
//   the same bits computed alone (m = 1) or among a thousand rows, and bitwise identical results
//   come from any `threads` given to plan_gemm and from gemm and gemm_prepacked_b, on one Highway
//   target. They differ between targets (kc differs; FMA vs separate multiply-add).
// * A plan is tied to the Highway target that was current when it was made (tests switch targets
//   with hwy::SetSupportedTargetsForTest): gemm throws std::logic_error when the dispatched target
//   differs from `plan.target`. In production the target never changes, so cached plans stay valid.
//
// Design, blocking numbers and the error bound: docs/gemm.md.

#include <cstddef>
#include <cstdint>

#include "tenferro/detail/base/function_ref.hpp"

namespace tenferro::kernels {

/// Element type of a GEMM (the ops layer maps tenferro::dtype::f32/f64 onto it).
enum class gemm_type : std::uint8_t { f32, f64 };

/// One GEMM: C[i,j] = alpha * sum_p A[i,p] * B[p,j] + beta * C[i,j] for i < m, j < n, p < k.
/// Element (i, p) of A is at `a[i * a_row_stride + p * a_col_stride]` (same for B, C), strides in
/// elements. Pointers are `const float*`/`float*` or the double ones, per the gemm_type.
struct gemm_operands {
    std::int64_t m = 0, n = 0, k = 0;
    const void* a = nullptr;
    std::int64_t a_row_stride = 0, a_col_stride = 0;
    const void* b = nullptr;
    std::int64_t b_row_stride = 0, b_col_stride = 0;
    void* c = nullptr;
    std::int64_t c_row_stride = 0, c_col_stride = 0;
    double alpha = 1.0, beta = 0.0;  ///< converted to the element type
};

/// Blocking and work split for one (type, m, n, k, threads) on one Highway target. Cheap to make
/// (no allocation, one dispatch); the ops layer's runtime cache may store it. Fields are for
/// information and for the kernel; callers only need `scratch_bytes` (and `packed_b_bytes()`).
struct gemm_plan {
    gemm_type type = gemm_type::f32;
    std::int64_t m = 0, n = 0, k = 0;
    std::int64_t target = 0;  ///< the hwy target bit the plan was made for
    /// Register tile (rows of A broadcast x columns of B in vectors) and cache blocks: kc (depth
    /// of one packed panel: the B micro-panel kc x nr stays in L1), mc (rows of the packed A block:
    /// mc x kc stays in L2), nc (columns of the packed B panel kc x nc, in L3).
    std::int32_t mr = 0, nr = 0, kc = 0, mc = 0, nc = 0;
    /// A is read in place (no A packing): small problems (n = 8..64), and products with at
    /// most four micro-panels of B (n <= 4 nr after swapping), where packing A cannot pay.
    bool small = false;
    /// The kernel computes C^T = B^T A^T (operands swapped; used when n is narrower than a
    /// vector tile and m is not). Arithmetic per element is unchanged.
    bool swapped = false;
    /// Independent tasks: C is split into tasks_m x tasks_n rectangles (along M and N; K is
    /// never split), each packing its own panels. tasks_m * tasks_n <= threads.
    std::int32_t tasks_m = 1, tasks_n = 1;
    /// Bytes of scratch gemm / gemm_prepacked_b need (packing buffers for all tasks plus
    /// alignment slack); 0 when nothing is needed.
    std::size_t scratch_bytes = 0;
};

/// Makes the plan for a GEMM of these extents run on up to `threads` workers (>= 1) on the
/// current Highway target.
gemm_plan plan_gemm(gemm_type type, std::int64_t m, std::int64_t n, std::int64_t k, int threads);

/// The Highway target gemm dispatches to now (the value plan_gemm stores in `gemm_plan::target`):
/// one indirect call, for keying cached plans. Prefer it to hwy::SupportedTargets(), which in
/// Highway 1.0.3 re-runs CPU detection (CPUID, a VM exit each, and a timer calibration) on every
/// call: ~40-80 us here, hundreds of times an 8x8 GEMM.
std::int64_t gemm_target() noexcept;

/// body(begin, end) runs tasks [begin, end) of a gemm call.
using gemm_body = detail::function_ref<void(std::int64_t begin, std::int64_t end)>;
/// run(count, body) must call body on a partition of [0, count) into ranges, possibly on several
/// threads at once, and return when all are done (rethrowing nothing: gemm's body does not throw).
/// A session passes `[&](std::int64_t n, gemm_body b) { session.parallel_for(n, 1, b); }`.
using gemm_runner = detail::function_ref<void(std::int64_t count, gemm_body body)>;

/// Runs the GEMM. `plan` must come from plan_gemm with the same type, m, n and k. `scratch`: at
/// least `plan.scratch_bytes` bytes, any alignment, not shared with a concurrent call; nullptr
/// makes gemm allocate (and free) it. Without `run`, the tasks run one after another on the
/// calling thread (same results).
void gemm(gemm_type type, const gemm_operands& op, const gemm_plan& plan, void* scratch, gemm_runner run);
void gemm(gemm_type type, const gemm_operands& op, const gemm_plan& plan, void* scratch = nullptr);

/// Pre-packing of a constant B (a weight matrix, a search corpus): the packed form depends on
/// the plan's k, n, kc, nr, swapped and target (not on m or threads beyond what those decide),
/// so it can be made once and used by every gemm_prepacked_b whose plan has the same
/// packed_b_key. The caller owns the buffer (packed_b_bytes(plan) bytes, any alignment).
std::size_t packed_b_bytes(const gemm_plan& plan) noexcept;
/// Two plans whose keys are equal may share one packed B (the ops layer can key its cache on it).
struct packed_b_key {
    std::int64_t n = 0, k = 0, target = 0;
    std::int32_t kc = 0, nr = 0, mr = 0;
    bool swapped = false;
    gemm_type type = gemm_type::f32;
    friend bool operator==(const packed_b_key&, const packed_b_key&) = default;
};
packed_b_key packed_b_key_of(const gemm_plan& plan) noexcept;
/// Packs B (k x n, element (p, j) at b[p * b_row_stride + j * b_col_stride]) into `packed`.
void pack_b(const gemm_plan& plan, const void* b, std::int64_t b_row_stride, std::int64_t b_col_stride, void* packed);
/// As gemm, with B taken from `packed` (made by pack_b for a plan with the same packed_b_key);
/// op.b is not read. Results are bitwise identical to gemm's.
void gemm_prepacked_b(gemm_type type, const gemm_operands& op, const gemm_plan& plan, const void* packed, void* scratch,
                      gemm_runner run);
void gemm_prepacked_b(gemm_type type, const gemm_operands& op, const gemm_plan& plan, const void* packed,
                      void* scratch = nullptr);

}  // namespace tenferro::kernels
