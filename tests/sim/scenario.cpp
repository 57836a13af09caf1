// The scenarios of the deterministic simulation: generation from a seed, and
// the exhaustive configurations.

#include "scenario.hpp"

#include "sim_executor.hpp"

#include <tenferro/batcher.hpp>
#include <tenferro/session_host.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tenferro::sim {

const char* placement_name(placement p) { return p == placement::compute ? "compute" : "caller"; }
const char* body_name(body_kind b) {
    switch (b) {
    case body_kind::sync:
        return "sync";
    case body_kind::async:
        return "async";
    case body_kind::throws:
        return "throws";
    case body_kind::reenter:
        return "reenter";
    case body_kind::steps:
        return "steps";
    case body_kind::steps_sync:
        return "steps_sync";
    }
    return "?";
}

bool scenario::policies() const {
    if (weights.size() > 1 || memory_budget > 0 || reject_late) return true;
    for (const entry_spec& e : entries)
        if (e.group != 0 || e.deadline != 0 || e.bytes != 0) return true;
    for (const op& o : ops)
        if (o.kind == op_kind::set_permits || o.kind == op_kind::set_budget) return true;
    return false;
}

std::string describe(const scenario& sc) {
    std::string s = "permits=" + std::to_string(sc.permits) + " ctxs=" + std::to_string(sc.shared_ctxs);
    if (!sc.weights.empty()) {
        s += " weights=";
        for (std::size_t g = 0; g < sc.weights.size(); ++g) s += (g ? ":" : "") + std::to_string(sc.weights[g]);
    }
    if (sc.memory_budget > 0) s += " budget=" + std::to_string(sc.memory_budget);
    if (sc.reject_late) s += " reject_late";
    if (sc.observer == 1) s += " observer";
    if (sc.observer == 2) s += " observer-throws@" + std::to_string(sc.throw_at);
    for (int k : sc.open_throw) s += " open-throws@" + std::to_string(k);
    for (int k : sc.open_reject) s += " open-rejects@" + std::to_string(k);
    s += "\n";
    for (std::size_t i = 0; i < sc.entries.size(); ++i) {
        const entry_spec& e = sc.entries[i];
        s += "  e" + std::to_string(i) + ": " + (e.scope ? "scope(inner=" + std::to_string(e.inner) + ")" : "entry") +
             " permits=" + std::to_string(e.permits) + (e.wait == wait_policy::never ? " never" : "") + " " +
             placement_name(e.where) + " " + body_name(e.body) +
             (e.suspensions > 0 ? "/" + std::to_string(e.suspensions) : "") +
             " ctx=" + (e.ctx < 0 ? std::string("private") : std::to_string(e.ctx)) +
             (e.cancel >= 0 ? " cancel=" + std::to_string(e.cancel) : "") +
             (e.group != 0 ? " group=" + std::to_string(e.group) : "") +
             (e.deadline != 0 ? " deadline=+" + std::to_string(e.deadline) : "") +
             (e.bytes != 0 ? " bytes=" + std::to_string(e.bytes) : "") +
             (e.sleep != 0 ? " sleep=" + std::to_string(e.sleep) : "") +
             (e.work != 0 ? " work=" + std::to_string(e.work) : "") + (e.catches ? " catches" : "") +
             (e.rogue ? " rogue" : "") + (e.rethrows ? " rethrows" : "") +
             (e.emit_at >= 0 ? " emit@" + std::to_string(e.emit_at) : "") +
             (!e.stop_at_deadline ? " no-stop-at-deadline" : "") + "\n";
    }
    if (sc.batch.on) {
        s += "  batcher max_batch=" + std::to_string(sc.batch.max_batch) + " " + placement_name(sc.batch.where) +
             (sc.batch.async ? " async" : " sync") + " throw@" + std::to_string(sc.batch.throw_on_batch) +
             " wrong-count@" + std::to_string(sc.batch.wrong_count_on_batch) +
             " max_delay=" + std::to_string(sc.batch.max_delay) + " group=" + std::to_string(sc.batch.group) +
             " items:";
        for (const item_spec& it : sc.batch.items)
            s += " ctx" + (it.ctx < 0 ? std::string("P") : std::to_string(it.ctx)) + (it.cancel ? "c" : "");
        s += "\n";
    }
    s += "  ops:";
    for (const op& o : sc.ops) {
        static const char* names[] = {"enter",       "cancel",      "shutdown",  "submit",
                                      "cancel_item", "set_permits", "set_budget"};
        s += std::string(" ") + names[static_cast<int>(o.kind)] + "(" + std::to_string(o.index) +
             (o.type >= 0 ? ",type " + std::to_string(o.type) : "") + ")";
        if (o.at > 0) s += "@" + std::to_string(o.at);
    }
    return s;
}

namespace {

/// Tenant groups, virtual deadlines, byte budgets, early rejection and
/// resizes for a generated scenario. Async bodies hold their permits for a
/// few virtual microseconds, so that deadlines race grants.
void add_policies(scenario& sc, prng& r) {
    // Several groups only without failing open_session: the model cannot tell
    // which of the grants one step made across groups a failed open belongs
    // to (docs/testing.md).
    const bool opens_fail = !sc.open_throw.empty() || !sc.open_reject.empty();
    const std::size_t groups = opens_fail ? 1 : 1 + r.below(3);
    for (std::size_t g = 0; g < groups && groups > 1; ++g) sc.weights.push_back(1 + r.below(3));
    if (r.chance(1, 3)) sc.memory_budget = 2 + r.below(5);
    sc.reject_late = r.chance(1, 3);
    for (entry_spec& e : sc.entries) {
        e.group = r.chance(1, 30) ? groups : r.below(static_cast<std::uint32_t>(groups));  // rarely out of range
        if (r.chance(1, 3)) e.deadline = 1 + r.below(8);
        if (sc.memory_budget > 0 && !e.scope)
            e.bytes =
                r.chance(1, 20) ? sc.memory_budget + 1 : r.below(static_cast<std::uint32_t>(sc.memory_budget + 1));
        if (e.body == body_kind::async) e.sleep = r.below(4);
    }
    if (sc.batch.on) {
        sc.batch.group = r.below(static_cast<std::uint32_t>(groups));
        return;  // (no resizes: the batcher's session bound is checked against fixed permits)
    }
    const int resizes = static_cast<int>(r.below(4));
    for (int k = 0; k < resizes; ++k) {
        op o{op_kind::set_permits, 1 + static_cast<int>(r.below(3)), r.chance(1, 2) ? 0 : 1 + r.below(6)};
        if (sc.memory_budget > 0 && r.chance(1, 2)) o = {op_kind::set_budget, static_cast<int>(r.below(7)), o.at};
        sc.ops.insert(sc.ops.begin() + r.below(static_cast<std::uint32_t>(sc.ops.size() + 1)), o);
    }
}

/// S20: turns some of a scenario's bodies into bodies that look at their
/// session's stop between steps, and asks them to stop at random moments:
/// cancellations of every type (terminal, partial, total) at random virtual
/// times (before the grant, between the grant and the start, while the body
/// runs), emitted from inside a synchronous compute body (the caller's thread
/// racing the worker), and deadlines that pass while the bodies run, with
/// and without stop_at_deadline. Some bodies catch the stop and return; some
/// throw session_stopped unasked.
void add_stops(scenario& sc, std::uint64_t seed) {
    prng r(seed ^ 0x57095709570957ULL);
    if (!r.chance(1, 2)) return;
    for (int i = 0; i < static_cast<int>(sc.entries.size()); ++i) {
        entry_spec& e = sc.entries[i];
        if (e.scope || e.body == body_kind::reenter || !r.chance(2, 3)) continue;
        const bool sync = e.where == placement::compute && r.chance(1, 3);
        e.body = sync ? body_kind::steps_sync : body_kind::steps;
        e.suspensions = 0;
        e.sleep = 0;
        e.work = 1 + static_cast<int>(r.below(6));
        e.catches = r.chance(1, 6);
        e.rogue = !e.catches && r.chance(1, 10);
        e.rethrows = !e.catches && !e.rogue && r.chance(1, 10);
        if (r.chance(1, 3)) e.deadline = 1 + r.below(8);
        e.stop_at_deadline = !r.chance(1, 5);
        const bool had_cancel = e.cancel >= 0;
        if (!had_cancel && r.chance(1, 2)) e.cancel = static_cast<int>(r.below(3));
        if (e.cancel < 0) continue;
        if (sync && r.chance(1, 2)) {
            // Emitted by the body itself (once: the operation is dropped).
            e.emit_at = static_cast<int>(r.below(static_cast<std::uint32_t>(e.work)));
            if (had_cancel)
                std::erase_if(sc.ops, [i](const op& o) { return o.kind == op_kind::cancel && o.index == i; });
            continue;
        }
        if (!had_cancel) {
            std::size_t pos = 0;
            while (!(sc.ops[pos].kind == op_kind::enter && sc.ops[pos].index == i)) ++pos;
            pos += 1 + r.below(static_cast<std::uint32_t>(sc.ops.size() - pos));
            sc.ops.insert(sc.ops.begin() + static_cast<std::ptrdiff_t>(pos), op{op_kind::cancel, i, 0});
        }
        // A random moment: at once, or in one of the body's steps.
        for (op& o : sc.ops)
            if (o.kind == op_kind::cancel && o.index == i) o.at = r.chance(1, 4) ? 0 : 1 + r.below(8);
        // Sometimes a second cancellation of its own type, later or sooner
        // (total then terminal: the first does not stop, the second does;
        // terminal twice: the stop is asked once).
        if (r.chance(1, 4)) {
            std::size_t pos = 0;
            while (!(sc.ops[pos].kind == op_kind::enter && sc.ops[pos].index == i)) ++pos;
            pos += 1 + r.below(static_cast<std::uint32_t>(sc.ops.size() - pos));
            sc.ops.insert(sc.ops.begin() + static_cast<std::ptrdiff_t>(pos),
                          op{op_kind::cancel, i, 1 + r.below(8), static_cast<int>(r.below(3))});
        }
    }
}

}  // namespace

scenario generate(std::uint64_t seed) {
    prng r(seed ^ 0x5eed5eed5eedULL);
    scenario sc;
    sc.permits = 1 + r.below(3);
    sc.shared_ctxs = 1 + static_cast<int>(r.below(3));
    const std::uint32_t obs = r.below(10);
    sc.observer = obs < 4 ? 0 : obs < 7 ? 1 : 2;
    const int n = 1 + static_cast<int>(r.below(7));
    if (sc.observer == 2) sc.throw_at = 1 + static_cast<int>(r.below(static_cast<std::uint32_t>(2 * n + 1)));
    if (r.chance(1, 5)) sc.open_throw.push_back(1 + static_cast<int>(r.below(static_cast<std::uint32_t>(n))));
    if (r.chance(1, 6)) sc.open_reject.push_back(1 + static_cast<int>(r.below(static_cast<std::uint32_t>(n))));
    for (int i = 0; i < n; ++i) {
        entry_spec e;
        e.ctx = r.chance(1, 5) ? -1 : static_cast<int>(r.below(static_cast<std::uint32_t>(sc.shared_ctxs)));
        if (r.chance(1, 8)) {
            e.scope = true;
            e.inner = static_cast<int>(r.below(3));
            e.where = placement::caller;
        } else {
            e.permits = r.chance(1, 25) ? sc.permits + 1 : 1 + r.below(static_cast<std::uint32_t>(sc.permits));
            e.wait = r.chance(1, 7) ? wait_policy::never : wait_policy::fifo;
            e.where = r.chance(1, 2) ? placement::compute : placement::caller;
            const std::uint32_t b = r.below(10);
            e.body = b < 4   ? body_kind::sync
                     : b < 7 ? body_kind::async
                     : b < 8 ? body_kind::throws
                             : body_kind::reenter;
            if (e.body == body_kind::async) e.suspensions = static_cast<int>(r.below(3));
        }
        if (r.chance(1, 4)) e.cancel = static_cast<int>(r.below(3));
        sc.entries.push_back(e);
    }
    if (r.chance(3, 10)) {
        batch_spec& b = sc.batch;
        b.on = true;
        b.max_batch = 1 + r.below(3);
        b.where = r.chance(1, 2) ? placement::compute : placement::caller;
        b.async = r.chance(1, 2);
        b.throw_on_batch = r.chance(1, 5) ? static_cast<int>(r.below(3)) : -1;
        b.wrong_count_on_batch = r.chance(1, 8) ? static_cast<int>(r.below(3)) : -1;
        b.max_delay = r.chance(1, 2) ? 0 : 1 + r.below(3);
        const int items = 1 + static_cast<int>(r.below(6));
        for (int i = 0; i < items; ++i) {
            item_spec it;
            it.ctx = r.chance(1, 5) ? -1 : static_cast<int>(r.below(static_cast<std::uint32_t>(sc.shared_ctxs)));
            it.cancel = r.chance(1, 4);
            b.items.push_back(it);
        }
    }
    // The operations, interleaved at random; a cancellation comes after its
    // entry's initiation (same context, FIFO), at a random distance.
    std::vector<op> ops;
    for (int i = 0; i < n; ++i) ops.push_back({op_kind::enter, i, 0});
    for (int i = 0; i < static_cast<int>(sc.batch.items.size()); ++i) ops.push_back({op_kind::submit, i, 0});
    for (std::size_t i = 0; i + 1 < ops.size(); ++i)
        std::swap(ops[i], ops[i + r.below(static_cast<std::uint32_t>(ops.size() - i))]);
    auto insert_after = [&](op_kind first, int index, op o) {
        std::size_t pos = 0;
        while (!(ops[pos].kind == first && ops[pos].index == index)) ++pos;
        pos += 1 + r.below(static_cast<std::uint32_t>(ops.size() - pos));
        ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(pos), o);
    };
    for (int i = 0; i < n; ++i)
        if (sc.entries[i].cancel >= 0) insert_after(op_kind::enter, i, {op_kind::cancel, i, 0});
    for (int i = 0; i < static_cast<int>(sc.batch.items.size()); ++i)
        if (sc.batch.items[i].cancel) insert_after(op_kind::submit, i, {op_kind::cancel_item, i, 0});
    if (r.chance(1, 10))
        ops.insert(ops.begin() + r.below(static_cast<std::uint32_t>(ops.size() + 1)), op{op_kind::shutdown, 0, 0});
    // Some operations come later in virtual time.
    for (op& o : ops)
        if (r.chance(1, 5)) o.at = 1 + r.below(4);
    sc.ops = std::move(ops);
    // Admission policies, in a third of the scenarios (drawn last, so that the
    // scenarios of the seeds without them stay those of the FIFO queue).
    if (r.chance(1, 3)) add_policies(sc, r);
    // Stopping (S20), in half of the scenarios, from a stream of its own (so
    // that the draws above stay those of the seeds before it).
    add_stops(sc, seed);
    return sc;
}

// ---------------------------------------------------------------------------
// Exhaustive configurations: up to 3 entries, up to 2 permits, with cancel and poison.
// ---------------------------------------------------------------------------

std::vector<scenario> exhaustive_configs() {
    std::vector<scenario> v;
    auto add = [&](std::string name, std::size_t permits, int ctxs, std::vector<entry_spec> es, std::vector<op> ops,
                   int observer = 0, int throw_at = 0, std::vector<int> open_throw = {}) {
        scenario sc;
        sc.name = std::move(name);
        sc.permits = permits;
        sc.shared_ctxs = ctxs;
        sc.entries = std::move(es);
        sc.ops = std::move(ops);
        sc.observer = observer;
        sc.throw_at = throw_at;
        sc.open_throw = std::move(open_throw);
        v.push_back(std::move(sc));
    };
    using P = placement;
    const auto E = [](std::size_t p, P where, int ctx, int cancel = -1, body_kind b = body_kind::sync) {
        entry_spec e;
        e.permits = p;
        e.where = where;
        e.ctx = ctx;
        e.cancel = cancel;
        e.body = b;
        return e;
    };
    const auto enter = [](int i) { return op{op_kind::enter, i, 0}; };
    const auto cancel = [](int i) { return op{op_kind::cancel, i, 0}; };
    // 1. weighted head cancelled while permits are re-offered (bpo-45997's shape)
    add("weighted-head-cancel", 2, 2, {E(1, P::compute, 0), E(2, P::compute, 1, 0), E(1, P::compute, 0)},
        {enter(0), enter(1), cancel(1), enter(2)});
    // 2. caller placement on one context: start order (S17)
    add("caller-start-order", 1, 2, {E(1, P::caller, 0), E(1, P::caller, 0), E(1, P::caller, 1)},
        {enter(0), enter(1), enter(2)});
    add("caller-start-order-2permits", 2, 2, {E(1, P::caller, 0), E(2, P::caller, 1), E(1, P::caller, 0)},
        {enter(0), enter(1), enter(2)});
    // 3. poisoning at each hook call (S11/S18)
    for (int k = 1; k <= 4; ++k)
        add("poison@" + std::to_string(k), 2, 2, {E(1, P::caller, 0), E(1, P::compute, 1), E(1, P::caller, 0)},
            {enter(0), enter(1), enter(2)}, 2, k);
    // 4. cancel/grant race, one permit
    add("cancel-grant-race", 1, 2, {E(1, P::compute, 0), E(1, P::caller, 1, 2), E(1, P::compute, 0)},
        {enter(0), enter(1), cancel(1), enter(2)});
    // 5. open_session throws
    add("open-throws", 1, 2, {E(1, P::compute, 0), E(1, P::caller, 1), E(1, P::compute, 1)},
        {enter(0), enter(1), enter(2)}, 1, 0, {1});
    add("open-throws-2", 2, 2, {E(2, P::caller, 0), E(1, P::compute, 1), E(1, P::caller, 0)},
        {enter(0), enter(1), enter(2)}, 0, 0, {2});
    // 6. async bodies with a cancel
    add("async-cancel", 1, 2, {E(1, P::caller, 0, -1, body_kind::async), E(1, P::compute, 1, 0), E(1, P::caller, 0)},
        {enter(0), enter(1), cancel(1), enter(2)});
    v[v.size() - 1].entries[0].suspensions = 1;
    // 7. The batcher, with either delay policy. No delay: one plain entry
    // competing, three items on two contexts, the second cancelled; with a
    // delay (where every wake-up of the timer is one more choice point), two
    // items, the second cancelled. max_batch 2.
    for (std::uint64_t delay = 0; delay <= 1; ++delay)
        for (int where = 0; where < 2; ++where) {
            const P p = where == 0 ? P::compute : P::caller;
            std::vector<entry_spec> es;
            std::vector<op> ops;
            if (delay == 0) {
                es.push_back(E(1, P::compute, 0));
                ops.push_back(enter(0));
            }
            ops.push_back(op{op_kind::submit, 0, 0});
            ops.push_back(op{op_kind::submit, 1, 0});
            ops.push_back(op{op_kind::cancel_item, 1, 0});
            if (delay == 0) ops.push_back(op{op_kind::submit, 2, 0});
            add(std::string("batcher ") + placement_name(p) + (delay > 0 ? " max_delay" : " no-delay"), 1, 2,
                std::move(es), std::move(ops));
            batch_spec& b = v.back().batch;
            b.on = true;
            b.max_batch = 2;
            b.where = p;
            b.max_delay = delay;
            b.items = {item_spec{0, false}, item_spec{1, true}};
            if (delay == 0) b.items.push_back(item_spec{0, false});
        }
    // 8. Admission policies, on the simulated clock. (a) A deadline racing a
    // grant and a cancellation across two groups: e0 holds the one permit
    // for 2 us, e1 (group 1, cancelled) must be admitted by 2 us, e2
    // (group 0) queues behind. (b) Resizing under load: 2 permits, shrunk to 1 and grown
    // back while weighted entries wait. (c) A byte budget shrunk below what
    // is held while a 0-byte entry of another group waits.
    {
        std::vector<entry_spec> es{E(1, P::compute, 0, -1, body_kind::async), E(1, P::caller, 1, 0),
                                   E(1, P::compute, 0)};
        es[0].sleep = 2;
        es[1].group = 1;
        es[1].deadline = 2;
        add("policy: deadline across groups", 1, 2, std::move(es), {enter(0), enter(1), enter(2), cancel(1)});
        v.back().weights = {1, 1};
    }
    {
        std::vector<entry_spec> es{E(2, P::compute, 0, -1, body_kind::async), E(1, P::caller, 1), E(2, P::compute, 0)};
        es[0].sleep = 1;
        add("policy: resize under load", 2, 2, std::move(es),
            {enter(0), enter(1), enter(2), op{op_kind::set_permits, 1, 1}, op{op_kind::set_permits, 2, 2}});
    }
    {
        std::vector<entry_spec> es{E(1, P::compute, 0, -1, body_kind::async), E(1, P::caller, 1), E(1, P::compute, 0)};
        es[0].sleep = 1;
        es[0].bytes = 2;
        es[1].bytes = 2;
        es[2].group = 1;
        add("policy: budget shrunk under load", 2, 2, std::move(es),
            {enter(0), enter(1), enter(2), op{op_kind::set_budget, 1, 1}});
        v.back().weights = {2, 1};
        v.back().memory_budget = 3;
        v.back().reject_late = true;
    }
    // 9. Stopping (S20), every schedule. (a) A terminal cancellation at 1 us
    // of a caller-placed body of 2 steps, before its grant, between grant
    // and start, or while it runs, with a compute entry queued behind it.
    // (b) A partial cancellation and the deadline at the same virtual
    // instant: either may be the first cause. (c) total does not stop a
    // running body, which then throws session_stopped of its own, and a
    // terminal one after it does. (d) A
    // synchronous compute body emits its own terminal cancellation between
    // its steps, and catches the stop. (e) B7: both items of an asynchronous
    // batch cancelled while it runs.
    {
        const auto steps = [&](P where, int ctx, int cancel, int work) {
            entry_spec e = E(1, where, ctx, cancel, body_kind::steps);
            e.work = work;
            return e;
        };
        add("stop: terminal at 1us", 1, 2, {steps(P::caller, 0, 0, 2), E(1, P::compute, 1)},
            {enter(0), op{op_kind::cancel, 0, 1}, enter(1)});
        std::vector<entry_spec> es{steps(P::compute, 0, 1, 3)};
        es[0].deadline = 2;
        add("stop: deadline and partial at once", 1, 1, std::move(es), {enter(0), op{op_kind::cancel, 0, 2}});
        es = {steps(P::compute, 0, 2, 2)};
        es[0].rogue = true;
        add("stop: total does not stop", 1, 1, std::move(es), {enter(0), op{op_kind::cancel, 0, 1}});
        add("stop: total, then terminal", 1, 1, {steps(P::compute, 0, 2, 3)},
            {enter(0), op{op_kind::cancel, 0, 1}, op{op_kind::cancel, 0, 2, 0}});
        es = {E(1, P::compute, 0, 0, body_kind::steps_sync), E(1, P::caller, 1)};
        es[0].work = 2;
        es[0].emit_at = 1;
        es[0].catches = true;
        add("stop: emitted while a sync body runs, caught", 1, 2, std::move(es), {enter(0), enter(1)});
        add("stop: B7, a running batch's items all cancelled", 1, 2, {},
            {op{op_kind::submit, 0, 0}, op{op_kind::submit, 1, 0}, op{op_kind::cancel_item, 0, 0},
             op{op_kind::cancel_item, 1, 0}});
        batch_spec& b = v.back().batch;
        b.on = true;
        b.max_batch = 2;
        b.where = P::compute;
        b.async = true;
        b.items = {item_spec{0, true}, item_spec{1, true}};
    }
    // 10. Systematically: 3 entries (e0, e2 on one caller context, e1 on
    // another), 1 or 2 permits (e1 weighted 1 or 2), every placement, no
    // cancellation or one of any entry; no observer (-1: bodies ready at
    // their grant), a counting one (0), or one that throws at hook call 1-4.
    for (std::size_t permits = 1; permits <= 2; ++permits)
        for (std::size_t w1 = 1; w1 <= permits; ++w1)
            for (int places = 0; places < 8; ++places)
                for (int cancelled = -1; cancelled < 3; ++cancelled)
                    for (int poison = -1; poison <= 4; ++poison) {
                        std::vector<entry_spec> es;
                        std::vector<op> ops;
                        for (int i = 0; i < 3; ++i) {
                            es.push_back(E(i == 1 ? w1 : 1, (places >> i) & 1 ? P::caller : P::compute, i == 1 ? 1 : 0,
                                           i == cancelled ? i % 3 : -1));
                            ops.push_back(enter(i));
                            if (i == cancelled) ops.push_back(cancel(i));
                        }
                        add("grid p" + std::to_string(permits) + " w" + std::to_string(w1) + " places" +
                                std::to_string(places) + " cancel" + std::to_string(cancelled) + " poison" +
                                std::to_string(poison),
                            permits, 2, std::move(es), std::move(ops),
                            poison < 0    ? 0
                            : poison == 0 ? 1
                                          : 2,
                            poison);
                    }
    return v;
}

scenario restrict_ops(const scenario& sc, const std::vector<std::uint32_t>& keep) {
    scenario r = sc;
    r.ops.clear();
    for (std::uint32_t k : keep)
        if (k < sc.ops.size()) r.ops.push_back(sc.ops[k]);
    return r;
}

}  // namespace tenferro::sim
