#pragma once
// Forcing and naming the Highway target our kernels dispatch to, for benchmarks compiled with
// -march flags of their own (hwy_target_select.cpp is not).

namespace tenferro::bench {

/// Restricts dispatch to the compiled and supported target called `name` (AVX3, AVX2, SSE4, ...);
/// false if there is none.
bool force_highway_target(const char* name);

/// The target dispatch picks now.
const char* dispatched_highway_target();

/// Back to normal dispatch (the best target compiled and supported).
void reset_highway_target();

/// Whether that target runs matmul_top_k's bf16 first pass (kernels/search_bf16.hpp).
bool dispatched_has_first_pass();

}  // namespace tenferro::bench
