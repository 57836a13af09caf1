#pragma once
// A non-owning reference to a callable (C++26's std::function_ref, reduced to
// what tenferro needs): two words, no allocation, cheap to pass by value.

#include <memory>
#include <type_traits>
#include <utility>

namespace tenferro::detail {

template <class Signature>
class function_ref;

template <class R, class... Args>
class function_ref<R(Args...)> {
public:
    template <class F>
        requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> && std::is_invocable_r_v<R, F&, Args...>)
    function_ref(F&& f) noexcept  // NOLINT(google-explicit-constructor): used like a function pointer
        : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* object, Args... args) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
          }) {}

    R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

private:
    void* object_;
    R (*call_)(void*, Args...);
};

}  // namespace tenferro::detail
