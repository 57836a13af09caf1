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
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

namespace tenferro::sim {

struct world;

/// The test backend's session: counts itself in and out.
class sim_session {
public:
    sim_session(world* w, const session_grant& g);
    sim_session(sim_session&& other) noexcept
        : w_(std::exchange(other.w_, nullptr)),
          permits_(other.permits_),
          bytes_(other.bytes_),
          group_(other.group_),
          executor_(std::move(other.executor_)),
          stop_(std::move(other.stop_)) {}
    sim_session& operator=(sim_session&&) = delete;
    ~sim_session();
    std::size_t permits() const noexcept { return permits_; }
    std::size_t bytes() const noexcept { return bytes_; }
    std::size_t group() const noexcept { return group_; }
    /// S20: the grant's token (session_grant::stop), as the CPU backend's
    /// session keeps it.
    const std::stop_token& stop_token() const noexcept { return stop_; }

private:
    world* w_;
    std::size_t permits_, bytes_, group_;
    asio::any_io_executor executor_;
    std::stop_token stop_;
};

struct sim_backend {
    using session_type = sim_session;
    world* w;
    std::string_view name() const noexcept { return "sim"; }
    session_result<sim_session> open_session(const session_grant& g);
};

/// `inspectable`: the world reads the permit counters after every step.
using host_type = test::inspectable<session_host<sim_backend>>;

/// A timer on the simulated clock (admission_timer), for the batcher's delay
/// (batch_options::timer) and the host's deadlines (host_options::timer):
/// each wake-up is a timer of the simulation, fired when the scheduler
/// chooses to move time on; replaced wake-ups still fire (what asked for them
/// must find nothing due then). It records the wake-ups asked and not yet
/// run, and whether one ran in this step, so that the world can check P4's
/// timeliness in virtual time.
struct sim_timer final : admission_timer {
    sim_context* ctx;
    int exec;
    std::multiset<std::uint64_t> pending;  // virtual microseconds
    bool fired = false;                     // a wake-up ran in this step
    sim_timer(sim_context& c, int e) : ctx(&c), exec(e) {}
    std::chrono::steady_clock::time_point now() override {
        return std::chrono::steady_clock::time_point(std::chrono::microseconds(ctx->now()));
    }
    void wake_at(std::chrono::steady_clock::time_point when, std::function<void()> fire) override {
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(when.time_since_epoch()).count();
        const std::uint64_t at = us < 0 ? 0 : static_cast<std::uint64_t>(us);
        pending.insert(at);
        ctx->post_at(exec, at, [this, at, f = std::move(fire)] {
            pending.erase(pending.find(at));
            fired = true;
            f();
        });
    }
};

struct body_error : std::runtime_error {
    explicit body_error(int i) : std::runtime_error("body " + std::to_string(i)), id(i) {}
    int id;
};

enum class rec_kind : unsigned char { plain, scope, inner, nested, batch_session };
enum class model_state : unsigned char { none, waiting, granted, removed, rejected, expired };

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
    // A cancellation fired after its grant and before its body started (S20):
    // the body must never start, and the entry completes without a value.
    bool cancel_before_start = false;
    // A batch session, not started, when one of the batcher's items was
    // cancelled: the items it took at its grant (caller placement, B5) may
    // all be gone, and B7 then keeps its body from starting (cancelled).
    bool b7_before_start = false;
    // Cancelled after its grant while the model took a failed open_session
    // for its runner's (open_failed() guesses by executor, and a caller-placed
    // batch session's executor is not known to it): cancelled is allowed.
    bool cancel_after_failed_open = false;
    bool poisoned_before_init = false, shut_before_init = false;
    bool fits_host = true;  // permits and group valid at initiation (S11/S12's codes then apply)
    // Admission policies.
    std::size_t group = 0, bytes = 0;
    std::uint64_t deadline = 0;  // virtual microseconds, absolute; 0: none
    bool late = false;           // rejected at its initiation with deadline_exceeded (P4, P5)
    bool shrunk_out = false;     // a waiter a resize left too large (P7)
    // Stopping (S20). The session's token, from its body's start; the first
    // cause of a stop the model expects of the running body (a cancellation
    // of type terminal or partial, B7's last item, or the host's deadline
    // timer waking at or after its deadline); how the body ended.
    bool stop_at_deadline = true;
    bool has_token = false;
    std::stop_token token;
    enum class cause : unsigned char { none, cancel, deadline } stop_cause = cause::none;
    std::uint64_t stop_asked_step = 0;  // the scheduler's step of the first cause
    int steps_done = 0, steps_at_request = 0;  // the body's work steps, in all and at the request
    bool ended_by_stop = false;  // the body threw session_stopped after it was asked
    bool caught = false;         // it caught the stop and returned
    bool rogue_thrown = false;   // it threw session_stopped unasked
    asio::cancellation_signal signal;
};

struct item_rec {
    int ctx = -1;
    bool private_ctx = false;
    std::uint64_t seq = 0;
    bool submitted = false, in_batch = false;
    bool cancelled = false;  // a terminal cancellation was emitted on it
    int batch = -1;          // the batch that took it
    int completions = 0;
    bool rejected_at_submit = false;
    std::uint64_t submitted_at = 0;  // virtual time
    asio::cancellation_signal signal;
};

/// What the runs exercised of the admission policies, summed over every run
/// of the process: printed by the driver, so that a change that stops the
/// scenarios from reaching a rule shows.
struct policy_coverage {
    std::uint64_t expired_waiting = 0;  // left their queue at their deadline
    std::uint64_t expired_at_start = 0; // granted in time, started late
    std::uint64_t rejected_late = 0;    // at initiation (P5, or a deadline already passed)
    std::uint64_t shrunk_out = 0;       // waiters a resize excluded
    std::uint64_t held_by_bytes = 0;    // steps where a head fit the permits but not the bytes
    std::uint64_t other_group_grants = 0;  // grants from a waiting queue of group > 0
    std::uint64_t resizes = 0;
    // S20
    std::uint64_t stopped_by_cancel = 0, stopped_by_deadline = 0, stopped_b7 = 0;
    std::uint64_t caught = 0, rogue = 0, rethrown = 0, total_running = 0, self_emits = 0;
    std::uint64_t cancelled_before_start = 0;
    std::uint64_t max_steps_to_completion = 0;  // scheduler steps from a stop's request to its completion
};
policy_coverage& coverage();

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
    // The permits the observer was told of (S20: on_released is called for
    // an entry cancelled between its grant and its start if on_admitted was).
    std::uint64_t observed_admitted = 0, observed_released = 0;
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
    // Admission policies: the grants applied per group, the host's clock, and
    // the entries that completed with deadline_exceeded.
    std::vector<std::uint64_t> applied_group_admitted;
    std::vector<int> init_grants_in;  // per group, this step
    std::shared_ptr<sim_timer> host_timer;
    std::uint64_t deadline_completions = 0;
    // S20: entries completed as stopped (in all and per group), and the batch
    // session each batch ran in (B7).
    std::uint64_t stop_completions = 0;
    std::uint64_t cancelled_completions = 0;  // `cancelled` of bodies that never ran
    std::vector<std::uint64_t> group_stop_completions;
    std::vector<int> batch_entry;
    int current_batch_entry = -1;

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

    std::size_t groups() const { return host->groups(); }
    bool due(const entry_rec& e) const { return e.deadline != 0 && e.deadline <= ctx.now(); }
    bool fits(const entry_rec& e, const detail::permit_counters& c) const {
        // (The queue's own test: after a shrink, nothing fits until the held
        // bytes are back within the budget, not even an entry of 0 bytes.)
        return e.permits <= c.available &&
               (c.memory_budget == 0 || (c.held_bytes <= c.memory_budget && e.bytes <= c.memory_budget - c.held_bytes));
    }

    /// Predicts admission at initiation (S4: no barging; S10; S9; S11; S12;
    /// P1: a group out of range; P4: a deadline already passed; P6: bytes over
    /// the budget; P7: permits over the current size). An early rejection
    /// (P5) depends on the host's measured durations: initiated() learns it.
    void predict_initiation(int i);

    /// After the initiating call: an entry the model queued that its group's
    /// queue did not take was rejected early (P5), and only that can explain it.
    void initiated(int i, const group_stats& before);

    /// The model's waiters of group `g`, in initiation order.
    std::vector<int> waiting_in(std::size_t g) const;

    /// Applies the grants the counters show and the model has not seen yet,
    /// group by group: each group's waiters in FIFO order (S4, P1), where a
    /// waiter whose deadline has passed is never granted: the queue expired
    /// it on its way to the ones granted behind it (P4). After every step,
    /// and when a body starts (a batch session with no items left runs its
    /// body inline, in the step that granted it). Grants of one step in
    /// several groups share one sequence number: their order between groups
    /// is the fair queue's (P2), which the model does not compute
    /// (permit_queue_policy_test steps it exactly).
    void sync_grants();

    /// Applies the expiries the groups' queues show: a group holding fewer
    /// waiters than the model lost the earliest of its waiters whose deadline
    /// has passed (the timer expires every due waiter; a grant, the due
    /// heads). Fewer due waiters than left is a waiter gone before its
    /// deadline (P4).
    void sync_expiries();

    /// After every step: apply what the counters say happened, then check.
    void after_step();

    // -- bodies ---------------------------------------------------------------

    void body_start(int i, std::size_t granted_permits, const sim_session* session = nullptr);
    /// open_session failed on the current executor: the runner that called
    /// it belongs to the earliest granted, unstarted entry bound there (a
    /// serial executor runs its runners in hand-off order).
    void open_failed();
    void body_end(int i) {
        entries[i].ended = true;
        trace("body of " + name(i) + " ends");
    }

    // -- stopping (S20) -------------------------------------------------------

    /// An await of body i threw `e`: it must be the stop asked of its entry
    /// (S20: operation_aborted, with a cause in the model).
    void check_aborted(int i, const asio_system_error& e);
    /// Body i ends by its await's cancellation (S20): checked, and recorded
    /// as ended by its stop.
    void body_aborted(int i, const asio_system_error& e);
    /// The session each running scope awaits (scope record → inner record).
    std::map<int, int> running_inner;

    /// A body looks at its session's stop (as throw_if_stop_requested does):
    /// asked exactly when the model has a cause for it. Throws
    /// session_stopped when asked.
    void stop_point(int i, const sim_session& s);
    /// Records a cause of a stop of running entry i (the first one counts),
    /// and checks that the token shows exactly the causes the model has.
    void stop_cause(int i, entry_rec::cause c);
    void check_token(int i, const std::string& when);
    /// Emits a cancellation of type t on entry i's slot, the model first.
    void cancel_entry(int i, asio::cancellation_type t);

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
        if (e.ended_by_stop) {
            // S20: a body that ended by the stop asked of it completes with
            // the first cause's code, counted stopped.
            const session_entry_errc want = e.stop_cause == entry_rec::cause::deadline
                                                ? session_entry_errc::deadline_exceeded
                                                : session_entry_errc::cancelled;
            check(!ex && !r,
                  "S20: the body of " + name(i) + " ended by its stop, but the entry completed with " + outcome);
            if (!ex && !r)
                check(r.error().code() == want,
                      "S20: " + name(i) + " was stopped first by its " +
                          (e.stop_cause == entry_rec::cause::deadline ? "deadline" : "cancellation") +
                          " but completed with " + outcome);
            ++stop_completions;
            if (e.group < group_stop_completions.size()) ++group_stop_completions[e.group];
            coverage().max_steps_to_completion =
                std::max(coverage().max_steps_to_completion, ctx.steps() - e.stop_asked_step);
            if (e.private_ctx) to_destroy.push_back(e.ctx);
            return;
        }
        if (ex) {
            check(e.started && e.ended, "S2: " + name(i) + " completed with an exception but its body did not run");
            try {
                std::rethrow_exception(ex);
            } catch (const body_error& b) {
                check(b.id == i, "S2: " + name(i) + " got another body's exception");
            } catch (const std::length_error&) {
                check(e.kind == rec_kind::batch_session, "S2: unexpected length_error");
            } catch (const session_stopped&) {
                // S20/S2: a session_stopped nobody asked for is the body's own.
                check(e.rogue_thrown, "S20: " + name(i) + " completed with a session_stopped its body did not throw");
                check(e.stop_cause == entry_rec::cause::none,
                      "S20: " + name(i) + " was asked to stop and ended by it, but completed with the exception");
            } catch (...) {
                fail("S2: " + name(i) + " completed with a foreign exception");
            }
        } else if (r) {
            check(e.started && e.ended, "S1: " + name(i) + " completed with a value but its body did not run");
            check(e.model != model_state::expired, "P4: " + name(i) + " expired in its queue but its body ran");
            if constexpr (std::equality_comparable<R>) {
                if (expect) check(*r == *expect, "S2: " + name(i) + " completed with the wrong value");
            }
        } else {
            const session_entry_errc code = r.error().code();
            check(!e.started, "S3: " + name(i) + " completed with an admission error after its body started");
            if (code == session_entry_errc::deadline_exceeded) {
                ++deadline_completions;
                ++(e.late                            ? coverage().rejected_late
                   : e.model == model_state::granted ? coverage().expired_at_start
                                                     : coverage().expired_waiting);
                check(e.deadline != 0 && (e.late || ctx.now() >= e.deadline),
                      "P4: " + name(i) + " completed with deadline_exceeded before its deadline");
                check(e.model != model_state::waiting,
                      "P4: " + name(i) + " completed with deadline_exceeded while the model has it waiting");
            }
            if (e.model == model_state::expired)
                check(code == session_entry_errc::deadline_exceeded,
                      "P4: " + name(i) + " left its queue at its deadline but completed with " + outcome);
            if (e.shrunk_out) ++coverage().shrunk_out;
            if (e.shrunk_out)
                check(code == session_entry_errc::incompatible_context,
                      "P7: " + name(i) + " no longer fit the host but completed with " + outcome);
            if (e.kind == rec_kind::nested)
                check(code == session_entry_errc::reentered, "S7: a nested entry did not complete with reentered");
            if (code == session_entry_errc::cancelled) ++cancelled_completions;
            if (code == session_entry_errc::cancelled)
                check(e.cancel_hit_waiting || e.cancel_before_start || e.b7_before_start || e.cancel_after_failed_open,
                      "S13/S20: " + name(i) + " completed cancelled without being cancelled before its body started");
            if ((e.poisoned_before_init || e.shut_before_init) && e.kind != rec_kind::nested && e.fits_host)
                check(code == session_entry_errc::resource_poisoned || code == session_entry_errc::executor,
                      "S11/S12: " + name(i) + " initiated after poisoning/shutdown completed with " + outcome);
        }
        if (e.cancel_hit_waiting)
            check(!r && !ex && r.error().code() == session_entry_errc::cancelled,
                  "S13: " + name(i) + " was cancelled while waiting but completed with " + outcome);
        if (e.cancel_before_start)  // (poisoning, a deadline or a dropped runner may decide first)
            check(!r && !ex,
                  "S20: " + name(i) + " was cancelled before its body started but completed with " + outcome);
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
    /// How a `steps` body ends: by its stop, by the stop caught, by a
    /// session_stopped of its own, or with its value.
    int end_of_steps(int i, const entry_spec& spec, bool stopped);
    void enter_scope(int s);
    void nested_entry(int parent);
    asio::awaitable<void> nested_awaited(int parent);
    /// Holds the calling async body for `us` virtual microseconds.
    asio::awaitable<void> sleep_for(std::uint64_t us);
    void resize(const op& o);
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
    void on_admitted(std::size_t n) override {
        w->observed_admitted += n;
        hook();
    }
    void on_released(std::size_t n) override {
        w->observed_released += n;
        hook();
    }
};

/// The batch session's completion as the recording host relays it: on the
/// batcher's executor, recorded, then the batcher's own. It forwards
/// bind_entry, by which the session's entry tells its batch where it is (B7:
/// the batcher stops the session through it).
template <class H>
struct recorded_completion {
    world* w;
    int i;
    H h;
    using executor_type = asio::associated_executor_t<H>;
    executor_type get_executor() const noexcept { return asio::get_associated_executor(h); }
    template <class E>
    void bind_entry(E* e) const noexcept
        requires requires(const H& x) { x.bind_entry(e); }
    {
        h.bind_entry(e);
    }
    void operator()(std::exception_ptr e, session_result<detail::batch_done> r) {
        --w->batch_sessions_in_flight;
        w->completed<detail::batch_done>(i, e, r, std::nullopt);
        std::move(h)(std::move(e), std::move(r));
    }
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
        w->entries[i].group = o.group;
        w->entries[i].bytes = o.bytes;
        if (o.where == placement::caller) w->entries[i].target = -1;  // the first item's executor
        ++w->batch_sessions_in_flight;
        const int cap = static_cast<int>(std::max<std::size_t>(1, w->sc.permits / std::max<std::size_t>(1, o.permits)));
        w->check(w->batch_sessions_in_flight <= cap,
                 "B5: the batcher holds more sessions than the host has permits for");
        w->predict_initiation(i);
        recorded_completion<std::decay_t<Token>> done{w, i, std::forward<Token>(token)};
        using R = std::invoke_result_t<F&, sim_session&>;
        world* wp = w;
        w->entries[i].initiating = true;
        if constexpr (std::is_same_v<R, asio::awaitable<detail::batch_done>>) {
            w->host->with_backend_session(
                o,
                [wp, i, f = std::forward<F>(f)](sim_session& s) mutable -> asio::awaitable<detail::batch_done> {
                    wp->body_start(i, s.permits(), &s);
                    wp->current_batch_entry = i;
                    bool stopped = false;
                    detail::batch_done d{};
                    try {
                        d = co_await f(s);
                    } catch (const session_stopped&) {
                        stopped = true;  // (B7: its batch body looked, below)
                    }
                    wp->body_end(i);
                    if (stopped) {
                        wp->entries[i].ended_by_stop = true;
                        ++coverage().stopped_b7;
                        throw session_stopped();
                    }
                    co_return d;
                },
                std::move(done));
        } else {
            w->host->with_backend_session(
                o,
                [wp, i, f = std::forward<F>(f)](sim_session& s) mutable {
                    wp->body_start(i, s.permits(), &s);
                    wp->current_batch_entry = i;
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
