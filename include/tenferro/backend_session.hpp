#pragma once
/// \file
/// `backend_session`: what a session body receives. Every operation is a
/// member whose implementation is a virtual of the backend, so one body can run
/// against any backend.
///
/// ## Conventions shared by every operation
///
/// - Each op comes in an allocating form (`add(a, b) -> tensor`, a new
///   row-major tensor) and an `_into` form that writes a caller-owned output
///   (`add_into(a, b, out)`). An `_into` form never reads `out`; `out` must have
///   exactly the result's dtype and shape, must not overlap any input
///   (`overlaps(out, input)`), and must not be a broadcast view (stride 0 on an
///   axis of extent > 1). `out` may be any other strided view.
/// - Only the `_into` forms (and the in-place `axpby`) are virtual: each
///   allocating form is a non-virtual wrapper that validates its arguments
///   (throwing with its own name, `add: ...`), allocates the result through
///   the backend (`allocate`; the CPU backend's buffer pool) and calls the
///   `_into` form. A backend implements each op once.
/// - Inputs are `const_tensor_view`s of any strides: contiguous, sliced,
///   transposed, reversed (negative strides) or broadcast (zero strides). A
///   `tensor` converts implicitly.
/// - Every invalid argument throws `tensor_error` before anything is written;
///   its message starts with the op's name (`add`, `add_into`, ...) and names the
///   operand and the offending shapes / dtypes / axes, e.g.
///   `"add: operand b has shape [2, 4], which does not broadcast with a's shape [2, 3]"`.
/// - Arithmetic ops take `f32` or `f64`; both operands of a binary op must
///   have the same dtype (there is no implicit promotion; use `cast`).
/// - Axes are `std::int64_t`; a negative axis counts from the end.
/// - Ops above a size threshold split their work over `parallelism()` threads
///   in fixed chunks: elementwise results are bitwise identical whatever the
///   parallelism, and so are reductions (see docs/kernels.md).
///
/// \code
/// tensor y = s.add(s.mul(x, w), b);         // numpy broadcasting: [n, k] * [k] + [k]
/// s.axpby(0.5, grad, 1.0, params);          // params = 0.5 * grad + params, in place
/// tensor p = s.sigmoid(y);
/// \endcode

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stop_token>
#include <string_view>
#include <utility>
#include <vector>

#include "tenferro/detail/base/function_ref.hpp"
#include "tenferro/detail/base/session_stopped.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro {

/// A non-owning, two-word reference to a callable.
using detail::function_ref;

/// The session a host hands to a session body.
///
/// Users never construct one: `host.with_backend_session(f)` passes a
/// `backend_session&` to `f`, valid only while `f` runs (for an asynchronous
/// body, until its awaitable completes). A session is used by one thread at a
/// time; the parallelism it holds is exercised through `parallel_for`.
/// Which axes `dot_general` contracts and batches over (StableHLO semantics).
///
/// `lhs_contracting[i]` of `a` is summed against `rhs_contracting[i]` of `b`
/// (equal extents); `lhs_batch[i]` pairs with `rhs_batch[i]` (equal extents, no
/// broadcasting). Axes may be negative (counted from the end); an axis may be
/// named once per operand. Every other axis is free.
struct dot_config {
    std::vector<std::int64_t> lhs_contracting, rhs_contracting, lhs_batch, rhs_batch;
};

class backend_session {
public:
    backend_session(const backend_session&) = delete;
    backend_session& operator=(const backend_session&) = delete;

    /// The backend's name, e.g. `"cpu"`.
    virtual std::string_view backend() const noexcept = 0;

    /// How many permits this session holds; its kernels may run on up to this
    /// many threads at once.
    virtual std::size_t parallelism() const noexcept = 0;

    /// Splits `[0, count)` into at most `parallelism()` contiguous ranges of at
    /// least `grain` elements and calls `body(begin, end)` for each, on the
    /// calling thread and on up to `parallelism() - 1` workers whose permits
    /// this session holds (so it never waits for a busy worker). The ranges
    /// depend only on `count`, `grain` and `parallelism()`. Returns when all
    /// ranges are done; the first exception `body` throws is rethrown here
    /// (the remaining ranges are skipped).
    virtual void parallel_for(std::int64_t count, std::int64_t grain,
                              function_ref<void(std::int64_t begin, std::int64_t end)> body) = 0;

    // ---------------------------------------------------------------------
    /// \name Binary elementwise ops
    /// `out = a op b` with numpy broadcasting: shapes are aligned at their last
    /// axis and an extent-1 (or missing) axis stretches to the other operand's
    /// extent; the result has the broadcast shape. `a` and `b` must have the same
    /// dtype, `f32` or `f64`. `div` is a true IEEE division. `maximum` / `minimum`
    /// propagate NaN as numpy does (a NaN operand gives NaN) and return `a` when
    /// the operands compare equal (so `maximum(-0.0, +0.0)` is `-0.0`).
    /// \throws tensor_error for a dtype that is not f32/f64, mismatched dtypes,
    /// shapes that do not broadcast, and (`_into`) a bad `out`.
    /// \code
    /// tensor c = s.add(a, b);          // [2, 3] + [3] -> [2, 3]
    /// s.maximum_into(a, b, out);       // out must be a [2, 3] f32 view
    /// \endcode
    ///@{
    tensor add(const const_tensor_view& a, const const_tensor_view& b);
    virtual void add_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) = 0;
    tensor sub(const const_tensor_view& a, const const_tensor_view& b);
    virtual void sub_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) = 0;
    tensor mul(const const_tensor_view& a, const const_tensor_view& b);
    virtual void mul_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) = 0;
    tensor div(const const_tensor_view& a, const const_tensor_view& b);
    virtual void div_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) = 0;
    tensor maximum(const const_tensor_view& a, const const_tensor_view& b);
    virtual void maximum_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) = 0;
    tensor minimum(const const_tensor_view& a, const const_tensor_view& b);
    virtual void minimum_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) = 0;
    ///@}

    /// \name Unary elementwise ops
    /// `out = f(x)`, same shape and dtype (`f32` or `f64`) as `x`.
    /// `neg`, `abs`, `sqrt` (correctly rounded) and `relu` (`max(x, 0)`; NaN stays
    /// NaN, `-0` gives `+0`) are exact; `rsqrt` is `1 / sqrt(x)` with a true division
    /// (within 1 ULP); `exp`, `log`, `tanh` and `sigmoid` (`1 / (1 + e^-x)`, never
    /// overflowing) are accurate to a few ULP (docs/kernels.md states the bounds)
    /// and follow C99 for special values: NaN in gives NaN, `exp` overflows to
    /// `+inf`, `log(0) = -inf`, `log(x < 0) = NaN`, `tanh(+-inf) = +-1`.
    /// \throws tensor_error for a dtype that is not f32/f64 and (`_into`) a bad `out`.
    ///@{
    tensor neg(const const_tensor_view& x);
    virtual void neg_into(const const_tensor_view& x, const tensor_view& out) = 0;
    tensor abs(const const_tensor_view& x);
    virtual void abs_into(const const_tensor_view& x, const tensor_view& out) = 0;
    tensor exp(const const_tensor_view& x);
    virtual void exp_into(const const_tensor_view& x, const tensor_view& out) = 0;
    tensor log(const const_tensor_view& x);
    virtual void log_into(const const_tensor_view& x, const tensor_view& out) = 0;
    tensor tanh(const const_tensor_view& x);
    virtual void tanh_into(const const_tensor_view& x, const tensor_view& out) = 0;
    tensor sqrt(const const_tensor_view& x);
    virtual void sqrt_into(const const_tensor_view& x, const tensor_view& out) = 0;
    tensor rsqrt(const const_tensor_view& x);
    virtual void rsqrt_into(const const_tensor_view& x, const tensor_view& out) = 0;
    tensor sigmoid(const const_tensor_view& x);
    virtual void sigmoid_into(const const_tensor_view& x, const tensor_view& out) = 0;
    tensor relu(const const_tensor_view& x);
    virtual void relu_into(const const_tensor_view& x, const tensor_view& out) = 0;
    ///@}

    /// \name Scalar forms
    /// `scale(x, alpha)` is `alpha * x`. `axpby(alpha, x, beta, y)` updates `y` in
    /// place: `y = alpha * x + beta * y` (one fused multiply-add where the CPU has
    /// it); `x` broadcasts to `y`'s shape and may be `y` itself (the same view), but
    /// must not otherwise overlap it; `y` must not be a broadcast view. As in BLAS,
    /// `beta == 0` does not read `y` (NaNs in it do not propagate).
    /// `axpby_into(alpha, x, beta, y, out)` writes `alpha * x + beta * y` (x and y
    /// broadcast together) to `out`. The scalars are converted to the dtype first.
    /// \throws tensor_error for a dtype that is not f32/f64, mismatched dtypes or
    /// shapes, an overlapping or broadcast `y` / `out`.
    ///@{
    tensor scale(const const_tensor_view& x, double alpha);
    virtual void scale_into(const const_tensor_view& x, double alpha, const tensor_view& out) = 0;
    virtual void axpby(double alpha, const const_tensor_view& x, double beta, const tensor_view& y) = 0;
    virtual void axpby_into(double alpha, const const_tensor_view& x, double beta, const const_tensor_view& y,
                            const tensor_view& out) = 0;
    ///@}

    /// \name Reductions
    /// `reduce_sum`, `reduce_prod`, `reduce_max`, `reduce_min` reduce `x` (`f32` or
    /// `f64`) over `axes` (negative axes count from the end; empty = every axis).
    /// The result has `x`'s dtype and `x`'s shape without the reduced axes (numpy
    /// `keepdims=False`): rank 0 when every axis is reduced. Over zero elements
    /// the sum is 0 and the product 1; max / min of zero elements throw. max / min
    /// return NaN when any reduced element is NaN (numpy).
    ///
    /// Sums and products accumulate in the input precision with several vector
    /// accumulators over blocks of 1024 elements, and combine the blocks pairwise:
    /// at least as accurate as numpy's pairwise summation (docs/kernels.md gives
    /// the order and the error bound). Results are bitwise identical whatever the
    /// parallelism.
    /// \throws tensor_error for a dtype that is not f32/f64, an axis out of range,
    /// a repeated axis, max / min over an empty axis, and (`_into`) a bad `out`.
    /// \code
    /// tensor col_sums = s.reduce_sum(m, {0});   // [r, c] -> [c]
    /// tensor total = s.reduce_sum(m);           // rank 0
    /// float peak = s.reduce_max(m, {}).data<float>()[0];
    /// \endcode
    ///@{
    tensor reduce_sum(const const_tensor_view& x, std::span<const std::int64_t> axes);
    virtual void reduce_sum_into(const const_tensor_view& x, std::span<const std::int64_t> axes,
                                 const tensor_view& out) = 0;
    tensor reduce_prod(const const_tensor_view& x, std::span<const std::int64_t> axes);
    virtual void reduce_prod_into(const const_tensor_view& x, std::span<const std::int64_t> axes,
                                  const tensor_view& out) = 0;
    tensor reduce_max(const const_tensor_view& x, std::span<const std::int64_t> axes);
    virtual void reduce_max_into(const const_tensor_view& x, std::span<const std::int64_t> axes,
                                 const tensor_view& out) = 0;
    tensor reduce_min(const const_tensor_view& x, std::span<const std::int64_t> axes);
    virtual void reduce_min_into(const const_tensor_view& x, std::span<const std::int64_t> axes,
                                 const tensor_view& out) = 0;

    tensor reduce_sum(const const_tensor_view& x, std::initializer_list<std::int64_t> axes) {
        return reduce_sum(x, std::span<const std::int64_t>(axes.begin(), axes.size()));
    }
    void reduce_sum_into(const const_tensor_view& x, std::initializer_list<std::int64_t> axes, const tensor_view& out) {
        reduce_sum_into(x, std::span<const std::int64_t>(axes.begin(), axes.size()), out);
    }
    tensor reduce_prod(const const_tensor_view& x, std::initializer_list<std::int64_t> axes) {
        return reduce_prod(x, std::span<const std::int64_t>(axes.begin(), axes.size()));
    }
    void reduce_prod_into(const const_tensor_view& x, std::initializer_list<std::int64_t> axes,
                          const tensor_view& out) {
        reduce_prod_into(x, std::span<const std::int64_t>(axes.begin(), axes.size()), out);
    }
    tensor reduce_max(const const_tensor_view& x, std::initializer_list<std::int64_t> axes) {
        return reduce_max(x, std::span<const std::int64_t>(axes.begin(), axes.size()));
    }
    void reduce_max_into(const const_tensor_view& x, std::initializer_list<std::int64_t> axes, const tensor_view& out) {
        reduce_max_into(x, std::span<const std::int64_t>(axes.begin(), axes.size()), out);
    }
    tensor reduce_min(const const_tensor_view& x, std::initializer_list<std::int64_t> axes) {
        return reduce_min(x, std::span<const std::int64_t>(axes.begin(), axes.size()));
    }
    void reduce_min_into(const const_tensor_view& x, std::initializer_list<std::int64_t> axes, const tensor_view& out) {
        reduce_min_into(x, std::span<const std::int64_t>(axes.begin(), axes.size()), out);
    }
    /// Over every axis (rank-0 result).
    tensor reduce_sum(const const_tensor_view& x) { return reduce_sum(x, std::span<const std::int64_t>{}); }
    tensor reduce_prod(const const_tensor_view& x) { return reduce_prod(x, std::span<const std::int64_t>{}); }
    tensor reduce_max(const const_tensor_view& x) { return reduce_max(x, std::span<const std::int64_t>{}); }
    tensor reduce_min(const const_tensor_view& x) { return reduce_min(x, std::span<const std::int64_t>{}); }
    ///@}

    /// \name Dot products
    /// `vdot(a, b)` is the sum of `a[i] * b[i]` over every element of two views
    /// of the same shape and dtype (`f32` or `f64`; no broadcasting, no complex
    /// conjugation); `norm_squared(x)` is `vdot(x, x)`. Both return rank-0
    /// tensors (the `_into` forms write a rank-0 `out`), summed in the same
    /// order and with the same bound as `reduce_sum`.
    /// \throws tensor_error for a dtype that is not f32/f64, mismatched dtypes or
    /// shapes, and (`_into`) a bad `out`.
    ///@{
    tensor vdot(const const_tensor_view& a, const const_tensor_view& b);
    virtual void vdot_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) = 0;
    tensor norm_squared(const const_tensor_view& x);
    virtual void norm_squared_into(const const_tensor_view& x, const tensor_view& out) = 0;
    ///@}

    /// \name Row-wise ops
    /// Both work along one `axis` of `x` (`f32` or `f64`; negative counts from the
    /// end); every other axis indexes independent rows.
    ///
    /// `softmax(x, axis)`: `exp(x - max) / sum(exp(x - max))` along `axis`, with the
    /// row maximum subtracted first (no overflow), the sum in `reduce_sum`'s order
    /// and a true division. Same shape and dtype as `x`. A row that holds a NaN
    /// or `+inf`, or only `-inf`, becomes all NaN.
    ///
    /// `top_k(x, k, axis)` returns `(values, indices)`: the `k` largest elements of
    /// each row, largest first, and their positions along `axis` (`i64`); both
    /// have `x`'s shape with `axis` of extent `k`. Ties go to the lower index. NaN
    /// ranks above every number, as in numpy's sort (so NaNs come first, lower
    /// index first among them); `-0.0` and `+0.0` tie. `k == 0` gives empty results.
    /// \throws tensor_error for a dtype that is not f32/f64, an axis out of range
    /// (a rank-0 `x` has none), `k < 0` or `k` greater than the axis extent, and
    /// (`_into`) a bad or overlapping output (`values` and `indices` must not
    /// overlap each other either).
    /// \code
    /// tensor p = s.softmax(logits, -1);
    /// auto [scores, ids] = s.top_k(p, 10, -1);   // [batch, vocab] -> [batch, 10] twice
    /// \endcode
    ///@{
    tensor softmax(const const_tensor_view& x, std::int64_t axis);
    virtual void softmax_into(const const_tensor_view& x, std::int64_t axis, const tensor_view& out) = 0;
    std::pair<tensor, tensor> top_k(const const_tensor_view& x, std::int64_t k, std::int64_t axis);
    virtual void top_k_into(const const_tensor_view& x, std::int64_t k, std::int64_t axis, const tensor_view& values,
                            const tensor_view& indices) = 0;
    ///@}

    /// \name Contractions
    /// `f32` or `f64`, both operands of the same dtype; any strides (sliced,
    /// transposed, reversed, broadcast). Computed by a packed, register-blocked
    /// GEMM split over `parallelism()` threads along the output's rows / columns
    /// (never along the contracted axes), so the result does not depend on the
    /// parallelism. Each output element sums its `k` products in a fixed order
    /// with fused multiply-adds; its error is bounded by about
    /// `k * eps * sum |a_i * b_i|` (see docs/contraction.md).
    ///
    /// `dot_general(a, b, cfg)`: the result's axes are the batch axes (in
    /// `cfg.lhs_batch` order), then `a`'s free axes, then `b`'s free axes, each in
    /// their operand's order (StableHLO `dot_general`).
    ///
    /// `dot_general_into(a, b, cfg, out, alpha, beta)`: `out = alpha * a.b + beta * out`.
    /// With `beta == 0`, `out` is not read (NaNs in it do not leak); otherwise it
    /// is the one `_into` form that reads `out`.
    ///
    /// `matmul(a, b)`: numpy's `matmul`. Rank >= 2 operands are stacks of matrices
    /// `[..., m, k]` and `[..., k, n]` whose leading (batch) axes broadcast; a rank-1
    /// `a` is a row `[1, k]` and a rank-1 `b` a column `[k, 1]`, the added axis
    /// removed from the result (so vector . vector is a rank-0 tensor).
    ///
    /// Inside `cpu_backend::with_backend_session_cached(cache, ...)` the plans
    /// (and packed copies of operands marked constant) come from and go to
    /// `cache`; otherwise from the backend's own cache.
    /// \throws tensor_error for a dtype that is not f32/f64, mismatched dtypes,
    /// contracting or batch axes out of range, repeated, of different counts or of
    /// different extents, rank-0 `matmul` operands, `matmul` inner extents that
    /// differ or batch axes that do not broadcast, and (`_into`) a bad or
    /// overlapping `out`; the message names both operands, their shapes and axes.
    /// \code
    /// tensor scores = s.matmul(corpus, query);                 // [n, d] . [d] -> [n]
    /// tensor y = s.dot_general(x, w, {{1}, {0}, {}, {}});      // [b, k] . [k, n] -> [b, n]
    /// s.dot_general_into(q, kv, {{2}, {2}, {0}, {0}}, attn, 0.125, 0.0);  // batched
    /// \endcode
    ///@{
    tensor dot_general(const const_tensor_view& a, const const_tensor_view& b, const dot_config& cfg);
    virtual void dot_general_into(const const_tensor_view& a, const const_tensor_view& b, const dot_config& cfg,
                                  const tensor_view& out, double alpha = 1.0, double beta = 0.0) = 0;
    tensor matmul(const const_tensor_view& a, const const_tensor_view& b);
    /// `matmul` into a caller-owned `out` of the result's shape (never read).
    virtual void matmul_into(const const_tensor_view& a, const const_tensor_view& b, const tensor_view& out) = 0;
    ///@}

    /// \name Fused search
    /// `matmul_top_k(a, b, k)` is `top_k(matmul(a, b), k, -1)`, bit for bit, values and
    /// indices, without materialising the product: `values` `[.., m, k]` (the product's dtype)
    /// and `indices` `[.., m, k]` (`i64`), best first, ties to the lower index, NaN above every
    /// number (top_k's order). Exact search over a corpus `[n, d]` is
    /// `matmul_top_k(queries, corpus.transposed(), k)`: `transposed()` is a view (no copy), and
    /// with the corpus marked constant in the runtime cache its packed copy (the one `matmul`
    /// uses too) is read instead.
    ///
    /// Like `matmul`, it is batch-invariant: a row's results have the same bits whether it is
    /// computed alone or among a thousand rows, and whatever `parallelism()`. The product is
    /// computed in tiles that stay in cache, each folded into the rows' top-k at once; the
    /// columns (the corpus) are split over the permits.
    ///
    /// The default implementation (for a backend without a fused kernel) is the unfused
    /// composition.
    /// \throws tensor_error for everything `matmul` and `top_k` reject (a product of two vectors
    /// is a scalar: no axis), and (`_into`) a bad or overlapping output.
    /// \code
    /// auto [scores, ids] = s.matmul_top_k(queries, corpus.transposed(), 10);  // [b, d] x [n, d] -> [b, 10]
    /// \endcode
    ///@{
    std::pair<tensor, tensor> matmul_top_k(const const_tensor_view& a, const const_tensor_view& b, std::int64_t k);
    virtual void matmul_top_k_into(const const_tensor_view& a, const const_tensor_view& b, std::int64_t k,
                                   const tensor_view& values, const tensor_view& indices);
    ///@}

    /// \name Structural ops
    /// Every dtype (`f32`, `f64`, `i32`, `i64`).
    ///
    /// `copy(x)`: a new contiguous (row-major) tensor with `x`'s elements, from any
    /// strided view — sliced, transposed, reversed (negative strides) or broadcast
    /// (zero strides: the copy materialises every alias).
    /// `copy_into(src, dst)`: writes `src` into `dst` (same dtype; `src` broadcasts
    /// to `dst`'s shape, as numpy's `copyto`).
    ///
    /// `transpose(x, perm)`: result axis `i` is `x`'s axis `perm[i]` (negative entries
    /// count from the end), materialised in row-major order; large transposes are
    /// copied in cache tiles. (`x.transposed(perm)` is the free, non-copying view.)
    ///
    /// `cast(x, type)`: converts every element. Float to integer truncates toward
    /// zero (numpy's `astype`); NaN becomes 0 and values outside the integer's range
    /// saturate to its limits (numpy leaves both undefined). `i64` to `i32` wraps
    /// modulo 2^32 (numpy). Conversions to floats round to nearest. `cast_into`
    /// takes the target dtype from `out`.
    ///
    /// `concatenate(inputs, axis)`: joins one or more views of the same dtype and
    /// rank (>= 1) along `axis` (negative counts from the end); the other extents
    /// must match. Braced lists work: `s.concatenate({a, b}, 0)`.
    /// \throws tensor_error for mismatched dtypes / shapes / ranks, a bad axis or
    /// permutation, an empty input list, and (`_into`) a bad or overlapping output.
    /// \code
    /// tensor dense = s.copy(x.slice(1, 0, INT64_MAX, 2));   // every other column, packed
    /// tensor xt = s.transpose(x, {1, 0});
    /// tensor ids = s.cast(scores, dtype::i32);
    /// tensor both = s.concatenate({a, b}, -1);
    /// \endcode
    ///@{
    tensor copy(const const_tensor_view& x);
    virtual void copy_into(const const_tensor_view& src, const tensor_view& dst) = 0;
    tensor transpose(const const_tensor_view& x, std::span<const std::int64_t> perm);
    virtual void transpose_into(const const_tensor_view& x, std::span<const std::int64_t> perm,
                                const tensor_view& out) = 0;
    tensor cast(const const_tensor_view& x, dtype type);
    virtual void cast_into(const const_tensor_view& x, const tensor_view& out) = 0;
    tensor concatenate(std::span<const const_tensor_view> inputs, std::int64_t axis);
    virtual void concatenate_into(std::span<const const_tensor_view> inputs, std::int64_t axis,
                                  const tensor_view& out) = 0;

    tensor transpose(const const_tensor_view& x, std::initializer_list<std::int64_t> perm) {
        return transpose(x, std::span<const std::int64_t>(perm.begin(), perm.size()));
    }
    void transpose_into(const const_tensor_view& x, std::initializer_list<std::int64_t> perm, const tensor_view& out) {
        transpose_into(x, std::span<const std::int64_t>(perm.begin(), perm.size()), out);
    }
    tensor concatenate(std::initializer_list<const_tensor_view> inputs, std::int64_t axis) {
        return concatenate(std::span<const const_tensor_view>(inputs.begin(), inputs.size()), axis);
    }
    void concatenate_into(std::initializer_list<const_tensor_view> inputs, std::int64_t axis, const tensor_view& out) {
        concatenate_into(std::span<const const_tensor_view>(inputs.begin(), inputs.size()), axis, out);
    }
    ///@}

    // ---------------------------------------------------------------------
    /// \name Stopping (S20)
    /// A session asked to stop (its grant's `session_grant::stop`) sees
    /// `stop_requested()` turn true, and stay true. Every operation checks at
    /// its start and between chunks of its work (about 32k element-operations,
    /// or one GEMM micro-panel, or one search tile), and throws
    /// `session_stopped`: so does every later operation of the session. An
    /// `_into` output, or `axpby`'s `y`, may then be partly written.
    /// `parallel_for` checks before each range; inside a range, the user's code
    /// looks (`stop_requested()`, `throw_if_stop_requested()`), and how soon it
    /// does is the user's.
    ///@{
    std::stop_token stop_token() const noexcept { return stop_; }
    bool stop_requested() const noexcept { return stop_.stop_requested(); }
    /// \throws session_stopped when stop_requested().
    void throw_if_stop_requested() const {
        if (stop_.stop_requested()) throw session_stopped();
    }
    ///@}

protected:
    backend_session() = default;
    /// A session that stops when `stop` does.
    explicit backend_session(std::stop_token stop) noexcept : stop_(std::move(stop)) {}
    virtual ~backend_session() = default;

    /// The token itself, for a backend's operations to mark their threads with.
    const std::stop_token& stop_token_ref() const noexcept { return stop_; }

    /// A new row-major tensor of `type` and `shape` for an allocating form's
    /// result (uninitialised; the `_into` form writes every element). The
    /// default is `tensor::empty(type, shape)`; the CPU backend takes the
    /// storage from its buffer pool.
    virtual tensor allocate(dtype type, std::span<const std::int64_t> shape) const;

private:
    std::stop_token stop_;
};

}  // namespace tenferro
