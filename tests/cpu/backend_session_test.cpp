#include <tenferro/backend_session.hpp>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>
#include <catch2/catch.hpp>
#include <tenferro/cpu_backend.hpp>
#include "test_asio.hpp"

using namespace tenferro;

namespace {
using range_set = std::set<std::pair<std::int64_t, std::int64_t>>;

range_set ranges_at(cpu_backend& cpu, std::size_t permits, std::int64_t count, std::int64_t grain) {
    auto f = cpu.with_backend_session(
        {permits, wait_policy::fifo, placement::compute},
        [=](backend_session& s) {
            std::mutex m;
            range_set out;
            s.parallel_for(count, grain, [&](std::int64_t b, std::int64_t e) {
                std::lock_guard lock(m);
                out.insert({b, e});
            });
            return out;
        },
        asio::use_future);
    return f.get().value();
}
}  // namespace

TEST_CASE("parallel_for ranges depend only on count, grain and parallelism") {
    cpu_backend cpu({.permits = 2});
    CHECK(ranges_at(cpu, 1, 100, 10) == range_set{{0, 100}});
    CHECK(ranges_at(cpu, 2, 100, 10) == range_set{{0, 50}, {50, 100}});
    CHECK(ranges_at(cpu, 2, 100, 10) == ranges_at(cpu, 2, 100, 10));
    CHECK(ranges_at(cpu, 2, 15, 10) == range_set{{0, 8}, {8, 15}});
    CHECK(ranges_at(cpu, 2, 5, 10) == range_set{{0, 5}});  // below one grain: one range
    CHECK(ranges_at(cpu, 2, 0, 10).empty());
}

TEST_CASE("parallel_for rethrows a body's exception in the session; the host stays healthy") {
    cpu_backend cpu({.permits = 2});
    auto f = cpu.with_backend_session(
        {2, wait_policy::fifo, placement::compute},
        [](backend_session& s) {
            s.parallel_for(1000, 1, [](std::int64_t b, std::int64_t) {
                if (b > 0) throw std::invalid_argument("chunk failed");
            });
            return 0;
        },
        asio::use_future);
    CHECK_THROWS_AS(f.get(), std::invalid_argument);
    auto g = cpu.with_backend_session([](backend_session& s) { return s.backend() == "cpu"; }, asio::use_future);
    CHECK(g.get().value());
    CHECK(cpu.stats().available == 2);
}

TEST_CASE("a caller-placed session's parallel_for runs on the caller plus pool workers") {
    cpu_backend cpu({.permits = 2});
    std::set<std::thread::id> threads;
    auto f = cpu.with_backend_session(
        {2, wait_policy::fifo, placement::caller},
        [&](backend_session& s) {
            std::mutex m;
            s.parallel_for(2, 1, [&](std::int64_t, std::int64_t) {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                std::lock_guard lock(m);
                threads.insert(std::this_thread::get_id());
            });
            return std::this_thread::get_id();
        },
        asio::use_future);
    const std::thread::id caller = f.get().value();
    CHECK(threads.size() == 2);
    CHECK(threads.count(caller) == 1);
}
