#pragma once
// Packed copies of constant operands: a GEMM operand B that lies inside a tensor marked
// constant in the session's runtime cache (a weight matrix, a search corpus) is packed once into
// the kernel's panel format, and the packed copy is kept in the cache, keyed by B's address, its
// strides and the packed layout (kernels::packed_b_key). matmul and matmul_top_k share it.

#include <cstdint>
#include <memory>

#include "kernels/gemm.hpp"

namespace tenferro::detail {

class cpu_session;

/// B's packed panels for `plan` (k x n of `plan`, element (p, j) at b[p * b_rs + j * b_cs]) when B
/// lies inside a constant: from the cache, or packed now and inserted (`hold` keeps them alive).
/// nullptr when B is not constant, or when its packed copy is larger than the cache's capacity.
const void* packed_constant_b(cpu_session& s, const kernels::gemm_plan& plan, const void* b, std::int64_t b_rs,
                              std::int64_t b_cs, std::shared_ptr<const void>& hold);

/// The exact search's first-pass copy of a constant B (kernels/search_bf16.hpp: bf16 rows and two
/// norms per row) for `plan` (f32), from the cache or made now and inserted, beside the packed f32
/// copy `packed` (made by packed_constant_b for the same B and plan). nullptr when B is not
/// constant, or when the two copies together exceed the cache's capacity (`too_large` set).
const void* bf16_constant_b(cpu_session& s, const kernels::gemm_plan& plan, const void* b, std::int64_t b_rs,
                            std::int64_t b_cs, std::shared_ptr<const void>& hold, bool& too_large);

}  // namespace tenferro::detail
