#pragma once
// An allocator for the tests of S19 that hand an operation an allocator of
// their own (use_future_t<A>, bind_allocator): it counts what it serves, and
// refuses (throws std::bad_alloc for) what the test tells it to, by size or by
// count. Its state is shared by every rebound copy.

#include <cstddef>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "tenferro/detail/async/op_allocator.hpp"

namespace tenferro::test {

template <class T>
struct is_op_block : std::false_type {};
template <std::size_t Size, std::size_t Align>
struct is_op_block<tenferro::detail::op_block<Size, Align>> : std::true_type {};

struct allocation_policy {
    /// Blocks larger than this many bytes are refused.
    std::size_t refuse_above = std::numeric_limits<std::size_t>::max();
    /// Allocations served before every later one is refused (all, while negative).
    int allowed = -1;
    int made = 0;     // served
    int refused = 0;  // refused
    int freed = 0;    // given back
    /// Of `made`: the library's own blocks (detail::op_block: every op it
    /// allocates from a handler's own allocator), as against Asio's.
    int library_blocks = 0;
};

template <class T>
struct test_allocator {
    using value_type = T;
    std::shared_ptr<allocation_policy> policy;

    explicit test_allocator(std::shared_ptr<allocation_policy> p) noexcept : policy(std::move(p)) {}
    template <class U>
    test_allocator(const test_allocator<U>& other) noexcept
        : policy(other.policy) {}  // NOLINT(google-explicit-constructor)

    T* allocate(std::size_t n) {
        if (n * sizeof(T) > policy->refuse_above || (policy->allowed >= 0 && policy->made >= policy->allowed)) {
            ++policy->refused;
            throw std::bad_alloc();
        }
        ++policy->made;
        if constexpr (is_op_block<T>::value) ++policy->library_blocks;
        return std::allocator<T>().allocate(n);
    }
    void deallocate(T* p, std::size_t n) noexcept {
        ++policy->freed;
        std::allocator<T>().deallocate(p, n);
    }

    template <class U>
    bool operator==(const test_allocator<U>& other) const noexcept {
        return policy == other.policy;
    }
    template <class U>
    bool operator!=(const test_allocator<U>& other) const noexcept {
        return policy != other.policy;
    }
};

}  // namespace tenferro::test
