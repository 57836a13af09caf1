// Highway target selection for the benchmarks whose main file is compiled -march=native (Highway's
// headers reject a baseline above the project's dynamic targets, so they are included here, built
// with the library's flags). See hwy_target_select.hpp.

#include "hwy_target_select.hpp"

#include <cstdint>
#include <cstring>

#include "kernels/hwy_control.hpp"
#include "kernels/search_bf16.hpp"

namespace tenferro::bench {

bool force_highway_target(const char* name) {
    for (const std::int64_t t : tenferro::kernels::hwy_control::supported_and_generated()) {
        if (std::strcmp(tenferro::kernels::hwy_control::target_name(t), name) == 0) {
            tenferro::kernels::hwy_control::force_target(t);
            return true;
        }
    }
    return false;
}

const char* dispatched_highway_target() {
    // Dispatch picks the best target both compiled and supported (the lowest bit).
    const std::int64_t t = tenferro::kernels::hwy_control::dispatched_target();
    return t != 0 ? tenferro::kernels::hwy_control::target_name(t) : "none";
}

void reset_highway_target() { tenferro::kernels::hwy_control::force_target(0); }

bool dispatched_has_first_pass() { return tenferro::kernels::native_first_pass_available(); }

}  // namespace tenferro::bench
