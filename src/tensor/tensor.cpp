// The owning tensor: its refcounted storage block, copies and moves that share
// it, allocation (empty, zeros, from) and element access. Its views come from
// detail::view_algebra (view.cpp); shapes and strides from the layout algebra
// (layout.cpp).

#include "tenferro/tensor.hpp"

#include <atomic>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "tensor/layout.hpp"

namespace tenferro {

namespace detail {

// The header of every tensor's storage block. It sits at the start of the
// tensor_alignment-aligned block; the elements start tensor_alignment bytes in,
// so they inherit the block's alignment and one allocation serves both.
struct storage {
    std::atomic<std::size_t> refs;
    std::size_t block_bytes;                               // header + elements, as allocated
    std::shared_ptr<std::pmr::memory_resource> resource;  // null: aligned ::operator new
};

static_assert(sizeof(storage) <= tensor_alignment, "the storage header must fit before the elements");

}  // namespace detail

using detail::layout_algebra::as_span;
using detail::layout_algebra::check_element_type;
using detail::layout_algebra::count_of;
using detail::layout_algebra::dtype_name;
using detail::layout_algebra::fail;
using detail::layout_algebra::index_offset;
using detail::layout_algebra::row_major_layout;

// ---------------------------------------------------------------------------
// tensor
// ---------------------------------------------------------------------------

tensor::tensor(const tensor& other) noexcept : storage_(other.storage_), data_(other.data_), layout_(other.layout_) {
    // Relaxed suffices for an increment: the caller already holds a reference,
    // so the storage cannot be freed concurrently.
    if (storage_ != nullptr) storage_->refs.fetch_add(1, std::memory_order_relaxed);
}

tensor::tensor(tensor&& other) noexcept
    : storage_(std::exchange(other.storage_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      layout_(std::exchange(other.layout_, detail::layout{})) {}

tensor& tensor::operator=(const tensor& other) noexcept {
    if (this != &other) {
        tensor copy(other);
        *this = std::move(copy);
    }
    return *this;
}

tensor& tensor::operator=(tensor&& other) noexcept {
    if (this != &other) {
        release();
        storage_ = std::exchange(other.storage_, nullptr);
        data_ = std::exchange(other.data_, nullptr);
        layout_ = std::exchange(other.layout_, detail::layout{});
    }
    return *this;
}

tensor::~tensor() { release(); }

void tensor::release() noexcept {
    detail::storage* s = std::exchange(storage_, nullptr);
    data_ = nullptr;
    layout_ = detail::layout{};
    // acq_rel: the last owner must see every other owner's element writes
    // before the memory is handed back.
    if (s == nullptr || s->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    std::shared_ptr<std::pmr::memory_resource> resource = std::move(s->resource);
    const std::size_t block_bytes = s->block_bytes;
    s->~storage();
    if (resource)
        resource->deallocate(s, block_bytes, tensor_alignment);
    else
        ::operator delete(static_cast<void*>(s), std::align_val_t{tensor_alignment});
}

std::size_t tensor::use_count() const noexcept {
    return storage_ == nullptr ? 0 : storage_->refs.load(std::memory_order_relaxed);
}

std::int64_t tensor::size() const noexcept { return count_of(layout_.shape); }

tensor tensor::allocate(const char* op, dtype type, std::span<const std::int64_t> shape,
                        std::shared_ptr<std::pmr::memory_resource> resource) {
    detail::layout l = row_major_layout(op, type, shape);
    // check_count bounded the byte count by INT64_MAX; the header must fit on top.
    const auto bytes = static_cast<std::uint64_t>(count_of(l.shape)) * size_of(type);
    if (bytes > std::numeric_limits<std::size_t>::max() - tensor_alignment)
        fail(op, "shape " + to_string(shape) + " of dtype " + dtype_name(type) +
                     " is too large: its byte size overflows size_t");
    const std::size_t block_bytes = static_cast<std::size_t>(bytes) + tensor_alignment;
    void* block = resource ? resource->allocate(block_bytes, tensor_alignment)
                           : ::operator new(block_bytes, std::align_val_t{tensor_alignment});
    tensor t;
    t.storage_ = ::new (block) detail::storage{{1}, block_bytes, std::move(resource)};
    t.data_ = static_cast<std::byte*>(block) + tensor_alignment;
    t.layout_ = l;
    return t;
}

tensor tensor::empty(dtype type, std::span<const std::int64_t> shape) {
    return allocate("tensor::empty", type, shape, nullptr);
}

tensor tensor::empty(dtype type, std::initializer_list<std::int64_t> shape) {
    return allocate("tensor::empty", type, as_span(shape), nullptr);
}

tensor tensor::empty(dtype type, std::span<const std::int64_t> shape,
                     std::shared_ptr<std::pmr::memory_resource> resource) {
    return allocate("tensor::empty", type, shape, std::move(resource));
}

tensor tensor::zeros(dtype type, std::span<const std::int64_t> shape) {
    tensor t = allocate("tensor::zeros", type, shape, nullptr);
    // All-zero bits are 0 (and +0.0) for every dtype.
    std::memset(t.data_, 0, t.nbytes());
    return t;
}

tensor tensor::zeros(dtype type, std::initializer_list<std::int64_t> shape) { return zeros(type, as_span(shape)); }

tensor tensor::from_elements(dtype type, const void* data, std::size_t count, std::span<const std::int64_t> shape) {
    const char* op = "tensor::from";
    detail::layout l = row_major_layout(op, type, shape);
    const std::int64_t needed = count_of(l.shape);
    if (count != static_cast<std::size_t>(needed))
        fail(op, "data holds " + std::to_string(count) + " elements but shape " + to_string(shape) + " has " +
                     std::to_string(needed));
    tensor t = allocate(op, type, shape, nullptr);
    if (count != 0) std::memcpy(t.data_, data, t.nbytes());
    return t;
}

void tensor::check_type(dtype requested, const char* op) const { check_element_type(op, requested, layout_.type); }

std::int64_t tensor::offset_of(std::span<const std::int64_t> index, const char* op) const {
    return index_offset(op, layout_, index);
}

}  // namespace tenferro
