// GEMM planning, compiled once (gemm_plan.hpp).

#include "kernels/gemm_plan.hpp"

#include <algorithm>
#include <limits>

namespace tenferro::kernels {
namespace gemm_detail {

gemm_plan make_plan(gemm_type type, std::int64_t m, std::int64_t n, std::int64_t k, int threads, std::int64_t target,
                    const blocking& b) {
    gemm_plan p;
    p.type = type;
    p.m = m;
    p.n = n;
    p.k = k;
    p.target = target;
    p.mr = b.mr;
    p.nr = b.nr;
    p.kc = b.kc;
    p.mc = b.mc;
    p.nc = b.nc;
    if (m <= 0 || n <= 0) return p;
    // A column narrower than a vector tile wastes lanes; computing C^T = B^T A^T puts the wider
    // extent along the vectors. The per-element arithmetic does not change.
    p.swapped = n < b.nr && m > n;
    const std::int64_t mm = p.swapped ? n : m;
    const std::int64_t nn = p.swapped ? m : n;
    if (k <= 0) return p;
    // A read in place: small problems, or at most four micro-panels of B (each A element would be
    // packed to be used at most four times; measured on Zen 3, reading A in place wins up to ~6).
    p.small = (k <= b.kc && (mm * nn * k <= small_max_fmas || mm <= 2 * b.mr)) || nn <= 4 * b.nr;

    // Split C into independent rectangles, never K, minimising the time of the largest task in
    // rough cycles: its micro-kernel work (rows x cols x k / nr: two FMAs of nr / 2 lanes per
    // cycle) plus its packing (A: a scalar gather, once per nc columns; B: mostly a vector copy).
    // Splitting M repacks B in every task, splitting N repacks A: the model prefers M.
    const std::int64_t mtiles = ceil_div(mm, b.mr), ntiles = ceil_div(nn, b.nr);
    std::int64_t max_tasks = threads < 1 ? 1 : threads;
    if (mm * nn * k < parallel_min_fmas) max_tasks = 1;
    std::int64_t best_tm = 1, best_tn = 1;
    double best_cost = std::numeric_limits<double>::max();
    for (std::int64_t tm = 1; tm <= max_tasks && tm <= mtiles; ++tm) {
        for (std::int64_t tn = 1; tm * tn <= max_tasks && tn <= ntiles; ++tn) {
            const double rows = static_cast<double>(ceil_div(mtiles, tm) * b.mr);
            const std::int64_t cols_i = ceil_div(ntiles, tn) * b.nr;
            const double cols = static_cast<double>(cols_i), kd = static_cast<double>(k);
            const double compute = rows * cols * kd / b.nr;
            const double pack_a = p.small ? 0.0 : rows * kd * static_cast<double>(ceil_div(cols_i, b.nc));
            const double pack_b = 0.5 * cols * kd;
            const double cost = compute + pack_a + pack_b;
            if (cost < best_cost * (1 - 1e-9)) {
                best_cost = cost;
                best_tm = tm;
                best_tn = tn;
            }
        }
    }
    // A split that leaves a task empty (tile rounding) is dropped by the range computation; count
    // only non-empty tasks so that every task index has work.
    while (best_tm > 1 && task_range(mm, b.mr, best_tm, best_tm - 1).first >= mm) --best_tm;
    while (best_tn > 1 && task_range(nn, b.nr, best_tn, best_tn - 1).first >= nn) --best_tn;
    p.tasks_m = static_cast<std::int32_t>(best_tm);
    p.tasks_n = static_cast<std::int32_t>(best_tn);

    // Per-task buffers: the A block (not on the small path) and the B panel.
    const std::size_t elem = type == gemm_type::f32 ? 4 : 8;
    const std::int64_t kc = std::min<std::int64_t>(k, b.kc);
    const std::int64_t task_rows = task_range(mm, b.mr, best_tm, 0).second;
    const std::int64_t task_cols = task_range(nn, b.nr, best_tn, 0).second;
    const std::int64_t mc = std::min<std::int64_t>(b.mc, round_up(task_rows, b.mr));
    const std::int64_t nc = std::min<std::int64_t>(b.nc, round_up(task_cols, b.nr));
    const std::size_t a_bytes = p.small ? 0 : round_up_bytes(static_cast<std::size_t>(mc * kc) * elem);
    const std::size_t b_bytes = round_up_bytes(static_cast<std::size_t>(nc * kc) * elem);
    p.scratch_bytes = static_cast<std::size_t>(best_tm * best_tn) * (a_bytes + b_bytes) + align_bytes;
    return p;
}

}  // namespace gemm_detail

std::size_t packed_b_bytes(const gemm_plan& plan) noexcept {
    if (plan.k <= 0 || plan.n <= 0) return 0;
    const std::int64_t unit = plan.swapped ? plan.mr : plan.nr;
    const std::size_t elem = plan.type == gemm_type::f32 ? 4 : 8;
    return static_cast<std::size_t>(gemm_detail::round_up(plan.n, unit) * plan.k) * elem + gemm_detail::align_bytes;
}

packed_b_key packed_b_key_of(const gemm_plan& plan) noexcept {
    packed_b_key key;
    key.n = plan.n;
    key.k = plan.k;
    key.target = plan.target;
    key.kc = plan.kc;
    key.nr = plan.nr;
    key.mr = plan.mr;
    key.swapped = plan.swapped;
    key.type = plan.type;
    return key;
}

}  // namespace tenferro::kernels
