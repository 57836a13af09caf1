#pragma once
/// \file
/// Tensors: the element types (`dtype`), the owning `tensor`, and the non-owning
/// strided views `tensor_view` (mutable) and `const_tensor_view` (read-only).
///
/// ## Ownership model
///
/// - A `tensor` is a *reference* to refcounted storage, like `torch::Tensor` or a
///   numpy array name. Copying a tensor (construction or assignment) shares the
///   storage and copies no element; the storage is freed when the last tensor
///   referring to it is destroyed or reassigned. A deep copy is `session.copy(x)`.
///   Refcounting is atomic: copies of one tensor may be made and dropped on
///   different threads at once. Concurrent *element* access follows the usual
///   rule: any number of readers, or one writer, per element.
/// - A new tensor's storage is 64-byte aligned and its layout is row-major
///   (C order, dense). A `tensor` is always in that layout; strided layouts exist
///   only as views.
/// - `tensor_view` and `const_tensor_view` never own anything. They are a data
///   pointer (pointing at element `[0, ..., 0]`), a dtype, a shape and signed
///   strides counted in *elements*. A view is valid while the memory it points
///   into is: a view of a tensor stays valid as long as *some* tensor shares that
///   storage (not necessarily the one it was taken from). Views are cheap to
///   copy (160 bytes, no allocation); `backend_session` takes them by `const&`.
/// - `tensor_view` is shallow-const like `std::span`: a `const tensor_view` still
///   grants write access to the elements. `const_tensor_view` only reads.
///   `const tensor` only reads too: its `data()`, `view()` and derived views are const.
///
/// ## Shapes and strides
///
/// Ranks 0 to `max_rank` (8) are supported; rank 0 is a scalar with one element.
/// Shape and stride metadata is stored inline (`detail::extents`), so creating
/// tensors and deriving views never allocates for metadata. Extents are `>= 0`;
/// a shape whose element count (or byte size) would overflow is rejected.
/// Strides may be negative (reversed slices) or zero (broadcast views).
///
/// Every invalid argument throws `tensor_error` with a message naming the
/// operation, the operand and the offending shape / dtype / axis, e.g.
/// `"tensor_view::reshaped: cannot view shape [2, 3] with strides [1, 2] as [6]"`.
///
/// ```cpp
/// using namespace tenferro;
/// tensor a = tensor::zeros(dtype::f32, {2, 3});
/// tensor b = a;                       // shares storage with a
/// b.data<float>()[0] = 1.0f;          // a sees it too
/// tensor_view col = a.slice(1, 2, 3); // shape [2, 1], strides [3, 1]
/// const_tensor_view rev = a.view().slice(0, -1, std::numeric_limits<std::int64_t>::min(), -1);
/// ```

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <memory_resource>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace tenferro {

/// The element type of a tensor.
enum class dtype : std::uint8_t {
    f32,  ///< `float`
    f64,  ///< `double`
    i32,  ///< `std::int32_t`
    i64,  ///< `std::int64_t`
};

/// Bytes per element of `t` (4 or 8); 0 for a value outside the enumeration.
std::size_t size_of(dtype t) noexcept;

/// `"f32"`, `"f64"`, `"i32"` or `"i64"`; `"invalid"` for a value outside the enumeration.
std::string_view to_string(dtype t) noexcept;

/// Formats a shape (or strides, or an index) as `"[2, 3]"`; rank 0 is `"[]"`.
std::string to_string(std::span<const std::int64_t> extents);

/// Thrown for every invalid tensor argument: bad shapes, axes, permutations,
/// dtypes, overflowing sizes, inexpressible reshapes. `what()` names the
/// operation, the operand and the offending values.
class tensor_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// The C++ types that tensors hold: `float`, `double`, `std::int32_t`, `std::int64_t`.
template <class T>
concept tensor_element =
    std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t>;

/// The `dtype` of element type `T`: `dtype_of<float> == dtype::f32`.
template <tensor_element T>
inline constexpr dtype dtype_of = std::same_as<T, float>          ? dtype::f32
                                  : std::same_as<T, double>       ? dtype::f64
                                  : std::same_as<T, std::int32_t> ? dtype::i32
                                                                  : dtype::i64;

/// The highest supported rank.
inline constexpr std::size_t max_rank = 8;

/// The alignment in bytes of every tensor's storage.
inline constexpr std::size_t tensor_alignment = 64;

namespace detail {

/// A fixed-capacity (`max_rank`) inline array of `std::int64_t`: shapes, strides
/// and indices without heap allocation. Kernels may use it for intermediate
/// shapes.
class extents {
public:
    static constexpr std::size_t capacity = max_rank;

    constexpr extents() noexcept = default;

    /// Copies `values`; throws `tensor_error` when `values.size() > capacity`.
    explicit extents(std::span<const std::int64_t> values);

    /// `n` copies of `value`; throws `tensor_error` when `n > capacity`.
    constexpr extents(std::size_t n, std::int64_t value) {
        if (n > capacity) throw_capacity(n);
        for (std::size_t i = 0; i < n; ++i) values_[i] = value;
        size_ = static_cast<std::uint8_t>(n);
    }

    constexpr std::size_t size() const noexcept { return size_; }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr std::int64_t* data() noexcept { return values_.data(); }
    constexpr const std::int64_t* data() const noexcept { return values_.data(); }
    constexpr std::int64_t* begin() noexcept { return values_.data(); }
    constexpr std::int64_t* end() noexcept { return values_.data() + size_; }
    constexpr const std::int64_t* begin() const noexcept { return values_.data(); }
    constexpr const std::int64_t* end() const noexcept { return values_.data() + size_; }
    /// Unchecked element access; `i < size()`.
    constexpr std::int64_t& operator[](std::size_t i) noexcept { return values_[i]; }
    constexpr std::int64_t operator[](std::size_t i) const noexcept { return values_[i]; }

    /// Appends `value`; throws `tensor_error` when full.
    void push_back(std::int64_t value);

    /// Resizes to `n` (new entries are 0); throws `tensor_error` when `n > capacity`.
    void resize(std::size_t n);

    /// The stored values as a span.
    constexpr std::span<const std::int64_t> span() const noexcept { return {values_.data(), size_}; }
    constexpr operator std::span<const std::int64_t>() const noexcept { return span(); }

    friend constexpr bool operator==(const extents& a, const extents& b) noexcept {
        if (a.size_ != b.size_) return false;
        for (std::size_t i = 0; i < a.size_; ++i)
            if (a.values_[i] != b.values_[i]) return false;
        return true;
    }

private:
    [[noreturn]] static void throw_capacity(std::size_t n);

    std::array<std::int64_t, capacity> values_{};
    std::uint8_t size_ = 0;
};

/// The metadata of a strided array: dtype, shape and strides (elements).
/// Invariant once validated: `shape.size() == strides.size()`, extents `>= 0`,
/// the element count fits `std::int64_t`, and the byte range addressed from the
/// data pointer fits `std::int64_t`.
struct layout {
    dtype type = dtype::f32;
    extents shape{std::size_t{1}, 0};    // the default is an empty rank-1 array
    extents strides{std::size_t{1}, 1};
};

/// The refcounted block behind a tensor. The header sits at the start of a
/// `tensor_alignment`-aligned allocation and the elements start
/// `tensor_alignment` bytes later, so one allocation serves both.
struct storage;

/// Private-constructor tag for views derived from already validated layouts.
struct trusted_t {
    explicit trusted_t() = default;
};

/// The members that derive views, written once for the three classes that have
/// them: `const_tensor_view`, `tensor_view` and `tensor` each derive from it
/// (CRTP, no data, no size), so `slice`, `transposed`, `reshaped` and
/// `broadcast_to` are theirs. The members are defined, over the layout algebra,
/// and instantiated for the three classes in the library (src/tensor/view.cpp).
///
/// `Self` is the deriving class. The `const` members view `Self` as a `View`
/// and return a `View`: a view returns its own type (shallow const), a `const
/// tensor` a `const_tensor_view`. When `MutableView` is not `void` (`tensor`),
/// non-`const` overloads return a `MutableView` (`tensor_view`). Error messages
/// name the deriving class, e.g. `"tensor_view::reshaped: ..."`.
template <class Self, class View, class MutableView = void>
class view_algebra {
public:
    /// A view of `begin, begin + step, ...` up to (excluding) `end` along `axis`,
    /// with Python / numpy slice semantics: negative `axis`, `begin` and `end`
    /// count from the end; `begin` and `end` are then clamped to the axis (out of
    /// range values never throw, they select fewer elements or none); a negative
    /// `step` walks backwards. `std::numeric_limits<std::int64_t>::max()` /
    /// `min()` act as the open ends, so `slice(0, -1, INT64_MIN, -1)` reverses
    /// axis 0. Throws `tensor_error` for an axis out of `[-rank, rank)` and for `step == 0`.
    /// On a `tensor` the result views the tensor's storage.
    View slice(std::int64_t axis, std::int64_t begin, std::int64_t end, std::int64_t step = 1) const;
    MutableView slice(std::int64_t axis, std::int64_t begin, std::int64_t end, std::int64_t step = 1)
        requires(!std::is_void_v<MutableView>);
    /// The view with axis `i` of the result being axis `perm[i]` of this view;
    /// throws `tensor_error` unless `perm` is a permutation of `0 .. rank-1`
    /// (negative entries count from the end).
    View transposed(std::span<const std::int64_t> perm) const;
    View transposed(std::initializer_list<std::int64_t> perm) const;
    MutableView transposed(std::span<const std::int64_t> perm)
        requires(!std::is_void_v<MutableView>);
    MutableView transposed(std::initializer_list<std::int64_t> perm)
        requires(!std::is_void_v<MutableView>);
    /// The view with the axes reversed (numpy's `.T`).
    View transposed() const;
    MutableView transposed()
        requires(!std::is_void_v<MutableView>);
    /// The same elements in row-major order under `shape`; one extent may be -1
    /// (inferred). Never copies: throws `tensor_error` when the element counts
    /// differ or when the strides cannot express the new shape (numpy's no-copy
    /// reshape rule: only runs of axes that are contiguous with respect to each
    /// other may be merged or split). On a `tensor`, which is row-major, it always
    /// succeeds for a matching element count.
    View reshaped(std::span<const std::int64_t> shape) const;
    View reshaped(std::initializer_list<std::int64_t> shape) const;
    MutableView reshaped(std::span<const std::int64_t> shape)
        requires(!std::is_void_v<MutableView>);
    MutableView reshaped(std::initializer_list<std::int64_t> shape)
        requires(!std::is_void_v<MutableView>);
    /// This view broadcast to `shape` with numpy rules (axes aligned at the end;
    /// extent-1 and missing leading axes stretch with stride 0); throws `tensor_error`
    /// when the shapes are incompatible or `shape` has fewer axes. Writing through a
    /// mutable broadcast view writes the shared elements once per alias.
    View broadcast_to(std::span<const std::int64_t> shape) const;
    View broadcast_to(std::initializer_list<std::int64_t> shape) const;
    MutableView broadcast_to(std::span<const std::int64_t> shape)
        requires(!std::is_void_v<MutableView>);
    MutableView broadcast_to(std::initializer_list<std::int64_t> shape)
        requires(!std::is_void_v<MutableView>);

private:
    const Self& self() const noexcept { return static_cast<const Self&>(*this); }
    Self& self() noexcept { return static_cast<Self&>(*this); }
};

}  // namespace detail

class tensor;
class tensor_view;

/// A non-owning, read-only strided view: a data pointer (to element `[0, ..., 0]`),
/// a dtype, a shape and signed strides in elements.
///
/// Implicitly constructible from `const tensor&` and from `tensor_view`. Copyable,
/// no allocation. The viewed memory must outlive the view (see the file comment).
/// A default-constructed view is an empty `f32` view of shape `[0]` with a null
/// data pointer. `slice`, `transposed`, `reshaped` and `broadcast_to` (see
/// `detail::view_algebra`) return `const_tensor_view`s.
class const_tensor_view : public detail::view_algebra<const_tensor_view, const_tensor_view> {
public:
    const_tensor_view() noexcept = default;

    /// A view of raw memory. Throws `tensor_error` when `shape` and `strides`
    /// differ in rank, the rank exceeds `max_rank`, an extent is negative, the
    /// element count or the addressed byte range overflows, `data` is null for a
    /// non-empty view, `data` is misaligned for `type`, or `type` is invalid.
    /// The caller guarantees every addressed element lies in readable memory.
    const_tensor_view(const void* data, dtype type, std::span<const std::int64_t> shape,
                      std::span<const std::int64_t> strides);
    /// As above, with braced lists: `const_tensor_view(p, dtype::f32, {2, 3}, {3, 1})`.
    const_tensor_view(const void* data, dtype type, std::initializer_list<std::int64_t> shape,
                      std::initializer_list<std::int64_t> strides);
    /// A row-major (C order, dense) view of raw memory; validated as above.
    const_tensor_view(const void* data, dtype type, std::span<const std::int64_t> shape);
    /// A row-major view of raw memory, with a braced shape.
    const_tensor_view(const void* data, dtype type, std::initializer_list<std::int64_t> shape);

    /// Views a tensor (implicit). Valid while the tensor's storage lives.
    const_tensor_view(const tensor& t) noexcept;  // NOLINT(google-explicit-constructor)
    /// Drops write access (implicit).
    const_tensor_view(const tensor_view& v) noexcept;  // NOLINT(google-explicit-constructor)

    /// The element type.
    dtype type() const noexcept { return layout_.type; }
    /// Bytes per element: `size_of(type())`.
    std::size_t itemsize() const noexcept { return size_of(layout_.type); }
    /// The number of axes (0 for a scalar).
    std::size_t rank() const noexcept { return layout_.shape.size(); }
    /// The extent of each axis.
    std::span<const std::int64_t> shape() const noexcept { return layout_.shape.span(); }
    /// The distance in elements between neighbours along each axis (signed; 0 for broadcast axes).
    std::span<const std::int64_t> strides() const noexcept { return layout_.strides.span(); }
    /// The element count: the product of the extents (1 for rank 0).
    std::int64_t size() const noexcept;
    /// True when the elements are dense in row-major order starting at `data()`.
    /// Strides of extent-1 axes are ignored; an empty view is contiguous (as numpy's C_CONTIGUOUS).
    bool is_contiguous() const noexcept;
    /// The address of element `[0, ..., 0]` (unspecified for an empty view).
    const void* data() const noexcept { return data_; }
    /// The typed address of element `[0, ..., 0]`; throws `tensor_error` when
    /// `T` does not match `type()`, naming both dtypes.
    template <tensor_element T>
    const T* data() const {
        check_type(dtype_of<T>, "const_tensor_view::data");
        return static_cast<const T*>(data_);
    }
    /// The element at `index` (negative entries count from the end of their axis);
    /// throws `tensor_error` on a dtype mismatch, a wrong index rank or an out-of-range index.
    template <tensor_element T>
    const T& at(std::span<const std::int64_t> index) const {
        check_type(dtype_of<T>, "const_tensor_view::at");
        return static_cast<const T*>(data_)[offset_of(index, "const_tensor_view::at")];
    }
    template <tensor_element T>
    const T& at(std::initializer_list<std::int64_t> index) const {
        return at<T>(std::span<const std::int64_t>(index.begin(), index.size()));
    }

    /// Validated parts; for code that already checked the layout (library internals).
    const_tensor_view(detail::trusted_t, const void* data, const detail::layout& l) noexcept
        : data_(data), layout_(l) {}
    /// The metadata (library internals and kernels).
    const detail::layout& layout() const noexcept { return layout_; }

private:
    void check_type(dtype requested, const char* op) const;
    std::int64_t offset_of(std::span<const std::int64_t> index, const char* op) const;

    const void* data_ = nullptr;
    detail::layout layout_;
};

/// A non-owning, mutable strided view: like `const_tensor_view`, but grants write
/// access. Implicitly constructible from `tensor&` (not from a temporary tensor,
/// which would leave it dangling). Shallow-const, like `std::span`: `slice`,
/// `transposed`, `reshaped` and `broadcast_to` (see `detail::view_algebra`) return
/// `tensor_view`s, also on a `const tensor_view`.
class tensor_view : public detail::view_algebra<tensor_view, tensor_view> {
public:
    tensor_view() noexcept = default;

    /// A view of raw memory; validated as `const_tensor_view`'s raw-part constructor.
    tensor_view(void* data, dtype type, std::span<const std::int64_t> shape, std::span<const std::int64_t> strides);
    tensor_view(void* data, dtype type, std::initializer_list<std::int64_t> shape,
                std::initializer_list<std::int64_t> strides);
    /// A row-major (C order, dense) view of raw memory.
    tensor_view(void* data, dtype type, std::span<const std::int64_t> shape);
    tensor_view(void* data, dtype type, std::initializer_list<std::int64_t> shape);

    /// Views a tensor (implicit). Valid while the tensor's storage lives.
    tensor_view(tensor& t) noexcept;  // NOLINT(google-explicit-constructor)
    /// A mutable view of a temporary would dangle once the temporary is gone,
    /// and a write through it could never be observed; use `t.view()` explicitly.
    tensor_view(tensor&& t) = delete;

    /// The element type.
    dtype type() const noexcept { return layout_.type; }
    /// Bytes per element: `size_of(type())`.
    std::size_t itemsize() const noexcept { return size_of(layout_.type); }
    /// The number of axes (0 for a scalar).
    std::size_t rank() const noexcept { return layout_.shape.size(); }
    /// The extent of each axis.
    std::span<const std::int64_t> shape() const noexcept { return layout_.shape.span(); }
    /// The signed element strides of each axis.
    std::span<const std::int64_t> strides() const noexcept { return layout_.strides.span(); }
    /// The element count (1 for rank 0).
    std::int64_t size() const noexcept;
    /// True when the elements are dense in row-major order starting at `data()`.
    bool is_contiguous() const noexcept;
    /// The address of element `[0, ..., 0]` (unspecified for an empty view).
    void* data() const noexcept { return data_; }
    /// The typed address of element `[0, ..., 0]`; throws `tensor_error` when
    /// `T` does not match `type()`, naming both dtypes.
    template <tensor_element T>
    T* data() const {
        check_type(dtype_of<T>, "tensor_view::data");
        return static_cast<T*>(data_);
    }
    /// The element at `index` (negative entries count from the end); checked as `const_tensor_view::at`.
    template <tensor_element T>
    T& at(std::span<const std::int64_t> index) const {
        check_type(dtype_of<T>, "tensor_view::at");
        return static_cast<T*>(data_)[offset_of(index, "tensor_view::at")];
    }
    template <tensor_element T>
    T& at(std::initializer_list<std::int64_t> index) const {
        return at<T>(std::span<const std::int64_t>(index.begin(), index.size()));
    }

    /// Validated parts; for code that already checked the layout (library internals).
    tensor_view(detail::trusted_t, void* data, const detail::layout& l) noexcept : data_(data), layout_(l) {}
    /// The metadata (library internals and kernels).
    const detail::layout& layout() const noexcept { return layout_; }

private:
    void check_type(dtype requested, const char* op) const;
    std::int64_t offset_of(std::span<const std::int64_t> index, const char* op) const;

    void* data_ = nullptr;
    detail::layout layout_;
};

/// An owning reference to refcounted, 64-byte aligned, row-major storage.
///
/// Copies share the storage (no element is copied); moves transfer the reference.
/// The storage is freed when the last tensor referring to it goes away. A
/// default-constructed or moved-from tensor holds no storage and reads as an
/// empty `f32` tensor of shape `[0]` with a null data pointer.
///
/// `slice`, `transposed`, `reshaped` and `broadcast_to` (see `detail::view_algebra`)
/// return views of this tensor's storage (mutable on a non-const tensor, read-only
/// on a const one).
class tensor : public detail::view_algebra<tensor, const_tensor_view, tensor_view> {
public:
    tensor() noexcept = default;
    tensor(const tensor& other) noexcept;
    tensor(tensor&& other) noexcept;
    /// Rebinds this tensor to `other`'s storage (no element is copied).
    tensor& operator=(const tensor& other) noexcept;
    tensor& operator=(tensor&& other) noexcept;
    ~tensor();

    /// A new row-major tensor with uninitialised elements. Throws `tensor_error`
    /// for an invalid dtype, a negative extent, rank > `max_rank`, or a size
    /// whose element count or byte count overflows (extents of 0 count as 1 in
    /// that check, as in numpy); `std::bad_alloc` when memory runs out.
    static tensor empty(dtype type, std::span<const std::int64_t> shape);
    static tensor empty(dtype type, std::initializer_list<std::int64_t> shape);
    /// As `empty`, with the storage (header and elements, one block) allocated from
    /// `resource` with alignment `tensor_alignment`, e.g. a buffer pool. The
    /// storage keeps `resource` alive and returns the block to it from whichever
    /// thread drops the last reference, so `resource` must be thread-safe.
    static tensor empty(dtype type, std::span<const std::int64_t> shape,
                        std::shared_ptr<std::pmr::memory_resource> resource);
    /// A new row-major tensor with every element zero; validated as `empty`.
    static tensor zeros(dtype type, std::span<const std::int64_t> shape);
    static tensor zeros(dtype type, std::initializer_list<std::int64_t> shape);

    /// A new row-major tensor holding a copy of `data` (row-major order) with
    /// dtype `dtype_of<T>`; throws `tensor_error` when `data.size()` is not the
    /// element count of `shape`, or when `shape` is invalid as for `empty`.
    /// `tensor::from<float>(values, {2, 3})`.
    template <tensor_element T>
    static tensor from(std::span<const T> data, std::span<const std::int64_t> shape) {
        return from_elements(dtype_of<T>, data.data(), data.size(), shape);
    }
    template <tensor_element T>
    static tensor from(std::span<const T> data, std::initializer_list<std::int64_t> shape) {
        return from_elements(dtype_of<T>, data.data(), data.size(), {shape.begin(), shape.size()});
    }
    /// From a braced list: `tensor::from<float>({1, 2, 3, 4}, {2, 2})`.
    template <tensor_element T>
    static tensor from(std::initializer_list<T> data, std::span<const std::int64_t> shape) {
        return from_elements(dtype_of<T>, data.begin(), data.size(), shape);
    }
    template <tensor_element T>
    static tensor from(std::initializer_list<T> data, std::initializer_list<std::int64_t> shape) {
        return from_elements(dtype_of<T>, data.begin(), data.size(), {shape.begin(), shape.size()});
    }
    /// From any contiguous range of a tensor element type, deducing the dtype:
    /// `tensor::from(std::vector<double>(6), {2, 3})`.
    template <std::ranges::contiguous_range R>
        requires tensor_element<std::remove_cv_t<std::ranges::range_value_t<R>>>
    static tensor from(const R& data, std::span<const std::int64_t> shape) {
        using T = std::remove_cv_t<std::ranges::range_value_t<R>>;
        return from_elements(dtype_of<T>, std::ranges::data(data), std::ranges::size(data), shape);
    }
    template <std::ranges::contiguous_range R>
        requires tensor_element<std::remove_cv_t<std::ranges::range_value_t<R>>>
    static tensor from(const R& data, std::initializer_list<std::int64_t> shape) {
        return from(data, std::span<const std::int64_t>(shape.begin(), shape.size()));
    }

    /// The element type.
    dtype type() const noexcept { return layout_.type; }
    /// Bytes per element: `size_of(type())`.
    std::size_t itemsize() const noexcept { return size_of(layout_.type); }
    /// The number of axes (0 for a scalar).
    std::size_t rank() const noexcept { return layout_.shape.size(); }
    /// The extent of each axis.
    std::span<const std::int64_t> shape() const noexcept { return layout_.shape.span(); }
    /// The row-major element strides.
    std::span<const std::int64_t> strides() const noexcept { return layout_.strides.span(); }
    /// The element count (1 for rank 0).
    std::int64_t size() const noexcept;
    /// The byte count of the elements: `size() * itemsize()`.
    std::size_t nbytes() const noexcept { return static_cast<std::size_t>(size()) * itemsize(); }
    /// Always true: a tensor is row-major and dense.
    bool is_contiguous() const noexcept { return true; }
    /// The address of the first element (64-byte aligned; null without storage).
    void* data() noexcept { return data_; }
    const void* data() const noexcept { return data_; }
    /// The typed address of the first element; throws `tensor_error` when `T`
    /// does not match `type()`, naming both dtypes.
    template <tensor_element T>
    T* data() {
        check_type(dtype_of<T>, "tensor::data");
        return static_cast<T*>(data_);
    }
    template <tensor_element T>
    const T* data() const {
        check_type(dtype_of<T>, "tensor::data");
        return static_cast<const T*>(data_);
    }
    /// The element at `index` (negative entries count from the end); checked as `const_tensor_view::at`.
    template <tensor_element T>
    T& at(std::span<const std::int64_t> index) {
        check_type(dtype_of<T>, "tensor::at");
        return static_cast<T*>(data_)[offset_of(index, "tensor::at")];
    }
    template <tensor_element T>
    const T& at(std::span<const std::int64_t> index) const {
        check_type(dtype_of<T>, "tensor::at");
        return static_cast<const T*>(data_)[offset_of(index, "tensor::at")];
    }
    template <tensor_element T>
    T& at(std::initializer_list<std::int64_t> index) {
        return at<T>(std::span<const std::int64_t>(index.begin(), index.size()));
    }
    template <tensor_element T>
    const T& at(std::initializer_list<std::int64_t> index) const {
        return at<T>(std::span<const std::int64_t>(index.begin(), index.size()));
    }

    /// A mutable view of the whole tensor.
    tensor_view view() noexcept { return tensor_view(detail::trusted_t{}, data_, layout_); }
    /// A read-only view of the whole tensor.
    const_tensor_view view() const noexcept { return const_tensor_view(detail::trusted_t{}, data_, layout_); }

    /// How many tensors share this tensor's storage (0 without storage). A
    /// snapshot: other threads may change it at any time.
    std::size_t use_count() const noexcept;

private:
    static tensor allocate(const char* op, dtype type, std::span<const std::int64_t> shape,
                           std::shared_ptr<std::pmr::memory_resource> resource);
    static tensor from_elements(dtype type, const void* data, std::size_t count, std::span<const std::int64_t> shape);
    void check_type(dtype requested, const char* op) const;
    std::int64_t offset_of(std::span<const std::int64_t> index, const char* op) const;
    void release() noexcept;

    detail::storage* storage_ = nullptr;
    void* data_ = nullptr;
    detail::layout layout_;
};

/// Conservatively, whether `a` and `b` may share memory: true when both are
/// non-empty and the byte ranges `[lowest element address, highest element
/// address + itemsize)` of the two intersect. May report an overlap for
/// interleaved views that touch disjoint elements (e.g. the even and odd
/// columns of one matrix); never misses a real one. Used to reject `_into`
/// outputs that overlap an input.
bool overlaps(const_tensor_view a, const_tensor_view b) noexcept;

}  // namespace tenferro
