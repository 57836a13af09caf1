// The two views (const_tensor_view, tensor_view) and what they share with
// tensor: detail::view_algebra, the members that derive views (slice,
// transposed, reshaped, broadcast_to), defined once here over the layout algebra
// and instantiated for the three classes; and overlaps().

#include "tenferro/tensor.hpp"

#include <cstdint>
#include <utility>

#include "tensor/layout.hpp"

namespace tenferro {

using detail::layout_algebra::advance;
using detail::layout_algebra::as_span;
using detail::layout_algebra::broadcast_layout;
using detail::layout_algebra::check_element_type;
using detail::layout_algebra::count_of;
using detail::layout_algebra::index_offset;
using detail::layout_algebra::is_c_contiguous;
using detail::layout_algebra::offset_range;
using detail::layout_algebra::raw_layout;
using detail::layout_algebra::reshape_layout;
using detail::layout_algebra::reverse_layout;
using detail::layout_algebra::slice_layout;
using detail::layout_algebra::transpose_layout;

// A view is its data pointer and its layout: the shared base adds no bytes.
static_assert(sizeof(const_tensor_view) == sizeof(const void*) + sizeof(detail::layout));
static_assert(sizeof(tensor_view) == sizeof(void*) + sizeof(detail::layout));

// ---------------------------------------------------------------------------
// const_tensor_view
// ---------------------------------------------------------------------------

const_tensor_view::const_tensor_view(const void* data, dtype type, std::span<const std::int64_t> shape,
                                     std::span<const std::int64_t> strides)
    : data_(data), layout_(raw_layout("const_tensor_view", data, type, shape, &strides)) {}

const_tensor_view::const_tensor_view(const void* data, dtype type, std::initializer_list<std::int64_t> shape,
                                     std::initializer_list<std::int64_t> strides)
    : const_tensor_view(data, type, as_span(shape), as_span(strides)) {}

const_tensor_view::const_tensor_view(const void* data, dtype type, std::span<const std::int64_t> shape)
    : data_(data), layout_(raw_layout("const_tensor_view", data, type, shape, nullptr)) {}

const_tensor_view::const_tensor_view(const void* data, dtype type, std::initializer_list<std::int64_t> shape)
    : const_tensor_view(data, type, as_span(shape)) {}

const_tensor_view::const_tensor_view(const tensor& t) noexcept : const_tensor_view(t.view()) {}

const_tensor_view::const_tensor_view(const tensor_view& v) noexcept : data_(v.data()), layout_(v.layout()) {}

std::int64_t const_tensor_view::size() const noexcept { return count_of(layout_.shape); }

bool const_tensor_view::is_contiguous() const noexcept { return is_c_contiguous(layout_); }

void const_tensor_view::check_type(dtype requested, const char* op) const {
    check_element_type(op, requested, layout_.type);
}

std::int64_t const_tensor_view::offset_of(std::span<const std::int64_t> index, const char* op) const {
    return index_offset(op, layout_, index);
}

// ---------------------------------------------------------------------------
// tensor_view
// ---------------------------------------------------------------------------

tensor_view::tensor_view(void* data, dtype type, std::span<const std::int64_t> shape,
                         std::span<const std::int64_t> strides)
    : data_(data), layout_(raw_layout("tensor_view", data, type, shape, &strides)) {}

tensor_view::tensor_view(void* data, dtype type, std::initializer_list<std::int64_t> shape,
                         std::initializer_list<std::int64_t> strides)
    : tensor_view(data, type, as_span(shape), as_span(strides)) {}

tensor_view::tensor_view(void* data, dtype type, std::span<const std::int64_t> shape)
    : data_(data), layout_(raw_layout("tensor_view", data, type, shape, nullptr)) {}

tensor_view::tensor_view(void* data, dtype type, std::initializer_list<std::int64_t> shape)
    : tensor_view(data, type, as_span(shape)) {}

tensor_view::tensor_view(tensor& t) noexcept : tensor_view(t.view()) {}

std::int64_t tensor_view::size() const noexcept { return count_of(layout_.shape); }

bool tensor_view::is_contiguous() const noexcept { return is_c_contiguous(layout_); }

void tensor_view::check_type(dtype requested, const char* op) const { check_element_type(op, requested, layout_.type); }

std::int64_t tensor_view::offset_of(std::span<const std::int64_t> index, const char* op) const {
    return index_offset(op, layout_, index);
}

// ---------------------------------------------------------------------------
// view_algebra: slice, transposed, reshaped, broadcast_to
// ---------------------------------------------------------------------------

namespace detail {
namespace {

// The operation names of error messages, "CLASS::MEMBER", as each class spells them.
template <class Self>
struct names_of;
template <>
struct names_of<const_tensor_view> {
    static constexpr const char* slice = "const_tensor_view::slice";
    static constexpr const char* transposed = "const_tensor_view::transposed";
    static constexpr const char* reshaped = "const_tensor_view::reshaped";
    static constexpr const char* broadcast_to = "const_tensor_view::broadcast_to";
};
template <>
struct names_of<tensor_view> {
    static constexpr const char* slice = "tensor_view::slice";
    static constexpr const char* transposed = "tensor_view::transposed";
    static constexpr const char* reshaped = "tensor_view::reshaped";
    static constexpr const char* broadcast_to = "tensor_view::broadcast_to";
};
template <>
struct names_of<tensor> {
    static constexpr const char* slice = "tensor::slice";
    static constexpr const char* transposed = "tensor::transposed";
    static constexpr const char* reshaped = "tensor::reshaped";
    static constexpr const char* broadcast_to = "tensor::broadcast_to";
};

// Each takes the view to derive from (a view of the tensor, for a tensor) and
// returns one of its type.

template <class View>
View slice_of(const char* op, const View& v, std::int64_t axis, std::int64_t begin, std::int64_t end,
              std::int64_t step) {
    layout l = v.layout();
    const std::int64_t offset = slice_layout(op, l, axis, begin, end, step);
    return {trusted_t{}, advance(v.data(), offset, l.type), l};
}

template <class View>
View transpose_of(const char* op, const View& v, std::span<const std::int64_t> perm) {
    layout l = v.layout();
    transpose_layout(op, l, perm);
    return {trusted_t{}, v.data(), l};
}

template <class View>
View reverse_of(const View& v) {
    layout l = v.layout();
    reverse_layout(l);
    return {trusted_t{}, v.data(), l};
}

template <class View>
View reshape_of(const char* op, const View& v, std::span<const std::int64_t> shape) {
    layout l = v.layout();
    reshape_layout(op, l, shape);
    return {trusted_t{}, v.data(), l};
}

template <class View>
View broadcast_of(const char* op, const View& v, std::span<const std::int64_t> shape) {
    layout l = v.layout();
    broadcast_layout(op, l, shape);
    return {trusted_t{}, v.data(), l};
}

}  // namespace

template <class Self, class View, class MutableView>
View view_algebra<Self, View, MutableView>::slice(std::int64_t axis, std::int64_t begin, std::int64_t end,
                                                  std::int64_t step) const {
    return slice_of(names_of<Self>::slice, View(self()), axis, begin, end, step);
}

template <class Self, class View, class MutableView>
MutableView view_algebra<Self, View, MutableView>::slice(std::int64_t axis, std::int64_t begin, std::int64_t end,
                                                         std::int64_t step)
    requires(!std::is_void_v<MutableView>)
{
    return slice_of(names_of<Self>::slice, MutableView(self()), axis, begin, end, step);
}

template <class Self, class View, class MutableView>
View view_algebra<Self, View, MutableView>::transposed(std::span<const std::int64_t> perm) const {
    return transpose_of(names_of<Self>::transposed, View(self()), perm);
}

template <class Self, class View, class MutableView>
MutableView view_algebra<Self, View, MutableView>::transposed(std::span<const std::int64_t> perm)
    requires(!std::is_void_v<MutableView>)
{
    return transpose_of(names_of<Self>::transposed, MutableView(self()), perm);
}

template <class Self, class View, class MutableView>
View view_algebra<Self, View, MutableView>::transposed(std::initializer_list<std::int64_t> perm) const {
    return transpose_of(names_of<Self>::transposed, View(self()), as_span(perm));
}

template <class Self, class View, class MutableView>
MutableView view_algebra<Self, View, MutableView>::transposed(std::initializer_list<std::int64_t> perm)
    requires(!std::is_void_v<MutableView>)
{
    return transpose_of(names_of<Self>::transposed, MutableView(self()), as_span(perm));
}

template <class Self, class View, class MutableView>
View view_algebra<Self, View, MutableView>::transposed() const {
    return reverse_of(View(self()));
}

template <class Self, class View, class MutableView>
MutableView view_algebra<Self, View, MutableView>::transposed()
    requires(!std::is_void_v<MutableView>)
{
    return reverse_of(MutableView(self()));
}

template <class Self, class View, class MutableView>
View view_algebra<Self, View, MutableView>::reshaped(std::span<const std::int64_t> shape) const {
    return reshape_of(names_of<Self>::reshaped, View(self()), shape);
}

template <class Self, class View, class MutableView>
MutableView view_algebra<Self, View, MutableView>::reshaped(std::span<const std::int64_t> shape)
    requires(!std::is_void_v<MutableView>)
{
    return reshape_of(names_of<Self>::reshaped, MutableView(self()), shape);
}

template <class Self, class View, class MutableView>
View view_algebra<Self, View, MutableView>::reshaped(std::initializer_list<std::int64_t> shape) const {
    return reshape_of(names_of<Self>::reshaped, View(self()), as_span(shape));
}

template <class Self, class View, class MutableView>
MutableView view_algebra<Self, View, MutableView>::reshaped(std::initializer_list<std::int64_t> shape)
    requires(!std::is_void_v<MutableView>)
{
    return reshape_of(names_of<Self>::reshaped, MutableView(self()), as_span(shape));
}

template <class Self, class View, class MutableView>
View view_algebra<Self, View, MutableView>::broadcast_to(std::span<const std::int64_t> shape) const {
    return broadcast_of(names_of<Self>::broadcast_to, View(self()), shape);
}

template <class Self, class View, class MutableView>
MutableView view_algebra<Self, View, MutableView>::broadcast_to(std::span<const std::int64_t> shape)
    requires(!std::is_void_v<MutableView>)
{
    return broadcast_of(names_of<Self>::broadcast_to, MutableView(self()), shape);
}

template <class Self, class View, class MutableView>
View view_algebra<Self, View, MutableView>::broadcast_to(std::initializer_list<std::int64_t> shape) const {
    return broadcast_of(names_of<Self>::broadcast_to, View(self()), as_span(shape));
}

template <class Self, class View, class MutableView>
MutableView view_algebra<Self, View, MutableView>::broadcast_to(std::initializer_list<std::int64_t> shape)
    requires(!std::is_void_v<MutableView>)
{
    return broadcast_of(names_of<Self>::broadcast_to, MutableView(self()), as_span(shape));
}

// The three classes that derive views. The two view classes get their const
// members one by one: instantiating the whole class would also instantiate the
// mutable overloads, whose constraint (MutableView is not void) is false there;
// the standard says an explicit instantiation skips such members and GCC does,
// but clang 14 instantiates them and fails.
#define TENFERRO_VIEW_ALGEBRA_CONST_MEMBERS(...)                                                                 \
    template const_tensor_view view_algebra<__VA_ARGS__>::slice(std::int64_t, std::int64_t, std::int64_t,        \
                                                                std::int64_t) const;                             \
    template const_tensor_view view_algebra<__VA_ARGS__>::transposed(std::span<const std::int64_t>) const;       \
    template const_tensor_view view_algebra<__VA_ARGS__>::transposed(std::initializer_list<std::int64_t>) const; \
    template const_tensor_view view_algebra<__VA_ARGS__>::transposed() const;                                    \
    template const_tensor_view view_algebra<__VA_ARGS__>::reshaped(std::span<const std::int64_t>) const;         \
    template const_tensor_view view_algebra<__VA_ARGS__>::reshaped(std::initializer_list<std::int64_t>) const;   \
    template const_tensor_view view_algebra<__VA_ARGS__>::broadcast_to(std::span<const std::int64_t>) const;     \
    template const_tensor_view view_algebra<__VA_ARGS__>::broadcast_to(std::initializer_list<std::int64_t>) const;
TENFERRO_VIEW_ALGEBRA_CONST_MEMBERS(const_tensor_view, const_tensor_view)
#undef TENFERRO_VIEW_ALGEBRA_CONST_MEMBERS
#define TENFERRO_VIEW_ALGEBRA_CONST_MEMBERS(...)                                                                  \
    template tensor_view view_algebra<__VA_ARGS__>::slice(std::int64_t, std::int64_t, std::int64_t, std::int64_t) \
        const;                                                                                                    \
    template tensor_view view_algebra<__VA_ARGS__>::transposed(std::span<const std::int64_t>) const;              \
    template tensor_view view_algebra<__VA_ARGS__>::transposed(std::initializer_list<std::int64_t>) const;        \
    template tensor_view view_algebra<__VA_ARGS__>::transposed() const;                                           \
    template tensor_view view_algebra<__VA_ARGS__>::reshaped(std::span<const std::int64_t>) const;                \
    template tensor_view view_algebra<__VA_ARGS__>::reshaped(std::initializer_list<std::int64_t>) const;          \
    template tensor_view view_algebra<__VA_ARGS__>::broadcast_to(std::span<const std::int64_t>) const;            \
    template tensor_view view_algebra<__VA_ARGS__>::broadcast_to(std::initializer_list<std::int64_t>) const;
TENFERRO_VIEW_ALGEBRA_CONST_MEMBERS(tensor_view, tensor_view)
#undef TENFERRO_VIEW_ALGEBRA_CONST_MEMBERS
template class view_algebra<tensor, const_tensor_view, tensor_view>;

}  // namespace detail

// ---------------------------------------------------------------------------
// overlaps
// ---------------------------------------------------------------------------

bool overlaps(const_tensor_view a, const_tensor_view b) noexcept {
    if (a.size() == 0 || b.size() == 0) return false;
    // [first byte, one past the last byte]; every validated layout's byte range
    // fits in int64, and unsigned wrap-around gives the right address for a
    // negative lowest offset.
    auto range = [](const const_tensor_view& v) {
        const auto [lo, hi] = offset_range(v.layout());
        const auto item = static_cast<std::int64_t>(v.itemsize());
        const auto base = reinterpret_cast<std::uintptr_t>(v.data());
        return std::pair{base + static_cast<std::uintptr_t>(lo * item),
                         base + static_cast<std::uintptr_t>(hi * item + item)};
    };
    const auto [a_first, a_last] = range(a);
    const auto [b_first, b_last] = range(b);
    return a_first < b_last && b_first < a_last;
}

}  // namespace tenferro
