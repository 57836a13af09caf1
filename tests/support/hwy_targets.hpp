#pragma once
// Running a test once per Highway target: the kernel tests (with the target's
// bit) and the operation tests (with its name, op_test_support.hpp).

#include <cstdint>
#include <string>
#include <type_traits>

#include <hwy/targets.h>

namespace tenferro::test {

/// Calls `f(target)` once per Highway target compiled and supported here, with
/// dispatch forced to that target; `f` receives the target's bit
/// (std::int64_t), or its name when it takes a `const std::string&`. Restores
/// normal dispatch afterwards, also when `f` throws.
template <class F>
void for_each_target(F&& f) {
    struct reset {
        ~reset() { hwy::SetSupportedTargetsForTest(0); }
    } guard;
    for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        if constexpr (std::is_invocable_v<F&, const std::string&>) {
            f(std::string(hwy::TargetName(target)));
        } else {
            f(target);
        }
    }
}

}  // namespace tenferro::test
