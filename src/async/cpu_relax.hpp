#pragma once
// One spin-wait step: tells the core that this thread is polling (x86 PAUSE,
// AArch64 YIELD), so a sibling hyperthread gets the pipeline and leaving the
// loop does not pay a memory-order mis-speculation. ~40 ns on recent Intel
// cores, a few ns on AMD.

namespace tenferro::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace tenferro::detail
