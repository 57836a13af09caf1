// The fused search op of cpu_session: matmul_top_k(_into) == top_k(matmul(a, b), k, -1) without
// materialising the product (kernels/gemm_top_k.hpp). The allocating form, and the unfused default
// other backends inherit, are in src/ops/backend_session.cpp.
//
// Each matrix of the (broadcast) batch is one fused kernel call, split over the session's
// permits along the columns of the product (the rows of a search corpus). A b inside a tensor
// marked constant in the cache is read from its packed copy, the one matmul uses too.

#include <algorithm>
#include <string>

#include "cpu/ops/op_support.hpp"
#include "cpu/ops/packed_constant.hpp"
#include "cpu/runtime_cache_state.hpp"
#include "kernels/gemm_top_k.hpp"
#include "kernels/search_bf16.hpp"
#include "ops/op_shapes.hpp"
#include "tenferro/detail/cpu/cpu_session.hpp"

namespace tenferro::detail {
namespace {

using namespace ops;

// Batch strides of an operand of promoted shape `sh` / strides `st` against the broadcast batch.
std::int64_t batch_stride(const extents& sh, const extents& st, std::size_t batch_rank, std::size_t i,
                          std::int64_t extent) {
    const std::size_t own = sh.size() - 2;
    if (i + own < batch_rank) return 0;
    const std::size_t j = i + own - batch_rank;
    return sh[j] == extent ? st[j] : 0;
}

void run_search(cpu_session& s, const search_shape& sh, const const_tensor_view& a, const const_tensor_view& b,
                std::int64_t k, const tensor_view& values, const tensor_view& indices) {
    const matmul_dims& md = sh.md;
    const std::size_t nb = md.batch.size();
    const std::size_t itemsize = size_of(a.type());
    const kernels::gemm_type gt = a.type() == dtype::f32 ? kernels::gemm_type::f32 : kernels::gemm_type::f64;
    const std::size_t ar = md.ash.size(), br = md.bsh.size();
    const extents vs(values.strides()), is(indices.strides());
    const std::size_t last = sh.out_shape.size() - 1;

    kernels::gemm_top_k_operands op{};
    op.m = md.m;
    op.n = md.n;
    op.k = md.k;
    op.count = k;
    op.a_row_stride = md.ast[ar - 2];
    op.a_col_stride = md.ast[ar - 1];
    op.b_row_stride = md.bst[br - 2];
    op.b_col_stride = md.bst[br - 1];
    op.values_row_stride = md.a_vec ? 0 : vs[nb];
    op.values_col_stride = vs[last];
    op.indices_row_stride = md.a_vec ? 0 : is[nb];
    op.indices_col_stride = is[last];
    const kernels::gemm_top_k_plan plan =
        kernels::plan_gemm_top_k(gt, op.m, op.n, op.k, k, static_cast<int>(s.parallelism()));

    std::shared_ptr<const void> hold;
    const void* packed = nullptr;
    if (std::all_of(md.batch.begin(), md.batch.end(), [](std::int64_t e) { return e == 1; }))
        packed = packed_constant_b(s, plan.gemm, b.data(), op.b_row_stride, op.b_col_stride, hold);

    // Over a constant f32 corpus, on a target with a bf16 dot product: the first pass with exact
    // re-ranking (kernels/search_bf16.hpp), the same bits; counted in the cache's search_stats.
    std::shared_ptr<const void> hold_bf16;
    const void* corpus = nullptr;
    search_stats counted{};
    if (packed != nullptr && gt == kernels::gemm_type::f32) {
        counted.queries = static_cast<std::uint64_t>(op.m);
        if (kernels::first_pass_applies(op.n, op.k, op.count) && kernels::native_first_pass_available()) {
            bool too_large = false;
            corpus = bf16_constant_b(s, plan.gemm, b.data(), op.b_row_stride, op.b_col_stride, hold_bf16, too_large);
            counted.copy_too_large = too_large ? 1 : 0;
        }
    }
    if (corpus != nullptr) {
        op.a = a.data();
        op.b = b.data();
        op.values = values.data();
        op.indices = static_cast<std::int64_t*>(indices.data());
        kernels::search_counters c{};
        kernels::gemm_top_k_bf16(op, plan, packed, corpus, kernels::first_pass::native, &c,
                                 [&](std::int64_t count, kernels::gemm_body body) { s.parallel_for(count, 1, body); });
        counted.first_pass = static_cast<std::uint64_t>(c.first_pass);
        counted.fallback = static_cast<std::uint64_t>(c.fallback);
        counted.reranked = static_cast<std::uint64_t>(c.reranked);
        cache_access::state(s.cache()).add_search(counted);
        return;
    }
    if (counted.queries != 0) {
        counted.fallback = counted.queries;
        cache_access::state(s.cache()).add_search(counted);
    }

    pooled_scratch scratch(s.buffers(), plan.scratch_bytes);
    const std::int64_t batches = element_count(md.batch.span());
    for (std::int64_t index = 0; index < batches; ++index) {
        std::int64_t ao = 0, bo = 0, vo = 0, io = 0;
        for (std::size_t d = nb, rest = static_cast<std::size_t>(index); d-- > 0;) {
            const std::int64_t e = md.batch[d];
            const auto i = static_cast<std::int64_t>(rest % static_cast<std::size_t>(e));
            rest /= static_cast<std::size_t>(e);
            ao += i * batch_stride(md.ash, md.ast, nb, d, e);
            bo += i * batch_stride(md.bsh, md.bst, nb, d, e);
            vo += i * vs[d];
            io += i * is[d];
        }
        op.a = static_cast<const std::byte*>(a.data()) + ao * static_cast<std::int64_t>(itemsize);
        op.b = static_cast<const std::byte*>(b.data()) + bo * static_cast<std::int64_t>(itemsize);
        op.values = static_cast<std::byte*>(values.data()) + vo * static_cast<std::int64_t>(itemsize);
        op.indices = static_cast<std::int64_t*>(indices.data()) + io;
        kernels::gemm_top_k(gt, op, plan, packed, scratch.get(),
                            [&](std::int64_t count, kernels::gemm_body body) { s.parallel_for(count, 1, body); });
    }
}

}  // namespace

void cpu_session::matmul_top_k_into(const const_tensor_view& a, const const_tensor_view& b, std::int64_t k,
                                    const tensor_view& values, const tensor_view& indices) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "matmul_top_k_into";
    const search_shape sh = check_search(op, a, b, k);
    check_out(op, "values", values, a.type(), sh.out_shape.span());
    check_out(op, "indices", indices, dtype::i64, sh.out_shape.span());
    check_no_overlap(op, "values", values, "a", a);
    check_no_overlap(op, "values", values, "b", b);
    check_no_overlap(op, "indices", indices, "a", a);
    check_no_overlap(op, "indices", indices, "b", b);
    if (overlaps(values, indices))
        fail(op, "values (shape " + str(values.shape()) + ") overlaps indices (shape " + str(indices.shape()) + ")");
    if (values.size() == 0) return;
    if (sh.md.b_vec) {
        // The product is a stack of vectors [.., m] and the top k runs along m: nothing large to
        // avoid materialising, so the unfused composition (same bits by definition).
        tensor product = allocate(a.type(), sh.md.out_shape.span());
        matmul_into(a, b, product.view());
        top_k_into(product.view(), k, -1, values, indices);
        return;
    }
    run_search(*this, sh, a, b, k, values, indices);
}

}  // namespace tenferro::detail
