#pragma once
// A CPU session built directly on a compute pool of its own, as a host builds
// it from a grant (cpu_engine::open_session), with the stop token a grant
// would carry (S20); and a tensor filled with one value. Shared by the
// operations' stop tests (tests/cpu/session_stop_test.cpp) and the stop
// latency benchmark (bench/stop_latency.cpp).

#include <tenferro/detail/admission/compute_pool.hpp>
#include <tenferro/detail/cpu/cpu_session.hpp>
#include <tenferro/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stop_token>
#include <utility>
#include <vector>

namespace tenferro::test {

/// A rows x cols f32 tensor whose every element is `value`.
inline tensor filled(std::int64_t rows, std::int64_t cols, float value) {
    const std::vector<float> v(static_cast<std::size_t>(rows * cols), value);
    return tensor::from(std::span<const float>(v), {rows, cols});
}

/// A CPU session of `permits` permits on its own pool, stopping with `stop`.
struct cpu_session_fixture {
    explicit cpu_session_fixture(std::size_t permits, std::stop_token stop = {},
                                 std::size_t buffer_bytes = std::size_t{64} << 20,
                                 std::size_t cache_bytes = std::size_t{256} << 20)
        : pool(permits, {}),
          buffers(std::make_shared<buffer_pool>(buffer_bytes)),
          cache(cache_bytes),
          session(pool, permits, buffers, cache, 0, std::move(stop)) {}

    detail::compute_pool pool;
    std::shared_ptr<buffer_pool> buffers;
    cpu_runtime_cache cache;
    detail::cpu_session session;
};

}  // namespace tenferro::test
