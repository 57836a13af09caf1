#pragma once
// The CPU backend's session: validates arguments and runs kernels through the
// compute pool's parallel-for, on at most `parallelism()` threads. Outputs and
// temporaries come from the backend's buffer pool. It implements the `_into`
// forms (and `axpby`); the allocating forms are backend_session's non-virtual
// wrappers over them. Both are defined per family in src/cpu/ops/*.cpp. Visible (in detail/) only because
// `cpu_engine::open_session` returns it by value into the session entry's
// template code; users only ever see it as a `backend_session&`.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <new>
#include <span>
#include <string_view>

#include "tenferro/backend_session.hpp"
#include "tenferro/buffer_pool.hpp"
#include "tenferro/cpu_runtime_cache.hpp"
#include "tenferro/detail/admission/compute_pool.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro::detail {

/// The byte cap of a session granted `bytes > 0` (P6): the session's scratch
/// and temporaries go through it, and throw std::bad_alloc past the cap.
/// Scratch counts while an op holds it; the session's results count from their
/// allocation to the session's end (they may outlive it, out of its sight).
class capped_buffers final : public std::pmr::memory_resource {
public:
    capped_buffers(buffer_pool& pool, std::size_t cap) noexcept : pool_(pool), cap_(cap) {}
    /// Counts `bytes` against the cap, or throws std::bad_alloc.
    void take(std::size_t bytes) {
        std::size_t used = used_.load(std::memory_order_relaxed);
        do {
            if (bytes > cap_ || used > cap_ - bytes) throw std::bad_alloc();
        } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    }
    void give_back(std::size_t bytes) noexcept { used_.fetch_sub(bytes, std::memory_order_relaxed); }
    std::size_t cap() const noexcept { return cap_; }

private:
    void* do_allocate(std::size_t bytes, std::size_t alignment) override {
        take(bytes);
        try {
            return pool_.allocate(bytes, alignment);
        } catch (...) {
            give_back(bytes);
            throw;
        }
    }
    void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
        pool_.deallocate(p, bytes, alignment);
        give_back(bytes);
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

    buffer_pool& pool_;
    const std::size_t cap_;
    std::atomic<std::size_t> used_{0};  // scratch ops of one session may run on several workers
};

class cpu_session final : public backend_session {
public:
    /// `byte_cap`: the grant's bytes (0: no cap, P6); `stop`: the grant's stop
    /// token (S20).
    cpu_session(compute_pool& pool, std::size_t permits, const std::shared_ptr<buffer_pool>& buffers,
                cpu_runtime_cache& cache, std::size_t byte_cap = 0, std::stop_token stop = {}) noexcept
        : backend_session(std::move(stop)),
          pool_(pool),
          permits_(permits),
          buffers_(buffers),
          cache_(cache),
          capped_(*buffers, byte_cap) {}
    /// A session of `with_backend_session_cached`: it holds `cache`'s claim
    /// (taken by cpu_engine::open_session) and gives it back when destroyed.
    struct claimed_t {};
    cpu_session(claimed_t, compute_pool& pool, std::size_t permits, const std::shared_ptr<buffer_pool>& buffers,
                cpu_runtime_cache& cache, std::size_t byte_cap = 0, std::stop_token stop = {}) noexcept
        : cpu_session(pool, permits, buffers, cache, byte_cap, std::move(stop)) {
        claimed_ = true;
    }
    ~cpu_session() override {
        if (claimed_) release_claim();
    }

    std::string_view backend() const noexcept override { return "cpu"; }
    std::size_t parallelism() const noexcept override { return permits_; }
    /// Checks the stop before each range (S20), and marks the thread that
    /// runs it with the session's stop token for the kernels (src/cpu/cpu_engine.cpp).
    void parallel_for(std::int64_t count, std::int64_t grain,
                      function_ref<void(std::int64_t, std::int64_t)> body) override;

    /// A new row-major tensor whose storage comes from the buffer pool (the
    /// allocating forms' results too).
    tensor allocate(dtype type, std::span<const std::int64_t> shape) const override {
        if (capped_.cap() != 0) {
            std::size_t n = size_of(type);
            for (const std::int64_t e : shape) n *= static_cast<std::size_t>(e);
            const_cast<capped_buffers&>(capped_).take(n);  // results count until the session ends
        }
        return tensor::empty(type, shape, buffers_);
    }
    /// The memory for temporaries and scratch (`std::pmr` containers,
    /// pooled_scratch): the buffer pool, through the byte cap when there is one.
    std::pmr::memory_resource& buffers() const noexcept {
        if (capped_.cap() != 0) return const_cast<capped_buffers&>(capped_);
        return *buffers_;
    }
    /// The runtime cache contractions consult: the caller's in a
    /// `with_backend_session_cached` session, else the backend's own.
    cpu_runtime_cache& cache() const noexcept { return cache_; }

    // Elementwise (src/cpu/ops/elementwise.cpp).
    void add_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) override;
    void sub_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) override;
    void mul_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) override;
    void div_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) override;
    void maximum_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) override;
    void minimum_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) override;
    void neg_into(const const_tensor_view& x, const tensor_view& out) override;
    void abs_into(const const_tensor_view& x, const tensor_view& out) override;
    void exp_into(const const_tensor_view& x, const tensor_view& out) override;
    void log_into(const const_tensor_view& x, const tensor_view& out) override;
    void tanh_into(const const_tensor_view& x, const tensor_view& out) override;
    void sqrt_into(const const_tensor_view& x, const tensor_view& out) override;
    void rsqrt_into(const const_tensor_view& x, const tensor_view& out) override;
    void sigmoid_into(const const_tensor_view& x, const tensor_view& out) override;
    void relu_into(const const_tensor_view& x, const tensor_view& out) override;
    void scale_into(const const_tensor_view& x, double alpha, const tensor_view& out) override;
    void axpby(double alpha, const const_tensor_view& x, double beta, const tensor_view& y) override;
    void axpby_into(double alpha, const const_tensor_view& x, double beta, const const_tensor_view& y,
                    const tensor_view& out) override;

    // Reductions (src/cpu/ops/reduce.cpp).
    using backend_session::reduce_max_into;
    using backend_session::reduce_min_into;
    using backend_session::reduce_prod_into;
    using backend_session::reduce_sum_into;
    void reduce_sum_into(const const_tensor_view& x, std::span<const std::int64_t> axes,
                         const tensor_view& out) override;
    void reduce_prod_into(const const_tensor_view& x, std::span<const std::int64_t> axes,
                          const tensor_view& out) override;
    void reduce_max_into(const const_tensor_view& x, std::span<const std::int64_t> axes,
                         const tensor_view& out) override;
    void reduce_min_into(const const_tensor_view& x, std::span<const std::int64_t> axes,
                         const tensor_view& out) override;
    void vdot_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) override;
    void norm_squared_into(const const_tensor_view& x, const tensor_view& out) override;

    // Row-wise (src/cpu/ops/rowwise.cpp).
    void softmax_into(const const_tensor_view& x, std::int64_t axis, const tensor_view& out) override;
    void top_k_into(const const_tensor_view& x, std::int64_t k, std::int64_t axis, const tensor_view& values,
                    const tensor_view& indices) override;

    // Structural (src/cpu/ops/structural.cpp).
    using backend_session::concatenate_into;
    using backend_session::transpose_into;
    void copy_into(const const_tensor_view& src, const tensor_view& dst) override;
    void transpose_into(const const_tensor_view& x, std::span<const std::int64_t> perm,
                        const tensor_view& out) override;
    void cast_into(const const_tensor_view& x, const tensor_view& out) override;
    void concatenate_into(std::span<const const_tensor_view> inputs, std::int64_t axis,
                          const tensor_view& out) override;

    // Contractions (src/cpu/ops/contraction.cpp).
    void dot_general_into(const const_tensor_view& a, const const_tensor_view& b, const dot_config& cfg,
                          const tensor_view& out, double alpha, double beta) override;
    void matmul_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) override;

    // Fused search (src/cpu/ops/search.cpp).
    void matmul_top_k_into(const const_tensor_view& a, const const_tensor_view& b, std::int64_t k,
                           const tensor_view& values, const tensor_view& indices) override;

private:
    void release_claim() noexcept;

    compute_pool& pool_;
    std::size_t permits_;
    const std::shared_ptr<buffer_pool>& buffers_;  // owned by the backend, which outlives the session
    cpu_runtime_cache& cache_;                      // the caller's (claimed) or the backend's
    capped_buffers capped_;                         // used only with a byte cap
    bool claimed_ = false;
};

}  // namespace tenferro::detail
