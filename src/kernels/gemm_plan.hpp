#pragma once
// GEMM planning: the target-independent part of the GEMM kernel (gemm.hpp),
// compiled once in gemm_plan.cpp. How C is split into tasks, which path a
// problem takes (packed, small), the scratch a plan needs, and the small
// helpers the per-target code shares. The per-target parts, compiled once per
// Highway target through gemm.cpp's foreach_target, are gemm_tile-inl.h (tile
// shapes, cache blocks, micro-kernels), gemm_pack-inl.h (packing) and
// gemm.cpp itself (the drivers and the dispatch). Design: docs/gemm.md.

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/gemm.hpp"

namespace tenferro::kernels::gemm_detail {

constexpr std::size_t align_bytes = 64;

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return (a + b - 1) / b; }
inline std::int64_t round_up(std::int64_t a, std::int64_t b) noexcept { return ceil_div(a, b) * b; }
inline std::size_t round_up_bytes(std::size_t a) noexcept { return (a + align_bytes - 1) / align_bytes * align_bytes; }

inline void* align_up(void* p) noexcept {
    const auto v = reinterpret_cast<std::uintptr_t>(p);
    return reinterpret_cast<void*>((v + align_bytes - 1) & ~static_cast<std::uintptr_t>(align_bytes - 1));
}

/// The register tile and cache blocks of one (target, type).
struct blocking {
    std::int32_t mr, nr, kc, mc, nc;
};

/// Below this many multiply-adds a GEMM runs as one task: waking a worker costs more.
constexpr std::int64_t parallel_min_fmas = std::int64_t{1} << 18;
/// The small path (A read in place) is taken when k <= kc and m*n*k is at most this, or when A
/// has at most a few micro-panel rows (a GEMV-like shape, where packing A cannot pay).
constexpr std::int64_t small_max_fmas = std::int64_t{96} * 96 * 96;

/// Rows of task t of a tasks-long split of `tiles` tiles of `tile` elements over `extent`.
inline std::pair<std::int64_t, std::int64_t> task_range(std::int64_t extent, std::int64_t tile, std::int64_t tasks,
                                                        std::int64_t t) noexcept {
    const std::int64_t tiles = ceil_div(extent, tile);
    const std::int64_t per = ceil_div(tiles, tasks);
    const std::int64_t begin = std::min(extent, t * per * tile);
    const std::int64_t end = std::min(extent, (t + 1) * per * tile);
    return {begin, end};
}

/// The plan of an m x n x k product for `threads` tasks at most on Highway
/// target `target`, whose register tile and cache blocks are `b`.
gemm_plan make_plan(gemm_type type, std::int64_t m, std::int64_t n, std::int64_t k, int threads, std::int64_t target,
                    const blocking& b);

}  // namespace tenferro::kernels::gemm_detail
