// Deterministic simulation of the admission core and the batcher (issue 34,
// section 3; docs/testing.md, "Deterministic simulation").
//
// One seeded, single-threaded scheduler (sim_executor.hpp) owns every hop the
// host makes: compute-placed bodies reach it through the public seam
// host_options::compute_executor, caller-placed bodies and completions through
// the callers' executors (sim executors bound to the handlers). The library
// runs its production paths unchanged. A seed picks a scenario (entries of
// random permits, placement, wait policy and body kind; cancellations;
// throwing observer hooks; shutdown; re-entry; scopes; callers whose context
// dies right after their upcall; batcher submits and cancels) and every
// scheduling choice; the invariants below are checked after every step.
//
//   sim_test --seeds N [--first S]   N seeds from S (default: TENFERRO_SIM_SEEDS or 2000, from 1)
//   sim_test --seed S [--verbose]    one seed (the replay of a failure)
//   sim_test --seed S --keep-ops i,j --schedule T
//                                    the seed's scenario with only those operations,
//                                    scheduled by chooser seed T (a shrunk failure)
//   sim_test --exhaustive [--config C] [--choices a,b,..]
//                                    every schedule of the small configurations
//                                    (or one configuration, or one schedule)
//
// Not covered: the inline fast paths (try_run_inline, awaitable_entry) need
// an io_context executor and take the general path here. The batcher's
// max_delay (B6) runs on the simulated clock through batch_options::timer;
// its default timer thread is not simulated.

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
namespace {

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

enum class body_kind : unsigned char { sync, async, throws, reenter };

struct entry_spec {
    std::size_t permits = 1;
    wait_policy wait = wait_policy::fifo;
    placement where = placement::compute;
    body_kind body = body_kind::sync;
    int suspensions = 0;          // async bodies: co_await post this many times
    int ctx = 0;                  // shared caller context, or -1: a private one destroyed after its upcall
    int cancel = -1;              // cancellation type index (0 terminal, 1 partial, 2 total), -1 none
    bool scope = false;           // an execution scope (inner sessions: `inner`)
    int inner = 0;
};

struct item_spec {
    int ctx = 0;
    bool cancel = false;
};

struct batch_spec {
    bool on = false;
    std::size_t max_batch = 2;
    placement where = placement::compute;
    bool async = false;
    int throw_on_batch = -1;  // the k-th batch's body throws (0-based), -1 never
    int wrong_count_on_batch = -1;
    std::uint64_t max_delay = 0;  // virtual microseconds; 0: no delay (B1), else B6 on the simulated timer
    std::vector<item_spec> items;
};

enum class op_kind : unsigned char { enter, cancel, shutdown, submit, cancel_item };

struct op {
    op_kind kind;
    int index = 0;          // entry or item
    std::uint64_t at = 0;   // virtual time (0: ready at once)
};

struct scenario {
    std::size_t permits = 1;
    int shared_ctxs = 1;
    int observer = 0;   // 0 none, 1 counting, 2 throws at hook call `throw_at` (1-based)
    int throw_at = 0;
    std::vector<int> open_throw;   // open_session calls (1-based) that throw
    std::vector<int> open_reject;  // open_session calls that return contended
    std::vector<entry_spec> entries;
    batch_spec batch;
    std::vector<op> ops;  // in order per context
    std::string name;
};

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
    }
    return "?";
}

std::string describe(const scenario& sc) {
    std::string s = "permits=" + std::to_string(sc.permits) + " ctxs=" + std::to_string(sc.shared_ctxs);
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
             (e.cancel >= 0 ? " cancel=" + std::to_string(e.cancel) : "") + "\n";
    }
    if (sc.batch.on) {
        s += "  batcher max_batch=" + std::to_string(sc.batch.max_batch) + " " + placement_name(sc.batch.where) +
             (sc.batch.async ? " async" : " sync") + " throw@" + std::to_string(sc.batch.throw_on_batch) +
             " wrong-count@" + std::to_string(sc.batch.wrong_count_on_batch) +
             " max_delay=" + std::to_string(sc.batch.max_delay) + " items:";
        for (const item_spec& it : sc.batch.items)
            s += " ctx" + (it.ctx < 0 ? std::string("P") : std::to_string(it.ctx)) + (it.cancel ? "c" : "");
        s += "\n";
    }
    s += "  ops:";
    for (const op& o : sc.ops) {
        static const char* names[] = {"enter", "cancel", "shutdown", "submit", "cancel_item"};
        s += std::string(" ") + names[static_cast<int>(o.kind)] + "(" + std::to_string(o.index) + ")";
        if (o.at > 0) s += "@" + std::to_string(o.at);
    }
    return s;
}

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
    return sc;
}

// ---------------------------------------------------------------------------
// The world of one run
// ---------------------------------------------------------------------------

struct world;

/// The test backend's session: counts itself in and out.
class sim_session {
public:
    sim_session(world* w, const session_grant& g);
    sim_session(sim_session&& other) noexcept
        : w_(std::exchange(other.w_, nullptr)), permits_(other.permits_), executor_(std::move(other.executor_)) {}
    sim_session& operator=(sim_session&&) = delete;
    ~sim_session();
    std::size_t permits() const noexcept { return permits_; }

private:
    world* w_;
    std::size_t permits_;
    asio::any_io_executor executor_;
};

struct sim_backend {
    using session_type = sim_session;
    world* w;
    std::string_view name() const noexcept { return "sim"; }
    session_result<sim_session> open_session(const session_grant& g);
};

using host_type = session_host<sim_backend>;

/// The batcher's delay timer on the simulated clock (batch_options::timer):
/// each wake-up is a timer of the simulation, fired when the scheduler
/// chooses to move time on. Replaced wake-ups still fire (the batcher must
/// find nothing due then).
struct sim_timer final : batch_timer {
    sim_context* ctx;
    int exec;
    sim_timer(sim_context& c, int e) : ctx(&c), exec(e) {}
    std::chrono::steady_clock::time_point now() override {
        return std::chrono::steady_clock::time_point(std::chrono::microseconds(ctx->now()));
    }
    void wake_at(std::chrono::steady_clock::time_point when, std::function<void()> fire) override {
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(when.time_since_epoch()).count();
        ctx->post_at(exec, us < 0 ? 0 : static_cast<std::uint64_t>(us), std::move(fire));
    }
};

struct body_error : std::runtime_error {
    explicit body_error(int i) : std::runtime_error("body " + std::to_string(i)), id(i) {}
    int id;
};

enum class rec_kind : unsigned char { plain, scope, inner, nested, batch_session };
enum class model_state : unsigned char { none, waiting, granted, removed, rejected };

struct entry_rec {
    rec_kind kind = rec_kind::plain;
    int spec = -1;           // index into scenario::entries (plain, scope)
    std::size_t permits = 1;
    wait_policy wait = wait_policy::fifo;
    placement where = placement::compute;
    int ctx = -1;            // the caller's executor id
    bool private_ctx = false;
    int target = -1;         // where the body must run (-1: unknown, batch sessions)
    model_state model = model_state::none;
    std::uint64_t init_seq = 0, grant_seq = 0;
    bool initiating = false, started = false, ended = false;
    bool open_failed = false;  // its runner ran, and open_session failed: its body never starts
    int completions = 0;
    bool cancel_hit_waiting = false;  // a cancellation fired while the model had it waiting
    bool poisoned_before_init = false, shut_before_init = false;
    asio::cancellation_signal signal;
};

struct item_rec {
    int ctx = -1;
    bool private_ctx = false;
    std::uint64_t seq = 0;
    bool submitted = false, in_batch = false;
    int completions = 0;
    bool rejected_at_submit = false;
    std::uint64_t submitted_at = 0;  // virtual time
    asio::cancellation_signal signal;
};

struct recording_host;
using batcher_type = batcher<recording_host, int, int>;

struct world {
    const scenario& sc;
    chooser& choose;
    bool verbose;
    std::string failure;
    sim_context ctx;
    int compute = -1;
    std::vector<int> shared;
    std::unique_ptr<host_type> host;
    std::unique_ptr<recording_host> rec_host;
    std::unique_ptr<batcher_type> batch;
    std::shared_ptr<admission_observer> observer;
    std::deque<entry_rec> entries;  // stable addresses
    std::deque<item_rec> items;
    std::vector<int> running_sync;  // the sync bodies on the stack
    std::vector<int> model_queue;   // model-waiting entries, FIFO
    std::vector<int> to_destroy;    // private contexts, destroyed after the step
    std::uint64_t seq = 0, grant_seq = 0, item_seq = 0;
    int hook_calls = 0, opens = 0;
    long sessions_open = 0;
    bool poison_flag = false, shut_flag = false;
    // per step
    int init_grants = 0, inner_admits = 0, cancel_target = -1;
    bool cancel_expect_removed = false;
    std::uint64_t batches_run = 0;
    bool any_item_cancel = false;
    std::uint64_t max_compute_item_seq = 0;
    int batch_sessions_in_flight = 0;
    detail::permit_counters last{};
    std::uint64_t applied_admitted = 0;

    world(const scenario& s, chooser& c, bool v)
        : sc(s), choose(c), verbose(v), ctx(c, [this](const std::string& m) { fail(m); }) {}

    void fail(const std::string& m) {
        if (failure.empty()) failure = m + " (step " + std::to_string(ctx.steps()) + ")";
    }
    void check(bool ok, const std::string& m) {
        if (!ok) fail(m);
    }
    void trace(const std::string& m) {
        if (verbose) std::printf("  [%llu] %s\n", static_cast<unsigned long long>(ctx.steps()), m.c_str());
    }
    detail::permit_counters counters() { return detail::host_access::core(*host).queue().counters(); }

    std::string name(int i) const {
        const entry_rec& e = entries[i];
        static const char* kinds[] = {"e", "scope e", "inner", "nested", "batch-session"};
        return std::string(kinds[static_cast<int>(e.kind)]) +
               std::to_string(e.kind == rec_kind::plain || e.kind == rec_kind::scope ? e.spec : i);
    }

    // -- the model of the FIFO queue -----------------------------------------

    /// Predicts admission at initiation (S4: no barging; S10; S9; S11; S12).
    void predict_initiation(int i) {
        entry_rec& e = entries[i];
        e.init_seq = ++seq;
        e.poisoned_before_init = poison_flag;
        e.shut_before_init = shut_flag;
        const detail::permit_counters c = counters();
        if (e.permits == 0 || e.permits > sc.permits || host->poisoned() || shut_flag) {
            e.model = model_state::rejected;
        } else if (model_queue.empty() && c.available >= e.permits) {
            e.model = model_state::granted;
            e.grant_seq = ++grant_seq;
            ++init_grants;
        } else if (e.wait == wait_policy::never) {
            e.model = model_state::rejected;
        } else {
            e.model = model_state::waiting;
            model_queue.push_back(i);
        }
    }

    /// Applies the grants the counters show and the model has not seen yet:
    /// the model's head entries, in FIFO order (S4). After every step, and
    /// when a body starts (a batch session with no items left runs its body
    /// inline, in the step that granted it).
    void sync_grants() {
        const detail::permit_counters c = counters();
        const long from_queue = static_cast<long>(c.admitted - applied_admitted) - init_grants - inner_admits;
        check(from_queue >= 0, "model: fewer grants than entries admitted at once");
        for (long k = 0; k < from_queue; ++k) {
            if (model_queue.empty()) {
                fail("S4: the queue granted more entries than were waiting");
                break;
            }
            const int i = model_queue.front();
            model_queue.erase(model_queue.begin());
            entries[i].model = model_state::granted;
            entries[i].grant_seq = ++grant_seq;
        }
        applied_admitted = c.admitted;
        init_grants = inner_admits = 0;
    }

    /// After every step: apply what the counters say happened, then check.
    void after_step() {
        const detail::permit_counters c = counters();
        // A cancellation of a model-waiting entry must have removed it (S13);
        // the model removed it when the cancellation was emitted.
        if (cancel_target >= 0) {
            if (cancel_expect_removed)
                check(c.cancelled == last.cancelled + 1,
                      "S13: cancelling waiting " + name(cancel_target) + " did not remove it from the queue");
            else
                check(c.cancelled == last.cancelled,
                      "S13: a cancellation removed " + name(cancel_target) + ", which was not waiting");
        }
        sync_grants();
        // Poisoning or shutdown drains every waiter.
        if (host->poisoned() || shut_flag) {
            for (int i : model_queue) entries[i].model = model_state::removed;
            model_queue.clear();
        }
        if (poison_flag) check(host->poisoned(), "S11: an observer hook threw and the host is not poisoned");
        check(model_queue.size() == c.waiting, "S4: the queue holds " + std::to_string(c.waiting) +
                                                   " waiters, the FIFO model " + std::to_string(model_queue.size()));
        // Permits conserved: what running bodies hold plus what is free never
        // exceeds the permits; what is free never falls below the permits
        // less those of granted, uncompleted entries.
        std::size_t running = 0, held_at_most = 0;
        for (const entry_rec& e : entries) {
            if (e.kind == rec_kind::inner || e.kind == rec_kind::nested) continue;
            if (e.started && !e.ended) running += e.permits;
            if (e.model == model_state::granted && e.completions == 0) held_at_most += e.permits;
        }
        check(c.available <= c.permits, "permits: more available than exist");
        check(c.available + running <= c.permits, "permits: " + std::to_string(c.available) +
                                                      " available while bodies holding " + std::to_string(running) +
                                                      " run (of " + std::to_string(c.permits) + ")");
        check(c.available + held_at_most >= c.permits,
              "permits leaked: " + std::to_string(c.available) + " available, at most " + std::to_string(held_at_most) +
                  " held by granted entries (of " + std::to_string(c.permits) + ")");
        // No waiter stranded: a head that fits the free permits is granted at
        // once (S4: permits re-offered when a waiter leaves).
        if (!model_queue.empty() && !host->poisoned() && !shut_flag) {
            const entry_rec& head = entries[model_queue.front()];
            check(head.permits > c.available, "S4/S13: " + name(model_queue.front()) +
                                                  " heads the queue and fits the " + std::to_string(c.available) +
                                                  " free permits, but was not granted");
        }
        last = c;
        cancel_target = -1;
    }

    // -- bodies ---------------------------------------------------------------

    void body_start(int i, std::size_t granted_permits) {
        entry_rec& e = entries[i];
        trace("body of " + name(i) + " starts on " + ctx.name(ctx.current()));
        check(!e.started, "S1: the body of " + name(i) + " started twice");
        e.started = true;
        check(!poison_flag, "S18: the body of " + name(i) + " started after an observer hook threw");
        if (e.kind != rec_kind::inner) {
            if (e.model == model_state::waiting) sync_grants();
            check(e.model == model_state::granted, "S4: the body of " + name(i) +
                                                       " started but the FIFO model did not grant it (" +
                                                       std::to_string(static_cast<int>(e.model)) + ")");
            check(granted_permits == e.permits, "S15: the session of " + name(i) + " holds the wrong permits");
        }
        if (e.target >= 0)
            check(ctx.current() == e.target, "S15: the body of " + name(i) + " runs on " + ctx.name(ctx.current()) +
                                                 ", not on " + ctx.name(e.target));
        // S17: on a serial executor, no body granted before this one is still
        // waiting to start.
        if (e.target >= 0 && e.target != compute && e.kind != rec_kind::inner) {
            for (std::size_t j = 0; j < entries.size(); ++j) {
                const entry_rec& o = entries[j];
                if (static_cast<int>(j) == i || o.kind == rec_kind::inner || o.target != e.target) continue;
                if (o.model == model_state::granted && o.grant_seq < e.grant_seq && !o.started && !o.open_failed &&
                    o.completions == 0)
                    fail("S17: the body of " + name(i) + " started before that of " + name(static_cast<int>(j)) +
                         ", granted earlier on the same executor");
            }
        }
    }
    /// open_session failed on the current executor: the runner that called
    /// it belongs to the earliest granted, unstarted entry bound there (a
    /// serial executor runs its runners in hand-off order).
    void open_failed() {
        const int here = ctx.current();
        if (here < 0 || here == compute) return;
        int best = -1;
        for (std::size_t j = 0; j < entries.size(); ++j) {
            const entry_rec& o = entries[j];
            if (o.kind == rec_kind::inner || o.target != here || o.model != model_state::granted || o.started ||
                o.open_failed || o.completions > 0)
                continue;
            if (best < 0 || o.grant_seq < entries[best].grant_seq) best = static_cast<int>(j);
        }
        if (best >= 0) entries[best].open_failed = true;
    }
    void body_end(int i) {
        entries[i].ended = true;
        trace("body of " + name(i) + " ends");
    }

    // -- completions ------------------------------------------------------------

    template <class R>
    void completed(int i, const std::exception_ptr& ex, const session_result<R>& r, std::optional<R> expect) {
        entry_rec& e = entries[i];
        std::string outcome =
            r ? "value" : std::string(session_entry_category().message(static_cast<int>(r.error().code())));
        if (ex) outcome = "exception";
        trace(name(i) + " completes: " + outcome);
        check(e.completions == 0, "S1: " + name(i) + " completed twice");
        ++e.completions;
        // (A batch session's completion is the batcher's own handler, whose
        // executor runs it where the host hands it over, by design.)
        check(!e.initiating || e.kind == rec_kind::batch_session,
              "S1: " + name(i) + " completed inside its initiating function");
        check(e.ctx < 0 || ctx.current() == e.ctx,
              "S6: " + name(i) + " completed on " +
                  (ctx.current() < 0 ? std::string("the driver") : ctx.name(ctx.current())) + ", not on its executor " +
                  (e.ctx < 0 ? std::string("?") : ctx.name(e.ctx)));
        check(running_sync.empty(), "S6: " + name(i) + " completed inline inside the body of " +
                                        (running_sync.empty() ? std::string() : name(running_sync.back())));
        if (ex) {
            check(e.started && e.ended, "S2: " + name(i) + " completed with an exception but its body did not run");
            try {
                std::rethrow_exception(ex);
            } catch (const body_error& b) {
                check(b.id == i, "S2: " + name(i) + " got another body's exception");
            } catch (const std::length_error&) {
                check(e.kind == rec_kind::batch_session, "S2: unexpected length_error");
            } catch (...) {
                fail("S2: " + name(i) + " completed with a foreign exception");
            }
        } else if (r) {
            check(e.started && e.ended, "S1: " + name(i) + " completed with a value but its body did not run");
            if constexpr (std::equality_comparable<R>) {
                if (expect) check(*r == *expect, "S2: " + name(i) + " completed with the wrong value");
            }
        } else {
            const session_entry_errc code = r.error().code();
            check(!e.started, "S3: " + name(i) + " completed with an admission error after its body started");
            if (e.kind == rec_kind::nested)
                check(code == session_entry_errc::reentered, "S7: a nested entry did not complete with reentered");
            if (code == session_entry_errc::cancelled)
                check(e.cancel_hit_waiting,
                      "S13: " + name(i) + " completed cancelled without being cancelled while waiting");
            if ((e.poisoned_before_init || e.shut_before_init) && e.kind != rec_kind::nested && e.permits >= 1 &&
                e.permits <= sc.permits)
                check(code == session_entry_errc::resource_poisoned || code == session_entry_errc::executor,
                      "S11/S12: " + name(i) + " initiated after poisoning/shutdown completed with " + outcome);
        }
        if (e.cancel_hit_waiting)
            check(!r && !ex && r.error().code() == session_entry_errc::cancelled,
                  "S13: " + name(i) + " was cancelled while waiting but completed with " + outcome);
        if (e.private_ctx) to_destroy.push_back(e.ctx);
    }

    // -- operations --------------------------------------------------------------

    int new_rec(rec_kind k, int spec, std::size_t permits, wait_policy w, placement p, int caller) {
        entries.emplace_back();
        entry_rec& e = entries.back();
        e.kind = k;
        e.spec = spec;
        e.permits = permits;
        e.wait = w;
        e.where = p;
        e.ctx = caller;
        e.target = p == placement::compute ? compute : caller;
        return static_cast<int>(entries.size()) - 1;
    }

    int caller_ctx(int spec_ctx, bool& is_private, const std::string& what) {
        if (spec_ctx >= 0) return shared[spec_ctx];
        is_private = true;
        return ctx.add_executor("private:" + what, true);
    }

    void enter(int s);
    void enter_scope(int s);
    void nested_entry(int parent);
    asio::awaitable<void> nested_awaited(int parent);
    void submit(int k);
    void run_op(const op& o);
    void start();
    bool quiescence_checks();
};

sim_session::sim_session(world* w, const session_grant& g) : w_(w), permits_(g.permits), executor_(g.executor) {
    ++w_->sessions_open;
}
sim_session::~sim_session() {
    if (w_ != nullptr) --w_->sessions_open;
}

session_result<sim_session> sim_backend::open_session(const session_grant& g) {
    const int k = ++w->opens;
    if (std::find(w->sc.open_throw.begin(), w->sc.open_throw.end(), k) != w->sc.open_throw.end()) {
        w->open_failed();
        throw std::runtime_error("open_session failed");
    }
    if (std::find(w->sc.open_reject.begin(), w->sc.open_reject.end(), k) != w->sc.open_reject.end()) {
        w->open_failed();
        return tl::unexpected(session_entry_error(session_entry_errc::contended, "sim", "busy"));
    }
    return session_result<sim_session>(tl::in_place, w, g);
}

struct sim_observer final : admission_observer {
    world* w;
    explicit sim_observer(world* x) : w(x) {}
    void hook() {
        if (++w->hook_calls == w->sc.throw_at && w->sc.observer == 2) {
            w->poison_flag = true;
            w->trace("observer hook throws");
            throw std::runtime_error("observer");
        }
    }
    void on_admitted(std::size_t) override { hook(); }
    void on_released(std::size_t) override { hook(); }
};

/// The batcher's host: forwards to the simulated host and records each batch
/// session as an entry of the model (the batcher's logic is unchanged).
struct recording_host {
    using session_type = sim_session;
    world* w;
    std::string_view name() const noexcept { return w->host->name(); }
    std::size_t permits() const noexcept { return w->host->permits(); }

    template <class F, class Token>
    void with_backend_session(session_options o, F&& f, Token&& token) {
        const int i = w->new_rec(rec_kind::batch_session, -1, o.permits, o.wait, o.where, -1);
        if (o.where == placement::caller) w->entries[i].target = -1;  // the first item's executor
        ++w->batch_sessions_in_flight;
        const int cap = static_cast<int>(std::max<std::size_t>(1, w->sc.permits / std::max<std::size_t>(1, o.permits)));
        w->check(w->batch_sessions_in_flight <= cap,
                 "B5: the batcher holds more sessions than the host has permits for");
        w->predict_initiation(i);
        auto ex = asio::get_associated_executor(token);
        auto done = asio::bind_executor(ex, [w = w, i, h = std::forward<Token>(token)](
                                                std::exception_ptr e, session_result<detail::batch_done> r) mutable {
            --w->batch_sessions_in_flight;
            w->completed<detail::batch_done>(i, e, r, std::nullopt);
            std::move(h)(std::move(e), std::move(r));
        });
        using R = std::invoke_result_t<F&, sim_session&>;
        world* wp = w;
        w->entries[i].initiating = true;
        if constexpr (std::is_same_v<R, asio::awaitable<detail::batch_done>>) {
            w->host->with_backend_session(
                o,
                [wp, i, f = std::forward<F>(f)](sim_session& s) mutable -> asio::awaitable<detail::batch_done> {
                    wp->body_start(i, s.permits());
                    detail::batch_done d = co_await f(s);
                    wp->body_end(i);
                    co_return d;
                },
                std::move(done));
        } else {
            w->host->with_backend_session(
                o,
                [wp, i, f = std::forward<F>(f)](sim_session& s) mutable {
                    wp->body_start(i, s.permits());
                    wp->running_sync.push_back(i);
                    detail::batch_done d = f(s);
                    wp->running_sync.pop_back();
                    wp->body_end(i);
                    return d;
                },
                std::move(done));
        }
        w->entries[i].initiating = false;
    }
};

void world::nested_entry(int parent) {
    // S7: an entry from inside a running sync body completes with reentered.
    // (Its completion goes to a shared context: a private one serves one
    // entry, and dies with that entry's upcall.)
    (void)parent;
    const int nested_ctx = shared[0];
    const int i = new_rec(rec_kind::nested, -1, 1, wait_policy::fifo, placement::compute, nested_ctx);
    entries[i].init_seq = ++seq;
    entries[i].model = model_state::rejected;
    entries[i].initiating = true;
    host->with_backend_session(
        [this, i](sim_session&) {
            body_start(i, 1);
            return 0;
        },
        asio::bind_executor(ctx.executor(nested_ctx), [this, i](std::exception_ptr e, session_result<int> r) {
            completed<int>(i, e, r, std::nullopt);
        }));
    entries[i].initiating = false;
    if (batch) {
        // B5/S7: submit is an entry too.
        items.emplace_back();
        item_rec& it = items.back();
        const int k = static_cast<int>(items.size()) - 1;
        it.ctx = nested_ctx;
        it.submitted = true;
        it.rejected_at_submit = true;
        it.seq = ++item_seq;
        batch->submit(
            k, asio::bind_executor(ctx.executor(nested_ctx), [this, k](std::exception_ptr e, session_result<int> r) {
                item_rec& x = items[k];
                check(x.completions++ == 0, "B3: a re-entered item completed twice");
                check(!e && !r && r.error().code() == session_entry_errc::reentered,
                      "S7/B5: batcher::submit inside a session did not complete with reentered");
            }));
    }
}

asio::awaitable<void> world::nested_awaited(int parent) {
    const int i = new_rec(rec_kind::nested, -1, 1, wait_policy::fifo, placement::caller, -1);
    entries[i].init_seq = ++seq;
    entries[i].model = model_state::rejected;
    (void)parent;
    auto [e, r] = co_await host->with_backend_session(
        session_options{1, wait_policy::fifo, placement::caller}, [](sim_session&) { return 0; },
        tenferro::test::as_tuple(asio::use_awaitable));
    completed<int>(i, e, r, std::nullopt);
}

void world::enter(int s) {
    const entry_spec& spec = sc.entries[s];
    bool is_private = false;
    const int caller = caller_ctx(spec.ctx, is_private, "e" + std::to_string(s));
    if (spec.scope) return enter_scope(s);
    const int i = new_rec(rec_kind::plain, s, spec.permits, spec.wait, spec.where, caller);
    entry_rec& e = entries[i];
    e.private_ctx = is_private;
    (void)is_private;
    trace("initiate " + name(i));
    predict_initiation(i);
    const session_options options{spec.permits, spec.wait, spec.where};
    auto handler = asio::bind_cancellation_slot(
        e.signal.slot(),
        asio::bind_executor(ctx.executor(caller), [this, i](std::exception_ptr ex, session_result<int> r) {
            completed<int>(i, ex, r, 1000 + i);
        }));
    e.initiating = true;
    switch (spec.body) {
    case body_kind::sync:
    case body_kind::throws:
    case body_kind::reenter:
        host->with_backend_session(
            options,
            [this, i, kind = spec.body](sim_session& session) -> int {
                body_start(i, session.permits());
                running_sync.push_back(i);
                if (kind == body_kind::reenter) nested_entry(i);
                running_sync.pop_back();
                body_end(i);
                if (kind == body_kind::throws) throw body_error(i);
                return 1000 + i;
            },
            std::move(handler));
        break;
    case body_kind::async:
        host->with_backend_session(
            options,
            [this, i, n = spec.suspensions](sim_session& session) -> asio::awaitable<int> {
                body_start(i, session.permits());
                for (int k = 0; k < n; ++k) {
                    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                    if (k == 0) co_await nested_awaited(i);
                }
                body_end(i);
                co_return 1000 + i;
            },
            std::move(handler));
        break;
    }
    entries[i].initiating = false;
}

void world::enter_scope(int s) {
    const entry_spec& spec = sc.entries[s];
    bool is_private = false;
    const int caller = spec.ctx >= 0 ? shared[spec.ctx] : -1;
    // (a private scope context was made by enter(); find it again)
    const int ctx_id = caller >= 0 ? caller : static_cast<int>(ctx.executors()) - 1;
    is_private = caller < 0;
    const int i = new_rec(rec_kind::scope, s, 1, wait_policy::fifo, placement::caller, ctx_id);
    entries[i].private_ctx = is_private;
    trace("initiate " + name(i));
    predict_initiation(i);
    auto handler = asio::bind_cancellation_slot(
        entries[i].signal.slot(),
        asio::bind_executor(ctx.executor(ctx_id), [this, i](std::exception_ptr ex, session_result<int> r) {
            completed<int>(i, ex, r, 1000 + i);
        }));
    entries[i].initiating = true;
    host->with_execution_scope(
        [this, i, inner = spec.inner](execution_scope&) -> asio::awaitable<int> {
            body_start(i, 1);
            for (int k = 0; k < inner; ++k) {
                const int j = new_rec(rec_kind::inner, -1, 1, wait_policy::fifo, placement::compute, -1);
                entries[j].init_seq = ++seq;
                const bool admits = !host->poisoned() && !shut_flag;
                entries[j].model = admits ? model_state::granted : model_state::rejected;
                if (admits) ++inner_admits;
                entries[j].poisoned_before_init = poison_flag;
                entries[j].shut_before_init = shut_flag;
                auto [e, r] = co_await host->with_backend_session(
                    [this, j](sim_session&) {
                        body_start(j, 1);
                        body_end(j);
                        return 2000 + j;
                    },
                    tenferro::test::as_tuple(asio::use_awaitable));
                completed<int>(j, e, r, 2000 + j);
            }
            body_end(i);
            co_return 1000 + i;
        },
        std::move(handler));
    entries[i].initiating = false;
}

void world::submit(int k) {
    const item_spec& spec = sc.batch.items[k];
    item_rec& it = items[k];
    it.ctx = caller_ctx(spec.ctx, it.private_ctx, "item" + std::to_string(k));
    it.submitted = true;
    it.seq = ++item_seq;
    it.submitted_at = ctx.now();
    // B1: an item submitted to an idle host and an idle batcher starts its
    // session at once.
    const detail::permit_counters before = counters();
    const bool idle = sc.batch.max_delay == 0 && before.available == before.permits && before.waiting == 0 &&
                      batch_sessions_in_flight == 0 && batch->stats().waiting == 0 && !host->poisoned() && !shut_flag;
    trace("submit item" + std::to_string(k));
    batch->submit(
        k, asio::bind_cancellation_slot(
               it.signal.slot(),
               asio::bind_executor(ctx.executor(it.ctx), [this, k](std::exception_ptr e, session_result<int> r) {
                   item_rec& x = items[k];
                   trace("item" + std::to_string(k) + " completes");
                   check(x.completions++ == 0, "B3: item" + std::to_string(k) + " completed twice");
                   check(ctx.current() == x.ctx, "S6: item" + std::to_string(k) + " completed off its executor");
                   if (r) {
                       check(x.in_batch && *r == k * 10, "B3: item" + std::to_string(k) + " got a wrong value");
                   } else if (!e && r.error().code() == session_entry_errc::cancelled) {
                       check(!x.in_batch,
                             "B4: item" + std::to_string(k) + " was taken into a batch and completed cancelled");
                   } else if (e) {
                       check(x.in_batch,
                             "B3: item" + std::to_string(k) + " got a batch body's exception without being in a batch");
                   }
                   if (x.private_ctx) to_destroy.push_back(x.ctx);
               })));
    if (idle)
        check(counters().admitted > before.admitted,
              "B1: an item submitted while idle did not start its session at once");
}

void world::run_op(const op& o) {
    switch (o.kind) {
    case op_kind::enter:
        return enter(o.index);
    case op_kind::cancel: {
        // The entry's own record (plain or scope) for this spec.
        for (std::size_t i = 0; i < entries.size(); ++i) {
            entry_rec& e = entries[i];
            if ((e.kind == rec_kind::plain || e.kind == rec_kind::scope) && e.spec == o.index) {
                if (e.completions > 0) return;  // (a cancellation after the upcall touches nothing)
                static const asio::cancellation_type types[] = {asio::cancellation_type::terminal,
                                                                asio::cancellation_type::partial,
                                                                asio::cancellation_type::total};
                trace("cancel " + name(static_cast<int>(i)));
                cancel_target = static_cast<int>(i);
                cancel_expect_removed = e.model == model_state::waiting;
                if (cancel_expect_removed) {
                    // S13: it leaves the queue before the permits are re-offered.
                    sync_grants();
                    if (e.model == model_state::waiting) {
                        e.model = model_state::removed;
                        e.cancel_hit_waiting = true;
                        std::erase(model_queue, cancel_target);
                    } else {
                        cancel_expect_removed = false;
                    }
                }
                e.signal.emit(types[sc.entries[o.index].cancel]);
                return;
            }
        }
        return;
    }
    case op_kind::shutdown:
        trace("shutdown");
        shut_flag = true;
        host->shutdown();
        return;
    case op_kind::submit:
        return submit(o.index);
    case op_kind::cancel_item: {
        item_rec& it = items[o.index];
        if (it.completions > 0 || !it.submitted) return;
        trace("cancel item" + std::to_string(o.index));
        it.signal.emit(asio::cancellation_type::terminal);
        return;
    }
    }
}

void world::start() {
    compute = ctx.add_executor("compute", false);
    for (int c = 0; c < sc.shared_ctxs; ++c) shared.push_back(ctx.add_executor("caller" + std::to_string(c), true));
    if (sc.observer != 0) observer = std::make_shared<sim_observer>(this);
    host_options options;
    options.permits = sc.permits;
    options.observer = observer;
    options.compute_executor = ctx.executor(compute);
    host = std::make_unique<host_type>(std::move(options), sim_backend{this});
    last = counters();
    applied_admitted = last.admitted;
    items.resize(sc.batch.items.size());
    for (const item_spec& it : sc.batch.items) any_item_cancel = any_item_cancel || it.cancel;
    if (sc.batch.on) {
        rec_host = std::make_unique<recording_host>(recording_host{this});
        batch_options bo;
        bo.max_batch = sc.batch.max_batch;
        bo.session.where = sc.batch.where;
        if (sc.batch.max_delay > 0) {
            bo.max_delay = std::chrono::microseconds(sc.batch.max_delay);
            bo.timer = std::make_shared<sim_timer>(ctx, ctx.add_executor("batch-timer", true));
        }
        auto check_batch = [this](std::span<int> in) {
            const int b = static_cast<int>(batches_run++);
            check(!in.empty(), "B2: a batch body received no items");
            check(in.size() <= sc.batch.max_batch, "B2: a batch exceeds max_batch");
            // B6: a partial batch is entered only once its first item has
            // waited max_delay (cancellations can thin a full one: not then).
            if (sc.batch.max_delay > 0 && !in.empty() && in.size() < sc.batch.max_batch && !any_item_cancel)
                check(ctx.now() >= items[in.front()].submitted_at + sc.batch.max_delay,
                      "B6: a partial batch started " + std::to_string(ctx.now() - items[in.front()].submitted_at) +
                          " us after its first item, before max_delay");
            std::uint64_t prev = 0;
            for (int k : in) {
                item_rec& x = items[k];
                check(!x.in_batch, "B3: item" + std::to_string(k) + " taken into two batches");
                check(x.completions == 0, "B4: item" + std::to_string(k) + " taken after it completed");
                x.in_batch = true;
                check(x.seq > prev, "B2: a batch's items are not in submission order");
                prev = x.seq;
                if (sc.batch.where == placement::compute) {
                    check(x.seq > max_compute_item_seq, "B2: an item was taken before an item submitted earlier");
                    max_compute_item_seq = std::max(max_compute_item_seq, x.seq);
                }
            }
            if (b == sc.batch.throw_on_batch) throw body_error(-1);
            std::vector<int> out;
            for (int k : in) out.push_back(k * 10);
            if (b == sc.batch.wrong_count_on_batch) out.push_back(0);
            return out;
        };
        if (sc.batch.async) {
            batch = std::make_unique<batcher_type>(
                *rec_host, bo, [check_batch](sim_session&, std::span<int> in) -> asio::awaitable<std::vector<int>> {
                    // (Checked before the suspension: the batch was taken
                    // just now, and B2's order is the order of the takes.)
                    std::vector<int> out = check_batch(in);
                    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                    co_return out;
                });
        } else {
            batch = std::make_unique<batcher_type>(
                *rec_host, bo, [check_batch](sim_session&, std::span<int> in) { return check_batch(in); });
        }
    }
    // Post the operations: each on its caller's context (FIFO there), at its time.
    for (const op& o : sc.ops) {
        int c = 0;
        if (o.kind == op_kind::enter || o.kind == op_kind::cancel)
            c = sc.entries[o.index].ctx;
        else if (o.kind == op_kind::submit || o.kind == op_kind::cancel_item)
            c = sc.batch.items[o.index].ctx;
        // A private caller's operations go through the driver's first context;
        // the entry itself binds its private one.
        const int exec = shared[c < 0 ? 0 : c];
        auto fn = [this, o] { run_op(o); };
        if (o.at == 0)
            ctx.execute(exec, true, fn);
        else
            ctx.post_at(exec, o.at, fn);
    }
}

bool world::quiescence_checks() {
    // S14 and S1 at quiescence.
    const detail::permit_counters c = counters();
    check(c.available == c.permits, "S14: at quiescence " + std::to_string(c.available) + " of " +
                                        std::to_string(c.permits) + " permits are available");
    check(c.admitted == c.completed,
          "S14: admitted " + std::to_string(c.admitted) + " != completed " + std::to_string(c.completed));
    check(c.waiting == 0, "S14: waiters left at quiescence (a lost wake-up)");
    for (std::size_t i = 0; i < entries.size(); ++i)
        check(entries[i].completions == 1, "S1: " + name(static_cast<int>(i)) + " never completed");
    check(sessions_open == 0, "sessions left open at quiescence");
    for (std::size_t k = 0; k < items.size(); ++k)
        if (items[k].submitted) check(items[k].completions == 1, "B3: item" + std::to_string(k) + " never completed");
    if (batch) {
        const batch_stats s = batch->stats();
        check(s.submitted == s.completed + s.cancelled + s.rejected,
              "batch stats: submitted != completed + cancelled + rejected");
        check(s.waiting == 0, "batch stats: items waiting at quiescence");
    }
    for (int id = 0; id < static_cast<int>(ctx.executors()); ++id)
        check(ctx.tracked_work(id) == 0, "S16/S14: tracked work left on " + ctx.name(id) + " at quiescence");
    return failure.empty();
}

struct run_outcome {
    bool ok;
    std::string failure;
    std::uint64_t steps;
};

constexpr std::uint64_t max_steps = 20000;

run_outcome run_scenario(const scenario& sc, chooser& choose, bool verbose) {
    auto w = std::make_unique<world>(sc, choose, verbose);
    w->start();
    while (w->failure.empty() && w->ctx.steps() < max_steps) {
        if (!w->ctx.step()) break;
        for (int id : w->to_destroy) w->ctx.destroy_executor(id);
        w->to_destroy.clear();
        w->after_step();
    }
    if (w->failure.empty() && w->ctx.steps() >= max_steps)
        w->fail("no quiescence after " + std::to_string(max_steps) + " steps (livelock)");
    if (w->failure.empty()) w->quiescence_checks();
    const std::uint64_t steps = w->ctx.steps();
    if (!w->failure.empty()) {
        // The host cannot be torn down (its destructor would wait for leaked
        // permits): leave it, the process reports and exits.
        std::string f = w->failure;
        (void)w.release();
        return {false, f, steps};
    }
    w->batch.reset();
    w->host.reset();
    w->ctx.drop_everything();
    return {true, {}, steps};
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
    // 8. Systematically: 3 entries (e0, e2 on one caller context, e1 on
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

std::string join(const std::vector<std::uint32_t>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s.empty() ? "-" : s;
}

std::vector<std::uint32_t> parse_choices(const char* s) {
    std::vector<std::uint32_t> v;
    if (std::strcmp(s, "-") == 0) return v;
    while (*s != 0) {
        v.push_back(static_cast<std::uint32_t>(std::strtoul(s, const_cast<char**>(&s), 10)));
        if (*s == ',') ++s;
    }
    return v;
}

/// The scenario with only the operations at `keep` (indices into its ops).
scenario restrict_ops(const scenario& sc, const std::vector<std::uint32_t>& keep) {
    scenario r = sc;
    r.ops.clear();
    for (std::uint32_t k : keep)
        if (k < sc.ops.size()) r.ops.push_back(sc.ops[k]);
    return r;
}

std::string rule_of(const std::string& failure) { return failure.substr(0, failure.find(':')); }

/// Shrinks a failing seed's operation list: drops one operation at a time
/// while some schedule (chooser seeds seed .. seed + 99) still breaks the same
/// rule. Prints the smallest list found and its replay command.
void shrink(std::uint64_t seed, const scenario& sc, const std::string& failure) {
    std::vector<std::uint32_t> keep;
    for (std::uint32_t k = 0; k < sc.ops.size(); ++k) keep.push_back(k);
    std::uint64_t schedule = seed;
    std::string last = failure;
    const std::string rule = rule_of(failure);
    for (bool progress = true; progress;) {
        progress = false;
        for (std::size_t k = 0; k < keep.size(); ++k) {
            std::vector<std::uint32_t> candidate = keep;
            candidate.erase(candidate.begin() + static_cast<std::ptrdiff_t>(k));
            const scenario smaller = restrict_ops(sc, candidate);
            for (std::uint64_t t = seed; t < seed + 100; ++t) {
                chooser choose(t);
                const run_outcome r = run_scenario(smaller, choose, false);
                if (!r.ok && rule_of(r.failure) == rule) {
                    keep = std::move(candidate);
                    schedule = t;
                    last = r.failure;
                    progress = true;
                    break;
                }
            }
            if (progress) break;
        }
    }
    std::printf(
        "shrunk: %zu of %zu operations still fail (%s)\nscenario: %s\nreplay: ./dev sim --seed %llu --keep-ops %s "
        "--schedule %llu --verbose\n",
        keep.size(), sc.ops.size(), last.c_str(), describe(restrict_ops(sc, keep)).c_str(),
        static_cast<unsigned long long>(seed), join(keep).c_str(), static_cast<unsigned long long>(schedule));
}

int run_seeds(std::uint64_t first, std::uint64_t count, bool verbose, const char* keep_ops,
              const std::uint64_t* schedule, bool do_shrink) {
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t steps = 0;
    for (std::uint64_t s = first; s < first + count; ++s) {
        scenario sc = generate(s);
        if (keep_ops != nullptr) sc = restrict_ops(sc, parse_choices(keep_ops));
        if (verbose) std::printf("seed %llu:\n%s\n", static_cast<unsigned long long>(s), describe(sc).c_str());
        chooser choose(schedule != nullptr ? *schedule : s);
        const run_outcome r = run_scenario(sc, choose, verbose);
        steps += r.steps;
        if (!r.ok) {
            std::printf(
                "sim: FAILED at seed %llu (after %llu seeds): %s\nscenario: %s\nchoices: %s\nreplay: ./dev sim --seed "
                "%llu --verbose\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s - first + 1), r.failure.c_str(),
                describe(sc).c_str(), join(choose.taken()).c_str(), static_cast<unsigned long long>(s));
            std::fflush(stdout);
            if (do_shrink && keep_ops == nullptr) shrink(s, sc, r.failure);
            std::fflush(stdout);
            std::_Exit(1);
        }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("sim: %llu seeds from %llu passed, %llu steps, %.2f s (%.0f seeds/s)\n",
                static_cast<unsigned long long>(count), static_cast<unsigned long long>(first),
                static_cast<unsigned long long>(steps), secs, count / (secs > 0 ? secs : 1e-9));
    return 0;
}

int run_exhaustive(int only, const char* choices, bool verbose, std::uint64_t cap) {
    const std::vector<scenario> configs = exhaustive_configs();
    std::uint64_t total = 0, configs_run = 0, capped = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < static_cast<int>(configs.size()); ++c) {
        if (only >= 0 && c != only) continue;
        const scenario& sc = configs[c];
        chooser choose(choices != nullptr ? parse_choices(choices) : std::vector<std::uint32_t>{});
        std::uint64_t n = 0;
        bool complete = true;
        do {
            ++n;
            const run_outcome r = run_scenario(sc, choose, verbose);
            if (!r.ok) {
                std::printf(
                    "sim: FAILED exhaustive config %d (%s), schedule %llu (%llu schedules in all): %s\nscenario: "
                    "%s\nreplay: ./dev sim --exhaustive --config %d --choices %s --verbose\n",
                    c, sc.name.c_str(), static_cast<unsigned long long>(n), static_cast<unsigned long long>(total + n),
                    r.failure.c_str(), describe(sc).c_str(), c, join(choose.taken()).c_str());
                std::fflush(stdout);
                std::_Exit(1);
            }
            if (choices != nullptr) break;
            if (n >= cap) {
                complete = false;
                break;
            }
        } while (choose.advance());
        total += n;
        ++configs_run;
        if (!complete) ++capped;
        if (verbose || only >= 0 || sc.name.rfind("grid", 0) != 0)
            std::printf("sim: exhaustive config %d (%s): %llu schedules explored%s\n", c, sc.name.c_str(),
                        static_cast<unsigned long long>(n), complete ? " (all)" : " (capped)");
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "sim: exhaustive: %llu configurations, %llu schedules explored (%llu configurations capped) in %.2f s\n",
        static_cast<unsigned long long>(configs_run), static_cast<unsigned long long>(total),
        static_cast<unsigned long long>(capped), secs);
    return 0;
}

}  // namespace
}  // namespace tenferro::sim

int main(int argc, char** argv) {
    using namespace tenferro::sim;
    std::uint64_t first = 1, count = 2000;
    if (const char* env = std::getenv("TENFERRO_SIM_SEEDS")) count = std::strtoull(env, nullptr, 10);
    bool exhaustive = false, verbose = false, one = false;
    int config = -1;
    const char* choices = nullptr;
    const char* keep_ops = nullptr;
    std::uint64_t schedule = 0;
    bool has_schedule = false, do_shrink = true;
    std::uint64_t cap = 2'000'000;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "sim_test: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--seed") {
            first = std::strtoull(next(), nullptr, 10);
            one = true;
        } else if (a == "--seeds") {
            count = std::strtoull(next(), nullptr, 10);
        } else if (a == "--first") {
            first = std::strtoull(next(), nullptr, 10);
        } else if (a == "--exhaustive") {
            exhaustive = true;
        } else if (a == "--config") {
            config = std::atoi(next());
        } else if (a == "--choices") {
            choices = next();
        } else if (a == "--keep-ops") {
            keep_ops = next();
        } else if (a == "--schedule") {
            schedule = std::strtoull(next(), nullptr, 10);
            has_schedule = true;
        } else if (a == "--no-shrink") {
            do_shrink = false;
        } else if (a == "--cap") {
            cap = std::strtoull(next(), nullptr, 10);
        } else if (a == "--verbose") {
            verbose = true;
        } else {
            std::fprintf(
                stderr,
                "usage: sim_test [--seeds N] [--first S] [--no-shrink] | --seed S [--keep-ops i,j,..] [--schedule T] "
                "[--verbose] | --exhaustive [--config C] [--choices a,b,..] [--cap N]\n");
            return 2;
        }
    }
    if (exhaustive) return run_exhaustive(config, choices, verbose, cap);
    return run_seeds(first, one ? 1 : count, verbose, keep_ops, has_schedule ? &schedule : nullptr, do_shrink);
}
