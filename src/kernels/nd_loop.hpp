#pragma once
// The iteration space the kernels walk: a row-major loop nest of up to eight
// axes shared by K operands, each with its own signed element strides. Plain
// integers only, so kernels stay free of tensor and session types.
//
// Positions are flat row-major indices into the loop's shape. A kernel is
// handed a position range [begin, end) — the whole space, or one fixed chunk
// of it when an op splits work over the session's workers — and walks it in
// *runs*: maximal stretches of consecutive positions inside one innermost row,
// along which every operand advances by its innermost stride. Unit-stride runs
// are vectorised in place; other runs are gathered into a small buffer.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tenferro::kernels {

inline constexpr int nd_max_rank = 8;

template <int K>
struct nd_loop {
    int rank = 1;                                 // >= 1; every extent >= 1
    std::int64_t shape[nd_max_rank] = {1};        // extents, outermost first
    std::int64_t strides[K][nd_max_rank] = {};    // per operand, in elements

    std::int64_t size() const noexcept {
        std::int64_t n = 1;
        for (int d = 0; d < rank; ++d) n *= shape[d];
        return n;
    }
    std::int64_t inner() const noexcept { return shape[rank - 1]; }
    std::int64_t inner_stride(int k) const noexcept { return strides[k][rank - 1]; }
};

// A loop over `shape` for K operands with the given strides (each aligned with
// `shape`): extent-1 axes dropped, and neighbouring axes merged where every
// operand steps through them as through one axis. All extents must be >= 1
// and the rank at most nd_max_rank after dropping; rank 0 becomes a single
// position.
template <int K>
nd_loop<K> make_loop(std::span<const std::int64_t> shape, const std::array<std::span<const std::int64_t>, K>& strides) {
    nd_loop<K> loop;
    int r = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] == 1) continue;
        if (r > 0) {
            bool mergeable = true;
            for (int k = 0; k < K; ++k)
                if (loop.strides[k][r - 1] != strides[k][d] * shape[d]) mergeable = false;
            if (mergeable) {
                loop.shape[r - 1] *= shape[d];
                for (int k = 0; k < K; ++k) loop.strides[k][r - 1] = strides[k][d];
                continue;
            }
        }
        loop.shape[r] = shape[d];
        for (int k = 0; k < K; ++k) loop.strides[k][r] = strides[k][d];
        ++r;
    }
    if (r == 0) {
        loop.shape[0] = 1;
        for (int k = 0; k < K; ++k) loop.strides[k][0] = 0;
        r = 1;
    }
    loop.rank = r;
    return loop;
}

// Element offsets of position `pos` for every operand.
template <int K>
inline void offsets_of(const nd_loop<K>& loop, std::int64_t pos, std::int64_t (&off)[K]) noexcept {
    for (int k = 0; k < K; ++k) off[k] = 0;
    for (int d = loop.rank - 1; d >= 0; --d) {
        const std::int64_t i = pos % loop.shape[d];
        pos /= loop.shape[d];
        for (int k = 0; k < K; ++k) off[k] += i * loop.strides[k][d];
    }
}

// Walks the runs of positions [begin, end): each next() yields `off[k]`, the
// element offset of the run's first position for operand k, and `n`, the run
// length; along the run operand k advances by loop.inner_stride(k). A cursor
// rather than a callback, so Highway kernels need no target-attributed lambdas.
template <int K>
class run_cursor {
public:
    run_cursor(const nd_loop<K>& loop, std::int64_t begin, std::int64_t end) noexcept
        : loop_(loop), pos_(begin), end_(end) {
        // Position 0 (every unchunked call) has all indices and offsets 0: no
        // division, which costs tens of cycles on a small call.
        if (begin >= end || begin == 0) return;
        std::int64_t rem = begin;
        for (int d = loop.rank - 1; d >= 0; --d) {
            idx_[d] = rem % loop.shape[d];
            rem /= loop.shape[d];
            for (int k = 0; k < K; ++k) off_[k] += idx_[d] * loop.strides[k][d];
        }
    }

    bool next(std::int64_t (&off)[K], std::int64_t& n) noexcept {
        if (pos_ >= end_) return false;
        const int r = loop_.rank;
        if (started_) {
            // The previous run ended at the end of its row: rewind the inner axis, carry outward.
            for (int k = 0; k < K; ++k) off_[k] -= idx_[r - 1] * loop_.strides[k][r - 1];
            idx_[r - 1] = 0;
            for (int d = r - 2; d >= 0; --d) {
                for (int k = 0; k < K; ++k) off_[k] += loop_.strides[k][d];
                if (++idx_[d] < loop_.shape[d]) break;
                for (int k = 0; k < K; ++k) off_[k] -= loop_.shape[d] * loop_.strides[k][d];
                idx_[d] = 0;
            }
        }
        started_ = true;
        n = std::min(loop_.shape[r - 1] - idx_[r - 1], end_ - pos_);
        for (int k = 0; k < K; ++k) off[k] = off_[k];
        pos_ += n;
        return true;
    }

private:
    const nd_loop<K>& loop_;
    std::int64_t pos_, end_;
    std::int64_t idx_[nd_max_rank] = {};
    std::int64_t off_[K] = {};
    bool started_ = false;
};

// Calls f(off, n) for each run of positions [begin, end) (see run_cursor).
template <int K, class F>
inline void for_each_run(const nd_loop<K>& loop, std::int64_t begin, std::int64_t end, F&& f) {
    run_cursor<K> cursor(loop, begin, end);
    std::int64_t off[K];
    std::int64_t n;
    while (cursor.next(off, n)) f(static_cast<const std::int64_t(&)[K]>(off), n);
}

}  // namespace tenferro::kernels
