#pragma once
// The world of one simulated run: the host over a counting backend, the
// batcher, the callers' executors, and the model the run is checked against
// after every step (the FIFO queue's predicted grants, the bodies' start and
// end, every completion).

#include "scenario.hpp"
#include "sim_executor.hpp"

#include <tenferro/batcher.hpp>
#include <tenferro/session_host.hpp>
#include "host_internals.hpp"

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

/// `inspectable`: the world reads the permit counters after every step.
using host_type = test::inspectable<session_host<sim_backend>>;

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
    detail::permit_counters counters() { return host->core().queue().counters(); }

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

struct run_outcome {
    bool ok;
    std::string failure;
    std::uint64_t steps;
};

/// Runs `sc` under the schedule `choose` picks until quiescence, a failed
/// check, or a step limit (a livelock).
run_outcome run_scenario(const scenario& sc, chooser& choose, bool verbose);

}  // namespace tenferro::sim
