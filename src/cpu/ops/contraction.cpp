// The contraction family of cpu_session: dot_general_into and matmul_into (the
// operand rules in ops/op_shapes.hpp; the allocating forms in src/ops/).
//
// Both are reduced to one *canonical* problem: a batch of GEMMs
// `C[i, j] = alpha * sum_p A[i, p] * B[p, j] + beta * C[i, j]` over 2-D strided
// operands, stepped by per-operand batch strides. The reduction is a *plan*
// (contraction_plan) that depends only on layouts, so it is cached in the
// session's runtime cache under a key built from shapes, strides, dtype, the
// axis configuration and the parallelism.
//
// dot_general's free and contracted axes become one GEMM axis each when their
// strides merge (as numpy reshapes without copying); when they do not, the
// operand is first permuted into a row-major scratch buffer (TTGT: transpose,
// transpose, GEMM, transpose) — and only that operand. An `_into` output whose
// row or column axes do not merge gets the product in a temporary first.
// matmul never copies: its row, column and depth axes are single axes, and
// its broadcast batch axes are zero strides.
//
// An operand lying inside a tensor marked constant in the cache is packed
// once into the kernel's panel format and the packed copy is kept in the cache.

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "cpu/ops/op_support.hpp"
#include "cpu/ops/packed_constant.hpp"
#include "cpu/runtime_cache_state.hpp"
#include "kernels/gemm.hpp"
#include "ops/op_shapes.hpp"
#include "tenferro/detail/cpu/cpu_session.hpp"

namespace tenferro::detail {
namespace {

using namespace ops;

// One strided axis of up to three operands (the ones that step through it).
struct axis_desc {
    std::int64_t extent;
    std::int64_t stride[2];
};

// A batch of GEMMs over strided operands (strides in elements).
struct gemm_layout {
    extents batch;             // batch extents (extent-1 axes dropped)
    extents a_bs, b_bs, c_bs;  // each operand's stride per batch axis
    std::int64_t m = 1, n = 1, k = 1;
    std::int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0, c_rs = 0, c_cs = 0;
};

// Everything a contraction decides from layouts alone.
struct contraction_plan {
    extents out_shape;
    // TTGT: an operand whose axes do not merge is copied, axes in `perm`
    // order, into a row-major scratch of shape `copy_shape` first.
    bool copy_a = false, copy_b = false;
    extents a_perm, b_perm, a_copy_shape, b_copy_shape;
    // The output's row or column axes do not merge: the product goes to a
    // row-major temporary of out_shape, then into out.
    bool out_via_temp = false;
    gemm_layout g;  // strides relative to the operands actually used
    kernels::gemm_plan kernel;
    // Batches run in parallel (each GEMM on one thread) rather than each GEMM
    // split over the workers.
    bool parallel_batches = false;
};

kernels::gemm_type gemm_type_of(dtype t) { return t == dtype::f32 ? kernels::gemm_type::f32 : kernels::gemm_type::f64; }

// Merges a run of axes (outermost first) into one strided axis for two
// operands at once; false when either operand's strides do not chain.
// Extent-1 axes are skipped. An empty run is one axis of extent 1.
bool merge_axes(std::span<const axis_desc> axes, std::int64_t& extent, std::int64_t& s0, std::int64_t& s1) {
    extent = 1;
    s0 = s1 = 0;
    for (const axis_desc& ax : axes)
        if (ax.extent == 0) {
            extent = 0;  // an empty run: nothing is ever addressed
            return true;
        }
    bool first = true;
    for (const axis_desc& ax : axes) {
        if (ax.extent == 1) continue;
        if (first) {
            extent = ax.extent;
            s0 = ax.stride[0];
            s1 = ax.stride[1];
            first = false;
            continue;
        }
        // The run so far, (extent, s), continues with (e, t) iff s == t * e.
        if (s0 != ax.stride[0] * ax.extent || s1 != ax.stride[1] * ax.extent) return false;
        extent *= ax.extent;
        s0 = ax.stride[0];
        s1 = ax.stride[1];
    }
    return true;
}

extents row_major_strides(std::span<const std::int64_t> shape) {
    extents s(shape.size(), 1);
    std::int64_t step = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        s[i] = step;
        step *= std::max<std::int64_t>(shape[i], 1);
    }
    return s;
}

std::int64_t product(std::span<const std::int64_t> v) {
    std::int64_t p = 1;
    for (std::int64_t x : v) p *= x;
    return p;
}

// ---- dot_general planning --------------------------------------------------

// Strides an operand has once copied in `perm` order into a row-major buffer,
// indexed by its original axes.
extents strides_after_copy(std::span<const std::int64_t> shape, const extents& perm, extents& copy_shape) {
    copy_shape = extents();
    for (std::int64_t ax : perm) copy_shape.push_back(shape[static_cast<std::size_t>(ax)]);
    const extents rm = row_major_strides(copy_shape.span());
    extents s(shape.size(), 0);
    for (std::size_t i = 0; i < perm.size(); ++i) s[static_cast<std::size_t>(perm[i])] = rm[i];
    return s;
}

void finish_plan(contraction_plan& p, dtype type, std::size_t threads) {
    const gemm_layout& g = p.g;
    const std::int64_t batches = product(g.batch.span());
    const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    // Small GEMMs in a batch: one per thread beats splitting each one.
    p.parallel_batches = threads > 1 && batches >= 2 && flops < 4.0e6;
    const int kernel_threads = p.parallel_batches ? 1 : static_cast<int>(threads);
    p.kernel = kernels::plan_gemm(gemm_type_of(type), g.m, g.n, g.k, kernel_threads);
}

contraction_plan plan_dot_general(std::string_view op, const const_tensor_view& a, const const_tensor_view& b,
                                  const dot_config& cfg, const tensor_view& out, std::size_t threads) {
    const dot_axes d = check_dot_axes(op, a, b, cfg);
    contraction_plan p;
    p.out_shape = dot_out_shape(a, b, d);
    check_out(op, "out", out, a.type(), p.out_shape.span());
    const extents out_strides(out.strides());

    // Contracted pairs, visited in decreasing |stride| of a so that a dense
    // `a` merges whatever order the config lists them in.
    std::vector<std::size_t> korder(d.lc.size());
    for (std::size_t i = 0; i < korder.size(); ++i) korder[i] = i;
    std::stable_sort(korder.begin(), korder.end(), [&](std::size_t x, std::size_t y) {
        return std::llabs(a.strides()[static_cast<std::size_t>(d.lc[x])]) >
               std::llabs(a.strides()[static_cast<std::size_t>(d.lc[y])]);
    });

    extents as(a.strides()), bs(b.strides());
    const std::size_t nb = d.lb.size(), nlf = d.lf.size();
    for (int attempt = 0; attempt < 2; ++attempt) {
        std::vector<axis_desc> mk, nk, kk;
        for (std::size_t i = 0; i < d.lf.size(); ++i)
            mk.push_back({a.shape()[static_cast<std::size_t>(d.lf[i])],
                          {as[static_cast<std::size_t>(d.lf[i])], out_strides[nb + i]}});
        for (std::size_t j = 0; j < d.rf.size(); ++j)
            nk.push_back({b.shape()[static_cast<std::size_t>(d.rf[j])],
                          {bs[static_cast<std::size_t>(d.rf[j])], out_strides[nb + nlf + j]}});
        for (std::size_t i : korder)
            kk.push_back({a.shape()[static_cast<std::size_t>(d.lc[i])],
                          {as[static_cast<std::size_t>(d.lc[i])], bs[static_cast<std::size_t>(d.rc[i])]}});

        gemm_layout& g = p.g;
        std::int64_t ma_s = 0, mc_s = 0, nb_s = 0, nc_s = 0, ka_s = 0, kb_s = 0;
        // Which operand breaks each merge: test them one at a time.
        auto merges = [](std::vector<axis_desc> axes, int which) {
            for (auto& ax : axes) ax.stride[1 - which] = 0;
            std::int64_t e, s0, s1;
            return merge_axes(axes, e, s0, s1);
        };
        const bool a_ok = merges(mk, 0) && merges(kk, 0);
        const bool b_ok = merges(nk, 0) && merges(kk, 1);
        const bool c_ok = merges(mk, 1) && merges(nk, 1);
        if (a_ok && b_ok) {
            merge_axes(mk, g.m, ma_s, mc_s);
            merge_axes(nk, g.n, nb_s, nc_s);
            merge_axes(kk, g.k, ka_s, kb_s);
            if (!c_ok) {
                // Product into a row-major temporary of out_shape.
                p.out_via_temp = true;
                const extents rm = row_major_strides(p.out_shape.span());
                for (std::size_t i = 0; i < mk.size(); ++i) mk[i].stride[1] = rm[nb + i];
                for (std::size_t j = 0; j < nk.size(); ++j) nk[j].stride[1] = rm[nb + nlf + j];
                merge_axes(mk, g.m, ma_s, mc_s);
                merge_axes(nk, g.n, nb_s, nc_s);
            }
            g.a_rs = ma_s;
            g.a_cs = ka_s;
            g.b_rs = kb_s;
            g.b_cs = nb_s;
            g.c_rs = mc_s;
            g.c_cs = nc_s;
            const extents c_strides = p.out_via_temp ? row_major_strides(p.out_shape.span()) : out_strides;
            for (std::size_t i = 0; i < nb; ++i) {
                const std::int64_t e = a.shape()[static_cast<std::size_t>(d.lb[i])];
                if (e == 1) continue;
                g.batch.push_back(e);
                g.a_bs.push_back(as[static_cast<std::size_t>(d.lb[i])]);
                g.b_bs.push_back(bs[static_cast<std::size_t>(d.rb[i])]);
                g.c_bs.push_back(c_strides[i]);
            }
            finish_plan(p, a.type(), threads);
            return p;
        }
        // TTGT for the operand(s) that do not merge: a as [batch, free, contracted],
        // b as [batch, contracted, free]; then every run is dense.
        if (!a_ok) {
            p.copy_a = true;
            p.a_perm = extents();
            for (std::int64_t ax : d.lb) p.a_perm.push_back(ax);
            for (std::int64_t ax : d.lf) p.a_perm.push_back(ax);
            for (std::size_t i : korder) p.a_perm.push_back(d.lc[i]);
            as = strides_after_copy(a.shape(), p.a_perm, p.a_copy_shape);
        }
        if (!b_ok) {
            p.copy_b = true;
            p.b_perm = extents();
            for (std::int64_t ax : d.rb) p.b_perm.push_back(ax);
            for (std::size_t i : korder) p.b_perm.push_back(d.rc[i]);
            for (std::int64_t ax : d.rf) p.b_perm.push_back(ax);
            bs = strides_after_copy(b.shape(), p.b_perm, p.b_copy_shape);
        }
    }
    fail(op, "internal error: no GEMM layout after copying the operands");  // unreachable
}

// ---- matmul planning -------------------------------------------------------

contraction_plan plan_matmul(std::string_view op, const const_tensor_view& a, const const_tensor_view& b,
                             const tensor_view& out, std::size_t threads) {
    const matmul_dims md = check_matmul(op, a, b);
    const bool a_vec = md.a_vec, b_vec = md.b_vec;
    const extents &ast = md.ast, &bst = md.bst, &ash = md.ash, &bsh = md.bsh, &batch = md.batch;
    const std::size_t ar = ash.size(), br = bsh.size();
    const std::int64_t m = md.m, n = md.n, k = md.k;

    contraction_plan p;
    p.out_shape = md.out_shape;
    check_out(op, "out", out, a.type(), p.out_shape.span());
    const extents os(out.strides());

    gemm_layout& g = p.g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a_rs = ast[ar - 2];
    g.a_cs = ast[ar - 1];
    g.b_rs = bst[br - 2];
    g.b_cs = bst[br - 1];
    const std::size_t nb = batch.size();
    g.c_rs = a_vec ? 0 : os[nb];
    g.c_cs = b_vec ? 0 : os[nb + (a_vec ? 0 : 1)];
    // Batch strides, right-aligned; a stretched or missing axis steps by 0.
    auto batch_stride = [](const extents& sh, const extents& st, std::size_t batch_rank, std::size_t i,
                           std::int64_t extent) -> std::int64_t {
        const std::size_t own = sh.size() - 2;
        if (i + own < batch_rank) return 0;
        const std::size_t j = i + own - batch_rank;
        return sh[j] == extent ? st[j] : 0;
    };
    for (std::size_t i = 0; i < nb; ++i) {
        if (batch[i] == 1) continue;
        g.batch.push_back(batch[i]);
        g.a_bs.push_back(batch_stride(ash, ast, nb, i, batch[i]));
        g.b_bs.push_back(batch_stride(bsh, bst, nb, i, batch[i]));
        g.c_bs.push_back(os[i]);
    }
    finish_plan(p, a.type(), threads);
    return p;
}

// ---- plan cache keys -------------------------------------------------------

class key_builder {
public:
    explicit key_builder(char tag) { key_.push_back(tag); }
    void add(std::int64_t v) { key_.append(reinterpret_cast<const char*>(&v), sizeof v); }
    void add(std::span<const std::int64_t> v) {
        add(static_cast<std::int64_t>(v.size()));
        for (std::int64_t x : v) add(x);
    }
    void add_view(const const_tensor_view& v) {
        add(static_cast<std::int64_t>(v.type()));
        add(v.shape());
        add(v.strides());
    }
    std::string take() { return std::move(key_); }

private:
    std::string key_;
};

std::string plan_key(char tag, const const_tensor_view& a, const const_tensor_view& b, const dot_config* cfg,
                     const tensor_view& out, std::size_t threads) {
    key_builder k(tag);
    k.add(static_cast<std::int64_t>(threads));
    // Kernel plans belong to one Highway target (tests switch targets).
    k.add(kernels::gemm_target());  // not hwy::SupportedTargets(): that re-runs CPUID (a VM exit) per call
    k.add_view(a);
    k.add_view(b);
    if (cfg) {
        k.add(cfg->lhs_contracting);
        k.add(cfg->rhs_contracting);
        k.add(cfg->lhs_batch);
        k.add(cfg->rhs_batch);
    }
    k.add(out.strides());
    return k.take();
}

// The plan for this call: from the cache, or made and inserted.
template <class Make>
std::shared_ptr<const contraction_plan> cached_plan(cpu_runtime_cache& cache, std::string key, Make&& make) {
    runtime_cache_state& st = cache_access::state(cache);
    if (auto hit = st.find(key)) return std::static_pointer_cast<const contraction_plan>(hit);
    auto plan = std::make_shared<const contraction_plan>(make());
    st.insert(std::move(key), plan, sizeof(contraction_plan));
    return plan;
}

// ---- execution -------------------------------------------------------------

void run_plan(cpu_session& s, const contraction_plan& p, const const_tensor_view& a, const const_tensor_view& b,
              const tensor_view& out, double alpha, double beta) {
    const dtype type = a.type();
    const std::size_t itemsize = size_of(type);
    const gemm_layout& g = p.g;
    if (product(p.out_shape.span()) == 0) return;

    // TTGT copies.
    const void* a_data = a.data();
    const void* b_data = b.data();
    std::unique_ptr<pooled_scratch> a_copy, b_copy, temp;
    if (p.copy_a) {
        a_copy = std::make_unique<pooled_scratch>(s.buffers(),
                                                  static_cast<std::size_t>(product(p.a_copy_shape.span())) * itemsize);
        s.copy_into(a.transposed(p.a_perm.span()), tensor_view(a_copy->get(), type, p.a_copy_shape.span()));
        a_data = a_copy->get();
    }
    if (p.copy_b) {
        b_copy = std::make_unique<pooled_scratch>(s.buffers(),
                                                  static_cast<std::size_t>(product(p.b_copy_shape.span())) * itemsize);
        s.copy_into(b.transposed(p.b_perm.span()), tensor_view(b_copy->get(), type, p.b_copy_shape.span()));
        b_data = b_copy->get();
    }
    void* c_data = out.data();
    if (p.out_via_temp) {
        temp = std::make_unique<pooled_scratch>(s.buffers(),
                                                static_cast<std::size_t>(product(p.out_shape.span())) * itemsize);
        c_data = temp->get();
    }
    const double k_alpha = p.out_via_temp ? 1.0 : alpha;
    const double k_beta = p.out_via_temp ? 0.0 : beta;

    // A constant operand (single GEMM, used as it is): its packed panels come
    // from the cache.
    const kernels::gemm_type gt = gemm_type_of(type);
    std::shared_ptr<const void> packed_b_hold;
    const void* packed_b = nullptr;
    if (g.batch.empty() && !p.copy_b) packed_b = packed_constant_b(s, p.kernel, b_data, g.b_rs, g.b_cs, packed_b_hold);

    pooled_scratch scratch(s.buffers(), p.kernel.scratch_bytes);
    auto gemm_at = [&](std::int64_t ao, std::int64_t bo, std::int64_t co, void* scratch_ptr, bool parallel) {
        kernels::gemm_operands ops{};
        ops.m = g.m;
        ops.n = g.n;
        ops.k = g.k;
        ops.a = static_cast<const std::byte*>(a_data) + ao * static_cast<std::int64_t>(itemsize);
        ops.a_row_stride = g.a_rs;
        ops.a_col_stride = g.a_cs;
        ops.b = static_cast<const std::byte*>(b_data) + bo * static_cast<std::int64_t>(itemsize);
        ops.b_row_stride = g.b_rs;
        ops.b_col_stride = g.b_cs;
        ops.c = static_cast<std::byte*>(c_data) + co * static_cast<std::int64_t>(itemsize);
        ops.c_row_stride = g.c_rs;
        ops.c_col_stride = g.c_cs;
        ops.alpha = k_alpha;
        ops.beta = k_beta;
        auto run = [&](std::int64_t count, kernels::gemm_body body) {
            if (parallel)
                s.parallel_for(count, 1, body);
            else
                body(0, count);
        };
        if (packed_b)
            kernels::gemm_prepacked_b(gt, ops, p.kernel, packed_b, scratch_ptr, run);
        else
            kernels::gemm(gt, ops, p.kernel, scratch_ptr, run);
    };

    const std::int64_t batches = product(g.batch.span());
    if (g.batch.empty()) {
        gemm_at(0, 0, 0, scratch.get(), true);
    } else {
        const std::size_t rank = g.batch.size();
        auto offsets = [&](std::int64_t index, std::int64_t& ao, std::int64_t& bo, std::int64_t& co) {
            ao = bo = co = 0;
            for (std::size_t d = rank; d-- > 0;) {
                const std::int64_t i = index % g.batch[d];
                index /= g.batch[d];
                ao += i * g.a_bs[d];
                bo += i * g.b_bs[d];
                co += i * g.c_bs[d];
            }
        };
        if (p.parallel_batches) {
            s.parallel_for(batches, 1, [&](std::int64_t begin, std::int64_t end) {
                pooled_scratch mine(s.buffers(), p.kernel.scratch_bytes);  // each range packs on its own
                for (std::int64_t i = begin; i < end; ++i) {
                    std::int64_t ao, bo, co;
                    offsets(i, ao, bo, co);
                    gemm_at(ao, bo, co, mine.get(), false);
                }
            });
        } else {
            for (std::int64_t i = 0; i < batches; ++i) {
                std::int64_t ao, bo, co;
                offsets(i, ao, bo, co);
                gemm_at(ao, bo, co, scratch.get(), true);
            }
        }
    }

    if (p.out_via_temp) {
        const const_tensor_view t(temp->get(), type, p.out_shape.span());
        if (beta == 0.0)
            s.scale_into(t, alpha, out);
        else
            s.axpby(alpha, t, beta, out);
    }
}

}  // namespace

void cpu_session::dot_general_into(const const_tensor_view& a, const const_tensor_view& b, const dot_config& cfg,
                                   const tensor_view& out, double alpha, double beta) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "dot_general_into";
    require_float(op, "a", a.type());
    require_same_dtype(op, "a", a.type(), "b", b.type());
    const auto plan = cached_plan(cache(), plan_key('d', a, b, &cfg, out, parallelism()),
                                  [&] { return plan_dot_general(op, a, b, cfg, out, parallelism()); });
    check_out(op, "out", out, a.type(), plan->out_shape.span());  // also on a cache hit
    check_no_overlap(op, "out", out, "a", a);
    check_no_overlap(op, "out", out, "b", b);
    run_plan(*this, *plan, a, b, out, alpha, beta);
}

void cpu_session::matmul_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) {
    const op_stop_scope stop(stop_token_ref());
    constexpr std::string_view op = "matmul_into";
    const auto plan = cached_plan(cache(), plan_key('m', a, b, nullptr, out, parallelism()),
                                  [&] { return plan_matmul(op, a, b, out, parallelism()); });
    check_out(op, "out", out, a.type(), plan->out_shape.span());  // also on a cache hit
    check_no_overlap(op, "out", out, "a", a);
    check_no_overlap(op, "out", out, "b", b);
    run_plan(*this, *plan, a, b, out, 1.0, 0.0);
}

}  // namespace tenferro::detail
