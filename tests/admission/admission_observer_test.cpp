#include <tenferro/admission_observer.hpp>

#include <mutex>
#include <vector>
#include <catch2/catch.hpp>
#include <tenferro/cpu_backend.hpp>
#include "test_asio.hpp"

#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;

namespace {
struct recording_observer final : admission_observer {
    std::mutex m;
    std::vector<std::pair<char, std::size_t>> events;  // ('a' | 'r', permits)
    void on_admitted(std::size_t k) override {
        std::lock_guard lock(m);
        events.emplace_back('a', k);
    }
    void on_released(std::size_t k) override {
        std::lock_guard lock(m);
        events.emplace_back('r', k);
    }
};
}  // namespace

TEST_CASE("admission_observer sees every grant and release with its weight, in order") {
    auto obs = std::make_shared<recording_observer>();
    test_host cpu({.permits = 3, .observer = obs});
    for (std::size_t k : {1, 3, 2}) {
        auto f = cpu.with_backend_session(
            {k, wait_policy::fifo, placement::compute}, [](test_session& s) { return s.parallelism(); },
            asio::use_future);
        CHECK(f.get().value() == k);
    }
    std::lock_guard lock(obs->m);
    const std::vector<std::pair<char, std::size_t>> want{{'a', 1}, {'r', 1}, {'a', 3}, {'r', 3}, {'a', 2}, {'r', 2}};
    CHECK(obs->events == want);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 3);
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}

TEST_CASE("admission_observer is not called for rejected entries or for sessions reusing a scope's permit") {
    auto obs = std::make_shared<recording_observer>();
    test_host cpu({.permits = 1, .observer = obs});
    auto rejected = cpu.with_backend_session(
        {2, wait_policy::fifo, placement::compute}, [](test_session&) {}, asio::use_future);
    CHECK(rejected.get().error() == session_entry_errc::incompatible_context);
    asio::io_context io;
    bool done = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            co_await cpu.with_execution_scope([&](execution_scope&) -> asio::awaitable<void> {
                for (int i = 0; i < 3; ++i) co_await cpu.with_backend_session([](test_session&) {});
            });
            done = true;
        },
        asio::detached);
    REQUIRE(tenferro::test::run_until(io, [&] { return done; }));
    std::lock_guard lock(obs->m);
    // Only the scope itself took and returned a permit.
    CHECK(obs->events == std::vector<std::pair<char, std::size_t>>{{'a', 1}, {'r', 1}});
    CHECK(cpu.stats().admitted == 4);
    TENFERRO_CHECK_SESSIONS_OPENED(cpu, 3);  // the scope's sessions; the scope opens none
    TENFERRO_CHECK_SESSIONS_CLOSED(cpu);
}
