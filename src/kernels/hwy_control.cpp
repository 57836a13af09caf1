// hwy_control.hpp: Highway's target control, compiled inside the library.

#include "kernels/hwy_control.hpp"

#include <hwy/highway.h>
#include <hwy/targets.h>

namespace tenferro::kernels::hwy_control {

std::vector<std::int64_t> supported_and_generated() {
    std::vector<std::int64_t> out;
    for (const std::int64_t t : hwy::SupportedAndGeneratedTargets()) out.push_back(t);
    return out;
}

void force_target(std::int64_t target) { hwy::SetSupportedTargetsForTest(target); }

const char* target_name(std::int64_t target) { return hwy::TargetName(target); }

std::int64_t dispatched_target() {
    const std::int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
    return usable != 0 ? (usable & -usable) : 0;
}

}  // namespace tenferro::kernels::hwy_control
