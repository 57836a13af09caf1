// Packed copies of constant operands (packed_constant.hpp).

#include "cpu/ops/packed_constant.hpp"

#include <cstddef>
#include <string>
#include <utility>

#include "cpu/runtime_cache_state.hpp"
#include "kernels/search_bf16.hpp"
#include "tenferro/detail/cpu/cpu_session.hpp"

namespace tenferro::detail {
namespace {

struct packed_operand {
    std::unique_ptr<std::byte[]> data;
    std::size_t bytes = 0;
};

// The byte range an operand's GEMM addresses (for the constant test).
std::pair<const std::byte*, const std::byte*> addressed_range(const void* base, std::size_t itemsize, std::int64_t rows,
                                                              std::int64_t rs, std::int64_t cols, std::int64_t cs) {
    std::int64_t lo = 0, hi = 0;
    for (auto [e, s] : {std::pair{rows, rs}, std::pair{cols, cs}}) {
        if (e <= 0) continue;
        const std::int64_t span = (e - 1) * s;
        (span < 0 ? lo : hi) += span;
    }
    const auto* b = static_cast<const std::byte*>(base);
    return {b + lo * static_cast<std::int64_t>(itemsize), b + (hi + 1) * static_cast<std::int64_t>(itemsize)};
}

void add(std::string& key, std::int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); }

// 64-byte alignment inside an allocation made 64 bytes larger (make_bf16_corpus's requirement).
std::byte* aligned(std::byte* p) {
    const auto v = reinterpret_cast<std::uintptr_t>(p);
    return reinterpret_cast<std::byte*>((v + 63) & ~std::uintptr_t{63});
}

}  // namespace

const void* packed_constant_b(cpu_session& s, const kernels::gemm_plan& plan, const void* b, std::int64_t b_rs,
                              std::int64_t b_cs, std::shared_ptr<const void>& hold) {
    if (plan.k <= 0 || plan.n <= 0) return nullptr;
    const std::size_t itemsize = plan.type == kernels::gemm_type::f32 ? 4 : 8;
    runtime_cache_state& cache = cache_access::state(s.cache());
    const auto [lo, hi] = addressed_range(b, itemsize, plan.k, b_rs, plan.n, b_cs);
    const void* source = cache.constant_containing(lo, hi);
    if (source == nullptr) return nullptr;
    std::string key(1, 'P');
    add(key, reinterpret_cast<std::intptr_t>(b));
    const kernels::packed_b_key pk = kernels::packed_b_key_of(plan);
    for (std::int64_t v : {b_rs, b_cs, pk.n, pk.k, pk.target, std::int64_t{pk.kc}, std::int64_t{pk.nr},
                           std::int64_t{pk.mr}, std::int64_t{pk.swapped}, static_cast<std::int64_t>(pk.type)})
        add(key, v);
    if (auto hit = cache.find(key)) {
        hold = std::move(hit);
    } else {
        // A packed copy the cache cannot retain would be made anew on every call, at the cost of
        // a full pass over B: the kernels' own per-call panels (in cache) are cheaper.
        if (kernels::packed_b_bytes(plan) > cache.capacity()) return nullptr;
        auto packed = std::make_shared<packed_operand>();
        packed->bytes = kernels::packed_b_bytes(plan);
        packed->data = std::make_unique_for_overwrite<std::byte[]>(packed->bytes);
        kernels::pack_b(plan, b, b_rs, b_cs, packed->data.get());
        const std::size_t bytes = packed->bytes;
        hold = packed;
        cache.insert(std::move(key), hold, bytes, source);
    }
    return static_cast<const packed_operand*>(hold.get())->data.get();
}

const void* bf16_constant_b(cpu_session& s, const kernels::gemm_plan& plan, const void* b, std::int64_t b_rs,
                            std::int64_t b_cs, std::shared_ptr<const void>& hold, bool& too_large) {
    too_large = false;
    if (plan.k <= 0 || plan.n <= 0 || plan.type != kernels::gemm_type::f32) return nullptr;
    runtime_cache_state& cache = cache_access::state(s.cache());
    const auto [lo, hi] = addressed_range(b, 4, plan.k, b_rs, plan.n, b_cs);
    const void* source = cache.constant_containing(lo, hi);
    if (source == nullptr) return nullptr;
    // Independent of the target and the blocking: the copy serves every plan of this B.
    std::string key(1, 'S');
    add(key, reinterpret_cast<std::intptr_t>(b));
    for (std::int64_t v : {b_rs, b_cs, plan.n, plan.k}) add(key, v);
    if (auto hit = cache.find(key)) {
        hold = std::move(hit);
    } else {
        const std::size_t bytes = kernels::bf16_corpus_bytes(plan.k, plan.n);
        // Both copies must stay, or each call would evict the other and remake it.
        if (bytes + kernels::packed_b_bytes(plan) > cache.capacity()) {
            too_large = true;
            return nullptr;
        }
        auto copy = std::make_shared<packed_operand>();
        copy->bytes = bytes + 64;
        copy->data = std::make_unique_for_overwrite<std::byte[]>(copy->bytes);
        kernels::make_bf16_corpus(static_cast<const float*>(b), b_rs, b_cs, plan.k, plan.n, aligned(copy->data.get()));
        hold = copy;
        cache.insert(std::move(key), hold, copy->bytes, source);
    }
    return aligned(static_cast<const packed_operand*>(hold.get())->data.get());
}

}  // namespace tenferro::detail
