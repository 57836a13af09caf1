#include <tenferro/detail/admission/brief_mutex.hpp>
#include <tenferro/detail/admission/permit_queue.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>
#include <vector>
#include <catch2/catch.hpp>

using namespace tenferro::detail;

namespace {

struct node : entry_node {
    explicit node(std::size_t n, int id_ = 0) : id(id_) { permits_ = n; }
    int id;
};

std::vector<int> ids(waiter_list list) {
    std::vector<int> out;
    while (permit_waiter* w = list.pop_front()) out.push_back(static_cast<node*>(w)->id);
    return out;
}

}  // namespace

TEST_CASE("permit_queue grants at once while permits are free and nobody waits") {
    permit_queue q(2, 100);
    node a(1, 1), b(1, 2), c(1, 3);
    CHECK(q.acquire(a, true) == acquire_outcome::granted);
    CHECK(q.acquire(b, true) == acquire_outcome::granted);
    CHECK(q.acquire(c, true) == acquire_outcome::queued);
    CHECK(a.phase() == entry_phase::granted);
    CHECK(c.phase() == entry_phase::waiting);
    auto cnt = q.counters();
    CHECK(cnt.available == 0);
    CHECK(cnt.waiting == 1);
    CHECK(cnt.admitted == 2);
    CHECK(ids(q.release(1)) == std::vector<int>{3});
    CHECK(ids(q.release(1)).empty());
    CHECK(ids(q.release(1)).empty());
    cnt = q.counters();
    CHECK(cnt.available == 2);
    CHECK(cnt.admitted == 3);
    CHECK(cnt.completed == 3);
}

TEST_CASE("permit_queue never lets a newcomer barge past a weighted head") {
    permit_queue q(2, 100);
    node hold(1, 0), heavy(2, 1), light(1, 2);
    REQUIRE(q.acquire(hold, true) == acquire_outcome::granted);
    CHECK(q.acquire(heavy, true) == acquire_outcome::queued);
    // One permit is free, but the heavy head is waiting: the light one queues.
    CHECK(q.acquire(light, true) == acquire_outcome::queued);
    node never(1, 3);
    CHECK(q.acquire(never, false) == acquire_outcome::would_wait);
    // Releasing the held permit satisfies the head; the light one still waits.
    CHECK(ids(q.release(1)) == std::vector<int>{1});
    CHECK(ids(q.release(2)) == std::vector<int>{2});
}

TEST_CASE("permit_queue grants several fitting waiters in FIFO order on one release") {
    permit_queue q(3, 100);
    node hold(3, 0), a(1, 1), b(1, 2), c(2, 3), d(1, 4);
    REQUIRE(q.acquire(hold, true) == acquire_outcome::granted);
    for (node* n : {&a, &b, &c, &d}) REQUIRE(q.acquire(*n, true) == acquire_outcome::queued);
    // 3 free: a, b fit (2), c needs 2 with 1 left: stop there; d must not pass c.
    CHECK(ids(q.release(3)) == std::vector<int>{1, 2});
    CHECK(q.counters().waiting == 2);
}

TEST_CASE("permit_queue cancel of a weighted head re-offers the permits at once") {
    permit_queue q(2, 100);
    node hold(1, 0), heavy(2, 1), light(1, 2), tail(1, 3);
    REQUIRE(q.acquire(hold, true) == acquire_outcome::granted);
    REQUIRE(q.acquire(heavy, true) == acquire_outcome::queued);
    REQUIRE(q.acquire(light, true) == acquire_outcome::queued);
    REQUIRE(q.acquire(tail, true) == acquire_outcome::queued);
    waiter_list granted;
    CHECK(q.cancel(heavy, granted));
    CHECK(heavy.phase() == entry_phase::rejected);
    CHECK(ids(std::move(granted)) == std::vector<int>{2});
    CHECK(q.counters().cancelled == 1);
    // Cancelling twice, or after a grant, changes nothing.
    waiter_list none;
    CHECK_FALSE(q.cancel(heavy, none));
    CHECK_FALSE(q.cancel(light, none));
    CHECK(none.empty());
}

TEST_CASE("permit_queue cancel in the middle keeps the others' order") {
    permit_queue q(1, 100);
    node hold(1, 0), a(1, 1), b(1, 2), c(1, 3);
    REQUIRE(q.acquire(hold, true) == acquire_outcome::granted);
    for (node* n : {&a, &b, &c}) REQUIRE(q.acquire(*n, true) == acquire_outcome::queued);
    waiter_list granted;
    CHECK(q.cancel(b, granted));
    CHECK(granted.empty());  // nothing free: hold still holds
    CHECK(ids(q.release(1)) == std::vector<int>{1});
    CHECK(ids(q.release(1)) == std::vector<int>{3});
}

TEST_CASE("permit_queue bounds the waiters with max_waiters") {
    permit_queue q(1, 2);
    node hold(1), a(1), b(1), c(1);
    REQUIRE(q.acquire(hold, true) == acquire_outcome::granted);
    CHECK(q.acquire(a, true) == acquire_outcome::queued);
    CHECK(q.acquire(b, true) == acquire_outcome::queued);
    CHECK(q.acquire(c, true) == acquire_outcome::queue_full);
    CHECK(q.counters().rejected == 1);
}

TEST_CASE("permit_queue poison and shutdown drain the waiters and reject later entries") {
    SECTION("poison") {
        permit_queue q(1, 100);
        node hold(1), a(1, 1), b(1, 2);
        REQUIRE(q.acquire(hold, true) == acquire_outcome::granted);
        REQUIRE(q.acquire(a, true) == acquire_outcome::queued);
        REQUIRE(q.acquire(b, true) == acquire_outcome::queued);
        CHECK(ids(q.poison()) == std::vector<int>{1, 2});
        CHECK(q.poisoned());
        node late(1);
        CHECK(q.acquire(late, true) == acquire_outcome::poisoned);
        CHECK(ids(q.release(1)).empty());
        auto c = q.counters();
        CHECK(c.available == 1);
        CHECK(c.admitted == c.completed);
        CHECK(c.rejected == 3);
    }
    SECTION("shut_down") {
        permit_queue q(1, 100);
        node hold(1), a(1, 1);
        REQUIRE(q.acquire(hold, true) == acquire_outcome::granted);
        REQUIRE(q.acquire(a, true) == acquire_outcome::queued);
        CHECK(ids(q.shut_down()) == std::vector<int>{1});
        CHECK(q.is_shut_down());
        node late(1);
        CHECK(q.acquire(late, true) == acquire_outcome::shut_down);
        CHECK(ids(q.release(1)).empty());
        CHECK(q.counters().available == 1);
    }
}

TEST_CASE("waiter_list unlinks from head, middle and tail") {
    waiter_list l;
    node a(1, 1), b(1, 2), c(1, 3);
    l.push_back(a);
    l.push_back(b);
    l.push_back(c);
    l.unlink(b);
    CHECK(l.size() == 2);
    l.unlink(c);
    l.unlink(a);
    CHECK(l.empty());
    CHECK(l.front() == nullptr);
}

namespace {

std::vector<int> chain_ids(entry_node* chain) {
    std::vector<int> out;
    for (; chain != nullptr; chain = chain->handoff_next_) out.push_back(static_cast<node*>(chain)->id);
    return out;
}

node& caller_started(node& n, bool ready_at_grant) {
    n.starts_on_caller_ = true;
    n.ready_at_grant_ = ready_at_grant;
    return n;
}

}  // namespace

TEST_CASE("permit_queue release hands back the waiters ready at their grant as a hand-off chain, in grant order") {
    permit_queue q(3, 100);
    node holder(3, 0), a(1, 1), b(1, 2), c(1, 3), d(3, 4);
    CHECK(q.acquire(holder, true) == acquire_outcome::granted);
    // a and c need nothing between grant and hand-off; b has a hook to run first.
    for (node* n : {&caller_started(a, true), &caller_started(b, false), &caller_started(c, true), &d})
        CHECK(q.acquire(*n, true) == acquire_outcome::queued);

    entry_node* chain = nullptr;
    // Only b comes back to be started by the caller; a is ready and heads the
    // hand-off list, so this thread takes it (and the hand-off role) at once;
    // c is ready too but waits behind b, which is not (S17).
    CHECK(ids(q.release(3, &chain)) == std::vector<int>{2});
    CHECK(chain_ids(chain) == std::vector<int>{1});
    CHECK(a.phase() == entry_phase::granted);
    CHECK(c.phase() == entry_phase::granted);
    CHECK(d.phase() == entry_phase::waiting);

    // b's hook ran on another thread while this one holds the role: b is left
    // for this thread, which finds b and c when it asks for more.
    bool alone = true;
    CHECK(q.start_order().ready_for_handoff(b, false, alone) == nullptr);
    CHECK_FALSE(alone);
    CHECK(chain_ids(q.start_order().next_handoffs()) == std::vector<int>{2, 3});
    CHECK(q.start_order().next_handoffs() == nullptr);  // gives the role up
    for (node* n : {&a, &b, &c}) q.start_order().note_started(*n);
}

TEST_CASE("permit_queue release without a hand-off chain returns every grant, ready or not") {
    permit_queue q(1, 100);
    node holder(1, 0), a(1, 1);
    CHECK(q.acquire(holder, true) == acquire_outcome::granted);
    CHECK(q.acquire(caller_started(a, true), true) == acquire_outcome::queued);
    CHECK(ids(q.release(1)) == std::vector<int>{1});
    bool alone = true;
    entry_node* chain = q.start_order().ready_for_handoff(a, false, alone);
    CHECK(chain_ids(chain) == std::vector<int>{1});
    CHECK(q.start_order().next_handoffs() == nullptr);
    q.start_order().note_started(a);
}

TEST_CASE("permit_queue cancel that unblocks ready waiters hands them back as a chain") {
    permit_queue q(2, 100);
    node holder(1, 0), heavy(2, 1), a(1, 2);
    CHECK(q.acquire(holder, true) == acquire_outcome::granted);
    CHECK(q.acquire(heavy, true) == acquire_outcome::queued);
    CHECK(q.acquire(caller_started(a, true), true) == acquire_outcome::queued);
    waiter_list granted;
    entry_node* chain = nullptr;
    CHECK(q.cancel(heavy, granted, &chain));
    CHECK(granted.empty());
    CHECK(chain_ids(chain) == std::vector<int>{2});
    CHECK(q.start_order().next_handoffs() == nullptr);
    q.start_order().note_started(a);
}

TEST_CASE("permit_queue grants inline at once only when nothing granted earlier is unstarted, and never barges") {
    permit_queue q(3, 100);
    node a(1, 1), b(1, 2), c(1, 3), d(1, 4), heavy(3, 5), e(1, 6), f(1, 7);

    // Clear: a is granted inline, outside the hand-off list, counted unstarted.
    CHECK(q.acquire(caller_started(a, true), true, true) == acquire_outcome::granted_inline);
    CHECK(a.phase() == entry_phase::granted);
    CHECK_FALSE(a.handoff_listed_);

    // a has not started: b, admitted at once, must not start inline ahead of it.
    CHECK(q.acquire(caller_started(b, true), true, true) == acquire_outcome::granted);
    CHECK_FALSE(b.may_start_inline_);
    CHECK(b.handoff_listed_);
    q.start_order().note_started(a);

    // b waits for its hand-off (unstarted): c, with a free permit, is not inline either.
    CHECK(q.acquire(caller_started(c, true), true, true) == acquire_outcome::granted);
    bool alone = true;
    CHECK(chain_ids(q.start_order().ready_for_handoff(b, false, alone)) == std::vector<int>{2});
    CHECK(q.start_order().next_handoffs() == nullptr);  // c is not ready yet: it keeps its place
    CHECK(chain_ids(q.start_order().ready_for_handoff(c, false, alone)) == std::vector<int>{3});
    CHECK(q.start_order().next_handoffs() == nullptr);
    q.start_order().note_started(b);
    q.start_order().note_started(c);

    // An entry with a hook to run between grant and start is never inline.
    for (int i = 0; i < 3; ++i) CHECK(ids(q.release(1)).empty());  // a, b, c finish
    CHECK(q.acquire(caller_started(d, false), true, true) == acquire_outcome::granted);
    CHECK(chain_ids(q.start_order().ready_for_handoff(d, true, alone)) == std::vector<int>{4});
    CHECK(alone);
    q.start_order().note_started(d);
    CHECK(q.start_order().next_handoffs(false) == nullptr);

    // No barging: a weighted head waits for 3 permits; e fits in the 2 free
    // ones but queues behind it, fast path or not.
    CHECK(q.acquire(heavy, true, true) == acquire_outcome::queued);
    CHECK(q.acquire(caller_started(e, true), true, true) == acquire_outcome::queued);
    CHECK(q.acquire(caller_started(f, true), false, true) == acquire_outcome::would_wait);
    CHECK(ids(q.release(1)) == std::vector<int>{5});  // heavy (3), then e waits for a permit
    CHECK(e.phase() == entry_phase::waiting);
    entry_node* chain = nullptr;
    CHECK(ids(q.release(3, &chain)).empty());
    CHECK(chain_ids(chain) == std::vector<int>{6});
    CHECK(q.start_order().next_handoffs() == nullptr);
    q.start_order().note_started(e);
    CHECK(ids(q.release(1)).empty());
    const permit_counters counters = q.counters();
    CHECK(counters.available == 3);
    CHECK(counters.admitted == counters.completed);
}

TEST_CASE("brief_mutex: try_lock fails while it is held, and a waiter that outlasts the poll sleeps and wakes") {
    brief_mutex m;
    m.lock();
    CHECK_FALSE(m.try_lock());
    std::atomic<bool> got{false};
    std::thread t([&] {
        m.lock();  // held for ~20 ms: polls, then sleeps on the lock word
        got.store(true);
        m.unlock();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const bool early = got.load();
    m.unlock();
    t.join();
    CHECK_FALSE(early);
    CHECK(got.load());
    CHECK(m.try_lock());
    m.unlock();
}

TEST_CASE("brief_mutex excludes under contention and serves condition_variable_any") {
    brief_mutex m;
    std::condition_variable_any cv;
    long counter = 0;  // plain: only the lock orders the increments (TSan checks)
    int finished = 0;
    constexpr int threads = 4;
    const long per_thread = 20000;
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
        pool.emplace_back([&] {
            for (long k = 0; k < per_thread; ++k) {
                std::lock_guard lock(m);
                ++counter;
            }
            std::lock_guard lock(m);
            ++finished;
            cv.notify_all();
        });
    {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return finished == threads; });
    }
    for (auto& t : pool) t.join();
    CHECK(counter == threads * per_thread);
}

TEST_CASE("permit_queue try_acquire_inline grants exactly when acquire would start inline, else changes nothing") {
    permit_queue q(2, 100);
    node a(1, 1), b(1, 2), c(1, 3), heavy(2, 4), big(3, 5), g(1, 6);

    // Clear: granted, outside the hand-off list, and not counted as unstarted
    // (its body starts at once on the caller's thread): a second fast entry
    // right behind it is clear too.
    CHECK(q.try_acquire_inline(a));
    CHECK(a.phase() == entry_phase::granted);
    CHECK_FALSE(a.handoff_listed_);
    CHECK_FALSE(a.start_counted_);
    CHECK(q.try_acquire_inline(b));
    permit_counters cnt = q.counters();
    CHECK(cnt.available == 0);
    CHECK(cnt.admitted == 2);

    // Refusals leave no trace: no permits, no counter, no link.
    const auto unchanged = [&](const char* why) {
        const permit_counters now = q.counters();
        INFO(why);
        CHECK(now.available == cnt.available);
        CHECK(now.waiting == cnt.waiting);
        CHECK(now.admitted == cnt.admitted);
        CHECK(now.rejected == cnt.rejected);
        CHECK(now.completed == cnt.completed);
    };
    CHECK_FALSE(q.try_acquire_inline(c));  // too few permits
    CHECK(c.phase() == entry_phase::idle);
    unchanged("too few permits");
    CHECK(ids(q.release(1)).empty());  // a finishes
    CHECK(ids(q.release(1)).empty());  // b finishes: both permits free
    cnt = q.counters();
    CHECK_FALSE(q.try_acquire_inline(big));  // more than the queue has at all
    unchanged("more than the queue has");

    // S4: a weighted head waits; a permit is free, still no barging.
    node hold(1, 8);
    CHECK(q.acquire(hold, true) == acquire_outcome::granted);
    CHECK(q.acquire(heavy, true) == acquire_outcome::queued);
    cnt = q.counters();
    CHECK_FALSE(q.try_acquire_inline(c));
    unchanged("a waiter heads the queue");
    CHECK(ids(q.release(1)) == std::vector<int>{4});  // heavy takes both

    // S17: an earlier grant that starts on its caller is counted until it
    // starts; while it is, the fast path stays shut.
    CHECK(ids(q.release(2)).empty());  // heavy finishes
    CHECK(q.acquire(caller_started(g, true), true) == acquire_outcome::granted);  // listed, not ready: unstarted
    cnt = q.counters();
    CHECK_FALSE(q.try_acquire_inline(c));
    unchanged("an earlier grant is unstarted");
    bool alone = true;
    CHECK(chain_ids(q.start_order().ready_for_handoff(g, false, alone)) == std::vector<int>{6});
    CHECK(q.start_order().next_handoffs() == nullptr);
    // Handed off (out of the hand-off list) but its body has not started:
    // the unstarted count alone keeps the fast path shut.
    CHECK_FALSE(g.handoff_listed_);
    CHECK_FALSE(q.try_acquire_inline(c));
    unchanged("an earlier grant is handed off, not started");
    q.start_order().note_started(g);
    // What acquire would answer for a caller-started waiter ready at its
    // grant agrees: granted_inline now (and the fast path takes it).
    node probe(1, 9);
    CHECK(q.acquire(caller_started(probe, true), true, true) == acquire_outcome::granted_inline);
    q.start_order().note_started(probe);
    CHECK(ids(q.release(1)).empty());  // probe
    CHECK(q.try_acquire_inline(c));
    CHECK(ids(q.release(1)).empty());  // c
    CHECK(ids(q.release(1)).empty());  // g

    // Poisoned, then shut down: refused, nothing counted (the general path
    // rejects those).
    permit_queue poisoned(2, 100);
    CHECK(poisoned.poison().empty());
    const permit_counters before_poison = poisoned.counters();
    node p(1, 10);
    CHECK_FALSE(poisoned.try_acquire_inline(p));
    CHECK(poisoned.counters().rejected == before_poison.rejected);
    CHECK(poisoned.counters().available == 2);
    q.shut_down();
    cnt = q.counters();
    node d(1, 7);
    CHECK_FALSE(q.try_acquire_inline(d));
    unchanged("shut down");
    cnt = q.counters();
    CHECK(cnt.available == 2);
    CHECK(cnt.admitted == cnt.completed);
}

TEST_CASE("permit_queue's at-once hint follows the free permits and the waiters through every operation") {
    // The hint session_host::enter reads without the lock to shape an awaited
    // entry: the free permits while nobody waits, else none.
    permit_queue q(2, 100);
    CHECK(q.likely_admits_at_once(1));
    CHECK(q.likely_admits_at_once(2));
    CHECK_FALSE(q.likely_admits_at_once(3));

    node a(1, 1);
    REQUIRE(q.acquire(a, true) == acquire_outcome::granted);
    CHECK(q.likely_admits_at_once(1));
    CHECK_FALSE(q.likely_admits_at_once(2));

    node heavy(2, 2);
    REQUIRE(q.acquire(heavy, true) == acquire_outcome::queued);
    // One permit is free, but a waiter is ahead of any newcomer (S4).
    CHECK_FALSE(q.likely_admits_at_once(1));

    waiter_list granted;
    REQUIRE(q.cancel(heavy, granted));
    CHECK(q.likely_admits_at_once(1));
    CHECK_FALSE(q.likely_admits_at_once(2));

    node b(1, 3);
    REQUIRE(q.try_acquire_inline(b));
    CHECK_FALSE(q.likely_admits_at_once(1));
    node c(1, 4);
    REQUIRE(q.acquire(c, true) == acquire_outcome::queued);
    CHECK(ids(q.release(1)) == std::vector<int>{4});  // b's permit goes to c
    CHECK_FALSE(q.likely_admits_at_once(1));
    CHECK(ids(q.release(1)).empty());  // a's
    CHECK(q.likely_admits_at_once(1));
    CHECK(ids(q.release(1)).empty());  // c's
    CHECK(q.likely_admits_at_once(2));

    // A poisoned or shut-down queue admits nobody, and its hint says so
    // even with every permit free (the queue itself refuses regardless).
    node d(2, 5), e(1, 6);
    REQUIRE(q.acquire(d, true) == acquire_outcome::granted);
    REQUIRE(q.acquire(e, true) == acquire_outcome::queued);
    CHECK_FALSE(q.likely_admits_at_once(1));
    CHECK(ids(q.poison()) == std::vector<int>{6});
    CHECK_FALSE(q.likely_admits_at_once(1));
    q.release(2);
    CHECK_FALSE(q.likely_admits_at_once(1));
    node f(1, 7);
    CHECK(q.acquire(f, true) == acquire_outcome::poisoned);

    permit_queue s(1, 100);
    REQUIRE(s.likely_admits_at_once(1));
    CHECK(ids(s.shut_down()).empty());
    CHECK_FALSE(s.likely_admits_at_once(1));
}
