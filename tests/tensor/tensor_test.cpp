#include <tenferro/tensor.hpp>
// The header under test comes first, alone: it must compile on its own.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory_resource>
#include <new>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

// ---------------------------------------------------------------------------
// Global allocation counter: proves that views and metadata never allocate.
// ---------------------------------------------------------------------------

namespace {
std::atomic<std::size_t> g_allocations{0};
}  // namespace

// Every replaceable allocation function is replaced (all on malloc /
// aligned_alloc + free), so that no pairing mixes ours with the library's or a
// sanitizer's. GCC flags free() in a replacement operator delete as mismatched
// with the operator new it replaces; here the pairing is consistent.
namespace {
void* counted_alloc(std::size_t n, std::size_t align) noexcept {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (n == 0) n = 1;
    if (align <= alignof(std::max_align_t)) return std::malloc(n);
    return std::aligned_alloc(align, (n + align - 1) / align * align);
}
void* counted_alloc_or_throw(std::size_t n, std::size_t align) {
    if (void* p = counted_alloc(n, align)) return p;
    throw std::bad_alloc();
}
}  // namespace

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) { return counted_alloc_or_throw(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc_or_throw(n, 0); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) {
    return counted_alloc_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return counted_alloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

using namespace tenferro;
using Catch::Contains;

namespace {

using shape_t = std::vector<std::int64_t>;

constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

shape_t vec(std::span<const std::int64_t> s) { return {s.begin(), s.end()}; }

/// A row-major i64 tensor holding 0, 1, 2, ...
tensor iota(std::initializer_list<std::int64_t> shape) {
    tensor t = tensor::empty(dtype::i64, shape);
    std::int64_t* p = t.data<std::int64_t>();
    for (std::int64_t i = 0; i < t.size(); ++i) p[i] = i;
    return t;
}

/// Calls f(index) for every index of `shape` in row-major order.
void for_each_index(std::span<const std::int64_t> shape, const std::function<void(std::span<const std::int64_t>)>& f) {
    for (std::int64_t n : shape)
        if (n == 0) return;
    shape_t index(shape.size(), 0);
    while (true) {
        f(index);
        std::size_t axis = shape.size();
        while (axis > 0) {
            --axis;
            if (++index[axis] < shape[axis]) break;
            index[axis] = 0;
            if (axis == 0) return;
        }
        if (shape.empty()) return;
    }
}

/// The elements of an i64 view in row-major order, read through its strides.
std::vector<std::int64_t> elements(const_tensor_view v) {
    std::vector<std::int64_t> out;
    for_each_index(v.shape(), [&](std::span<const std::int64_t> index) {
        std::int64_t offset = 0;
        for (std::size_t i = 0; i < index.size(); ++i) offset += index[i] * v.strides()[i];
        out.push_back(v.data<std::int64_t>()[offset]);
    });
    return out;
}

/// The element addresses of a view in row-major order.
std::vector<const std::byte*> addresses(const_tensor_view v) {
    std::vector<const std::byte*> out;
    const auto item = static_cast<std::int64_t>(v.itemsize());
    for_each_index(v.shape(), [&](std::span<const std::int64_t> index) {
        std::int64_t offset = 0;
        for (std::size_t i = 0; i < index.size(); ++i) offset += index[i] * v.strides()[i];
        out.push_back(static_cast<const std::byte*>(v.data()) + offset * item);
    });
    return out;
}

/// Oracle: can the elements of `v` (row-major) be viewed with strides as `shape`?
/// A strided view is determined by its unit steps, so derive the candidate
/// strides from them and check every element.
bool expressible(const_tensor_view v, const shape_t& shape) {
    const std::vector<const std::byte*> addr = addresses(v);
    if (addr.empty()) return true;
    const auto item = static_cast<std::int64_t>(v.itemsize());
    shape_t strides(shape.size(), 0);
    std::int64_t step = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        if (shape[i] > 1) strides[i] = (addr[static_cast<std::size_t>(step)] - addr[0]) / item;
        step *= shape[i];
    }
    bool ok = true;
    std::size_t k = 0;
    for_each_index(shape, [&](std::span<const std::int64_t> index) {
        std::int64_t offset = 0;
        for (std::size_t i = 0; i < index.size(); ++i) offset += index[i] * strides[i];
        if (addr[0] + offset * item != addr[k++]) ok = false;
    });
    return ok;
}

bool aligned64(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

/// A pmr resource that counts its blocks.
class counting_resource final : public std::pmr::memory_resource {
public:
    int allocations = 0;
    int deallocations = 0;
    std::size_t last_alignment = 0;
    std::size_t live_bytes = 0;

private:
    void* do_allocate(std::size_t bytes, std::size_t alignment) override {
        ++allocations;
        last_alignment = alignment;
        live_bytes += bytes;
        return std::pmr::new_delete_resource()->allocate(bytes, alignment);
    }
    void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
        ++deallocations;
        live_bytes -= bytes;
        std::pmr::new_delete_resource()->deallocate(p, bytes, alignment);
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
};

}  // namespace

// ---------------------------------------------------------------------------
// Compile-time contract
// ---------------------------------------------------------------------------

static_assert(std::is_same_v<std::underlying_type_t<dtype>, std::uint8_t>);
static_assert(std::is_base_of_v<std::invalid_argument, tensor_error>);
static_assert(std::is_copy_constructible_v<tensor> && std::is_nothrow_move_constructible_v<tensor>);
static_assert(std::is_convertible_v<tensor&, tensor_view>);
static_assert(!std::is_convertible_v<const tensor&, tensor_view>);
static_assert(!std::is_convertible_v<tensor&&, tensor_view>);
static_assert(std::is_convertible_v<const tensor&, const_tensor_view>);
static_assert(std::is_convertible_v<tensor&&, const_tensor_view>);
static_assert(std::is_convertible_v<tensor_view, const_tensor_view>);
static_assert(!std::is_convertible_v<const_tensor_view, tensor_view>);
static_assert(std::is_trivially_copyable_v<tensor_view> && std::is_trivially_copyable_v<const_tensor_view>);
static_assert(std::is_same_v<decltype(std::declval<tensor&>().view()), tensor_view>);
static_assert(std::is_same_v<decltype(std::declval<const tensor&>().view()), const_tensor_view>);
static_assert(std::is_same_v<decltype(std::declval<tensor&>().slice(0, 0, 1)), tensor_view>);
static_assert(std::is_same_v<decltype(std::declval<const tensor&>().slice(0, 0, 1)), const_tensor_view>);
static_assert(std::is_same_v<decltype(std::declval<tensor&>().data<float>()), float*>);
static_assert(std::is_same_v<decltype(std::declval<const tensor&>().data<float>()), const float*>);
static_assert(std::is_same_v<decltype(std::declval<const tensor_view&>().data<float>()), float*>);
static_assert(std::is_same_v<decltype(std::declval<const_tensor_view&>().data<float>()), const float*>);
static_assert(dtype_of<float> == dtype::f32 && dtype_of<double> == dtype::f64);
static_assert(dtype_of<std::int32_t> == dtype::i32 && dtype_of<std::int64_t> == dtype::i64);
static_assert(tensor_element<float> && !tensor_element<char> && !tensor_element<const float>);
static_assert(sizeof(detail::extents) <= 8 * sizeof(std::int64_t) + 8);

// ---------------------------------------------------------------------------
// dtype and formatting
// ---------------------------------------------------------------------------

TEST_CASE("dtype sizes and names", "[tensor][dtype]") {
    REQUIRE(size_of(dtype::f32) == 4);
    REQUIRE(size_of(dtype::f64) == 8);
    REQUIRE(size_of(dtype::i32) == 4);
    REQUIRE(size_of(dtype::i64) == 8);
    REQUIRE(to_string(dtype::f32) == "f32");
    REQUIRE(to_string(dtype::f64) == "f64");
    REQUIRE(to_string(dtype::i32) == "i32");
    REQUIRE(to_string(dtype::i64) == "i64");
    const auto bogus = static_cast<dtype>(7);
    REQUIRE(size_of(bogus) == 0);
    REQUIRE(to_string(bogus) == "invalid");
}

TEST_CASE("shape formatting", "[tensor][format]") {
    REQUIRE(to_string(shape_t{}) == "[]");
    REQUIRE(to_string(shape_t{5}) == "[5]");
    REQUIRE(to_string(shape_t{2, 3}) == "[2, 3]");
    REQUIRE(to_string(shape_t{-1, 0, int64_max}) == "[-1, 0, 9223372036854775807]");
}

TEST_CASE("detail::extents is an inline fixed-capacity array", "[tensor][extents]") {
    detail::extents e;
    REQUIRE(e.empty());
    for (std::int64_t i = 0; i < 8; ++i) e.push_back(i);
    REQUIRE(e.size() == 8);
    REQUIRE(vec(e.span()) == shape_t{0, 1, 2, 3, 4, 5, 6, 7});
    REQUIRE_THROWS_AS(e.push_back(8), tensor_error);
    REQUIRE_THROWS_WITH(e.push_back(8), Contains("maximum rank 8"));
    e.resize(2);
    REQUIRE(vec(e) == shape_t{0, 1});
    REQUIRE_THROWS_AS(e.resize(9), tensor_error);
    REQUIRE_THROWS_AS(detail::extents(shape_t(9, 1)), tensor_error);
    REQUIRE(detail::extents(shape_t{4, 5}) == detail::extents(shape_t{4, 5}));
    REQUIRE_FALSE(detail::extents(shape_t{4, 5}) == detail::extents(shape_t{4}));
}

// ---------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------

TEST_CASE("empty and zeros: row-major, aligned, every dtype", "[tensor][create]") {
    for (dtype t : {dtype::f32, dtype::f64, dtype::i32, dtype::i64}) {
        CAPTURE(to_string(t));
        tensor a = tensor::empty(t, {2, 3, 4});
        REQUIRE(a.type() == t);
        REQUIRE(a.itemsize() == size_of(t));
        REQUIRE(a.rank() == 3);
        REQUIRE(vec(a.shape()) == shape_t{2, 3, 4});
        REQUIRE(vec(a.strides()) == shape_t{12, 4, 1});
        REQUIRE(a.size() == 24);
        REQUIRE(a.nbytes() == 24 * size_of(t));
        REQUIRE(a.is_contiguous());
        REQUIRE(aligned64(a.data()));

        tensor z = tensor::zeros(t, shape_t{5, 7});
        REQUIRE(vec(z.shape()) == shape_t{5, 7});
        REQUIRE(aligned64(z.data()));
        const auto* bytes = static_cast<const unsigned char*>(z.data());
        for (std::size_t i = 0; i < z.nbytes(); ++i) REQUIRE(bytes[i] == 0);
    }
    tensor f = tensor::zeros(dtype::f64, {3});
    REQUIRE(f.data<double>()[2] == 0.0);
}

TEST_CASE("storage is 64-byte aligned for many sizes", "[tensor][create][alignment]") {
    std::vector<tensor> keep;
    for (std::int64_t n : {0, 1, 3, 17, 63, 64, 65, 1023, 4097}) {
        keep.push_back(tensor::empty(dtype::f32, {n}));
        REQUIRE(reinterpret_cast<std::uintptr_t>(keep.back().data()) % 64 == 0);
        keep.push_back(tensor::zeros(dtype::i32, {n, 1}));
        REQUIRE(reinterpret_cast<std::uintptr_t>(keep.back().data()) % 64 == 0);
    }
}

TEST_CASE("rank 0 is a scalar", "[tensor][create][rank0]") {
    tensor s = tensor::zeros(dtype::f32, {});
    REQUIRE(s.rank() == 0);
    REQUIRE(s.shape().empty());
    REQUIRE(s.strides().empty());
    REQUIRE(s.size() == 1);
    REQUIRE(s.is_contiguous());
    REQUIRE(s.data() != nullptr);
    REQUIRE(aligned64(s.data()));
    s.data<float>()[0] = 2.5f;
    REQUIRE(s.at<float>({}) == 2.5f);

    tensor f = tensor::from<double>({4.0}, {});
    REQUIRE(f.rank() == 0);
    REQUIRE(*f.data<double>() == 4.0);

    const_tensor_view v = s;
    REQUIRE(v.rank() == 0);
    REQUIRE(v.size() == 1);
    REQUIRE(v.is_contiguous());
    REQUIRE(v.transposed().rank() == 0);
    REQUIRE(v.transposed({}).rank() == 0);
    REQUIRE(vec(v.reshaped({1, 1}).shape()) == shape_t{1, 1});
    REQUIRE(vec(v.broadcast_to({2, 3}).strides()) == shape_t{0, 0});
    REQUIRE(v.broadcast_to({}).rank() == 0);
    REQUIRE_THROWS_AS(v.slice(0, 0, 1), tensor_error);
    REQUIRE_THROWS_WITH(v.slice(0, 0, 1),
                        Contains("const_tensor_view::slice") && Contains("axis 0") && Contains("shape []"));
}

TEST_CASE("rank 8 works and rank 9 is rejected", "[tensor][create][rank]") {
    tensor t = tensor::zeros(dtype::f32, {1, 2, 1, 2, 1, 2, 1, 2});
    REQUIRE(t.rank() == 8);
    REQUIRE(t.size() == 16);
    REQUIRE(vec(t.strides()) == shape_t{16, 8, 8, 4, 4, 2, 2, 1});
    tensor_view r = t.transposed();
    REQUIRE(vec(r.shape()) == shape_t{2, 1, 2, 1, 2, 1, 2, 1});
    REQUIRE(vec(r.strides()) == shape_t{1, 2, 2, 4, 4, 8, 8, 16});
    REQUIRE(t.reshaped({16}).size() == 16);
    REQUIRE(tensor::zeros(dtype::f32, {1}).view().broadcast_to(shape_t(8, 1)).rank() == 8);

    const shape_t nine(9, 1);
    REQUIRE_THROWS_AS(tensor::empty(dtype::f32, nine), tensor_error);
    REQUIRE_THROWS_WITH(tensor::empty(dtype::f32, nine), Contains("tensor::empty") && Contains("rank 9") &&
                                                             Contains("maximum rank 8") &&
                                                             Contains("[1, 1, 1, 1, 1, 1, 1, 1, 1]"));
    REQUIRE_THROWS_WITH(tensor::zeros(dtype::f32, nine), Contains("tensor::zeros") && Contains("rank 9"));
    REQUIRE_THROWS_WITH(tensor::from<float>(std::vector<float>{1.0f}, nine),
                        Contains("tensor::from") && Contains("rank 9"));
    REQUIRE_THROWS_WITH(t.reshaped(nine), Contains("tensor::reshaped") && Contains("rank 9"));
    REQUIRE_THROWS_WITH(t.broadcast_to(nine), Contains("tensor::broadcast_to") && Contains("rank 9"));
    float x = 0;
    REQUIRE_THROWS_WITH(tensor_view(&x, dtype::f32, nine, nine), Contains("tensor_view") && Contains("rank 9"));
    REQUIRE_THROWS_WITH(const_tensor_view(&x, dtype::f32, nine), Contains("const_tensor_view") && Contains("rank 9"));
}

TEST_CASE("zero extents", "[tensor][create]") {
    tensor e = tensor::empty(dtype::f64, {2, 0, 3});
    REQUIRE(e.size() == 0);
    REQUIRE(e.nbytes() == 0);
    REQUIRE(vec(e.strides()) == shape_t{3, 3, 1});  // numpy: extents of 0 count as 1
    REQUIRE(e.is_contiguous());
    REQUIRE(aligned64(e.data()));
    tensor z = tensor::zeros(dtype::i32, {0});
    REQUIRE(z.size() == 0);
    tensor f = tensor::from<float>(std::span<const float>{}, {0, 4});
    REQUIRE(f.size() == 0);
    REQUIRE(vec(f.shape()) == shape_t{0, 4});
}

TEST_CASE("invalid shapes and dtypes are rejected with a clear message", "[tensor][create][errors]") {
    REQUIRE_THROWS_AS(tensor::empty(dtype::f32, {2, -1}), tensor_error);
    REQUIRE_THROWS_WITH(tensor::empty(dtype::f32, {2, -1}), Contains("tensor::empty") &&
                                                                Contains("negative extent -1") && Contains("axis 1") &&
                                                                Contains("[2, -1]"));
    REQUIRE_THROWS_WITH(tensor::zeros(dtype::f32, {-3}), Contains("tensor::zeros") && Contains("negative extent -3"));

    // Element count overflows int64.
    REQUIRE_THROWS_AS(tensor::empty(dtype::f32, {int64_max, 2}), tensor_error);
    REQUIRE_THROWS_WITH(tensor::empty(dtype::f32, {int64_max, 2}), Contains("tensor::empty") && Contains("too large") &&
                                                                       Contains("[9223372036854775807, 2]") &&
                                                                       Contains("f32"));
    // The count fits, the bytes do not.
    REQUIRE_THROWS_WITH(tensor::zeros(dtype::f64, {int64_max / 4}),
                        Contains("tensor::zeros") && Contains("too large") && Contains("f64"));
    // As in numpy, zero extents count as 1 in the overflow check.
    REQUIRE_THROWS_WITH(tensor::empty(dtype::i32, {0, std::int64_t{1} << 40, std::int64_t{1} << 40}),
                        Contains("too large"));

    const auto bogus = static_cast<dtype>(9);
    REQUIRE_THROWS_AS(tensor::empty(bogus, {2}), tensor_error);
    REQUIRE_THROWS_WITH(tensor::empty(bogus, {2}), Contains("tensor::empty") && Contains("invalid dtype 9"));
    REQUIRE_THROWS_WITH(tensor::zeros(bogus, {2}), Contains("tensor::zeros") && Contains("invalid dtype 9"));
}

TEST_CASE("from copies the data and checks the element count", "[tensor][create][from]") {
    std::vector<float> values{1, 2, 3, 4, 5, 6};
    tensor a = tensor::from<float>(values, {2, 3});
    REQUIRE(a.type() == dtype::f32);
    REQUIRE(vec(a.shape()) == shape_t{2, 3});
    REQUIRE(aligned64(a.data()));
    values[0] = 100;  // a owns a copy
    REQUIRE(a.data<float>()[0] == 1.0f);
    REQUIRE(a.at<float>({1, 2}) == 6.0f);

    const std::array<std::int32_t, 4> ints{7, 8, 9, 10};
    tensor b = tensor::from(std::span<const std::int32_t>(ints), shape_t{4});
    REQUIRE(b.type() == dtype::i32);
    REQUIRE(b.data<std::int32_t>()[3] == 10);

    tensor c = tensor::from(std::vector<double>{1.5, 2.5}, {2, 1});  // range overload deduces f64
    REQUIRE(c.type() == dtype::f64);
    REQUIRE(c.at<double>({1, 0}) == 2.5);

    tensor d = tensor::from<std::int64_t>({1, 2, 3}, {3});
    REQUIRE(d.type() == dtype::i64);
    REQUIRE(d.data<std::int64_t>()[2] == 3);

    std::vector<float> mutable_values{1, 2};
    tensor e = tensor::from(std::span<float>(mutable_values), {2});  // non-const span: the range overload
    REQUIRE(e.type() == dtype::f32);

    REQUIRE_THROWS_AS(tensor::from<float>(values, {2, 2}), tensor_error);
    REQUIRE_THROWS_WITH(tensor::from<float>(values, {2, 2}),
                        Contains("tensor::from") && Contains("6 elements") && Contains("[2, 2]") && Contains("4"));
    REQUIRE_THROWS_WITH(tensor::from<double>({1.0, 2.0}, {}),
                        Contains("tensor::from") && Contains("2 elements") && Contains("shape []"));
    REQUIRE_THROWS_WITH(tensor::from<float>(values, {6, -1}), Contains("tensor::from") && Contains("negative extent"));
}

// ---------------------------------------------------------------------------
// Typed access
// ---------------------------------------------------------------------------

TEST_CASE("typed data access is checked against the dtype", "[tensor][data]") {
    tensor t = tensor::zeros(dtype::f32, {4});
    REQUIRE(t.data<float>() == t.data());
    REQUIRE_THROWS_AS(t.data<double>(), tensor_error);
    REQUIRE_THROWS_WITH(t.data<double>(), Contains("tensor::data") && Contains("f64") && Contains("f32"));
    REQUIRE_THROWS_WITH(t.data<std::int32_t>(), Contains("i32") && Contains("f32"));
    const tensor& ct = t;
    REQUIRE(ct.data<float>() == ct.data());
    REQUIRE_THROWS_WITH(ct.data<std::int64_t>(), Contains("tensor::data") && Contains("i64") && Contains("f32"));

    tensor_view v = t;
    REQUIRE(v.data<float>() == v.data());
    REQUIRE_THROWS_AS(v.data<std::int64_t>(), tensor_error);
    REQUIRE_THROWS_WITH(v.data<std::int64_t>(), Contains("tensor_view::data") && Contains("i64") && Contains("f32"));
    const_tensor_view cv = t;
    REQUIRE(cv.data<float>() == cv.data());
    REQUIRE_THROWS_WITH(cv.data<double>(), Contains("const_tensor_view::data") && Contains("f64") && Contains("f32"));
}

TEST_CASE("at reads and writes single elements with bounds checks", "[tensor][at]") {
    tensor t = iota({2, 3});
    REQUIRE(t.at<std::int64_t>({1, 2}) == 5);
    REQUIRE(t.at<std::int64_t>({-1, -3}) == 3);
    t.at<std::int64_t>({0, 1}) = 42;
    REQUIRE(t.data<std::int64_t>()[1] == 42);
    const tensor& ct = t;
    REQUIRE(ct.at<std::int64_t>(shape_t{0, 1}) == 42);

    tensor_view v = t.transposed();
    REQUIRE(v.at<std::int64_t>({2, 1}) == 5);
    v.at<std::int64_t>({2, 0}) = -2;
    REQUIRE(t.at<std::int64_t>({0, 2}) == -2);
    const_tensor_view cv = v;
    REQUIRE(cv.at<std::int64_t>({2, 0}) == -2);

    REQUIRE_THROWS_AS(t.at<std::int64_t>({2, 0}), tensor_error);
    REQUIRE_THROWS_WITH(t.at<std::int64_t>({2, 0}), Contains("tensor::at") && Contains("[2, 0]") &&
                                                        Contains("out of bounds") && Contains("[2, 3]"));
    REQUIRE_THROWS_WITH(v.at<std::int64_t>({0, -3}), Contains("tensor_view::at") && Contains("[0, -3]"));
    REQUIRE_THROWS_WITH(cv.at<std::int64_t>({0}),
                        Contains("const_tensor_view::at") && Contains("[0]") && Contains("rank 2"));
    REQUIRE_THROWS_WITH(t.at<float>({0, 0}), Contains("tensor::at") && Contains("f32") && Contains("i64"));
}

// ---------------------------------------------------------------------------
// Reference semantics and lifetime
// ---------------------------------------------------------------------------

TEST_CASE("a copy shares storage; assignment rebinds", "[tensor][ownership]") {
    tensor a = tensor::zeros(dtype::f32, {3});
    REQUIRE(a.use_count() == 1);
    tensor b = a;
    REQUIRE(a.use_count() == 2);
    REQUIRE(b.data() == a.data());
    b.data<float>()[1] = 7.0f;
    REQUIRE(a.data<float>()[1] == 7.0f);

    tensor c = tensor::zeros(dtype::i64, {2, 2});
    c = a;  // rebinds c; its old storage is freed
    REQUIRE(c.use_count() == 3);
    REQUIRE(c.type() == dtype::f32);
    REQUIRE(vec(c.shape()) == shape_t{3});
    REQUIRE(c.data() == a.data());

    tensor& alias = c;
    c = alias;  // self-assignment keeps the reference
    REQUIRE(c.use_count() == 3);
    REQUIRE(c.data() == a.data());

    {
        const tensor d = b;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the point
        REQUIRE(a.use_count() == 4);
        REQUIRE(d.data<float>()[1] == 7.0f);
    }
    REQUIRE(a.use_count() == 3);
}

TEST_CASE("moves transfer the reference and leave an empty tensor", "[tensor][ownership]") {
    tensor a = tensor::from<float>({1, 2, 3}, {3});
    void* p = a.data();
    tensor b = std::move(a);
    REQUIRE(b.data() == p);
    REQUIRE(b.use_count() == 1);
    // The moved-from state is the default state.
    REQUIRE(a.use_count() == 0);  // NOLINT(bugprone-use-after-move)
    REQUIRE(a.data() == nullptr);
    REQUIRE(a.size() == 0);
    REQUIRE(vec(a.shape()) == shape_t{0});
    REQUIRE(a.type() == dtype::f32);

    tensor c;
    c = std::move(b);
    REQUIRE(c.data() == p);
    REQUIRE(c.use_count() == 1);
    REQUIRE(b.data() == nullptr);  // NOLINT(bugprone-use-after-move)
    a = c;
    REQUIRE(c.use_count() == 2);
}

TEST_CASE("default-constructed tensors and views are empty", "[tensor][ownership]") {
    tensor t;
    REQUIRE(t.data() == nullptr);
    REQUIRE(t.size() == 0);
    REQUIRE(t.rank() == 1);
    REQUIRE(t.use_count() == 0);
    REQUIRE(t.is_contiguous());
    tensor_view v;
    REQUIRE(v.data() == nullptr);
    REQUIRE(v.size() == 0);
    REQUIRE(v.is_contiguous());
    const_tensor_view cv;
    REQUIRE(cv.data() == nullptr);
    REQUIRE(cv.size() == 0);
    REQUIRE(vec(cv.shape()) == shape_t{0});
    tensor_view tv = t;
    REQUIRE(tv.size() == 0);
}

TEST_CASE("storage lives as long as any tensor refers to it", "[tensor][ownership]") {
    counting_resource resource;
    // The shared_ptr does not own the stack object; the storage only keeps the handle.
    std::shared_ptr<std::pmr::memory_resource> handle(&resource, [](std::pmr::memory_resource*) {});
    const_tensor_view view;
    {
        tensor keep;
        {
            tensor a = tensor::empty(dtype::f64, shape_t{4, 4}, handle);
            REQUIRE(resource.allocations == 1);
            REQUIRE(resource.last_alignment == 64);
            REQUIRE(aligned64(a.data()));
            a.data<double>()[5] = 3.25;
            view = a.slice(0, 1, 2);
            keep = a;
        }
        // a is gone; keep still holds the storage, so the view is still valid.
        REQUIRE(resource.deallocations == 0);
        REQUIRE(view.at<double>({0, 1}) == 3.25);
        REQUIRE(keep.use_count() == 1);
    }
    REQUIRE(resource.deallocations == 1);
    REQUIRE(resource.live_bytes == 0);
}

TEST_CASE("the storage keeps a shared memory resource alive", "[tensor][ownership]") {
    auto resource = std::make_shared<counting_resource>();
    std::weak_ptr<counting_resource> weak = resource;
    tensor t = tensor::empty(dtype::i32, shape_t{10}, resource);
    resource.reset();
    REQUIRE_FALSE(weak.expired());
    REQUIRE(weak.lock()->allocations == 1);
    t = tensor();
    REQUIRE(weak.expired());
}

TEST_CASE("copies on many threads keep an exact count", "[tensor][ownership][threads]") {
    tensor a = tensor::zeros(dtype::f32, {16});
    std::vector<std::thread> threads;
    threads.reserve(4);
    for (int i = 0; i < 4; ++i)
        threads.emplace_back([a] {
            for (int k = 0; k < 10000; ++k) {
                tensor c = a;
                tensor d = std::move(c);
            }
        });
    for (auto& th : threads) th.join();
    REQUIRE(a.use_count() == 1);
}

TEST_CASE("views and metadata never allocate", "[tensor][alloc]") {
    tensor t = iota({4, 6});
    const tensor& ct = t;
    const std::size_t before = g_allocations.load();
    tensor_view v = t;
    const_tensor_view cv = ct;
    tensor_view s = v.slice(1, 5, 0, -2);
    const_tensor_view tr = cv.transposed({1, 0});
    const_tensor_view r = cv.reshaped({2, 3, -1});
    const_tensor_view b = cv.slice(0, 0, 1).broadcast_to({3, 4, 6});
    tensor copy = t;
    const_tensor_view from_view = s;
    const bool o = overlaps(s, tr);
    const std::size_t after = g_allocations.load();
    REQUIRE(after == before);
    REQUIRE(o);
    REQUIRE(r.rank() == 3);
    REQUIRE(b.rank() == 3);
    REQUIRE(from_view.size() == 12);

    // A new tensor is a single allocation: header and elements share one block.
    const std::size_t before_alloc = g_allocations.load();
    tensor n = tensor::empty(dtype::f32, {3, 3, 3, 3, 3, 3, 3, 3});
    REQUIRE(g_allocations.load() - before_alloc == 1);
}

// ---------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------

TEST_CASE("views of a tensor alias its elements", "[tensor][view]") {
    tensor t = tensor::zeros(dtype::f32, {2, 3});
    tensor_view v = t;
    REQUIRE(v.data() == t.data());
    REQUIRE(v.type() == dtype::f32);
    REQUIRE(v.itemsize() == 4);
    REQUIRE(v.rank() == 2);
    REQUIRE(vec(v.shape()) == shape_t{2, 3});
    REQUIRE(vec(v.strides()) == shape_t{3, 1});
    REQUIRE(v.size() == 6);
    REQUIRE(v.is_contiguous());
    v.data<float>()[4] = 9.0f;
    REQUIRE(t.data<float>()[4] == 9.0f);

    const_tensor_view cv = v;
    REQUIRE(cv.data() == t.data());
    REQUIRE(cv.type() == dtype::f32);
    REQUIRE(vec(cv.shape()) == shape_t{2, 3});
    REQUIRE(cv.data<float>()[4] == 9.0f);

    const tensor& ct = t;
    const_tensor_view cv2 = ct.view();
    REQUIRE(cv2.data() == t.data());
    const_tensor_view cv3 = ct;
    REQUIRE(vec(cv3.strides()) == shape_t{3, 1});
    REQUIRE(t.view().data() == t.data());
}

TEST_CASE("raw-part views", "[tensor][view][raw]") {
    std::array<float, 12> buffer{};
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i);

    tensor_view m(buffer.data(), dtype::f32, {3, 4});  // row-major
    REQUIRE(vec(m.strides()) == shape_t{4, 1});
    REQUIRE(m.at<float>({2, 1}) == 9.0f);
    m.at<float>({0, 0}) = -1.0f;
    REQUIRE(buffer[0] == -1.0f);

    // Column-major view of the same memory.
    const_tensor_view f(buffer.data(), dtype::f32, {4, 3}, {1, 4});
    REQUIRE(f.at<float>({1, 2}) == 9.0f);
    REQUIRE_FALSE(f.is_contiguous());

    // Negative strides from raw parts: data points at element [0, 0].
    const_tensor_view rev(buffer.data() + 11, dtype::f32, shape_t{3, 4}, shape_t{-4, -1});
    REQUIRE(rev.at<float>({0, 0}) == 11.0f);
    REQUIRE(rev.at<float>({2, 3}) == -1.0f);

    // Empty views may have a null pointer.
    const_tensor_view none(nullptr, dtype::f64, {0, 5});
    REQUIRE(none.size() == 0);
    tensor_view none2(nullptr, dtype::i32, {3, 0}, {0, 0});
    REQUIRE(none2.size() == 0);

    // Rank 0 from raw parts.
    std::int64_t scalar = 5;
    tensor_view s(&scalar, dtype::i64, {}, {});
    REQUIRE(s.size() == 1);
    REQUIRE(s.at<std::int64_t>({}) == 5);
}

TEST_CASE("raw-part views reject invalid parts", "[tensor][view][raw][errors]") {
    std::array<double, 8> buffer{};
    double* p = buffer.data();
    REQUIRE_THROWS_AS(tensor_view(p, dtype::f64, {2, 3}, {3}), tensor_error);
    REQUIRE_THROWS_WITH(tensor_view(p, dtype::f64, {2, 3}, {3}),
                        Contains("tensor_view") && Contains("[2, 3]") && Contains("[3]") && Contains("differ in rank"));
    REQUIRE_THROWS_WITH(const_tensor_view(p, dtype::f64, {2, -3}, {3, 1}),
                        Contains("const_tensor_view") && Contains("negative extent -3"));
    REQUIRE_THROWS_WITH(tensor_view(nullptr, dtype::f64, {2}),
                        Contains("tensor_view") && Contains("null data pointer") && Contains("[2]"));
    REQUIRE_THROWS_WITH(const_tensor_view(nullptr, dtype::f64, {2}, {1}), Contains("null data pointer"));
    auto* misaligned = reinterpret_cast<std::byte*>(p) + 2;
    REQUIRE_THROWS_WITH(tensor_view(misaligned, dtype::f64, {2}),
                        Contains("tensor_view") && Contains("not aligned") && Contains("f64"));
    REQUIRE_THROWS_WITH(const_tensor_view(misaligned, dtype::i32, {2}, {1}), Contains("not aligned"));
    REQUIRE_THROWS_WITH(tensor_view(p, static_cast<dtype>(4), {2}), Contains("invalid dtype 4"));
    REQUIRE_THROWS_WITH(tensor_view(p, dtype::f64, {3, 2}, {int64_max / 2, 1}),
                        Contains("tensor_view") && Contains("byte range") && Contains("overflows"));
    REQUIRE_THROWS_WITH(const_tensor_view(p, dtype::f64, {int64_max, 2}, {1, 1}), Contains("too large"));
}

TEST_CASE("is_contiguous follows numpy's C_CONTIGUOUS flag", "[tensor][view]") {
    tensor t = iota({3, 4});
    REQUIRE(t.view().is_contiguous());
    REQUIRE(t.slice(0, 1, 3).is_contiguous());        // a run of whole rows
    REQUIRE_FALSE(t.slice(1, 0, 2).is_contiguous());  // part of each row
    REQUIRE_FALSE(t.transposed().is_contiguous());
    REQUIRE(t.slice(0, 1, 2).is_contiguous());  // one row
    REQUIRE(t.slice(1, 2, 3).slice(0, 1, 2).is_contiguous());  // [1, 1]: strides irrelevant
    REQUIRE(t.slice(1, 0, 0).is_contiguous());  // empty
    REQUIRE_FALSE(t.slice(1, 3, int64_min, -1).is_contiguous());
    REQUIRE_FALSE(t.slice(0, 0, 1).broadcast_to({2, 4}).is_contiguous());
    REQUIRE(t.slice(0, 0, 1).broadcast_to({1, 4}).is_contiguous());
}

// ---------------------------------------------------------------------------
// slice
// ---------------------------------------------------------------------------

TEST_CASE("slice: basic ranges and steps", "[tensor][slice]") {
    tensor t = iota({4, 5});
    tensor_view rows = t.slice(0, 1, 3);
    REQUIRE(vec(rows.shape()) == shape_t{2, 5});
    REQUIRE(vec(rows.strides()) == shape_t{5, 1});
    REQUIRE(rows.data<std::int64_t>() == t.data<std::int64_t>() + 5);
    REQUIRE(elements(rows) == std::vector<std::int64_t>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14});

    const_tensor_view cols = t.view().slice(1, 0, 5, 2);
    REQUIRE(vec(cols.shape()) == shape_t{4, 3});
    REQUIRE(vec(cols.strides()) == shape_t{5, 2});
    REQUIRE(elements(cols) == std::vector<std::int64_t>{0, 2, 4, 5, 7, 9, 10, 12, 14, 15, 17, 19});

    // Negative axis and negative bounds count from the end.
    const_tensor_view last = t.slice(-1, -2, 5);
    REQUIRE(vec(last.shape()) == shape_t{4, 2});
    REQUIRE(elements(last) == std::vector<std::int64_t>{3, 4, 8, 9, 13, 14, 18, 19});

    // Slicing a slice.
    const_tensor_view inner = cols.slice(0, 1, 4, 2).slice(1, 1, 3);
    REQUIRE(elements(inner) == std::vector<std::int64_t>{7, 9, 17, 19});

    // Writing through a slice.
    t.slice(0, 3, 4).slice(1, 0, 1).data<std::int64_t>()[0] = -7;
    REQUIRE(t.at<std::int64_t>({3, 0}) == -7);
}

TEST_CASE("slice: negative steps read the right elements", "[tensor][slice][negative]") {
    tensor t = iota({6});
    const_tensor_view rev = t.slice(0, -1, int64_min, -1);  // x[::-1]
    REQUIRE(vec(rev.shape()) == shape_t{6});
    REQUIRE(vec(rev.strides()) == shape_t{-1});
    REQUIRE(rev.data<std::int64_t>() == t.data<std::int64_t>() + 5);
    REQUIRE(elements(rev) == std::vector<std::int64_t>{5, 4, 3, 2, 1, 0});

    REQUIRE(elements(t.slice(0, 4, 0, -2)) == std::vector<std::int64_t>{4, 2});        // x[4:0:-2]
    REQUIRE(elements(t.slice(0, int64_max, 1, -3)) == std::vector<std::int64_t>{5, 2});  // x[:1:-3]
    REQUIRE(elements(t.slice(0, 3, -7, -1)) == std::vector<std::int64_t>{3, 2, 1, 0});   // x[3:-7:-1]
    REQUIRE(elements(rev.slice(0, 1, 4, 2)) == std::vector<std::int64_t>{4, 2});        // reversed then stepped
    REQUIRE(elements(rev.slice(0, -1, int64_min, -1)) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});

    tensor m = iota({3, 4});
    const_tensor_view both = m.slice(0, -1, int64_min, -1).slice(1, -1, int64_min, -2);
    REQUIRE(vec(both.shape()) == shape_t{3, 2});
    REQUIRE(vec(both.strides()) == shape_t{-4, -2});
    REQUIRE(elements(both) == std::vector<std::int64_t>{11, 9, 7, 5, 3, 1});
}

TEST_CASE("slice: out-of-range bounds clamp like Python", "[tensor][slice][clamp]") {
    tensor t = iota({5});
    REQUIRE(elements(t.slice(0, -100, 100)) == std::vector<std::int64_t>{0, 1, 2, 3, 4});
    REQUIRE(elements(t.slice(0, 3, 100)) == std::vector<std::int64_t>{3, 4});
    REQUIRE(t.slice(0, 7, 9).size() == 0);
    REQUIRE(t.slice(0, 3, 1).size() == 0);   // begin >= end with a positive step
    REQUIRE(t.slice(0, 1, 3, -1).size() == 0);
    REQUIRE(t.slice(0, -100, 100, -1).size() == 0);
    REQUIRE(elements(t.slice(0, 100, -100, -1)) == std::vector<std::int64_t>{4, 3, 2, 1, 0});
    REQUIRE(elements(t.slice(0, 0, int64_max, int64_max)) == std::vector<std::int64_t>{0});
    REQUIRE(elements(t.slice(0, int64_max, int64_min, int64_min)) == std::vector<std::int64_t>{4});
    REQUIRE(elements(t.slice(0, 1, 5, 3)) == std::vector<std::int64_t>{1, 4});
    // An empty slice keeps a valid data pointer (the parent's).
    const_tensor_view e = t.slice(0, 5, 5);
    REQUIRE(e.size() == 0);
    REQUIRE(vec(e.shape()) == shape_t{0});
    REQUIRE(e.data() == t.data());
}

TEST_CASE("slice: errors", "[tensor][slice][errors]") {
    tensor t = iota({2, 3});
    REQUIRE_THROWS_AS(t.slice(2, 0, 1), tensor_error);
    REQUIRE_THROWS_WITH(t.slice(2, 0, 1), Contains("tensor::slice") && Contains("axis 2") && Contains("[2, 3]"));
    REQUIRE_THROWS_WITH(t.view().slice(-3, 0, 1),
                        Contains("tensor_view::slice") && Contains("axis -3") && Contains("[2, 3]"));
    const tensor& ct = t;
    REQUIRE_THROWS_WITH(ct.slice(0, 0, 1, 0), Contains("tensor::slice") && Contains("step 0") && Contains("[2, 3]"));
    REQUIRE_THROWS_WITH(const_tensor_view(t).slice(1, 0, 1, 0),
                        Contains("const_tensor_view::slice") && Contains("step 0") && Contains("axis 1"));
}

// ---------------------------------------------------------------------------
// transposed
// ---------------------------------------------------------------------------

TEST_CASE("transposed permutes shape and strides", "[tensor][transpose]") {
    tensor t = iota({2, 3, 4});
    tensor_view p = t.transposed({2, 0, 1});
    REQUIRE(vec(p.shape()) == shape_t{4, 2, 3});
    REQUIRE(vec(p.strides()) == shape_t{1, 12, 4});
    REQUIRE(p.data() == t.data());
    REQUIRE(p.at<std::int64_t>({3, 1, 2}) == t.at<std::int64_t>({1, 2, 3}));

    const_tensor_view n = t.view().transposed(shape_t{-1, 0, -2});  // negative entries count from the end
    REQUIRE(vec(n.shape()) == shape_t{4, 2, 3});

    const_tensor_view rev = const_tensor_view(t).transposed();
    REQUIRE(vec(rev.shape()) == shape_t{4, 3, 2});
    REQUIRE(vec(rev.strides()) == shape_t{1, 4, 12});
    REQUIRE(vec(rev.transposed().strides()) == shape_t{12, 4, 1});

    tensor m = iota({2, 3});
    REQUIRE(elements(m.transposed()) == std::vector<std::int64_t>{0, 3, 1, 4, 2, 5});
    REQUIRE(elements(m.transposed({0, 1})) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});
    const tensor& cm = m;
    REQUIRE(elements(cm.transposed({1, 0})) == std::vector<std::int64_t>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("transposed rejects anything but a permutation", "[tensor][transpose][errors]") {
    tensor t = iota({2, 3});
    REQUIRE_THROWS_AS(t.transposed({0, 0}), tensor_error);
    REQUIRE_THROWS_WITH(t.transposed({0, 0}), Contains("tensor::transposed") && Contains("[0, 0]") &&
                                                  Contains("not a permutation") && Contains("[2, 3]"));
    REQUIRE_THROWS_WITH(t.view().transposed({0}), Contains("tensor_view::transposed") && Contains("[0]"));
    REQUIRE_THROWS_WITH(t.view().transposed({0, 1, 2}), Contains("[0, 1, 2]") && Contains("2 axes"));
    REQUIRE_THROWS_WITH(const_tensor_view(t).transposed({0, 2}),
                        Contains("const_tensor_view::transposed") && Contains("[0, 2]"));
    REQUIRE_THROWS_WITH(t.transposed({-3, 0}), Contains("[-3, 0]"));
    REQUIRE_THROWS_WITH(t.transposed({1, -1}), Contains("[1, -1]"));  // -1 is axis 1 again
}

// ---------------------------------------------------------------------------
// reshaped
// ---------------------------------------------------------------------------

TEST_CASE("reshaped: contiguous sources", "[tensor][reshape]") {
    tensor t = iota({2, 3, 4});
    tensor_view a = t.reshaped({6, 4});
    REQUIRE(vec(a.shape()) == shape_t{6, 4});
    REQUIRE(vec(a.strides()) == shape_t{4, 1});
    REQUIRE(a.data() == t.data());
    REQUIRE(vec(t.reshaped({-1}).shape()) == shape_t{24});
    REQUIRE(vec(t.reshaped({4, -1, 2}).shape()) == shape_t{4, 3, 2});
    REQUIRE(vec(t.reshaped({1, 24, 1}).strides()) == shape_t{24, 1, 1});
    const tensor& ct = t;
    REQUIRE(elements(ct.reshaped(shape_t{3, 8})) == elements(t));

    tensor e = tensor::empty(dtype::i64, {0, 3});
    REQUIRE(vec(e.reshaped({3, 0, 5}).shape()) == shape_t{3, 0, 5});
    REQUIRE(vec(e.reshaped({0}).shape()) == shape_t{0});

    tensor s = tensor::from<std::int64_t>({9}, {});
    REQUIRE(s.reshaped({1, 1, 1}).at<std::int64_t>({0, 0, 0}) == 9);
    REQUIRE(s.reshaped({-1}).size() == 1);
    REQUIRE(s.view().reshaped({1}).reshaped({}).rank() == 0);
}

TEST_CASE("reshaped: strided sources that strides can express (numpy no-copy cases)", "[tensor][reshape]") {
    tensor a = iota({2, 3, 4});

    // a[:, :, ::2] is uniformly strided: every reshape works.
    const_tensor_view b = a.slice(2, 0, 4, 2);  // [2, 3, 2] strides [12, 4, 2]
    REQUIRE(vec(b.reshaped({6, 2}).strides()) == shape_t{4, 2});
    REQUIRE(vec(b.reshaped({2, 6}).strides()) == shape_t{12, 2});
    REQUIRE(vec(b.reshaped({12}).strides()) == shape_t{2});
    REQUIRE(elements(b.reshaped({12})) == elements(b));

    // a[:, :2, :]: axes 1 and 2 merge, axes 0 and 1 do not.
    const_tensor_view c = a.slice(1, 0, 2);  // [2, 2, 4] strides [12, 4, 1]
    REQUIRE(vec(c.reshaped({2, 8}).strides()) == shape_t{12, 1});
    REQUIRE(vec(c.reshaped({2, 2, 2, 2}).strides()) == shape_t{12, 4, 2, 1});
    REQUIRE(elements(c.reshaped({2, 8})) == elements(c));

    // A transposed source splits an axis.
    const_tensor_view t = a.transposed({2, 0, 1});  // [4, 2, 3] strides [1, 12, 4]
    REQUIRE(vec(t.reshaped({4, 6}).strides()) == shape_t{1, 4});
    REQUIRE(vec(t.reshaped({2, 2, 2, 3}).strides()) == shape_t{2, 1, 12, 4});
    REQUIRE(elements(t.reshaped({2, 2, 2, 3})) == elements(t));

    // Extent-1 axes of the source are ignored; trailing 1s of the target take the last stride.
    tensor w = iota({3, 5, 4});
    const_tensor_view d = w.slice(1, 1, 2);  // [3, 1, 4] strides [20, 4, 1]
    REQUIRE(vec(d.reshaped({3, 4}).strides()) == shape_t{20, 1});
    REQUIRE(vec(d.reshaped({3, 4, 1, 1}).strides()) == shape_t{20, 1, 1, 1});
    REQUIRE(vec(d.reshaped({1, 3, 1, 4}).strides()) == shape_t{60, 20, 4, 1});
    REQUIRE(elements(d.reshaped({1, 3, 1, 4})) == elements(d));

    // Negative strides.
    tensor v = iota({6});
    const_tensor_view r = v.slice(0, -1, int64_min, -1);
    REQUIRE(vec(r.reshaped({2, 3}).strides()) == shape_t{-3, -1});
    REQUIRE(elements(r.reshaped({2, 3})) == std::vector<std::int64_t>{5, 4, 3, 2, 1, 0});

    // Broadcast sources keep their zero strides where they can.
    const_tensor_view bc = v.slice(0, 0, 3).broadcast_to({2, 3});  // strides [0, 1]
    REQUIRE(vec(bc.reshaped({2, 3, 1}).strides()) == shape_t{0, 1, 1});
    REQUIRE(vec(bc.reshaped({1, 2, 3}).strides()) == shape_t{0, 0, 1});
    REQUIRE(vec(bc.reshaped({2, 1, 3}).strides()) == shape_t{0, 3, 1});

    // An empty non-contiguous view can take any shape with the same (zero) count.
    const_tensor_view empty = a.transposed().slice(0, 0, 0);
    REQUIRE(vec(empty.reshaped({3, 0}).shape()) == shape_t{3, 0});
}

TEST_CASE("reshaped: strides that cannot express the target throw", "[tensor][reshape][errors]") {
    tensor m = iota({3, 2});
    const_tensor_view t = m.transposed();  // shape [2, 3], strides [1, 2]
    REQUIRE_THROWS_AS(t.reshaped({6}), tensor_error);
    REQUIRE_THROWS_WITH(t.reshaped({6}),
                        Contains("const_tensor_view::reshaped: cannot view shape [2, 3] with strides [1, 2] as [6]"));
    REQUIRE_THROWS_WITH(m.transposed().reshaped({-1}),
                        Contains("tensor_view::reshaped: cannot view shape [2, 3] with strides [1, 2] as [6]"));
    REQUIRE_THROWS_WITH(t.reshaped({3, 2}), Contains("as [3, 2]"));

    tensor a = iota({2, 3, 4});
    const_tensor_view c = a.slice(1, 0, 2);  // [2, 2, 4] strides [12, 4, 1]
    REQUIRE_THROWS_WITH(c.reshaped({4, 4}), Contains("cannot view shape [2, 2, 4] with strides [12, 4, 1] as [4, 4]"));
    REQUIRE_THROWS_WITH(c.reshaped({16}), Contains("as [16]"));

    tensor v = iota({3});
    const_tensor_view bc = v.view().broadcast_to({2, 3});
    REQUIRE_THROWS_WITH(bc.reshaped({6}), Contains("with strides [0, 1] as [6]"));
}

TEST_CASE("reshaped: bad target shapes", "[tensor][reshape][errors]") {
    tensor t = iota({2, 3});
    REQUIRE_THROWS_AS(t.reshaped({4}), tensor_error);
    REQUIRE_THROWS_WITH(t.reshaped({4}), Contains("tensor::reshaped") && Contains("[2, 3] (6 elements)") &&
                                             Contains("[4] (4 elements)"));
    REQUIRE_THROWS_WITH(t.view().reshaped({-1, -1}), Contains("tensor_view::reshaped") && Contains("more than one -1"));
    REQUIRE_THROWS_WITH(t.reshaped({-1, 4}), Contains("-1 cannot be inferred") && Contains("[-1, 4]"));
    REQUIRE_THROWS_WITH(t.reshaped({2, -2}), Contains("invalid extent -2") && Contains("[2, -2]"));
    REQUIRE_THROWS_WITH(t.reshaped({0, 6}), Contains("(0 elements)"));
    tensor e = tensor::empty(dtype::f32, {0, 3});
    REQUIRE_THROWS_WITH(e.reshaped({0, -1}), Contains("-1 cannot be inferred"));
    REQUIRE_THROWS_WITH(e.reshaped({0, std::int64_t{1} << 40, std::int64_t{1} << 40}), Contains("too large"));
    REQUIRE_THROWS_WITH(const_tensor_view(t).reshaped({7}), Contains("const_tensor_view::reshaped"));
}

TEST_CASE("reshaped agrees with a brute-force oracle on random strided views", "[tensor][reshape][property]") {
    std::mt19937 rng(12345);
    auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    // Factorisations of 24 (and the counts reached by slicing) as targets.
    const std::vector<shape_t> targets24 = {{24},         {2, 12},    {12, 2},    {3, 8},       {8, 3},    {4, 6},
                                            {6, 4},       {2, 3, 4},  {4, 3, 2},  {2, 2, 6},    {6, 2, 2}, {2, 2, 2, 3},
                                            {3, 2, 2, 2}, {1, 24, 1}, {2, 1, 12}, {2, 2, 3, 2}, {24, 1}};
    int successes = 0;
    int failures = 0;
    for (int round = 0; round < 400; ++round) {
        // Two sources of 24-element strided views: a [2, 3, 4, 5] block with one
        // index of the 5-axis taken, or a [2, 3, 8] block stepped by 2 along the 8-axis.
        tensor base = pick(0, 1) == 0 ? iota({2, 3, 4, 5}) : iota({2, 3, 8});
        const_tensor_view v = base;
        for (std::size_t ax = 0; ax < v.rank(); ++ax) {
            const auto axis = static_cast<std::int64_t>(ax);
            if (v.shape()[ax] == 5) {
                const std::int64_t k = pick(0, 4);
                v = v.slice(axis, k, k + 1);
            } else if (v.shape()[ax] == 8) {
                v = v.slice(axis, pick(0, 1), int64_max, 2);
            }
        }
        shape_t perm(v.rank());
        for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<std::int64_t>(i);
        std::shuffle(perm.begin(), perm.end(), rng);
        v = v.transposed(perm);
        if (pick(0, 1) == 1) v = v.slice(pick(0, static_cast<std::int64_t>(v.rank()) - 1), -1, int64_min, -1);
        REQUIRE(v.size() == 24);
        for (const shape_t& target : targets24) {
            CAPTURE(to_string(v.shape()), to_string(v.strides()), to_string(target));
            if (expressible(v, target)) {
                const_tensor_view r = v.reshaped(target);
                REQUIRE(addresses(r) == addresses(v));
                ++successes;
            } else {
                REQUIRE_THROWS_AS(v.reshaped(target), tensor_error);
                ++failures;
            }
        }
    }
    REQUIRE(successes > 100);
    REQUIRE(failures > 100);
}

// ---------------------------------------------------------------------------
// broadcast_to
// ---------------------------------------------------------------------------

TEST_CASE("broadcast_to uses zero strides", "[tensor][broadcast]") {
    tensor row = iota({3});
    tensor_view b = row.broadcast_to({4, 3});
    REQUIRE(vec(b.shape()) == shape_t{4, 3});
    REQUIRE(vec(b.strides()) == shape_t{0, 1});
    REQUIRE(b.data() == row.data());
    REQUIRE(elements(b) == std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2});

    tensor col = iota({3, 1});
    const tensor& ccol = col;
    const_tensor_view c = ccol.broadcast_to({2, 3, 4});
    REQUIRE(vec(c.strides()) == shape_t{0, 1, 0});
    REQUIRE(c.at<std::int64_t>({1, 2, 3}) == 2);

    REQUIRE(vec(row.view().broadcast_to({3}).strides()) == shape_t{1});  // identity
    REQUIRE(vec(col.broadcast_to(shape_t{3, 0}).shape()) == shape_t{3, 0});  // 1 -> 0 is allowed
    REQUIRE(col.broadcast_to(shape_t{3, 0}).size() == 0);

    // A reversed source keeps its negative stride on the non-broadcast axis.
    const_tensor_view r = const_tensor_view(row).slice(0, -1, int64_min, -1).broadcast_to({2, 3});
    REQUIRE(vec(r.strides()) == shape_t{0, -1});
    REQUIRE(elements(r) == std::vector<std::int64_t>{2, 1, 0, 2, 1, 0});
}

TEST_CASE("broadcast_to: errors", "[tensor][broadcast][errors]") {
    tensor t = iota({2, 3});
    REQUIRE_THROWS_AS(t.broadcast_to({4, 3}), tensor_error);
    REQUIRE_THROWS_WITH(
        t.broadcast_to({4, 3}),
        Contains("tensor::broadcast_to: cannot broadcast shape [2, 3] to [4, 3]") && Contains("axis 0 has extent 2"));
    REQUIRE_THROWS_WITH(t.view().broadcast_to({3}),
                        Contains("tensor_view::broadcast_to") && Contains("fewer axes") && Contains("[3]"));
    REQUIRE_THROWS_WITH(const_tensor_view(t).broadcast_to({2, -3}),
                        Contains("const_tensor_view::broadcast_to") && Contains("negative extent -3"));
    REQUIRE_THROWS_WITH(t.broadcast_to({int64_max, 2, 3}), Contains("too large"));
    REQUIRE_THROWS_WITH(t.broadcast_to({2, 0}), Contains("axis 1 has extent 3"));
}

// ---------------------------------------------------------------------------
// overlaps
// ---------------------------------------------------------------------------

TEST_CASE("overlaps is a conservative memory-range check", "[tensor][overlaps]") {
    tensor a = iota({4, 4});
    tensor b = iota({4, 4});
    REQUIRE(overlaps(a, a));
    REQUIRE(overlaps(a, a.transposed()));
    REQUIRE_FALSE(overlaps(a, b));

    // Disjoint halves.
    REQUIRE_FALSE(overlaps(a.slice(0, 0, 2), a.slice(0, 2, 4)));
    REQUIRE(overlaps(a.slice(0, 0, 3), a.slice(0, 2, 4)));
    // Adjacent single elements.
    REQUIRE_FALSE(overlaps(a.slice(0, 0, 1).slice(1, 0, 1), a.slice(0, 0, 1).slice(1, 1, 2)));
    // Interleaved columns touch disjoint elements but their ranges intersect: conservative.
    REQUIRE(overlaps(a.slice(1, 0, 4, 2), a.slice(1, 1, 4, 2)));
    // Negative strides cover the same range.
    REQUIRE(overlaps(a.slice(0, -1, int64_min, -1), a.slice(0, 0, 1)));
    REQUIRE(overlaps(a.slice(0, -1, int64_min, -1), a.slice(0, 3, 4)));
    REQUIRE_FALSE(overlaps(a.slice(0, 1, int64_min, -1), a.slice(0, 2, 4)));
    // Broadcast views.
    REQUIRE(overlaps(a.slice(0, 1, 2).broadcast_to({3, 4, 4}), a.slice(0, 1, 2).slice(1, 3, 4)));
    REQUIRE_FALSE(overlaps(a.slice(0, 1, 2).broadcast_to({3, 4, 4}), a.slice(0, 2, 3)));
    // Empty views never overlap.
    REQUIRE_FALSE(overlaps(a.slice(0, 0, 0), a));
    REQUIRE_FALSE(overlaps(a, a.slice(1, 2, 2)));
    // Itemsize matters: an f64 view reaches 8 bytes.
    std::array<std::int64_t, 4> raw{};
    const_tensor_view first(raw.data(), dtype::i64, {1});
    const_tensor_view bytes_of_first(reinterpret_cast<std::int32_t*>(raw.data()) + 1, dtype::i32, {1});
    const_tensor_view second(raw.data() + 1, dtype::i64, {1});
    REQUIRE(overlaps(first, bytes_of_first));
    REQUIRE_FALSE(overlaps(first, second));
    // Rank-0 views.
    REQUIRE(overlaps(a.slice(0, 0, 1).slice(1, 0, 1).reshaped({}), a));
}
