// Tensors: dtypes, creation, typed access, reference semantics and lifetime,
// and that views and metadata never allocate.
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
#include "tensor_test_support.hpp"

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
using namespace tenferro::test::tensors;

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
