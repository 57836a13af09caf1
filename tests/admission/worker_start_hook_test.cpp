#include <tenferro/cpu_backend.hpp>

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "host_internals.hpp"

using namespace tenferro;

namespace {

thread_local std::size_t prepared_as = 0;  // the worker's index + 1, set by the hook

struct hook_log {
    std::mutex mutex;
    std::vector<std::size_t> indices;
    std::set<std::thread::id> threads;
    std::vector<int> cpus_seen;  // the one CPU a worker may run on, or -1
};

int only_cpu_of_this_thread() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0 || CPU_COUNT(&set) != 1) return -1;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) return c;
    return -1;
}

}  // namespace

TEST_CASE("on_worker_start runs once on each compute worker, with its index, before any session") {
    hook_log log;
    cpu_backend_options o;
    o.permits = 3;
    o.on_worker_start = [&](std::size_t i) {
        prepared_as = i + 1;
        std::lock_guard lock(log.mutex);
        log.indices.push_back(i);
        log.threads.insert(std::this_thread::get_id());
    };
    cpu_backend cpu(std::move(o));
    {
        // The constructor returned after every worker ran the hook.
        std::lock_guard lock(log.mutex);
        CHECK(std::set<std::size_t>(log.indices.begin(), log.indices.end()) == std::set<std::size_t>{0, 1, 2});
        CHECK(log.indices.size() == 3);
        CHECK(log.threads.size() == 3);
        CHECK(log.threads.count(std::this_thread::get_id()) == 0);
    }
    // Every session body runs on a worker that the hook prepared, and the hook
    // does not run again.
    for (int round = 0; round < 20; ++round) {
        auto r = cpu.with_backend_session([](backend_session&) { return prepared_as; }, asio::use_future).get();
        REQUIRE(r.has_value());
        CHECK(*r >= 1);
        CHECK(*r <= 3);
    }
    auto wide = cpu.with_backend_session(
                       session_options{.permits = 3},
                       [](backend_session& s) {
                           std::atomic<int> unprepared{0};
                           s.parallel_for(3, 1, [&](std::int64_t, std::int64_t) {
                               if (prepared_as == 0) unprepared.fetch_add(1);
                           });
                           return unprepared.load();
                       },
                       asio::use_future)
                    .get();
    REQUIRE(wide.has_value());
    CHECK(*wide == 0);
    std::lock_guard lock(log.mutex);
    CHECK(log.indices.size() == 3);
    CHECK(prepared_as == 0);  // never on the caller's thread
}

TEST_CASE("on_worker_start runs after the worker is pinned") {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
    std::vector<unsigned> cpus;
    for (unsigned c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
        if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    REQUIRE(!cpus.empty());
    hook_log log;
    cpu_backend_options o;
    o.permits = 2;
    o.cpus = cpus;
    o.on_worker_start = [&](std::size_t i) {
        const int cpu = only_cpu_of_this_thread();
        std::lock_guard lock(log.mutex);
        log.indices.push_back(i);
        log.cpus_seen.push_back(cpu == static_cast<int>(cpus[i % cpus.size()]) ? cpu : -1);
    };
    cpu_backend cpu(std::move(o));
    std::lock_guard lock(log.mutex);
    REQUIRE(log.cpus_seen.size() == 2);
    CHECK(log.cpus_seen[0] >= 0);
    CHECK(log.cpus_seen[1] >= 0);
}

TEST_CASE("an exception from on_worker_start makes the constructor throw it, after joining the workers") {
    std::atomic<int> calls{0};
    cpu_backend_options o;
    o.permits = 4;
    o.on_worker_start = [&](std::size_t i) {
        calls.fetch_add(1);
        if (i == 2) throw std::runtime_error("worker 2 refuses");
    };
    CHECK_THROWS_WITH(cpu_backend(std::move(o)), "worker 2 refuses");
    CHECK(calls.load() == 4);  // every worker ran it; none is left behind
    // A backend without a hook is unaffected.
    cpu_backend plain({.permits = 1});
    auto r = plain.with_backend_session([](backend_session&) { return 7; }, asio::use_future).get();
    REQUIRE(r.has_value());
    CHECK(*r == 7);
}

TEST_CASE("A cpu_backend whose workers drop a run completes the entry with executor, leaking nothing") {
    test::inspectable<cpu_backend> cpu({.permits = 1});
    cpu.drop_next_runs(1);
    bool ran = false;
    auto dropped = cpu.with_backend_session(
                          [&](backend_session&) {
                              ran = true;
                              return 1;
                          },
                          asio::use_future)
                       .get();
    auto next = cpu.with_backend_session([](backend_session&) { return 2; }, asio::use_future).get();
    REQUIRE(!dropped.has_value());
    CHECK(dropped.error().code() == session_entry_errc::executor);
    CHECK_FALSE(ran);
    REQUIRE(next.has_value());
    CHECK(*next == 2);
    const admission_stats st = cpu.stats();
    CHECK(st.available == 1);
    CHECK(st.admitted == st.completed);
}
