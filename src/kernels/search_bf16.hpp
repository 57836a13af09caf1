#pragma once
// Exact search with a bf16 first pass: gemm_top_k's result (f32), bit for bit, with most of the
// arithmetic done by VDPBF16PS. Design and proof: docs/design/exact-search-first-pass.md.
//
//     std::vector<std::byte> corpus(kernels::bf16_corpus_bytes(k, n));   // once per constant B
//     kernels::make_bf16_corpus(b, b_rs, b_cs, k, n, corpus.data());
//     kernels::gemm_top_k_bf16(op, plan, packed_b, corpus.data(), kernels::first_pass::native,
//                              &counters, run);
//
// * The first pass scores every (query, corpus row) in bf16 and keeps, per query, every row whose
//   upper bound reaches the k-th lower bound (rows with NaN, infinities or a huge norm always).
//   The kept rows are scored again with the f32 kernel's arithmetic for the full shape (`plan`,
//   the dispatched target) and the top k taken from those scores alone.
// * A query whose candidates overflow their buffer, or which is not finite or in range, is
//   answered by gemm_top_k itself (f32, batch-invariant: the same bits as in the batch).
// * first_pass::native needs a dispatched target with VDPBF16PS (native_first_pass_available());
//   first_pass::emulated runs the same pass through emulate_vdpbf16ps on any target, bit for bit
//   the instruction's arithmetic: for tests on machines without it.
// * f32 only.

#include <cstddef>
#include <cstdint>

#include "kernels/gemm.hpp"
#include "kernels/gemm_top_k.hpp"

namespace tenferro::kernels {

/// f32 to bf16 as the first pass converts: to nearest, ties to even; an f32 denormal becomes a
/// zero of its sign; NaN stays NaN (quiet), infinities stay infinite.
std::uint16_t to_bf16(float x) noexcept;
/// bf16 to f32 (exact).
float from_bf16(std::uint16_t h) noexcept;

/// One f32 lane of VDPBF16PS, bit for bit (Intel SDM pseudo-code): `acc` plus the products of the
/// bf16 pairs packed in `a` and `b` (element 0 in the low half), the odd element first, each an f32
/// FMA rounded to nearest even with denormal inputs read as zero and denormal results flushed to
/// a zero of their sign.
float emulate_vdpbf16ps(float acc, std::uint32_t a, std::uint32_t b) noexcept;

/// The instruction itself on the dispatched target: out[i] = VDPBF16PS's lane of (acc[i], a[i],
/// b[i]) for n a multiple of 16; false (nothing written) where the target has no native bf16 dot
/// product. For the test of emulate_vdpbf16ps.
bool native_vdpbf16ps(const float* acc, const std::uint32_t* a, const std::uint32_t* b, float* out, std::size_t n);

/// Bytes of the first-pass copy of a k x n corpus B (its n columns are the corpus rows): the
/// bf16 rows in panels of 16, and two norms per row. Alignment: 64 bytes at the start suffice.
std::size_t bf16_corpus_bytes(std::int64_t k, std::int64_t n) noexcept;
/// Makes it from B (element (p, j) at b[p * b_rs + j * b_cs]) into `out` (bf16_corpus_bytes,
/// 64-byte aligned). A row holding NaN, an infinity or a norm above 2^60 is flagged: always kept.
void make_bf16_corpus(const float* b, std::int64_t b_rs, std::int64_t b_cs, std::int64_t k, std::int64_t n, void* out);

enum class first_pass { native, emulated };

/// Whether gemm_top_k_bf16 runs the first pass at all for n corpus rows of depth k keeping `count`
/// (else it is gemm_top_k: no depth, or `count` too close to n for the pass to discard much).
bool first_pass_applies(std::int64_t n, std::int64_t k, std::int64_t count) noexcept;

/// Whether the target dispatch picks now has a native bf16 dot product (HWY_NATIVE_DOT_BF16).
bool native_first_pass_available();

/// What one call did, added to by each call.
struct search_counters {
    std::int64_t queries = 0;     ///< queries answered
    std::int64_t first_pass = 0;  ///< of them, through the first pass and the re-ranking
    std::int64_t fallback = 0;    ///< of them, by the f32 path (out of range, or too many candidates)
    std::int64_t reranked = 0;    ///< candidates scored again in f32, over the first-pass queries
};

/// gemm_top_k(gemm_type::f32, op, plan, packed_b, ..., run)'s result, through the first pass.
/// `plan`: plan_gemm_top_k(f32, op.m, op.n, op.k, op.count, threads) on the dispatched target;
/// `packed_b`: pack_b(plan.gemm, ...) or nullptr; `corpus`: make_bf16_corpus of the same B
/// (op.b, which is read too: the re-ranking reads the kept rows in f32). `counters` may be null.
void gemm_top_k_bf16(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed_b,
                     const void* corpus, first_pass how, search_counters* counters, gemm_runner run);
void gemm_top_k_bf16(const gemm_top_k_operands& op, const gemm_top_k_plan& plan, const void* packed_b,
                     const void* corpus, first_pass how, search_counters* counters = nullptr);

}  // namespace tenferro::kernels
