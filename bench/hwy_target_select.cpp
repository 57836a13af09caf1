// Highway target selection for the benchmarks whose main file is compiled -march=native (Highway's
// headers reject a baseline above the project's dynamic targets, so they are included here, built
// with the library's flags). See hwy_target_select.hpp.

#include "hwy_target_select.hpp"

#include <cstdint>
#include <cstring>

#include <hwy/targets.h>

namespace tenferro::bench {

bool force_highway_target(const char* name) {
    for (const std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
        if (std::strcmp(hwy::TargetName(t), name) == 0) {
            hwy::SetSupportedTargetsForTest(t);
            return true;
        }
    }
    return false;
}

const char* dispatched_highway_target() {
    // Dispatch picks the best target both compiled and supported (the lowest bit).
    const std::int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
    return usable != 0 ? hwy::TargetName(usable & -usable) : "none";
}

}  // namespace tenferro::bench
