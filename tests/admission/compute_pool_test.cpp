#include <tenferro/detail/admission/compute_pool.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

using namespace tenferro::detail;

namespace {
struct counting_task final : pool_task {
    std::atomic<int>* runs;
    std::atomic<int>* drops;
    counting_task(std::atomic<int>& r, std::atomic<int>& d) : runs(&r), drops(&d) {}
    void run() noexcept override { runs->fetch_add(1); }
    void drop() noexcept override { drops->fetch_add(1); }
};
}  // namespace

TEST_CASE("compute_pool runs submitted intrusive tasks on its workers") {
    std::atomic<int> runs{0}, drops{0};
    std::vector<counting_task> tasks(100, counting_task(runs, drops));
    {
        compute_pool pool(2, {});
        for (auto& t : tasks) pool.submit(t);
        for (int i = 0; i < 2000 && runs.load() < 100; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(runs.load() == 100);
    CHECK(drops.load() == 0);
}

TEST_CASE("compute_pool drops the tasks the test hook tells it to") {
    std::atomic<int> runs{0}, drops{0};
    counting_task a(runs, drops), b(runs, drops), c(runs, drops);
    compute_pool pool(1, {});
    pool.drop_next_for_testing(2);
    pool.submit(a);
    pool.submit(b);
    pool.submit(c);
    for (int i = 0; i < 2000 && runs.load() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(drops.load() == 2);
    CHECK(runs.load() == 1);
}

TEST_CASE("compute_pool's executor runs Asio handlers and reports running_in_this_thread") {
    compute_pool pool(2, {});
    std::promise<bool> on_pool;
    asio::post(pool.get_executor(), [&] { on_pool.set_value(pool.running_in_this_thread()); });
    CHECK(on_pool.get_future().get());
    CHECK_FALSE(pool.running_in_this_thread());
    CHECK(&asio::query(pool.get_executor(), asio::execution::context) == &pool);
}

TEST_CASE("compute_pool::parallel_for covers the range once, on up to `workers` threads") {
    compute_pool pool(3, {});
    for (std::int64_t count : {0, 1, 3, 17, 1000, 65537}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(count));
        std::mutex m;
        std::set<std::thread::id> threads;
        pool.parallel_for(3, count, 4, [&](std::int64_t b, std::int64_t e) {
            {
                std::lock_guard lock(m);
                threads.insert(std::this_thread::get_id());
            }
            for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
        });
        int wrong = 0;
        for (auto& h : hits) wrong += h.load() != 1;
        CHECK(wrong == 0);
        CHECK(threads.size() <= 3);
    }
}

TEST_CASE("compute_pool::parallel_for uses fixed ranges and rethrows the first exception") {
    compute_pool pool(2, {});
    std::mutex m;
    std::set<std::pair<std::int64_t, std::int64_t>> ranges;
    pool.parallel_for(2, 10, 1, [&](std::int64_t b, std::int64_t e) {
        std::lock_guard lock(m);
        ranges.insert({b, e});
    });
    CHECK(ranges == std::set<std::pair<std::int64_t, std::int64_t>>{{0, 5}, {5, 10}});
    CHECK_THROWS_AS(pool.parallel_for(2, 100, 1, [](std::int64_t, std::int64_t) { throw std::runtime_error("x"); }),
                    std::runtime_error);
}

TEST_CASE("compute_pool rejects CPUs the process may not run on") {
    const std::vector<unsigned> bad{100000};
    CHECK_THROWS_AS(compute_pool(1, bad), std::system_error);
    const std::vector<unsigned> good{0};
    CHECK_NOTHROW(compute_pool(2, good));
}
