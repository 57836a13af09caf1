#pragma once
// What the tensor tests share: shapes, an iota tensor, reading a view's
// elements and addresses through its strides, a brute-force oracle for what a
// reshape can express without a copy, and a counting memory resource.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory_resource>
#include <span>
#include <vector>

#include <tenferro/tensor.hpp>

namespace tenferro::test::tensors {

using shape_t = std::vector<std::int64_t>;

constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

inline shape_t vec(std::span<const std::int64_t> s) { return {s.begin(), s.end()}; }

/// A row-major i64 tensor holding 0, 1, 2, ...
inline tensor iota(std::initializer_list<std::int64_t> shape) {
    tensor t = tensor::empty(dtype::i64, shape);
    std::int64_t* p = t.data<std::int64_t>();
    for (std::int64_t i = 0; i < t.size(); ++i) p[i] = i;
    return t;
}

/// Calls f(index) for every index of `shape` in row-major order.
inline void for_each_index(std::span<const std::int64_t> shape,
                           const std::function<void(std::span<const std::int64_t>)>& f) {
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
inline std::vector<std::int64_t> elements(const_tensor_view v) {
    std::vector<std::int64_t> out;
    for_each_index(v.shape(), [&](std::span<const std::int64_t> index) {
        std::int64_t offset = 0;
        for (std::size_t i = 0; i < index.size(); ++i) offset += index[i] * v.strides()[i];
        out.push_back(v.data<std::int64_t>()[offset]);
    });
    return out;
}

/// The element addresses of a view in row-major order.
inline std::vector<const std::byte*> addresses(const_tensor_view v) {
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
inline bool expressible(const_tensor_view v, const shape_t& shape) {
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

inline bool aligned64(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

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

}  // namespace tenferro::test::tensors
