#pragma once
// The Highway dispatch of the library's own kernels, for tests and benchmarks.
//
// The bundled Highway (subprojects/highway.wrap) lives inside libtenferro with its symbols hidden:
// a test that called Highway's SetSupportedTargetsForTest itself would set the chosen target of
// its own copy, not the library's. These do it for the copy the kernels dispatch with, whichever
// Highway the build took. Not public API (src/ only).

#include <cstdint>
#include <vector>

namespace tenferro::kernels::hwy_control {

/// The targets compiled into the library and supported by this CPU, best last (Highway's
/// SupportedAndGeneratedTargets).
std::vector<std::int64_t> supported_and_generated();
/// Forces dispatch to `target` (one bit), or back to normal dispatch with 0.
void force_target(std::int64_t target);
/// The target's name ("AVX3_ZEN4", ...).
const char* target_name(std::int64_t target);
/// The target dispatch picks now (the best one compiled and supported, or the forced one).
std::int64_t dispatched_target();

}  // namespace tenferro::kernels::hwy_control
