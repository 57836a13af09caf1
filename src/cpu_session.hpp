#pragma once
// The CPU backend's session: validates arguments and runs kernels through the
// compute pool's parallel-for, on at most `parallelism()` threads.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tenferro/backend_session.hpp"
#include "tenferro/detail/compute_pool.hpp"

namespace tenferro::detail {

class cpu_session final : public backend_session {
public:
    cpu_session(compute_pool& pool, std::size_t permits) noexcept : pool_(pool), permits_(permits) {}

    std::string_view backend() const noexcept override { return "cpu"; }
    std::size_t parallelism() const noexcept override { return permits_; }
    void parallel_for(std::int64_t count, std::int64_t grain,
                      function_ref<void(std::int64_t, std::int64_t)> body) override {
        pool_.parallel_for(permits_, count, grain, body);
    }

private:
    compute_pool& pool_;
    std::size_t permits_;
};

}  // namespace tenferro::detail
