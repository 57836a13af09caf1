// The layout algebra (declared in layout.hpp): the metadata vocabulary (dtype
// sizes and names, detail::extents) and every computation on shapes and strides
// that tensors and views share: validation, row-major strides, contiguity,
// offsets, and the derivations behind slice, transposed, reshaped and broadcast_to.

#include "tensor/layout.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

namespace tenferro {

// ---------------------------------------------------------------------------
// detail::extents
// ---------------------------------------------------------------------------

namespace detail {

extents::extents(std::span<const std::int64_t> values) {
    if (values.size() > capacity) throw_capacity(values.size());
    std::copy(values.begin(), values.end(), values_.begin());
    size_ = static_cast<std::uint8_t>(values.size());
}

void extents::push_back(std::int64_t value) {
    if (size_ == capacity) throw_capacity(capacity + 1);
    values_[size_++] = value;
}

void extents::resize(std::size_t n) {
    if (n > capacity) throw_capacity(n);
    for (std::size_t i = size_; i < n; ++i) values_[i] = 0;
    size_ = static_cast<std::uint8_t>(n);
}

void extents::throw_capacity(std::size_t n) {
    throw tensor_error("detail::extents: " + std::to_string(n) + " entries exceed the maximum rank " +
                       std::to_string(capacity));
}
}  // namespace detail

// ---------------------------------------------------------------------------
// dtype and formatting
// ---------------------------------------------------------------------------

std::size_t size_of(dtype t) noexcept {
    switch (t) {
    case dtype::f32:
    case dtype::i32:
        return 4;
    case dtype::f64:
    case dtype::i64:
        return 8;
    }
    return 0;
}

std::string_view to_string(dtype t) noexcept {
    switch (t) {
    case dtype::f32:
        return "f32";
    case dtype::f64:
        return "f64";
    case dtype::i32:
        return "i32";
    case dtype::i64:
        return "i64";
    }
    return "invalid";
}

std::string to_string(std::span<const std::int64_t> extents) {
    std::string out = "[";
    for (std::size_t i = 0; i < extents.size(); ++i) {
        if (i != 0) out += ", ";
        out += std::to_string(extents[i]);
    }
    out += ']';
    return out;
}

namespace detail::layout_algebra {

// ---------------------------------------------------------------------------
// Validation, strides and offsets
// ---------------------------------------------------------------------------

namespace {

bool valid(dtype t) noexcept { return static_cast<std::uint8_t>(t) <= static_cast<std::uint8_t>(dtype::i64); }

void check_dtype(const char* op, dtype t) {
    if (!valid(t)) fail(op, dtype_name(t));
}

// Ranks above max_rank, negative extents; `what` names the operand ("shape",
// "target shape", ...).
void check_extents(const char* op, const char* what, std::span<const std::int64_t> shape) {
    if (shape.size() > max_rank)
        fail(op, std::string(what) + " " + to_string(shape) + " has rank " + std::to_string(shape.size()) +
                     ", above the maximum rank " + std::to_string(max_rank));
    for (std::size_t i = 0; i < shape.size(); ++i)
        if (shape[i] < 0)
            fail(op, "negative extent " + std::to_string(shape[i]) + " at axis " + std::to_string(i) + " of " + what +
                         " " + to_string(shape));
}

// The product of the extents with 0 counted as 1 (numpy's rule), times
// `itemsize`, must fit in int64: then the element count, the byte count and
// every row-major stride fit too, and shapes with a zero extent cannot smuggle
// in an overflowing stride.
void check_count(const char* op, const char* what, std::span<const std::int64_t> shape, std::int64_t itemsize,
                 dtype t) {
    std::int64_t product = itemsize;
    for (std::int64_t n : shape)
        if (__builtin_mul_overflow(product, n == 0 ? 1 : n, &product))
            fail(op, std::string(what) + " " + to_string(shape) + " of dtype " + dtype_name(t) +
                         " is too large: its element count or byte size overflows");
}

// Row-major strides; extents of 0 count as 1, as in numpy. check_count rules out overflow.
void fill_row_major(layout& l) noexcept {
    std::int64_t stride = 1;
    for (std::size_t i = l.shape.size(); i-- > 0;) {
        l.strides[i] = stride;
        if (l.shape[i] != 0) stride *= l.shape[i];
    }
}

void check_data_pointer(const char* op, const void* data, const layout& l) {
    if (data == nullptr && count_of(l.shape) != 0)
        fail(op, "null data pointer for a non-empty view of shape " + to_string(l.shape) + " with strides " +
                     to_string(l.strides));
    if (reinterpret_cast<std::uintptr_t>(data) % size_of(l.type) != 0)
        fail(op, "data pointer is not aligned to the " + std::to_string(size_of(l.type)) + "-byte elements of dtype " +
                     dtype_name(l.type));
}

}  // namespace

std::string dtype_name(dtype t) {
    if (valid(t)) return std::string(to_string(t));
    return "invalid dtype " + std::to_string(static_cast<unsigned>(t));
}

[[noreturn]] void fail(const char* op, const std::string& what) { throw tensor_error(std::string(op) + ": " + what); }

std::int64_t count_of(const detail::extents& shape) noexcept {
    std::int64_t n = 1;
    for (std::int64_t e : shape) n *= e;
    return n;
}

layout row_major_layout(const char* op, dtype t, std::span<const std::int64_t> shape) {
    check_dtype(op, t);
    check_extents(op, "shape", shape);
    check_count(op, "shape", shape, static_cast<std::int64_t>(size_of(t)), t);
    layout l;
    l.type = t;
    l.shape = detail::extents(shape);
    l.strides = detail::extents(shape.size(), 0);
    fill_row_major(l);
    return l;
}

bool is_c_contiguous(const layout& l) noexcept {
    for (std::int64_t n : l.shape)
        if (n == 0) return true;
    std::int64_t expected = 1;
    for (std::size_t i = l.shape.size(); i-- > 0;) {
        if (l.shape[i] == 1) continue;
        if (l.strides[i] != expected) return false;
        expected *= l.shape[i];
    }
    return true;
}

// The lowest and highest element offsets a non-empty layout addresses.
std::pair<std::int64_t, std::int64_t> offset_range(const layout& l) noexcept {
    std::int64_t lo = 0;
    std::int64_t hi = 0;
    for (std::size_t i = 0; i < l.shape.size(); ++i) {
        const std::int64_t reach = (l.shape[i] - 1) * l.strides[i];
        (reach < 0 ? lo : hi) += reach;
    }
    return {lo, hi};
}

// Validates the raw parts of a view; row-major when `strides` is null.
layout raw_layout(const char* op, const void* data, dtype t, std::span<const std::int64_t> shape,
                  const std::span<const std::int64_t>* strides) {
    if (strides == nullptr) {
        layout l = row_major_layout(op, t, shape);
        check_data_pointer(op, data, l);
        return l;
    }
    check_dtype(op, t);
    if (shape.size() != strides->size())
        fail(op, "shape " + to_string(shape) + " and strides " + to_string(*strides) + " differ in rank");
    check_extents(op, "shape", shape);
    const auto itemsize = static_cast<std::int64_t>(size_of(t));
    check_count(op, "shape", shape, itemsize, t);
    layout l;
    l.type = t;
    l.shape = detail::extents(shape);
    l.strides = detail::extents(*strides);
    if (count_of(l.shape) != 0) {
        // The addressed byte range must fit in int64 so that offset arithmetic
        // on this view and on every view derived from it cannot overflow.
        std::int64_t lo = 0;
        std::int64_t hi = 0;
        bool overflow = false;
        for (std::size_t i = 0; i < shape.size() && !overflow; ++i) {
            std::int64_t reach = 0;
            overflow = __builtin_mul_overflow(shape[i] - 1, (*strides)[i], &reach) ||
                       __builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi);
        }
        std::int64_t span_bytes = 0;
        overflow = overflow || __builtin_sub_overflow(hi, lo, &span_bytes) ||
                   __builtin_add_overflow(span_bytes, 1, &span_bytes) ||
                   __builtin_mul_overflow(span_bytes, itemsize, &span_bytes);
        if (overflow)
            fail(op, "shape " + to_string(shape) + " with strides " + to_string(*strides) + " of dtype " +
                         dtype_name(t) + " addresses a byte range that overflows");
    }
    check_data_pointer(op, data, l);
    return l;
}

std::int64_t index_offset(const char* op, const layout& l, std::span<const std::int64_t> index) {
    if (index.size() != l.shape.size())
        fail(op, "index " + to_string(index) + " has " + std::to_string(index.size()) + " entries for shape " +
                     to_string(l.shape) + " (rank " + std::to_string(l.shape.size()) + ")");
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < index.size(); ++i) {
        std::int64_t k = index[i];
        const std::int64_t n = l.shape[i];
        if (k < -n || k >= n)
            fail(op, "index " + to_string(index) + " is out of bounds for shape " + to_string(l.shape) + " at axis " +
                         std::to_string(i));
        if (k < 0) k += n;
        offset += k * l.strides[i];
    }
    return offset;
}

void check_element_type(const char* op, dtype requested, dtype actual) {
    if (requested != actual)
        fail(op, "requested element type " + dtype_name(requested) + " but the dtype is " + dtype_name(actual));
}

// ---------------------------------------------------------------------------
// The view derivations: slice, transposed, reshaped, broadcast_to
// ---------------------------------------------------------------------------

namespace {

std::size_t normalize_axis(const char* op, std::int64_t axis, const layout& l) {
    const auto rank = static_cast<std::int64_t>(l.shape.size());
    if (axis < -rank || axis >= rank)
        fail(op, "axis " + std::to_string(axis) + " is out of range for shape " + to_string(l.shape) + " (rank " +
                     std::to_string(rank) + ")");
    return static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
}

// numpy's _attempt_nocopy_reshape (C order), in elements rather than bytes.
// Runs of old and new axes with equal products are matched up; a run of old
// axes may be merged only when each one's stride is the next one's stride
// times its extent. Only called for a non-empty, non-contiguous layout.
bool nocopy_reshape(const layout& l, const detail::extents& new_shape, detail::extents& new_strides) noexcept {
    std::array<std::int64_t, max_rank> old_dims{};
    std::array<std::int64_t, max_rank> old_strides{};
    std::size_t old_rank = 0;
    for (std::size_t i = 0; i < l.shape.size(); ++i) {
        if (l.shape[i] != 1) {
            old_dims[old_rank] = l.shape[i];
            old_strides[old_rank] = l.strides[i];
            ++old_rank;
        }
    }
    const std::size_t new_rank = new_shape.size();
    std::size_t oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < new_rank && oi < old_rank) {
        std::int64_t np = new_shape[ni];
        std::int64_t op = old_dims[oi];
        while (np != op) {
            // The products are equal overall and nonzero, so neither index runs off the end.
            if (np < op)
                np *= new_shape[nj++];
            else
                op *= old_dims[oj++];
        }
        for (std::size_t ok = oi; ok + 1 < oj; ++ok)
            if (old_strides[ok] != old_dims[ok + 1] * old_strides[ok + 1]) return false;
        new_strides[nj - 1] = old_strides[oj - 1];
        for (std::size_t nk = nj - 1; nk > ni; --nk) new_strides[nk - 1] = new_strides[nk] * new_shape[nk];
        ni = nj++;
        oi = oj++;
    }
    // Trailing extent-1 axes of the new shape.
    const std::int64_t last_stride = ni >= 1 ? new_strides[ni - 1] : 1;
    for (std::size_t nk = ni; nk < new_rank; ++nk) new_strides[nk] = last_stride;
    return true;
}

}  // namespace

// Python's PySlice_AdjustIndices, then the view. Returns the element offset of
// the new view's first element.
std::int64_t slice_layout(const char* op, layout& l, std::int64_t axis, std::int64_t begin, std::int64_t end,
                          std::int64_t step) {
    const std::size_t ax = normalize_axis(op, axis, l);
    if (step == 0)
        fail(op, "step 0 along axis " + std::to_string(axis) + " of shape " + to_string(l.shape) +
                     " (the step must be nonzero)");
    const std::int64_t n = l.shape[ax];
    auto adjust = [&](std::int64_t i) {
        if (i < 0) {
            i += n;  // cannot overflow: n >= 0
            if (i < 0) i = step < 0 ? -1 : 0;
        } else if (i >= n) {
            i = step < 0 ? n - 1 : n;
        }
        return i;
    };
    begin = adjust(begin);
    end = adjust(end);

    // |step| as unsigned: step may be INT64_MIN.
    const std::uint64_t magnitude =
        step < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(step) : static_cast<std::uint64_t>(step);
    std::int64_t length = 0;
    if (step > 0 && begin < end)
        length = static_cast<std::int64_t>(static_cast<std::uint64_t>(end - begin - 1) / magnitude + 1);
    else if (step < 0 && end < begin)
        length = static_cast<std::int64_t>(static_cast<std::uint64_t>(begin - end - 1) / magnitude + 1);

    const std::int64_t stride = l.strides[ax];
    // With two or more elements, |step * stride| is below the parent's
    // addressed range and cannot overflow; with fewer the stride is irrelevant.
    std::int64_t new_stride = stride;
    if (length > 1) new_stride = stride * step;
    l.shape[ax] = length;
    l.strides[ax] = new_stride;
    // An empty slice keeps the parent's data pointer rather than forming an
    // address that may lie outside the parent's memory.
    return length > 0 ? begin * stride : 0;
}

void transpose_layout(const char* op, layout& l, std::span<const std::int64_t> perm) {
    const std::size_t rank = l.shape.size();
    auto bad = [&]() {
        fail(op, to_string(perm) + " is not a permutation of the " + std::to_string(rank) + " axes of shape " +
                     to_string(l.shape));
    };
    if (perm.size() != rank) bad();
    std::array<bool, max_rank> seen{};
    const layout source = l;
    for (std::size_t i = 0; i < rank; ++i) {
        std::int64_t p = perm[i];
        if (p < -static_cast<std::int64_t>(rank) || p >= static_cast<std::int64_t>(rank)) bad();
        if (p < 0) p += static_cast<std::int64_t>(rank);
        const auto a = static_cast<std::size_t>(p);
        if (seen[a]) bad();
        seen[a] = true;
        l.shape[i] = source.shape[a];
        l.strides[i] = source.strides[a];
    }
}

void reverse_layout(layout& l) noexcept {
    std::reverse(l.shape.begin(), l.shape.end());
    std::reverse(l.strides.begin(), l.strides.end());
}

void reshape_layout(const char* op, layout& l, std::span<const std::int64_t> requested) {
    if (requested.size() > max_rank)
        fail(op, "target shape " + to_string(requested) + " has rank " + std::to_string(requested.size()) +
                     ", above the maximum rank " + std::to_string(max_rank));
    const std::int64_t count = count_of(l.shape);
    detail::extents target(requested);
    std::size_t inferred = max_rank;
    std::int64_t known = 1;  // product of the given extents, 0 counted as 1
    bool has_zero = false;
    for (std::size_t i = 0; i < target.size(); ++i) {
        const std::int64_t e = target[i];
        if (e == -1) {
            if (inferred != max_rank) fail(op, "more than one -1 in target shape " + to_string(requested));
            inferred = i;
        } else if (e < 0) {
            fail(op, "invalid extent " + std::to_string(e) + " at axis " + std::to_string(i) + " of target shape " +
                         to_string(requested));
        } else if (e == 0) {
            has_zero = true;
        } else if (__builtin_mul_overflow(known, e, &known)) {
            fail(op, "target shape " + to_string(requested) + " is too large: its element count overflows");
        }
    }
    if (inferred != max_rank) {
        if (has_zero || count % known != 0)
            fail(op, "cannot reshape shape " + to_string(l.shape) + " (" + std::to_string(count) + " elements) into " +
                         to_string(requested) + ": the -1 cannot be inferred");
        target[inferred] = count / known;
    }
    const std::int64_t target_count = has_zero ? 0 : count_of(target);
    if (target_count != count)
        fail(op, "cannot reshape shape " + to_string(l.shape) + " (" + std::to_string(count) + " elements) into " +
                     to_string(target) + " (" + std::to_string(target_count) + " elements)");

    layout result;
    result.type = l.type;
    result.shape = target;
    result.strides = detail::extents(target.size(), 0);
    if (is_c_contiguous(l)) {
        // Also covers every empty layout (no stride constraint to honour).
        fill_row_major(result);
    } else if (!nocopy_reshape(l, target, result.strides)) {
        fail(op, "cannot view shape " + to_string(l.shape) + " with strides " + to_string(l.strides) + " as " +
                     to_string(target));
    }
    l = result;
}

void broadcast_layout(const char* op, layout& l, std::span<const std::int64_t> target) {
    check_extents(op, "target shape", target);
    check_count(op, "target shape", target, 1, l.type);
    const std::size_t rank = l.shape.size();
    if (target.size() < rank)
        fail(op, "cannot broadcast shape " + to_string(l.shape) + " to " + to_string(target) +
                     ": the target has fewer axes");
    const std::size_t lead = target.size() - rank;
    layout result;
    result.type = l.type;
    result.shape = detail::extents(target);
    result.strides = detail::extents(target.size(), 0);  // new leading axes: stride 0
    for (std::size_t i = 0; i < rank; ++i) {
        const std::int64_t from = l.shape[i];
        const std::int64_t to = target[lead + i];
        if (from == to)
            result.strides[lead + i] = l.strides[i];
        else if (from != 1)
            fail(op, "cannot broadcast shape " + to_string(l.shape) + " to " + to_string(target) + ": axis " +
                         std::to_string(i) + " has extent " + std::to_string(from) + ", target extent " +
                         std::to_string(to));
    }
    l = result;
}

}  // namespace detail::layout_algebra
}  // namespace tenferro
