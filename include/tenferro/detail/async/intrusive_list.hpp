#pragma once
// A FIFO list threaded through links that live in its elements: pushing,
// popping and unlinking allocate nothing, and an element costs no memory
// beyond its links. Every list of operations in the library is one: the
// permit queue's waiters and its start-order list, the batcher's waiting
// items, the compute pool's tasks, the hand-offs parked for a retry. (The same
// idea as Asio's op_queue, libunifex's intrusive_list<T, &T::next, &T::prev>
// and tokio's util::linked_list.)
//
// `Next` and `Prev` name the links: with both, the list is doubly linked and
// any element unlinks in O(1); with `Prev` null, it is a singly linked queue
// (push_back, pop_front, splice). The list never owns its elements: it only
// reads and writes their links, and only while they are in it. An element
// leaves with its links cleared.
//
// Not thread-safe: its owner guards it (a mutex, or a single thread).

#include <cstddef>
#include <utility>

namespace tenferro::detail {

template <class T, T* T::*Next, T* T::*Prev = nullptr>
class intrusive_list {
public:
    static constexpr bool doubly_linked = Prev != nullptr;

    constexpr intrusive_list() noexcept = default;
    intrusive_list(intrusive_list&& other) noexcept
        : head_(std::exchange(other.head_, nullptr)),
          tail_(std::exchange(other.tail_, nullptr)),
          size_(std::exchange(other.size_, 0)) {}
    /// Takes over `other`'s elements; this list must be empty.
    intrusive_list& operator=(intrusive_list&& other) noexcept {
        head_ = std::exchange(other.head_, nullptr);
        tail_ = std::exchange(other.tail_, nullptr);
        size_ = std::exchange(other.size_, 0);
        return *this;
    }
    intrusive_list(const intrusive_list&) = delete;
    intrusive_list& operator=(const intrusive_list&) = delete;

    bool empty() const noexcept { return head_ == nullptr; }
    std::size_t size() const noexcept { return size_; }
    T* front() const noexcept { return head_; }
    T* back() const noexcept { return tail_; }
    /// The element after `e` in its list, or null.
    static T* next(const T& e) noexcept { return e.*Next; }

    void push_back(T& e) noexcept {
        e.*Next = nullptr;
        if constexpr (doubly_linked) e.*Prev = tail_;
        (tail_ != nullptr ? tail_->*Next : head_) = &e;
        tail_ = &e;
        ++size_;
    }

    /// Links `e` right after `pos` (at the front when `pos` is null), which
    /// must be in this list: an ordered list's insertion. O(1).
    void insert_after(T* pos, T& e) noexcept
        requires doubly_linked
    {
        T* after = pos != nullptr ? pos->*Next : head_;
        e.*Prev = pos;
        e.*Next = after;
        (pos != nullptr ? pos->*Next : head_) = &e;
        (after != nullptr ? after->*Prev : tail_) = &e;
        ++size_;
    }

    /// Unlinks and returns the first element, or null.
    T* pop_front() noexcept {
        T* e = head_;
        if (e == nullptr) return nullptr;
        head_ = e->*Next;
        if (head_ == nullptr)
            tail_ = nullptr;
        else if constexpr (doubly_linked)
            head_->*Prev = nullptr;
        e->*Next = nullptr;
        --size_;
        return e;
    }

    /// Unlinks `e`, which must be in this list. O(1).
    void unlink(T& e) noexcept
        requires doubly_linked
    {
        (e.*Prev != nullptr ? e.*Prev->*Next : head_) = e.*Next;
        (e.*Next != nullptr ? e.*Next->*Prev : tail_) = e.*Prev;
        e.*Prev = e.*Next = nullptr;
        --size_;
    }

    /// Moves every element of `other` to the end of this list, in order.
    void splice_back(intrusive_list& other) noexcept {
        if (other.head_ == nullptr) return;
        if constexpr (doubly_linked) other.head_->*Prev = tail_;
        (tail_ != nullptr ? tail_->*Next : head_) = other.head_;
        tail_ = other.tail_;
        size_ += std::exchange(other.size_, 0);
        other.head_ = other.tail_ = nullptr;
    }

    /// Unlinks the longest prefix whose elements satisfy `pred` and returns
    /// it as a list of its own, in order.
    template <class Pred>
    intrusive_list take_front_while(Pred pred) noexcept {
        intrusive_list prefix;
        T* last = nullptr;
        std::size_t n = 0;
        for (T* e = head_; e != nullptr && pred(*e); e = e->*Next) {
            last = e;
            ++n;
        }
        if (last == nullptr) return prefix;
        prefix.head_ = head_;
        prefix.tail_ = last;
        prefix.size_ = n;
        head_ = last->*Next;
        if (head_ == nullptr)
            tail_ = nullptr;
        else if constexpr (doubly_linked)
            head_->*Prev = nullptr;
        last->*Next = nullptr;
        size_ -= n;
        return prefix;
    }

private:
    T* head_ = nullptr;
    T* tail_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace tenferro::detail
