#pragma once
// Running a test once per Highway target: the kernel tests (with the target's
// bit) and the operation tests (with its name, op_test_support.hpp).

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/hwy_control.hpp"

namespace tenferro::test {

/// Calls `f(target)` once per Highway target compiled and supported here, with
/// dispatch forced to that target; `f` receives the target's bit
/// (std::int64_t), or its name when it takes a `const std::string&`. Restores
/// normal dispatch afterwards, also when `f` throws.
template <class F>
void for_each_target(F&& f) {
    struct reset {
        ~reset() { tenferro::kernels::hwy_control::force_target(0); }
    } guard;
    for (const std::int64_t target : tenferro::kernels::hwy_control::supported_and_generated()) {
        tenferro::kernels::hwy_control::force_target(target);
        if constexpr (std::is_invocable_v<F&, const std::string&>) {
            f(std::string(tenferro::kernels::hwy_control::target_name(target)));
        } else {
            f(target);
        }
    }
}

}  // namespace tenferro::test
