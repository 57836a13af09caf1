// The permit queue's admission policies, step by step (docs/contract.md
// P1-P3, P6-P8): groups served by start-time fair queuing over permit-time,
// byte budgets, resizing, per-group counters. Time is what each release says
// its session held, so every expectation is exact.
#include <tenferro/detail/admission/permit_queue.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <vector>
#include <catch2/catch.hpp>

using namespace tenferro;
using namespace tenferro::detail;

namespace {

struct policy_node : entry_node {
    policy_node(std::size_t permits, std::size_t group, int id_, std::size_t bytes = 0) : id(id_) {
        permits_ = static_cast<std::uint32_t>(permits);
        group_ = static_cast<std::uint16_t>(group);
        bytes_ = bytes;
    }
    int id;
};

std::vector<int> policy_ids(waiter_list list) {
    std::vector<int> out;
    while (permit_waiter* w = list.pop_front()) out.push_back(static_cast<policy_node*>(w)->id);
    return out;
}

queue_policy groups(std::vector<unsigned> weights) {
    queue_policy p;
    for (std::size_t i = 0; i < weights.size(); ++i) p.groups.push_back({"g" + std::to_string(i), weights[i]});
    p.measure_time = weights.size() > 1;
    return p;
}

}  // namespace

TEST_CASE("P1: FIFO within a group, a weighted head blocks its group and the others") {
    permit_queue q(2, 100, groups({1, 1}));
    policy_node hold(1, 0, 0), heavy(2, 0, 1), same(1, 0, 2), other(1, 1, 3);
    REQUIRE(q.acquire(hold, true) == acquire_outcome::granted);
    CHECK(q.acquire(heavy, true) == acquire_outcome::queued);
    CHECK(q.acquire(same, true) == acquire_outcome::queued);
    // A newcomer of another group does not barge either: somebody waits.
    CHECK(q.acquire(other, true) == acquire_outcome::queued);
    // One permit is free, but the chosen group's head (group 0: equal charges,
    // the lower index) needs two: nobody gets it (P3).
    permit_counters k = q.counters();
    CHECK(k.waiting == 3);
    CHECK(k.available == 1);
    // A release that charges nothing keeps group 0 chosen: its head takes both permits.
    CHECK(policy_ids(q.release(released_grant(hold, 0.0))) == std::vector<int>{1});
    // Group 0 paid 2 x 1 permit-seconds: group 1 (charge 0) is served first, then group 0's next.
    CHECK(policy_ids(q.release(released_grant(heavy, 1.0))) == std::vector<int>{3, 2});
    (void)q.release(released_grant(other, 0.0));
    (void)q.release(released_grant(same, 0.0));
    k = q.counters();
    CHECK(k.admitted == 4);
    CHECK(k.completed == 4);
}

TEST_CASE("P2: backlogged groups weighted 4:2:1 get 4/7, 2/7 and 1/7 of the grants") {
    permit_queue q(2, 100000, groups({4, 2, 1}));
    std::deque<std::unique_ptr<policy_node>> nodes;
    int next_id = 0;
    auto offer = [&](std::size_t g) {
        nodes.push_back(std::make_unique<policy_node>(1, g, next_id++));
        return q.acquire(*nodes.back(), true);
    };
    std::map<int, std::size_t> group_of;
    // Keep every group backlogged: 40 waiters each at all times.
    std::vector<policy_node*> running;
    for (std::size_t g = 0; g < 3; ++g)
        for (int i = 0; i < 40; ++i) {
            const acquire_outcome o = offer(g);
            group_of[nodes.back()->id] = g;
            if (o == acquire_outcome::granted) running.push_back(nodes.back().get());
        }
    REQUIRE(running.size() == 2);
    std::vector<std::size_t> order;
    while (order.size() < 2100) {
        policy_node* done = running.front();
        running.erase(running.begin());
        waiter_list granted = q.release(released_grant(*done, 0.001));  // equal durations
        while (permit_waiter* w = granted.pop_front()) {
            policy_node* n = static_cast<policy_node*>(w);
            running.push_back(n);
            const std::size_t g = group_of[n->id];
            order.push_back(g);
            offer(g);  // a new waiter replaces it
            group_of[nodes.back()->id] = g;
        }
    }
    // Every window of 100 consecutive grants is within 5 of 57 / 29 / 14.
    for (std::size_t start = 0; start + 100 <= order.size(); ++start) {
        std::array<int, 3> c{};
        for (std::size_t i = start; i < start + 100; ++i) ++c[order[i]];
        INFO("window at " << start);
        CHECK(std::abs(c[0] - 57) <= 5);
        CHECK(std::abs(c[1] - 29) <= 5);
        CHECK(std::abs(c[2] - 14) <= 5);
    }
    for (auto& n : running) (void)q.release(released_grant(*n, 0.001));
}

TEST_CASE("P2: with durations 10x apart, busy permit-seconds follow the weights") {
    permit_queue q(2, 100000, groups({1, 1}));
    std::deque<std::unique_ptr<policy_node>> nodes;
    int next_id = 0;
    std::vector<policy_node*> running;
    auto offer = [&](std::size_t g) {
        nodes.push_back(std::make_unique<policy_node>(1, g, next_id++));
        if (q.acquire(*nodes.back(), true) == acquire_outcome::granted) running.push_back(nodes.back().get());
    };
    for (int i = 0; i < 20; ++i) {
        offer(0);
        offer(1);
    }
    // Group 1's sessions last 10x as long; a simulated clock releases whichever ends first.
    std::multimap<double, policy_node*> ends;
    double now = 0;
    for (policy_node* n : running) ends.emplace(now + (n->group_ == 0 ? 0.001 : 0.010), n);
    running.clear();
    for (int step = 0; step < 20000; ++step) {
        auto first = ends.begin();
        now = first->first;
        policy_node* done = first->second;
        ends.erase(first);
        const double held = done->group_ == 0 ? 0.001 : 0.010;
        waiter_list granted = q.release(released_grant(*done, held));
        offer(done->group_);
        while (permit_waiter* w = granted.pop_front()) {
            policy_node* n = static_cast<policy_node*>(w);
            ends.emplace(now + (n->group_ == 0 ? 0.001 : 0.010), n);
        }
        for (policy_node* n : running) ends.emplace(now + (n->group_ == 0 ? 0.001 : 0.010), n);
        running.clear();
    }
    const double a = q.group_counters(0).busy_permit_seconds, b = q.group_counters(1).busy_permit_seconds;
    INFO("busy permit-seconds " << a << " / " << b);
    CHECK(std::abs(a - b) <= 0.10 * (a + b) / 2);
    for (auto& [t, n] : ends) (void)q.release(released_grant(*n, 0));
}

TEST_CASE("P3: an idle group is not owed its idle time") {
    permit_queue q(1, 1000, groups({1, 1}));
    std::deque<std::unique_ptr<policy_node>> nodes;
    int next_id = 0;
    auto add = [&](std::size_t g) {
        nodes.push_back(std::make_unique<policy_node>(1, g, next_id++));
        return q.acquire(*nodes.back(), true);
    };
    policy_node* running = nullptr;
    REQUIRE(add(0) == acquire_outcome::granted);
    running = nodes.back().get();
    for (int i = 0; i < 50; ++i) add(0);
    // Group 0 alone runs 50 sessions of 1 s: it is charged 50, group 1 nothing.
    for (int i = 0; i < 30; ++i) {
        waiter_list g = q.release(released_grant(*running, 1.0));
        running = static_cast<policy_node*>(g.pop_front());
        REQUIRE(running != nullptr);
    }
    // Group 1 becomes backlogged with 10 waiters: it starts from group 0's
    // charge, so the two alternate instead of group 1 taking 30 grants in a row.
    for (int i = 0; i < 10; ++i) add(1);
    std::vector<std::size_t> served;
    for (int i = 0; i < 10; ++i) {
        waiter_list g = q.release(released_grant(*running, 1.0));
        running = static_cast<policy_node*>(g.pop_front());
        served.push_back(running->group_);
    }
    int ones = 0;
    for (std::size_t s : served) ones += s == 1;
    CHECK(ones >= 4);
    CHECK(ones <= 6);
    // A group with waiters is served within sum/weight = 2 grants of any other.
    for (std::size_t i = 0; i + 2 < served.size(); ++i) CHECK(served[i] + served[i + 1] + served[i + 2] >= 1);
    while (running != nullptr) {
        waiter_list g = q.release(released_grant(*running, 1.0));
        running = static_cast<policy_node*>(g.pop_front());
    }
}

TEST_CASE("P6: an entry is granted only when its permits and its bytes are free") {
    queue_policy p;
    p.memory_budget = 100;
    permit_queue q(4, 100, p);
    policy_node a(1, 0, 1, 60), b(1, 0, 2, 60), c(1, 0, 3, 10), huge(1, 0, 4, 101);
    CHECK(q.acquire(huge, true) == acquire_outcome::too_large);
    CHECK(q.acquire(a, true) == acquire_outcome::granted);
    CHECK(q.counters().memory_available == 40);
    CHECK(q.acquire(b, true) == acquire_outcome::queued);  // permits free, bytes not
    CHECK(q.acquire(c, true) == acquire_outcome::queued);  // no barging past b
    CHECK(policy_ids(q.release(released_grant(a, -1))) == std::vector<int>{2, 3});
    CHECK(q.counters().memory_available == 30);
    (void)q.release(released_grant(b, -1));
    (void)q.release(released_grant(c, -1));
    const permit_counters k = q.counters();
    CHECK(k.memory_budget == 100);
    CHECK(k.memory_available == 100);
    CHECK(k.rejected == 1);
}

TEST_CASE("P7: growing grants at once, shrinking preempts nobody, oversized waiters leave") {
    permit_queue q(2, 100);
    policy_node a(1, 0, 1), b(1, 0, 2), c(1, 0, 3), d(2, 0, 4), e(1, 0, 5);
    REQUIRE(q.acquire(a, true) == acquire_outcome::granted);
    REQUIRE(q.acquire(b, true) == acquire_outcome::granted);
    REQUIRE(q.acquire(c, true) == acquire_outcome::queued);
    waiter_list granted, rejected;
    q.set_permits(3, granted, rejected);
    CHECK(policy_ids(std::move(granted)) == std::vector<int>{3});
    CHECK(q.permits() == 3);
    // Shrink to 1 with 3 held: nothing is preempted, available is floored at 0.
    q.set_permits(1, granted, rejected);
    CHECK(q.counters().available == 0);
    CHECK(q.acquire(d, true) == acquire_outcome::too_large);  // 2 > 1
    REQUIRE(q.acquire(e, true) == acquire_outcome::queued);
    CHECK(policy_ids(q.release(released_grant(a, -1))).empty());  // 2 held of 1
    CHECK(policy_ids(q.release(released_grant(b, -1))).empty());  // 1 held of 1
    CHECK(policy_ids(q.release(released_grant(c, -1))) == std::vector<int>{5});
    // A waiter that can no longer fit leaves with the shrink.
    policy_node f(2, 0, 6);
    q.set_permits(2, granted, rejected);
    REQUIRE(policy_ids(std::move(granted)).empty());
    REQUIRE(q.acquire(f, true) == acquire_outcome::queued);  // e holds 1 of 2
    q.set_permits(1, granted, rejected);
    CHECK(policy_ids(std::move(rejected)) == std::vector<int>{6});
    CHECK(f.phase() == entry_phase::rejected);
    (void)q.release(released_grant(e, -1));
    const permit_counters k = q.counters();
    CHECK(k.available == 1);
    CHECK(k.admitted == k.completed);
    CHECK(k.rejected == 2);
}

TEST_CASE("P8: group counters add up to the host's, and at quiescence admitted == completed") {
    queue_policy p = groups({3, 1});
    p.groups[0].max_waiters = 1;
    permit_queue q(1, 100, p);
    policy_node a(1, 0, 1), b(1, 0, 2), c(1, 0, 3), d(1, 1, 4);
    const auto t0 = std::chrono::steady_clock::now() + std::chrono::hours(1);
    d.when_ = t0;  // P4: d's deadline
    REQUIRE(q.acquire(a, true) == acquire_outcome::granted);
    REQUIRE(q.acquire(b, true) == acquire_outcome::queued);
    CHECK(q.acquire(c, true) == acquire_outcome::queue_full);  // group 0's bound
    REQUIRE(q.acquire(d, true) == acquire_outcome::queued);    // group 1 has room
    waiter_list granted, expired;
    CHECK(q.expire_due(t0, expired, granted) == std::chrono::steady_clock::time_point::max());
    CHECK(policy_ids(std::move(expired)) == std::vector<int>{4});
    CHECK(q.cancel(b, granted) == true);
    CHECK(policy_ids(std::move(granted)).empty());
    (void)q.release(released_grant(a, 2.0));
    const group_stats g0 = q.group_counters(0), g1 = q.group_counters(1);
    CHECK(g0.name == "g0");
    CHECK(g0.weight == 3);
    CHECK(g0.admitted == 1);
    CHECK(g0.completed == 1);
    CHECK(g0.rejected == 1);
    CHECK(g0.cancelled == 1);
    CHECK(g0.busy_permit_seconds == 2.0);
    CHECK(g1.expired == 1);
    CHECK(g1.rejected == 1);
    const permit_counters k = q.counters();
    CHECK(k.rejected == 2);
    CHECK(k.expired == 1);
    CHECK(k.cancelled == 1);
    CHECK_THROWS_AS(q.group_counters(2), std::out_of_range);
}
