#pragma once
// The machine's measured f32 FMA peak (fma_peak.cpp, compiled -march=native).

namespace tenferro::bench {

/// GFLOP/s of a register-only FMA loop on `threads` threads at once, the best of three rounds
/// lasting `seconds` in all; of process CPU time rather than wall time when `cpu_clock`.
double fma_peak_gflops(int threads, double seconds, bool cpu_clock = false);

/// GFLOP/s (2 per multiply-add) of a register-only VDPBF16PS loop (bf16 pairs into f32, 32
/// multiply-adds per 512-bit instruction), as fma_peak_gflops; 0 where the compiler's -march has
/// no AVX512_BF16.
double dpbf16_peak_gflops(int threads, double seconds, bool cpu_clock = false);

/// The vector ISA the loop was compiled for ("AVX-512" or "AVX2+FMA").
const char* fma_peak_isa();

}  // namespace tenferro::bench
