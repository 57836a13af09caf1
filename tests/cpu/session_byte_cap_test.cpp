// cpu_backend's byte cap (docs/contract.md P6): a session granted `bytes > 0`
// throws std::bad_alloc from the op whose results or scratch would exceed them,
// the body sees it as its own exception, and the host stays healthy (S19).
#include <tenferro/cpu_backend.hpp>

#include <exception>
#include <new>
#include <optional>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "spawn.hpp"

using namespace tenferro;
using tenferro::test::spawn;

namespace {

session_options declaring(std::size_t bytes) {
    session_options o;
    o.bytes = bytes;
    return o;
}

}  // namespace

TEST_CASE("P6: results count against the grant's bytes until the session ends") {
    asio::io_context io;
    cpu_backend cpu({.permits = 1, .memory_budget = 1 << 20});
    const tensor x = tensor::empty(dtype::f32, std::vector<std::int64_t>{100});  // 400 bytes, outside any session
    std::optional<session_result<int>> r;
    spawn(io, [&]() -> asio::awaitable<void> {
        r = co_await cpu.with_backend_session(declaring(1000), [&](backend_session& s) {
            tensor a = s.add(x.view(), x.view());  // 400
            tensor b = s.add(x.view(), x.view());  // 800
            (void)a;
            (void)b;
            try {
                tensor c = s.add(x.view(), x.view());  // 1,200: over the cap
                (void)c;
                return 0;
            } catch (const std::bad_alloc&) {
                return 1;
            }
        });
    });
    io.run();
    REQUIRE(r);
    REQUIRE(r->has_value());
    CHECK(**r == 1);

    // Without bytes there is no cap.
    io.restart();
    r.reset();
    spawn(io, [&]() -> asio::awaitable<void> {
        r = co_await cpu.with_backend_session([&](backend_session& s) {
            for (int i = 0; i < 10; ++i) (void)s.add(x.view(), x.view());
            return 2;
        });
    });
    io.run();
    REQUIRE(r);
    CHECK(**r == 2);
}

TEST_CASE("P6: a bad_alloc that leaves the body is the body's exception, and the host stays healthy") {
    asio::io_context io;
    cpu_backend cpu({.permits = 1, .memory_budget = 1 << 20});
    const tensor x = tensor::empty(dtype::f64, std::vector<std::int64_t>{1000});  // 8,000 bytes
    bool threw_bad_alloc = false;
    spawn(io, [&]() -> asio::awaitable<void> {
        try {
            (void)co_await cpu.with_backend_session(declaring(4096),
                                                    [&](backend_session& s) { return s.copy(x.view()); });
        } catch (const std::bad_alloc&) {
            threw_bad_alloc = true;
        }
    });
    io.run();
    CHECK(threw_bad_alloc);
    const admission_stats st = cpu.stats();
    CHECK(st.admitted == st.completed);
    CHECK(st.available == st.permits);
    CHECK(st.memory_available == st.memory_budget);
    CHECK(!cpu.poisoned());
}
