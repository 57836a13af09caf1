// The CPU backend's session opening (include/tenferro/detail/cpu/cpu_engine.hpp).

#include "tenferro/detail/cpu/cpu_engine.hpp"

#include "cpu/runtime_cache_state.hpp"
#include "kernels/stop_point.hpp"

namespace tenferro::detail {

namespace {
constexpr const char* cache_busy = "the runtime cache is in use by a running session";
}

cpu_engine::cpu_engine(std::size_t buffer_pool_bytes, std::size_t runtime_cache_bytes)
    : buffers_(std::make_shared<buffer_pool>(buffer_pool_bytes)), default_cache_(runtime_cache_bytes) {}

session_result<cpu_session> cpu_engine::open_session(const session_grant& grant, cpu_runtime_cache& cache) const {
    if (!cache_access::try_claim(cache))
        return tl::unexpected<session_entry_error>(
            session_entry_error(session_entry_errc::contended, name(), cache_busy));
    // Built in place: a session is neither copied nor moved.
    return session_result<cpu_session>(tl::in_place, cpu_session::claimed_t{}, *pool_, grant.permits, buffers_, cache,
                                       grant.bytes, grant.stop);
}

const char* cached_cpu_opener::busy_before_admission() const noexcept { return cache->in_use() ? cache_busy : nullptr; }

void cpu_session::release_claim() noexcept { cache_access::release_claim(cache_); }

void cpu_session::parallel_for(std::int64_t count, std::int64_t grain,
                               function_ref<void(std::int64_t, std::int64_t)> body) {
    const std::stop_token& stop = stop_token_ref();
    if (!stop.stop_possible()) {
        pool_.parallel_for(permits_, count, grain, body);
        return;
    }
    throw_if_stop_requested();
    pool_.parallel_for(permits_, count, grain, [&](std::int64_t begin, std::int64_t end) {
        const kernels::stop_scope scope(stop);
        kernels::stop_point();
        body(begin, end);
    });
}

}  // namespace tenferro::detail
