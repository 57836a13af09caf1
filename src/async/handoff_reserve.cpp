#include "tenferro/detail/async/handoff_reserve.hpp"

#include <array>

#include "tenferro/asio.hpp"

namespace tenferro::detail {
namespace {

/// The function whose block is reserved: as large as handoff_block_bytes.
struct sized_function {
    std::array<unsigned char, handoff_block_bytes> payload{};
    void operator()() const noexcept {}
};

/// An executor that destroys what it is given, unrun. The second function is
/// handed off while the first one's block is still held, so that both
/// blocks are allocated before either goes back to the cache.
class discarding_executor {
public:
    explicit discarding_executor(int* depth) noexcept : depth_(depth) {}

    template <class F>
    void execute(F&& f) const {
        F held(static_cast<F&&>(f));
        if (++*depth_ < 2) asio_execute(asio::any_io_executor(*this), sized_function{});
        (void)held;  // destroyed here: its block goes to this thread's cache
    }

    asio::execution_context& query(asio::execution::context_t) const noexcept { return context(); }
    static constexpr asio::execution::blocking_t query(asio::execution::blocking_t) noexcept {
        return asio::execution::blocking.never;
    }
    discarding_executor require(asio::execution::blocking_t::never_t) const noexcept { return *this; }

    friend bool operator==(const discarding_executor& a, const discarding_executor& b) noexcept {
        return a.depth_ == b.depth_;
    }
    friend bool operator!=(const discarding_executor& a, const discarding_executor& b) noexcept { return !(a == b); }

private:
    static asio::execution_context& context() noexcept {
        static asio::execution_context ctx;
        return ctx;
    }
    int* depth_;
};

}  // namespace

void reserve_handoff_blocks() {
    int depth = 0;
    asio_execute(asio::any_io_executor(discarding_executor(&depth)), sized_function{});
}

}  // namespace tenferro::detail
