// The model the world checks a run against (world.hpp): the FIFO queue of
// each group, fed by the initiations and the queue's counters, and the
// invariants checked after every step and at each body's start.

#include "world.hpp"

namespace tenferro::sim {

void world::predict_initiation(int i) {
    entry_rec& e = entries[i];
    e.init_seq = ++seq;
    const detail::permit_counters c = counters();
    e.fits_host = e.permits != 0 && e.permits <= c.permits && e.group < groups();
    e.poisoned_before_init = poison_flag;
    e.shut_before_init = shut_flag;
    if (!e.fits_host || host->poisoned() || shut_flag || (c.memory_budget != 0 && e.bytes > c.memory_budget)) {
        e.model = model_state::rejected;
    } else if (due(e)) {
        e.model = model_state::rejected;
        e.late = true;
    } else if (model_queue.empty() && fits(e, c)) {
        e.model = model_state::granted;
        e.grant_seq = ++grant_seq;
        ++init_grants_in[e.group];
    } else if (e.wait == wait_policy::never) {
        e.model = model_state::rejected;
    } else {
        e.model = model_state::waiting;
        model_queue.push_back(i);
    }
}

void world::initiated(int i, const group_stats& before) {
    entry_rec& e = entries[i];
    if (e.model != model_state::waiting) return;
    const group_stats after = host->group_stats(e.group);
    if (after.expired == before.expired) return;
    check(sc.reject_late && e.deadline != 0 && e.wait == wait_policy::fifo,
          "P5: " + name(i) + " was rejected at its initiation as late without reject_late and a deadline");
    e.model = model_state::rejected;
    e.late = true;
    std::erase(model_queue, i);
}

std::vector<int> world::waiting_in(std::size_t g) const {
    std::vector<int> v;
    for (int i : model_queue)
        if (entries[i].group == g) v.push_back(i);
    return v;
}

void world::sync_grants() {
    const detail::permit_counters c = counters();
    const std::uint64_t step_seq = groups() > 1 ? ++grant_seq : 0;
    for (std::size_t g = 0; g < groups(); ++g) {
        const group_stats gs = host->group_stats(g);
        long granted = static_cast<long>(gs.admitted - applied_group_admitted[g]) - init_grants_in[g] -
                       (g == 0 ? inner_admits : 0);
        check(granted >= 0, "model: fewer grants in group " + std::to_string(g) + " than entries admitted at once");
        applied_group_admitted[g] = gs.admitted;
        for (int i : waiting_in(g)) {
            if (granted <= 0) break;
            entry_rec& e = entries[i];
            std::erase(model_queue, i);
            if (due(e)) {
                e.model = model_state::expired;
                continue;
            }
            e.model = model_state::granted;
            e.grant_seq = step_seq != 0 ? step_seq : ++grant_seq;
            if (g > 0) ++coverage().other_group_grants;
            --granted;
        }
        if (granted > 0) fail("S4/P1: group " + std::to_string(g) + " granted more entries than were waiting");
    }
    applied_admitted = c.admitted;
    init_grants = inner_admits = 0;
    std::fill(init_grants_in.begin(), init_grants_in.end(), 0);
}

void world::sync_expiries() {
    if (host->poisoned() || shut_flag) return;  // every waiter was drained (after_step)
    for (std::size_t g = 0; g < groups(); ++g) {
        const std::vector<int> mine = waiting_in(g);
        const std::size_t real = host->group_stats(g).waiting;
        if (real > mine.size()) {
            fail("P1: group " + std::to_string(g) + " holds " + std::to_string(real) + " waiters, the model " +
                 std::to_string(mine.size()));
            continue;
        }
        std::size_t gone = mine.size() - real;
        for (int i : mine) {
            if (gone == 0) break;
            if (!due(entries[i])) continue;
            entries[i].model = model_state::expired;
            std::erase(model_queue, i);
            --gone;
        }
        if (gone > 0) fail("P4: a waiter of group " + std::to_string(g) + " left its queue before its deadline");
    }
}

void world::after_step() {
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
    sync_expiries();
    // Poisoning or shutdown drains every waiter.
    if (host->poisoned() || shut_flag) {
        for (int i : model_queue) entries[i].model = model_state::removed;
        model_queue.clear();
    }
    if (poison_flag) check(host->poisoned(), "S11: an observer hook threw and the host is not poisoned");
    // P4 on time: every waiter with a deadline has a wake-up of the host's
    // timer asked for by then, and a wake-up leaves no waiter past its deadline.
    std::uint64_t earliest = 0;
    for (int i : model_queue) {
        const std::uint64_t d = entries[i].deadline;
        if (d != 0 && (earliest == 0 || d < earliest)) earliest = d;
    }
    if (earliest != 0)
        check(!host_timer->pending.empty() && *host_timer->pending.begin() <= earliest,
              "P4: a waiter's deadline is " + std::to_string(earliest) + " and the host asked no wake-up by then");
    if (host_timer->fired && earliest != 0)
        check(earliest > ctx.now(), "P4: the deadline timer woke at " + std::to_string(ctx.now()) +
                                        " and left a waiter whose deadline was " + std::to_string(earliest));
    // S20: the host's deadline timer woke in this step: every running body
    // whose deadline has passed, and that stops at it, is asked to stop now
    // (the first cause, unless a cancellation came first). Every running
    // body's token shows exactly the causes the model has; a running body
    // that stops at its deadline has a wake-up asked by then.
    for (std::size_t k = 0; k < entries.size(); ++k) {
        entry_rec& e = entries[k];
        if (!e.has_token || !e.started || e.ended) continue;
        const bool stops_at_deadline = e.deadline != 0 && e.stop_at_deadline;
        if (stops_at_deadline && host_timer->fired && ctx.now() >= e.deadline)
            stop_cause(static_cast<int>(k), entry_rec::cause::deadline);
        check_token(static_cast<int>(k), "after the step");
        if (stops_at_deadline && e.stop_cause == entry_rec::cause::none)
            check(!host_timer->pending.empty() && *host_timer->pending.begin() <= e.deadline,
                  "S20: the running body of " + name(static_cast<int>(k)) + " stops at its deadline " +
                      std::to_string(e.deadline) + " and the host asked no wake-up by then");
    }
    host_timer->fired = false;
    check(model_queue.size() == c.waiting, "S4: the queue holds " + std::to_string(c.waiting) +
                                               " waiters, the FIFO model " + std::to_string(model_queue.size()));
    // Permits conserved: what running bodies hold plus what is free never
    // exceeds the permits; what is free never falls below the permits
    // less those of granted, uncompleted entries. Likewise the bytes
    // (P6). A shrink (P7) preempts nothing: what is held may exceed the
    // permits, and nothing is free then.
    std::size_t running = 0, held_at_most = 0, running_bytes = 0, bytes_at_most = 0;
    for (const entry_rec& e : entries) {
        if (e.kind == rec_kind::inner || e.kind == rec_kind::nested) continue;
        if (e.started && !e.ended) {
            running += e.permits;
            running_bytes += e.bytes;
        }
        if (e.model == model_state::granted && e.completions == 0) {
            held_at_most += e.permits;
            bytes_at_most += e.bytes;
        }
    }
    check(c.available <= c.permits, "permits: more available than exist");
    if (c.available > 0)
        check(c.available + running <= c.permits, "permits: " + std::to_string(c.available) +
                                                      " available while bodies holding " + std::to_string(running) +
                                                      " run (of " + std::to_string(c.permits) + ")");
    check(c.available + held_at_most >= c.permits,
          "permits leaked: " + std::to_string(c.available) + " available, at most " + std::to_string(held_at_most) +
              " held by granted entries (of " + std::to_string(c.permits) + ")");
    if (c.memory_budget != 0) {
        check(c.memory_available <= c.memory_budget, "P6: more bytes available than the budget");
        if (c.memory_available > 0)
            check(c.memory_available + running_bytes <= c.memory_budget,
                  "P6: " + std::to_string(c.memory_available) + " bytes available while bodies declaring " +
                      std::to_string(running_bytes) + " run (budget " + std::to_string(c.memory_budget) + ")");
        check(c.memory_available + bytes_at_most >= c.memory_budget,
              "P6: bytes leaked: " + std::to_string(c.memory_available) + " available, at most " +
                  std::to_string(bytes_at_most) + " held (budget " + std::to_string(c.memory_budget) + ")");
    }
    // No waiter stranded: when every group's head fits what is free, one
    // of them is granted at once (S4: permits re-offered when a waiter
    // leaves; P3: only the chosen group's head not fitting stops the
    // grants). A head past its deadline waits for the timer to expire it.
    if (!model_queue.empty() && !host->poisoned() && !shut_flag) {
        bool all_fit = true, any_due = false;
        for (std::size_t g = 0; g < groups(); ++g) {
            const std::vector<int> mine = waiting_in(g);
            if (mine.empty()) continue;
            any_due = any_due || due(entries[mine.front()]);
            all_fit = all_fit && fits(entries[mine.front()], c);
        }
        if (!all_fit && c.memory_budget != 0) {
            const entry_rec& head = entries[model_queue.front()];
            if (head.permits <= c.available && !fits(head, c)) ++coverage().held_by_bytes;
        }
        check(!all_fit || any_due, "S4/S13/P3: " + name(model_queue.front()) +
                                       " and every other group's head fit the " + std::to_string(c.available) +
                                       " free permits, but none was granted");
    }
    last = c;
    cancel_target = -1;
}

void world::body_start(int i, std::size_t granted_permits, const sim_session* session) {
    entry_rec& e = entries[i];
    trace("body of " + name(i) + " starts on " + ctx.name(ctx.current()));
    check(!e.started, "S1: the body of " + name(i) + " started twice");
    check(!e.cancel_before_start, "S20: the body of " + name(i) + " started after a cancellation that came before");
    e.started = true;
    if (session != nullptr) {
        e.has_token = true;
        e.token = session->stop_token();
        // S20: a session that can be asked has a stop state; a cancellation
        // before the start never lets it start (checked above).
        if (e.kind == rec_kind::plain || e.kind == rec_kind::batch_session)
            check(e.token.stop_possible(), "S20: the session of " + name(i) + " (a connected slot) cannot be stopped");
        check(!e.token.stop_requested(), "S20: the body of " + name(i) + " started already asked to stop");
    }
    check(!poison_flag, "S18: the body of " + name(i) + " started after an observer hook threw");
    if (e.kind != rec_kind::inner) {
        if (e.model == model_state::waiting) sync_grants();
        check(e.model == model_state::granted, "S4: the body of " + name(i) +
                                                   " started but the FIFO model did not grant it (" +
                                                   std::to_string(static_cast<int>(e.model)) + ")");
        check(granted_permits == e.permits, "S15: the session of " + name(i) + " holds the wrong permits");
        if (session != nullptr)
            check(session->bytes() == e.bytes && session->group() == e.group,
                  "P6/P1: the grant of " + name(i) + " names the wrong bytes or group");
        check(e.deadline == 0 || ctx.now() <= e.deadline, "P4: the body of " + name(i) + " started at " +
                                                              std::to_string(ctx.now()) + ", after its deadline " +
                                                              std::to_string(e.deadline));
    }
    if (e.target >= 0)
        check(ctx.current() == e.target,
              "S15: the body of " + name(i) + " runs on " + ctx.name(ctx.current()) + ", not on " + ctx.name(e.target));
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

void world::open_failed() {
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

}  // namespace tenferro::sim
