// The handler-independent half of a session entry: admission decisions, the
// runner, and the release path. See include/tenferro/detail/admission/entry_op.hpp.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <new>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>

#include "tenferro/detail/admission/entry_awaitable.hpp"
#include "tenferro/detail/admission/entry_op.hpp"

#include "async/fast_tls.hpp"

namespace tenferro::detail {
namespace {

// A running session of a scope stops when the scope is asked to (S20).
struct inner_session_stopper {
    entry_base* entry;
    void operator()() const noexcept {
        std::stop_source source = entry->stop_for_cancellation();
        if (source.stop_possible()) source.request_stop();
    }
};

struct scope_state final : session_context {
    scope_state(const void* host, std::string_view backend)
        : session_context(context_kind::scope, host), scope(backend) {}
    execution_scope scope;
    /// The scope entry's stop (none when nobody can cancel the scope); set
    /// before its body starts.
    std::stop_token stop;
    /// The session of this scope running now (S8: one at a time, which the
    /// busy flag guarantees) stops with the scope: linked from its runner's
    /// turn (before "has started" is decided) to its end.
    std::optional<std::stop_callback<inner_session_stopper>> running_session;
};

// The entry whose initiating function is running on this thread. A body that
// ran inline inside it (caller placement, admitted at once) must complete by
// post: Asio forbids invoking the handler from the initiating function.
TENFERRO_FAST_TLS thread_local const entry_base* initiating_entry = nullptr;

struct initiation_scope {
    explicit initiation_scope(const entry_base* e) noexcept : previous(initiating_entry) { initiating_entry = e; }
    ~initiation_scope() { initiating_entry = previous; }
    initiation_scope(const initiation_scope&) = delete;
    initiation_scope& operator=(const initiation_scope&) = delete;
    const entry_base* previous;
};

// The one function type every inline completion is posted as; owns its
// completion until it runs (destroyed unrun, it discards it).
struct inline_completion_policy {
    static void run(inline_completion& c) { c.invoke(); }
    static void drop(inline_completion& c) noexcept { c.discard(); }
};
using inline_completion_runner = op_function<inline_completion, inline_completion_policy>;

std::string_view permits_word(std::size_t n) noexcept { return n == 1 ? " permit" : " permits"; }

}  // namespace

detail_piece::detail_piece(std::size_t n) noexcept {
    const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
    text = std::string_view(digits, static_cast<std::size_t>(end - digits));
}

std::string compose_detail(std::initializer_list<detail_piece> pieces) noexcept {
    std::string out;
    try {
        std::size_t size = 0;
        for (const detail_piece& p : pieces) size += p.text.size();
        out.reserve(size);
        for (const detail_piece& p : pieces) out += p.text;
    } catch (...) {
        out.clear();  // out of memory: the error code alone says what happened
    }
    return out;
}

namespace {
/// Posts `c`; false when that failed for want of memory (`c` not consumed).
bool try_post_inline_completion(const asio::io_context::executor_type& io, inline_completion* c) noexcept {
    inline_completion_runner runner(c);
    try {
        hand_off_unguarded(io, std::move(runner), /*may_dispatch=*/false);
        return true;
    } catch (const std::bad_alloc&) {
        return runner.release() == nullptr;  // (null: the executor took it)
    } catch (...) {
        return true;  // refused: the runner's destructor discarded it
    }
}
}  // namespace

void post_inline_completion(const asio::io_context::executor_type& io, inline_completion* c) noexcept {
    if (try_post_inline_completion(io, c)) return;
    c->parked_on_ = &io.context();
    c->retry = [](retry_node& node) noexcept {
        auto& self = static_cast<inline_completion&>(node);
        return try_post_inline_completion(self.parked_on_->get_executor(), &self);
    };
    retry_handoff_later(*c);
}

namespace {
// Inline fast-path entries returned on this thread since one last went
// through the executor (entry_awaitable.hpp: fairness).
TENFERRO_FAST_TLS constinit thread_local unsigned inline_returns_in_a_row = 0;
constexpr unsigned inline_return_budget = 32;
}  // namespace

bool take_inline_return_budget() noexcept {
    if (++inline_returns_in_a_row < inline_return_budget) return true;
    inline_returns_in_a_row = 0;
    return false;
}

void renew_inline_return_budget() noexcept { inline_returns_in_a_row = 0; }

entry_base::entry_base(std::shared_ptr<host_core> core, session_options options, entry_kind kind) noexcept
    : core_(std::move(core)),
      kind_(kind),
      may_wait_(options.wait == wait_policy::fifo),
      compute_placed_(options.where == placement::compute) {
    // Out-of-range asks are kept recognisable and rejected in start(): more
    // permits than 2^32 (more than any host has) and groups past 2^16.
    permits_ = static_cast<std::uint32_t>(std::min<std::size_t>(options.permits, UINT32_MAX));
    group_ = static_cast<std::uint16_t>(std::min<std::size_t>(options.group, UINT16_MAX));
    bytes_ = options.bytes;
    when_ = options.deadline;
    // S20: a session body still running at its deadline is asked to stop.
    // (A scope's body is not a session: the sessions inside it have their own.)
    if (kind == entry_kind::session && options.stop_at_deadline &&
        options.deadline != std::chrono::steady_clock::time_point::max())
        phase_.make_stoppable_at_deadline();
    starts_on_caller_ = kind_ == entry_kind::scope || !compute_placed_;
    // Nothing to do between grant and hand-off: no hook (and with no observer
    // the host can never be poisoned, S18). A backend's claims happen later,
    // in open_session.
    ready_at_grant_ = starts_on_caller_ && core_->observer() == nullptr;
}

entry_base::~entry_base() {
    phase_.check_destroyable();
    discard_error();
}

// Every byte of entry_base is paid by each parked entry (docs/benchmarks.md,
// the parked-entry bytes); a change of layout must be a decision.
static_assert(sizeof(void*) != 8 || sizeof(entry_base) == 152, "entry_base changed size: update session-entry.md");

static_assert(static_cast<int>(session_entry_errc::reentered) == 1 &&
                  static_cast<int>(session_entry_errc::deadline_exceeded) <= 255,
              "entry_base keeps the code in a byte, 0 meaning none");

session_entry_error entry_base::make_error(std::string_view host, session_entry_errc code,
                                           std::string detail) noexcept {
    const int raw = static_cast<int>(code);
    if (raw < static_cast<int>(session_entry_errc::reentered) ||
        raw > static_cast<int>(session_entry_errc::deadline_exceeded)) {
        // Only a backend's open_session can bring a code outside the
        // enumeration (session_entry_errc{0}, a cast int). The entry still
        // fails, as `executor` (the backend could not open it), and says so.
        try {
            detail = "the backend rejected the session with " + std::to_string(raw) +
                     ", which is not a session_entry_errc" + (detail.empty() ? "" : ": " + detail);
        } catch (...) {
            // Out of memory: the code still says what happened.
        }
        code = session_entry_errc::executor;
    }
    return session_entry_error(code, host, std::move(detail));  // never throws
}

session_entry_error entry_base::backend_rejection(std::string_view host, const session_entry_error& error) noexcept {
    try {
        return make_error(host, error.code(), std::string(error.detail()));
    } catch (...) {
        return make_error(host, error.code(), {});  // out of memory for the detail
    }
}

session_entry_error entry_base::open_threw_error(std::string_view host) noexcept {
    constexpr std::string_view what = "the backend's open_session threw";
    std::string detail;
    try {
        throw;
    } catch (const std::exception& e) {
        detail = compose_detail({what, ": ", e.what()});
    } catch (...) {
        detail = compose_detail({what});
    }
    return make_error(host, session_entry_errc::executor, std::move(detail));
}

session_entry_error entry_base::out_of_memory_error() noexcept {
    return session_entry_error(session_entry_errc::executor, {},
                               compose_detail({"out of memory while starting the entry; the body did not run "
                                               "(the exception is the first argument)"}));
}

session_entry_error entry_base::body_threw_error(std::string_view host) noexcept {
    return session_entry_error(
        session_entry_errc::executor, host,
        compose_detail({"no value: the session body threw an exception (delivered as the first argument)"}));
}

void entry_base::set_error(session_entry_errc code, std::string_view detail) noexcept {
    std::string text;
    try {
        text.assign(detail);
    } catch (...) {
        // Out of memory: the code still says what happened.
    }
    adopt_error(make_error(core_->name(), code, std::move(text)));
}

void entry_base::adopt_error(session_entry_error error) noexcept {
    discard_error();
    error_code_ = static_cast<unsigned char>(error.code());
    error_texts_ = std::exchange(error.texts_, nullptr);
}

void entry_base::discard_error() noexcept {
    // Rebuilt only to be destroyed: drops this entry's reference to the texts.
    if (error_texts_ != nullptr) (void)take_error();
}

bool entry_base::retry_parked(permit_waiter& w) noexcept {
    auto& self = static_cast<entry_base&>(w);
    // The lane borrows the queue links, which only a parked entry has free.
    self.phase_.expect(entry_phase::parked_runner, entry_phase::parked_completion, "the retry lane");
    return self.retry_handoff(self.phase() == entry_phase::parked_completion ? parked_handoff::completion
                                                                             : parked_handoff::runner);
}

void entry_base::retry_later(parked_handoff what) noexcept {
    // Parked through its queue node, whose links are free: an entry parks
    // only once it is out of the queue (granted, or rejected).
    static constinit retry_lane<permit_waiter, &permit_waiter::next_, &entry_base::retry_parked> parked_entries;
    phase_.advance(what == parked_handoff::runner ? entry_phase::parked_runner : entry_phase::parked_completion);
    parked_entries.park(*this);
}

void entry_base::reject(session_entry_errc code, std::string_view detail) noexcept {
    set_error(code, detail);
    complete(false);
}

void entry_base::reject_counted(session_entry_errc code, std::string_view detail) noexcept {
    core_->queue().note_rejected(group_);
    reject(code, detail);
}

bool entry_base::rejected_for_group(const permit_queue& queue) noexcept {
    if (group_ < queue.groups()) return false;
    reject_counted(session_entry_errc::incompatible_context,
                   compose_detail({"session_options::group is ", group_, " and the host has ", queue.groups(),
                                   queue.groups() == 1 ? " group" : " groups"}));
    return true;
}

void entry_base::start(session_context* ctx) noexcept {
    const initiation_scope initiating(this);
    permit_queue& queue = core_->queue();
    const bool is_scope = kind_ == entry_kind::scope;

    if (ctx != nullptr) {
        if (ctx->kind == context_kind::session)
            return reject_counted(session_entry_errc::reentered,
                                  compose_detail({is_scope ? "an execution scope" : "a session",
                                                  " was entered from inside a running session body; a session "
                                                  "cannot wait for admission while it holds permits"}));
        if (ctx->host != core_.get())
            return reject_counted(session_entry_errc::incompatible_context,
                                  compose_detail({is_scope ? "an execution scope" : "a session",
                                                  " was entered inside an execution scope of another host"}));
        if (is_scope)
            return reject_counted(session_entry_errc::reentered,
                                  "an execution scope was entered inside an execution scope of the same host");
        if (permits_ != 1)
            return reject_counted(session_entry_errc::incompatible_context,
                                  compose_detail({"the execution scope holds 1 permit and the session asks for ",
                                                  permits_, permits_word(permits_)}));
        if (rejected_for_group(queue)) return;
        if (bytes_ != 0)
            return reject_counted(session_entry_errc::incompatible_context,
                                  compose_detail({"a session inside an execution scope declares no bytes of its "
                                                  "own (the scope's options do), and this one declares ",
                                                  bytes_}));
        // The scope's permit never meets the queue, but the host's state still
        // applies (S11, S12); after the context checks, as for entries that
        // queue, so that reentered and incompatible_context keep precedence.
        if (queue.poisoned())
            return reject_counted(session_entry_errc::resource_poisoned,
                                  "an admission_observer hook threw earlier; the host admits nothing more");
        if (queue.is_shut_down()) return reject_counted(session_entry_errc::executor, "the host was shut down");
        if (const char* busy = busy_before_admission()) return reject_counted(session_entry_errc::contended, busy);
        // S20: a scope asked to stop starts no more sessions; one that can be
        // stopped gives each of its sessions a stop state, since the scope's
        // stop reaches them (made here, at initiation, S19).
        const std::stop_token& scope_stop = static_cast<scope_state*>(ctx)->stop;
        if (scope_stop.stop_requested()) {
            queue.note_cancelled(group_);
            return reject(session_entry_errc::cancelled,
                          "entered inside an execution scope that was asked to stop (S20); the body did not run");
        }
        if (scope_stop.stop_possible() && !can_stop()) {
            try {
                make_stoppable();
            } catch (...) {
                return reject_counted(session_entry_errc::executor,
                                      "out of memory for the stop state of a session inside a cancellable execution "
                                      "scope; the body did not run");
            }
        }
        if (ctx->scope_busy.exchange(true, std::memory_order_acq_rel))
            return reject_counted(session_entry_errc::contended, "another session of this execution scope is running");
        scope_ = ctx->shared_from_this();
        queue.note_admitted_without_permits(*this);
        return schedule(true);
    }

    if (permits_ == 0 || permits_ > queue.permits())
        return reject_counted(session_entry_errc::incompatible_context,
                              compose_detail({"the entry asks for ", permits_, permits_word(permits_),
                                              " and the host has ", queue.permits(), permits_word(queue.permits())}));
    if (rejected_for_group(queue)) return;
    if (const char* busy = busy_before_admission()) return reject_counted(session_entry_errc::contended, busy);
    const auto deadline = when_;
    const bool has_deadline = deadline != std::chrono::steady_clock::time_point::max();
    if (has_deadline) {
        try {
            core_->watch_deadlines();
        } catch (...) {
            return reject_counted(session_entry_errc::executor, "the host's deadline timer could not be started");
        }
    }
    host_core* const core = core_.get();  // alive: we are inside one of its initiating functions

    std::chrono::steady_clock::duration predicted{};
    switch (queue.acquire(*this, may_wait_, /*start_inline_if_clear=*/true, &predicted)) {
    case acquire_outcome::granted_inline:
        // The caller-placement fast path (S17 checked by the queue in the same
        // critical section as the grant): ready at the grant means no observer
        // hook to run and no poisoning possible, so the body may be dispatched
        // right here. Nobody is in the hand-off list behind this entry.
        phase_.advance(entry_phase::handed_off);
        return run_on_caller(true);
    case acquire_outcome::granted:
        return on_granted(true);
    case acquire_outcome::queued:
        // The queue owns the next step; touch nothing of this entry more here.
        if (has_deadline) core->arm_deadline(deadline);
        return;
    case acquire_outcome::late: {
        using us = std::chrono::microseconds;
        const auto left = std::chrono::duration_cast<us>(deadline - core->queue().now());
        return reject(session_entry_errc::deadline_exceeded,
                      compose_detail({"rejected early (host_options::reject_late): the predicted wait is ",
                                      static_cast<std::size_t>(std::chrono::duration_cast<us>(predicted).count()),
                                      " us and ", static_cast<std::size_t>(left.count() < 0 ? 0 : left.count()),
                                      " us are left to the deadline; the body did not run"}));
    }
    case acquire_outcome::expired:
        return reject(session_entry_errc::deadline_exceeded,
                      "the deadline (session_options::deadline) had passed when the entry was initiated; the body "
                      "did not run");
    case acquire_outcome::would_wait:
        return reject(session_entry_errc::contended,
                      compose_detail({"wait_policy::never and ", permits_, permits_word(permits_),
                                      " cannot be granted at once (taken, or promised to earlier waiters)"}));
    case acquire_outcome::queue_full:
        return reject(session_entry_errc::contended, "the admission queue is full (max_waiters reached)");
    case acquire_outcome::too_large:
        // The host shrank (set_permits, set_memory_budget) since the check above, or the bytes exceed the budget.
        return reject(session_entry_errc::incompatible_context,
                      compose_detail({"the entry asks for ", permits_, permits_word(permits_), " and ", bytes_,
                                      " bytes, more than the host's ", queue.permits(), permits_word(queue.permits()),
                                      " or its memory budget"}));
    case acquire_outcome::poisoned:
        return reject(session_entry_errc::resource_poisoned,
                      "an admission_observer hook threw earlier; the host admits nothing more");
    case acquire_outcome::shut_down:
        return reject(session_entry_errc::executor, "the host was shut down");
    }
}

void entry_base::on_granted(bool at_initiation) noexcept {
    // The queue counted this entry as admitted; every failure below gives the
    // permits back through the queue, which counts it as completed.
    if (core_->queue().poisoned()) {
        // Granted in the same release as an entry whose hook threw just now
        // (S18): the observer never hears of this one.
        give_back_grant();  // poisoned: grants nobody
        return reject_counted(session_entry_errc::resource_poisoned,
                              "an admission_observer hook threw while this entry was being admitted; "
                              "the body did not run");
    }
    if (admission_observer* observer = core_->observer()) {
        try {
            observer->on_admitted(permits_);
        } catch (...) {
            core_->poison("an admission_observer::on_admitted hook threw");
            give_back_grant();  // poisoned: grants nobody
            return reject_counted(session_entry_errc::resource_poisoned,
                                  "the admission_observer::on_admitted hook threw while admitting this entry");
        }
    }
    phase_.advance(entry_phase::admitted);
    schedule(at_initiation);
}

void entry_base::give_back_grant() noexcept {
    phase_.advance(entry_phase::rejected);
    permit_queue& queue = core_->queue();
    queue.start_order().note_started(*this);
    // (`this` keeps the host alive meanwhile: it is not handed off.)
    if (starts_on_caller_) hand_off_in_grant_order(queue.start_order().abandon_handoff(*this));
    entry_node* handoffs = nullptr;
    waiter_list granted = queue.release(released_grant(*this, -1), &handoffs);
    host_core::start_granted(std::move(granted), handoffs);
}

void entry_base::hand_off_in_grant_order(entry_node* chain) noexcept {
    if (chain == nullptr) return;
    permit_queue& queue = static_cast<entry_base*>(chain)->core_->queue();
    // S17 across threads: runners reach their executors in grant order. Only
    // one thread at a time hands off (the queue says which); the others leave
    // their entries to it. Read each link before the hand-off, which may run
    // (and free) the entry at once. Every hand-off here is a post: no body
    // runs inside another entry's release.
    while (chain != nullptr) {
        do {
            auto* e = static_cast<entry_base*>(chain);
            chain = chain->handoff_next_;
            // (Entries made ready at their grant never went through
            // on_granted(): granted, not admitted.)
            e->phase_.advance(entry_phase::handed_off);
            e->run_on_caller(false);
        } while (chain != nullptr);
        chain = queue.start_order().next_handoffs();
    }
}

void entry_base::schedule(bool at_initiation) noexcept {
    // Scopes run their body on the caller's executor: it orchestrates sessions
    // and must not occupy the compute worker its permit stands for.
    if (!starts_on_caller_) {
        phase_.advance(entry_phase::handed_off);
        return core_->pool().submit(*this);
    }
    permit_queue& queue = core_->queue();
    bool alone = false;
    entry_node* chain = queue.start_order().ready_for_handoff(*this, at_initiation && may_start_inline_, alone);
    // The entries handed off (this one too) may finish on other threads while
    // the loop still asks the queue for more; the host stays alive all the
    // same: whoever granted them is up the stack (an entry releasing its
    // permits, a cancellation, or an initiating function of the host).
    if (!alone) return hand_off_in_grant_order(chain);
    // Admitted inside the initiating function with no body granted earlier
    // still waiting to start: we are on the caller's thread, and dispatch runs
    // the body right here when that thread is in the caller's executor, saving
    // a hop. The entry was taken off the hand-off list alone; grants made after
    // it that became ready meanwhile are handed off behind it.
    // (`this` may be gone after the dispatch; the host is not: we are inside
    // its initiating function.)
    phase_.advance(entry_phase::handed_off);
    run_on_caller(true);
    hand_off_in_grant_order(queue.start_order().next_handoffs(false));
}

void entry_base::cancel(asio::cancellation_type_t type) noexcept {
    if (phase() == entry_phase::waiting) {
        // S13: the queue decides, under its lock, against a grant made meanwhile.
        waiter_list granted;
        entry_node* handoffs = nullptr;
        const bool removed = core_->queue().cancel(*this, granted, &handoffs);
        host_core::start_granted(std::move(granted), handoffs);
        if (removed)
            return reject(session_entry_errc::cancelled,
                          compose_detail({"cancelled while waiting for ", permits_, permits_word(permits_),
                                          "; the body did not run"}));
    }
    // Granted (S20): before its start, any request means it never starts (the
    // runner's try_start() sees it); once it runs, terminal or partial asks
    // the body to stop, through its session's token. The entry is alive:
    // its completion runs on this executor, after this handler.
    constexpr auto stops_running = asio::cancellation_type::terminal | asio::cancellation_type::partial;
    if (phase_.request_stop((type & stops_running) != asio::cancellation_type::none) == stop_found::running)
        stop_.request_stop();
}

bool entry_base::ended_by_stop(const std::exception_ptr& e) const noexcept {
    if (!e || !stop_requested()) return false;
    try {
        std::rethrow_exception(e);
    } catch (const session_stopped&) {
        return true;
    } catch (const asio_system_error& error) {
        return error.code() == asio::error::operation_aborted;
    } catch (...) {
        return false;
    }
}

void entry_base::stopped_while_running() noexcept {
    // The first cause decides the code.
    if (phase_.stopped_at_deadline())
        set_error(session_entry_errc::deadline_exceeded,
                  "stopped while running (S20): its deadline (session_options::deadline) passed and its body ended "
                  "by the stop");
    else
        set_error(session_entry_errc::cancelled,
                  "stopped while running (S20): the entry was cancelled and its body ended by the stop");
    core_->queue().note_stopped(group_);
}

std::stop_source entry_base::stop_for_deadline() noexcept {
    if (phase_.request_stop_at_deadline()) return stop_;
    return std::stop_source(std::nostopstate);
}

std::stop_source entry_base::stop_for_cancellation() noexcept {
    if (phase_.request_stop(/*may_stop_running=*/true) == stop_found::running) return stop_;
    return std::stop_source(std::nostopstate);
}

void entry_base::watch_running(session_context& ctx, std::chrono::steady_clock::time_point stop_at) noexcept {
    if (stop_at == std::chrono::steady_clock::time_point::max()) return;
    // A synchronous body's context is on the runner's stack: held without
    // ownership, for body_finished() to unlink it (while it is still there).
    if (!body_context_) body_context_ = std::shared_ptr<session_context>(std::shared_ptr<void>(), &ctx);
    ctx.deadline.when = stop_at;
    ctx.deadline.entry = this;
    core_->running().watch(ctx.deadline);
    core_->arm_deadline(stop_at);
}

void entry_base::run() noexcept {
    permit_queue& queue = core_->queue();
    queue.start_order().note_started(*this);
    if (queue.poisoned()) {
        // S18: from the moment a hook threw, no body starts, not even one
        // granted (and handed to its executor) before that.
        set_error(session_entry_errc::resource_poisoned,
                  "an admission_observer hook threw after this entry was admitted; the body did not run");
        queue.note_rejected(group_);
        return body_finished();
    }
    if (when_ != std::chrono::steady_clock::time_point::max() && queue.now() > when_) {
        // P4: granted by its deadline, but its hop to the executor took it past:
        // no body starts after its deadline.
        when_ = {};
        set_error(session_entry_errc::deadline_exceeded,
                  "granted by its deadline (session_options::deadline) but not started by it; the body did not run");
        queue.note_expired(group_);
        return body_finished();
    }
    // A session of a scope that can be stopped stops with it (S20): linked
    // before "has started" is decided, so that a scope asked to stop
    // meanwhile (or already) is a request like any other: before the start,
    // the body never starts; after it, it is asked to stop.
    if (scope_ && can_stop())
        static_cast<scope_state&>(*scope_).running_session.emplace(static_cast<scope_state&>(*scope_).stop,
                                                                   inner_session_stopper{this});
    // Its turn came in time. Whether the body starts is decided here, once,
    // against a request to stop (S20): cancelled after its grant, it never
    // starts, counted as cancelled (not as stopped).
    if (!phase_.try_start()) {
        when_ = {};
        set_error(session_entry_errc::cancelled,
                  "cancelled after its grant, before its body started (S20); the body did not run");
        queue.note_cancelled(group_);
        return body_finished();
    }
    // It has started (S17's sense), whatever happens to the session below.
    // From here the word times the body (P2), where the host measures; the
    // deadline, if the body stops at it (S20), moves to the body's context.
    const auto stop_at = phase_.stops_at_deadline() ? when_ : std::chrono::steady_clock::time_point::max();
    when_ = queue.measures_time() ? queue.now() : std::chrono::steady_clock::time_point{};
    try {
        if (kind_ == entry_kind::scope) {
            auto state = std::make_shared<scope_state>(core_.get(), core_->name());
            body_context_ = state;
            state->set_executors(caller_executor());
            state->stop = stop_token();
            spawn_scope(session_executor(state), state->scope);
        } else {
            // The session's own failures (a rejection, an exception from
            // open_session) are run_session's to report; it ends in
            // body_finished(), so nothing here may touch `this` after it.
            run_session(
                session_grant{permits_,
                              compute_placed_ ? asio::any_io_executor(core_->pool().get_executor()) : caller_executor(),
                              scope_ ? 0 : bytes_, group_, stop_.get_token()},
                stop_at);
        }
    } catch (...) {
        // Only the runtime's own set-up can get here (allocating the body's
        // context, wrapping the caller's executor): the body never started.
        // (run_session, which watches the deadline, is noexcept.)
        body_context_.reset();
        could_not_start();
    }
}

void entry_base::could_not_start() noexcept {
    set_error(session_entry_errc::executor, "the session could not be started on its executor");
    core_->queue().note_rejected(group_);
    body_finished();
}

void entry_base::drop() noexcept {
    phase_.advance(entry_phase::finishing);
    when_ = {};  // the body never started: nothing to charge
    core_->queue().start_order().note_started(*this);
    core_->queue().note_rejected(group_);
    set_error(session_entry_errc::executor, "the executor dropped the session before running it; the body did not run");
    release_permits();
    complete(false);
}

void entry_base::opened_rejected(const session_entry_error& error) noexcept {
    adopt_error(backend_rejection(core_->name(), error));
    core_->queue().note_rejected(group_);
    body_finished();
}

void entry_base::open_threw() noexcept {
    adopt_error(open_threw_error(core_->name()));
    core_->queue().note_rejected(group_);
    body_finished();
}

void entry_base::body_dropped() noexcept {
    set_error(session_entry_errc::executor, "the executor destroyed the asynchronous session body before it finished");
    body_finished();
}

void entry_base::body_finished() noexcept {
    phase_.advance(entry_phase::finishing);
    // The runner's poster has left the caller's executor before we hand the
    // completion over the same gate (a no-op for runners that were not posted).
    gate_.pass();
    if (body_context_) {
        // From here the deadline timer no longer reaches this entry (S20).
        if (body_context_->deadline.entry != nullptr) core_->running().unwatch(body_context_->deadline);
        body_context_->stop_forwarding();  // nor does a stop reach the body's awaits
        body_context_->active.store(false, std::memory_order_release);
        // co_spawn (Asio 1.26 on; not 1.22) leaves its cancellation handler in the body's
        // slot, and that handler holds a copy of the body's executor, which
        // holds this context: a cycle that kept every stoppable asynchronous
        // body's context alive for ever. Cleared here, on the body's thread
        // inside co_spawn's completion (or as co_spawn drops it), after which
        // co_spawn no longer touches its cancellation state.
        body_context_->body_signal.slot().clear();
        body_context_->close();  // an asynchronous body's session goes before its permits
        body_context_->release_tracked();  // the caller's work, unless a body's copy still holds it
        body_context_.reset();
    }
    release_permits();
    // After a body on the caller's executor we are on that executor, so the
    // caller may be resumed inline; from a compute worker, always post.
    const bool on_caller = kind_ == entry_kind::scope || !compute_placed_;
    complete(on_caller && initiating_entry != this);
}

void entry_base::release_permits() noexcept {
    core_->queue().start_order().note_started(*this);  // a no-op unless the body never started
    // Only a body that ended, or never started, gives permits back.
    phase_.expect(entry_phase::finishing, entry_phase::finishing, "the release of its permits");
    if (scope_) {
        static_cast<scope_state&>(*scope_).running_session.reset();  // before the next session may start
        scope_->scope_busy.store(false, std::memory_order_release);
        scope_.reset();
        core_->queue().note_completed_without_permits(group_);
        return;
    }
    if (admission_observer* observer = core_->observer()) {
        try {
            observer->on_released(permits_);
        } catch (...) {
            core_->poison("an admission_observer::on_released hook threw");
        }
    }
    // P2: the group pays for the permit-time from the body's start (none
    // when the body never started, or the host does not measure).
    double held_seconds = -1;
    if (when_ != std::chrono::steady_clock::time_point{})
        held_seconds = std::chrono::duration<double>(core_->queue().now() - when_).count();
    entry_node* handoffs = nullptr;
    waiter_list granted = core_->queue().release(released_grant(*this, held_seconds), &handoffs);
    host_core::start_granted(std::move(granted), handoffs);
}

}  // namespace tenferro::detail
