#pragma once
// Pairwise (binary-counter) combination of partial results, shared by the
// reduction kernels (leaf partials) and by the ops that split a reduction into
// fixed chunks (chunk partials).
//
// Partials are pushed in position order, each with a level (log2 of the number
// of leaves it covers). Pushing merges the top of the stack with the new value
// while their levels are equal, exactly like incrementing a binary counter;
// finish() then folds the remaining stack from the top (right to left). The
// result is a fixed, balanced tree over the leaves: for n leaves every leaf
// goes through at most ceil(log2 n) + 1 combinations.
//
// A chunk of 2^L whole leaves that starts at a multiple of 2^L leaves reduces
// to one level-L partial, and a trailing chunk with fewer leaves never merges
// eagerly with it; so combining chunk partials this way (pushing a trailing
// short chunk with no_merge_level) yields bit for bit the tree the unchunked
// computation would build. Results therefore do not depend on the chunking.

#include <cstdint>

namespace tenferro::kernels {

inline constexpr int no_merge_level = -1;

template <class T, class Combine>
class pairwise_stack {
public:
    explicit pairwise_stack(Combine combine) noexcept : combine_(combine) {}

    void push(T value, int level) noexcept {
        if (level != no_merge_level) {
            while (size_ > 0 && level_[size_ - 1] == level) {
                value = combine_(value_[--size_], value);
                ++level;
            }
        }
        value_[size_] = value;
        level_[size_] = level;
        ++size_;
    }

    bool empty() const noexcept { return size_ == 0; }

    // Folds the stack from the top; `identity` when nothing was pushed.
    T finish(T identity) noexcept {
        if (size_ == 0) return identity;
        T acc = value_[--size_];
        while (size_ > 0) acc = combine_(value_[--size_], acc);
        return acc;
    }

private:
    Combine combine_;
    // One entry per set bit of a 64-bit leaf count, plus the trailing partial.
    T value_[66];
    int level_[66];
    int size_ = 0;
};

}  // namespace tenferro::kernels
