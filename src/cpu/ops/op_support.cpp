#include "cpu/ops/op_support.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace tenferro::detail::ops {

extents broadcast_strides(const const_tensor_view& v, std::span<const std::int64_t> shape) {
    extents s(shape.size(), 0);
    const std::size_t lead = shape.size() - v.rank();
    for (std::size_t i = 0; i < v.rank(); ++i) s[lead + i] = v.shape()[i] == shape[lead + i] ? v.strides()[i] : 0;
    return s;
}

nd_loop<1> make_memory_order_loop(std::span<const std::int64_t> shape, std::span<const std::int64_t> strides,
                                  std::int64_t& base_offset) {
    struct axis {
        std::int64_t extent, stride;
    };
    axis axes[max_rank];
    std::size_t n = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] == 1) continue;
        std::int64_t s = strides[d];
        if (s < 0) {
            base_offset += (shape[d] - 1) * s;
            s = -s;
        }
        axes[n++] = {shape[d], s};
    }
    // Stable insertion sort by decreasing stride: at most eight axes, and unlike std::stable_sort it
    // takes no temporary buffer from the heap (a reduction must not malloc per call).
    for (std::size_t i = 1; i < n; ++i) {
        const axis a = axes[i];
        std::size_t j = i;
        for (; j > 0 && axes[j - 1].stride < a.stride; --j) axes[j] = axes[j - 1];
        axes[j] = a;
    }
    extents sh(n, 0), st(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
        sh[i] = axes[i].extent;
        st[i] = axes[i].stride;
    }
    return make_loop<1>(sh.span(), {st.span()});
}

void for_range(backend_session& session, std::int64_t count, std::int64_t cost,
               function_ref<void(std::int64_t, std::int64_t)> body) {
    if (count <= 0) return;
    if (cost < 1) cost = 1;
    const std::int64_t grain = std::max<std::int64_t>(1, parallel_grain / cost);
    const auto stepped = [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; i += grain) {
            kernels::stop_point();
            body(i, std::min(end, i + grain));
        }
    };
    const bool stoppable = kernels::stop_possible();
    if (session.parallelism() <= 1 || count * cost < parallel_threshold) {
        if (stoppable)
            stepped(0, count);
        else
            body(0, count);
        return;
    }
    if (stoppable)
        session.parallel_for(count, grain, stepped);
    else
        session.parallel_for(count, grain, body);
}

}  // namespace tenferro::detail::ops
