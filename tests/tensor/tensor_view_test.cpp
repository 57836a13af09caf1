// Tensor views and their layout algebra: raw-part views, slice, transposed,
// reshaped (against a brute-force oracle), broadcast_to, overlaps.
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

using namespace tenferro;
using namespace tenferro::test::tensors;
using Catch::Contains;

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
