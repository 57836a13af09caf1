// The world of one simulated run: its operations, its backend and observer,
// the recording host of the batcher, and the run loop.

#include "world.hpp"

namespace tenferro::sim {

namespace {
const asio::cancellation_type cancel_types[] = {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                                                asio::cancellation_type::total};
}  // namespace

sim_session::sim_session(world* w, const session_grant& g)
    : w_(w), permits_(g.permits), bytes_(g.bytes), group_(g.group), executor_(g.executor), stop_(g.stop) {
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

asio::awaitable<void> world::sleep_for(std::uint64_t us) {
    const int here = ctx.current();
    co_await asio::async_initiate<const asio::use_awaitable_t<>, void()>(
        [this, here, us](auto handler) {
            ctx.post_at(here, ctx.now() + us, [h = std::move(handler)]() mutable { std::move(h)(); });
        },
        asio::use_awaitable);
}

namespace {

session_options options_of(const entry_spec& spec, std::uint64_t now) {
    session_options o{spec.permits, spec.wait, spec.where};
    o.group = spec.group;
    o.bytes = spec.bytes;
    if (spec.deadline != 0)
        o.deadline = std::chrono::steady_clock::time_point(std::chrono::microseconds(now + spec.deadline));
    o.stop_at_deadline = spec.stop_at_deadline;
    return o;
}

const char* cause_name(entry_rec::cause c) {
    return c == entry_rec::cause::none ? "none" : c == entry_rec::cause::cancel ? "a cancellation" : "its deadline";
}

}  // namespace

void world::check_token(int i, const std::string& when) {
    const entry_rec& e = entries[i];
    if (!e.has_token || !e.started || e.ended) return;
    const bool asked = e.token.stop_requested();
    const bool expected = e.stop_cause != entry_rec::cause::none;
    if (asked != expected)
        fail(std::string("S20: ") + (asked ? "the running body of " + name(i) + " was asked to stop with no cause " +
                                                 "(terminal or partial cancellation, B7, its deadline) " + when
                                           : "the running body of " + name(i) + " was not asked to stop " + when +
                                                 ", though " + cause_name(e.stop_cause) + " asked first"));
}

void world::stop_cause(int i, entry_rec::cause c) {
    entry_rec& e = entries[i];
    if (!e.started || e.ended || e.stop_cause != entry_rec::cause::none) return;
    trace(name(i) + ": stop asked by " + cause_name(c));
    e.stop_cause = c;
    e.stop_asked_step = ctx.steps();
    e.steps_at_request = e.steps_done;
    // S20: a scope's stop reaches the session running inside it; one granted
    // and not yet started never starts.
    if (const auto inner = running_inner.find(i); inner != running_inner.end()) {
        entry_rec& in = entries[inner->second];
        if (in.model == model_state::granted && !in.started && !in.open_failed) in.cancel_before_start = true;
    }
}

void world::check_aborted(int i, const asio_system_error& e) {
    check(e.code() == asio::error::operation_aborted,
          "S20: an await of the body of " + name(i) + " failed with " + e.code().message());
    check(entries[i].stop_cause != entry_rec::cause::none,
          "S20: an await of the body of " + name(i) + " was cancelled, but nothing asked it to stop");
}

void world::body_aborted(int i, const asio_system_error& e) {
    check_aborted(i, e);
    entry_rec& r = entries[i];
    r.ended_by_stop = true;
    ++(r.stop_cause == entry_rec::cause::deadline ? coverage().stopped_by_deadline : coverage().stopped_by_cancel);
    body_end(i);
}

void world::stop_point(int i, const sim_session& s) {
    entry_rec& e = entries[i];
    check(e.has_token, "S20: " + name(i) + " looks at a stop it has no token for");
    check_token(i, "at its next look");
    if (!s.stop_token().stop_requested()) return;
    // The bound: the body throws at its first look after the request, so
    // at most the one step that was in progress ran after it.
    check(e.steps_done - e.steps_at_request <= 1, "S20: the body of " + name(i) + " ran " +
                                                      std::to_string(e.steps_done - e.steps_at_request) +
                                                      " steps after it was asked to stop");
    trace("body of " + name(i) + " sees its stop");
    throw session_stopped();
}

void world::cancel_entry(int i, asio::cancellation_type t) {
    entry_rec& e = entries[i];
    trace("cancel " + name(i) +
          (t == asio::cancellation_type::terminal  ? " (terminal)"
           : t == asio::cancellation_type::partial ? " (partial)"
                                                   : " (total)"));
    cancel_target = i;
    cancel_expect_removed = e.model == model_state::waiting;
    if (cancel_expect_removed) {
        // S13: it leaves the queue before the permits are re-offered.
        sync_grants();
        sync_expiries();
        if (e.model == model_state::waiting) {
            e.model = model_state::removed;
            e.cancel_hit_waiting = true;
            std::erase(model_queue, cancel_target);
        } else {
            cancel_expect_removed = false;
        }
    }
    // S20: granted, its body not started (its runner not run): any
    // cancellation means the body never starts.
    if (e.model == model_state::granted && !e.started && !e.open_failed) {
        e.cancel_before_start = true;
        ++coverage().cancelled_before_start;
    }
    if (e.model == model_state::granted && !e.started && e.open_failed) e.cancel_after_failed_open = true;
    // While it runs: terminal or partial asks it to stop, total does not.
    const bool running = e.started && !e.ended;
    if (running &&
        (t & (asio::cancellation_type::terminal | asio::cancellation_type::partial)) != asio::cancellation_type::none)
        stop_cause(i, entry_rec::cause::cancel);
    else if (running && e.has_token)
        ++coverage().total_running;
    e.signal.emit(t);
    if (running) check_token(i, "right after the emit");
}

void world::enter(int s) {
    const entry_spec& spec = sc.entries[s];
    bool is_private = false;
    const int caller = caller_ctx(spec.ctx, is_private, "e" + std::to_string(s));
    if (spec.scope) return enter_scope(s);
    const int i = new_rec(rec_kind::plain, s, spec.permits, spec.wait, spec.where, caller);
    entry_rec& e = entries[i];
    e.private_ctx = is_private;
    e.group = spec.group;
    e.bytes = spec.bytes;
    e.deadline = spec.deadline != 0 ? ctx.now() + spec.deadline : 0;
    trace("initiate " + name(i));
    predict_initiation(i);
    const group_stats before = host->group_stats(spec.group < groups() ? spec.group : 0);
    const session_options options = options_of(spec, ctx.now());
    e.stop_at_deadline = spec.stop_at_deadline;
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
                body_start(i, session.permits(), &session);
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
            [this, i, n = spec.suspensions, sleep = spec.sleep](sim_session& session) -> asio::awaitable<int> {
                body_start(i, session.permits(), &session);
                try {
                    for (int k = 0; k < n; ++k) {
                        co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                        if (k == 0) co_await nested_awaited(i);
                    }
                    if (sleep != 0) co_await sleep_for(sleep);
                } catch (const asio_system_error& e) {
                    // S20: the stop reached the body's own await (its entry
                    // emitted terminal into the body's slot).
                    body_aborted(i, e);
                    throw;
                }
                body_end(i);
                co_return 1000 + i;
            },
            std::move(handler));
        break;
    case body_kind::steps:
        // S20: an asynchronous body of `work` steps of one virtual
        // microsecond, looking at its stop before each and at its end.
        host->with_backend_session(
            options,
            [this, i, spec](sim_session& session) -> asio::awaitable<int> {
                body_start(i, session.permits(), &session);
                bool stopped = false;
                try {
                    for (int k = 0; k < spec.work; ++k) {
                        stop_point(i, session);
                        bool aborted = false;
                        try {
                            co_await sleep_for(1);
                        } catch (const asio_system_error& e) {
                            check_aborted(i, e);
                            aborted = true;
                        }
                        // S20: an await the stop cancelled is the body's
                        // look at its stop, as its operations' checks are.
                        if (aborted) throw session_stopped();
                        ++entries[i].steps_done;
                    }
                    stop_point(i, session);
                } catch (const session_stopped&) {
                    stopped = true;
                }
                co_return end_of_steps(i, spec, stopped);
            },
            std::move(handler));
        break;
    case body_kind::steps_sync:
        // The same, synchronous on a compute worker; it may emit its own
        // entry's cancellation between steps (the caller's thread racing it).
        host->with_backend_session(
            options,
            [this, i, spec](sim_session& session) -> int {
                body_start(i, session.permits(), &session);
                running_sync.push_back(i);
                bool stopped = false;
                try {
                    for (int k = 0; k < spec.work; ++k) {
                        if (k == spec.emit_at) {
                            ++coverage().self_emits;
                            cancel_entry(i, cancel_types[spec.cancel]);
                        }
                        stop_point(i, session);
                        ++entries[i].steps_done;
                    }
                    stop_point(i, session);
                } catch (const session_stopped&) {
                    stopped = true;
                }
                running_sync.pop_back();
                return end_of_steps(i, spec, stopped);
            },
            std::move(handler));
        break;
    }
    entries[i].initiating = false;
    initiated(i, before);
}

int world::end_of_steps(int i, const entry_spec& spec, bool stopped) {
    entry_rec& e = entries[i];
    body_end(i);
    if (stopped && spec.rethrows) {
        ++coverage().rethrown;  // S2: any other exception is the body's, stopped or not
        throw body_error(i);
    }
    if (stopped && !spec.catches) {
        e.ended_by_stop = true;
        ++(e.stop_cause == entry_rec::cause::deadline ? coverage().stopped_by_deadline : coverage().stopped_by_cancel);
        throw session_stopped();
    }
    if (stopped) {
        e.caught = true;  // S2: its value is delivered
        ++coverage().caught;
    } else if (spec.rogue) {
        e.rogue_thrown = true;  // S2: its own exception
        ++coverage().rogue;
        throw session_stopped();
    }
    return 1000 + i;
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
    entries[i].group = spec.group;
    entries[i].deadline = spec.deadline != 0 ? ctx.now() + spec.deadline : 0;
    trace("initiate " + name(i));
    predict_initiation(i);
    const group_stats before = host->group_stats(spec.group < groups() ? spec.group : 0);
    session_options options = options_of(spec, ctx.now());
    options.permits = 1;
    options.wait = wait_policy::fifo;
    options.where = placement::caller;
    auto handler = asio::bind_cancellation_slot(
        entries[i].signal.slot(),
        asio::bind_executor(ctx.executor(ctx_id), [this, i](std::exception_ptr ex, session_result<int> r) {
            completed<int>(i, ex, r, 1000 + i);
        }));
    entries[i].initiating = true;
    host->with_execution_scope(
        options,
        [this, i, inner = spec.inner](execution_scope&) -> asio::awaitable<int> {
            body_start(i, 1);
            try {
                for (int k = 0; k < inner; ++k) {
                // A scope asked to stop enters no more sessions here (its
                // next await would throw, S20; a session entered in it
                // completes cancelled at once: tests/cpu/session_stop_awaits).
                    if (entries[i].stop_cause != entry_rec::cause::none) break;
                    const int j = new_rec(rec_kind::inner, -1, 1, wait_policy::fifo, placement::compute, -1);
                    entries[j].init_seq = ++seq;
                    const bool admits = !host->poisoned() && !shut_flag;
                    entries[j].model = admits ? model_state::granted : model_state::rejected;
                    if (admits) ++inner_admits;
                    entries[j].poisoned_before_init = poison_flag;
                    entries[j].shut_before_init = shut_flag;
                    running_inner[i] = j;
                    auto [e, r] = co_await host->with_backend_session(
                        [this, j](sim_session&) {
                            body_start(j, 1);
                            body_end(j);
                            return 2000 + j;
                        },
                        tenferro::test::as_tuple(asio::use_awaitable));
                    running_inner.erase(i);
                    completed<int>(j, e, r, 2000 + j);
                }
            } catch (const asio_system_error& e) {
                body_aborted(i, e);  // (its await cancelled by its stop, S20)
                throw;
            }
            body_end(i);
            co_return 1000 + i;
        },
        std::move(handler));
    entries[i].initiating = false;
    initiated(i, before);
}

policy_coverage& coverage() {
    static policy_coverage c;
    return c;
}

void world::resize(const op& o) {
    ++coverage().resizes;
    // P7: the queue is settled first (grants and expiries up to now), so that
    // the waiters the new size excludes are the model's.
    sync_grants();
    sync_expiries();
    const std::size_t n = static_cast<std::size_t>(o.index);
    if (o.kind == op_kind::set_permits) {
        trace("set_permits " + std::to_string(n));
        host->set_permits(n);
    } else {
        trace("set_memory_budget " + std::to_string(n));
        host->set_memory_budget(n);
    }
    if (host->poisoned() || shut_flag) return;
    const detail::permit_counters c = counters();
    for (int i : std::vector<int>(model_queue)) {
        entry_rec& e = entries[i];
        if (e.permits <= c.permits && (c.memory_budget == 0 || e.bytes <= c.memory_budget)) continue;
        e.model = model_state::rejected;
        e.shrunk_out = true;
        std::erase(model_queue, i);
    }
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
                       // B4, B7: once taken, only a batch whose every item was
                       // cancelled completes its items cancelled.
                       if (x.in_batch)
                           for (std::size_t j = 0; j < items.size(); ++j)
                               check(items[j].batch != x.batch || items[j].cancelled,
                                     "B4/B7: item" + std::to_string(k) + " was taken into a batch and completed " +
                                         "cancelled, but item" + std::to_string(j) + " of its batch was not cancelled");
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
                cancel_entry(static_cast<int>(i), cancel_types[o.type >= 0 ? o.type : sc.entries[o.index].cancel]);
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
        it.cancelled = true;
        for (entry_rec& e : entries)
            if (e.kind == rec_kind::batch_session && !e.started && e.completions == 0) e.b7_before_start = true;
        // B7: the last item still waited for of a running batch asks its
        // session to stop.
        int session = -1;
        if (it.in_batch && it.batch >= 0 && it.batch < static_cast<int>(batch_entry.size())) {
            session = batch_entry[it.batch];
            bool all = true;
            for (const item_rec& x : items)
                if (x.batch == it.batch && !x.cancelled) all = false;
            if (all) stop_cause(session, entry_rec::cause::cancel);
        }
        it.signal.emit(asio::cancellation_type::terminal);
        if (session >= 0) check_token(session, "right after its batch's last item was cancelled");
        return;
    }
    case op_kind::set_permits:
    case op_kind::set_budget:
        return resize(o);
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
    // Deadlines, early rejection and permit-time on the simulated clock,
    // their wake-ups as timers of the simulation (host_options::timer).
    host_timer = std::make_shared<sim_timer>(ctx, ctx.add_executor("deadline-timer", true));
    options.timer = host_timer;
    for (std::size_t g = 0; g < sc.weights.size(); ++g)
        options.groups.push_back({"g" + std::to_string(g), sc.weights[g]});
    options.memory_budget = sc.memory_budget;
    options.reject_late = sc.reject_late;
    host = std::make_unique<host_type>(std::move(options), sim_backend{this});
    last = counters();
    applied_admitted = last.admitted;
    applied_group_admitted.assign(groups(), 0);
    group_stop_completions.assign(groups(), 0);
    init_grants_in.assign(groups(), 0);
    items.resize(sc.batch.items.size());
    for (const item_spec& it : sc.batch.items) any_item_cancel = any_item_cancel || it.cancel;
    if (sc.batch.on) {
        rec_host = std::make_unique<recording_host>(recording_host{this});
        batch_options bo;
        bo.max_batch = sc.batch.max_batch;
        bo.session.where = sc.batch.where;
        bo.session.group = sc.batch.group;
        if (sc.batch.max_delay > 0) {
            bo.max_delay = std::chrono::microseconds(sc.batch.max_delay);
            bo.timer = std::make_shared<sim_timer>(ctx, ctx.add_executor("batch-timer", true));
        }
        auto check_batch = [this](std::span<int> in) {
            const int b = static_cast<int>(batches_run++);
            batch_entry.push_back(current_batch_entry);
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
                x.batch = b;
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
                *rec_host, bo,
                [this, check_batch](sim_session& s, std::span<int> in) -> asio::awaitable<std::vector<int>> {
                    // (Checked before the suspension: the batch was taken
                    // just now, and B2's order is the order of the takes.)
                    std::vector<int> out = check_batch(in);
                    const int session = batch_entry.back();
                    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
                    // B7: its items cancelled meanwhile, all of them.
                    stop_point(session, s);
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
    for (std::size_t g = 0; g < groups(); ++g) {
        const group_stats gs = host->group_stats(g);
        check(gs.admitted == gs.completed && gs.waiting == 0,
              "P8: group " + std::to_string(g) + " admitted " + std::to_string(gs.admitted) + ", completed " +
                  std::to_string(gs.completed) + ", " + std::to_string(gs.waiting) + " waiting at quiescence");
    }
    check(c.expired == deadline_completions, "P8: the host counts " + std::to_string(c.expired) + " expired entries, " +
                                                 std::to_string(deadline_completions) +
                                                 " completed with deadline_exceeded");
    // Every permit announced admitted is announced released (a counting
    // observer; one that throws poisons the host, S18).
    if (sc.observer == 1)
        check(observed_admitted == observed_released, "S14/S20: the observer was told of " +
                                                          std::to_string(observed_admitted) + " permits admitted and " +
                                                          std::to_string(observed_released) + " released");
    // S14/S20: `cancelled` counts the entries completed cancelled whose body
    // never ran (waiting, or after the grant and before the start).
    check(c.cancelled == cancelled_completions, "S20: the host counts " + std::to_string(c.cancelled) + " cancelled, " +
                                                    std::to_string(cancelled_completions) +
                                                    " entries completed cancelled without running");
    // S20: `stopped` counts the bodies that ended by their stop, host and groups.
    check(c.stopped == stop_completions, "S20: the host counts " + std::to_string(c.stopped) + " stopped, " +
                                             std::to_string(stop_completions) + " bodies ended by their stop");
    for (std::size_t g = 0; g < groups(); ++g)
        check(host->group_stats(g).stopped == group_stop_completions[g],
              "S20: group " + std::to_string(g) + " counts " + std::to_string(host->group_stats(g).stopped) +
                  " stopped, the model " + std::to_string(group_stop_completions[g]));
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

}  // namespace tenferro::sim
