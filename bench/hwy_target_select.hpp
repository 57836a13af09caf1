#pragma once
// Forcing and naming the Highway target our kernels dispatch to, for benchmarks compiled with
// -march flags of their own (hwy_target_select.cpp is not).

namespace tenferro::bench {

/// Restricts dispatch to the compiled and supported target called `name` (AVX3, AVX2, SSE4, ...);
/// false if there is none.
bool force_highway_target(const char* name);

/// The target dispatch picks now.
const char* dispatched_highway_target();

}  // namespace tenferro::bench
