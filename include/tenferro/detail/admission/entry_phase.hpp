#pragma once
// Where one entry stands in its life: one byte, one writer at a time, every
// transition checked against the table below in builds with assertions
// (NDEBUG unset: the sanitizer stages, debug builds).
//
//   idle ──► waiting ──► granted ──► admitted ──► handed_off ──► running
//    │          │           │    └──────────────────┘  ▲ │  │       │
//    │          ▼           ▼                           │ ▼  │       ▼
//    │       rejected ◄─ (give back)       parked_runner ◄┘  └──► finishing
//    │          │                                                     │
//    └──────────┴────────────────────► completing ◄───────────────────┘
//                                        ▲    │
//                        parked_completion ◄──┤
//                                             ▼
//                                            done
//
// Who writes it, and when ownership passes (docs/design/session-entry.md,
// "One entry, one phase"):
//  * Until the grant the queue decides, under its lock: idle → waiting, and
//    waiting (or idle) → granted or rejected. The race between a grant, a
//    cancellation, a deadline, a shutdown and a resize is settled there.
//  * From the grant on, the entry has one owner at a time: the granting
//    thread, the thread holding the hand-off role (S17), the runner, the
//    body's thread, the retry lane, the handler's executor. Ownership passes
//    through a submit, a post, a dispatch or the retry lane's lock, each of
//    which orders the writes before it with the reads after it.
//  * Each owner writes the next phase *before* the call that gives the entry
//    away: the receiver may run it, and free it, at once.
//  * A cancellation reads it concurrently with the owner: under the queue's
//    lock, to see whether the entry still waits (S13), and then to record a
//    request to stop (S20) in a bit beside the phase, by compare-and-swap.
//    Hence an atomic byte. An entry that can be cancelled (a connected slot)
//    moves its phase by read-modify-writes that keep that bit, and its body
//    starts only if try_start() wins against the request; any other entry's
//    byte has no second writer, and its moves are plain stores.
//
// The inline fast paths (inline_session.hpp) build no entry: their waiter,
// on the stack, goes idle → granted and is gone with the frame.

#include <atomic>
#include <cstdint>

namespace tenferro::detail {

enum class entry_phase : std::uint8_t {
    idle,  // built, not yet offered to the queue
    waiting,  // linked in the queue (and in its deadline list, with a deadline)
    granted,  // holds its permits (or its scope's); not yet announced to the observer
    rejected,  // will never run and holds nothing: removed from the queue, or refused after its grant
    admitted,  // announced (on_admitted ran); waits for its turn to be handed off (S17)
    handed_off,  // its runner is with the compute pool or the caller's executor
    parked_runner,  // that hand-off failed for want of memory; in the retry lane (S19)
    running,  // its turn came and its body started: the session opens, the body runs
    finishing,  // the body is over, or never starts: the permits go back
    completing,  // the completion is with the handler's executor
    parked_completion,  // that hand-off failed for want of memory; in the retry lane (S19)
    done,  // the completion ran, or its executor discarded it: the op is freed
};

/// The transitions an entry may take (the diagram above).
constexpr bool may_follow(entry_phase from, entry_phase to) noexcept {
    using enum entry_phase;
    switch (to) {
    case idle:
        return false;
    case waiting:
        return from == idle;
    case granted:
        // At initiation (at once, or a scope's permit), or from the queue.
        return from == idle || from == waiting;
    case rejected:
        // Removed by the queue (cancelled, expired, drained, resized away),
        // or a granted entry refused before its announcement (S18).
        return from == waiting || from == granted;
    case admitted:
        return from == granted;
    case handed_off:
        // Entries ready at their grant (no observer) skip the announcement;
        // a parked runner is handed off again.
        return from == granted || from == admitted || from == parked_runner;
    case parked_runner:
        return from == handed_off;
    case running:
        return from == handed_off;
    case finishing:
        // From handed_off: the runner was dropped, or its turn came too late
        // (S18, P4); the body never started.
        return from == running || from == handed_off;
    case completing:
        // Rejected at initiation (idle), by the queue, after the grant, or
        // done with the permits; a parked completion is handed off again.
        return from == idle || from == rejected || from == finishing || from == parked_completion;
    case parked_completion:
        return from == completing;
    case done:
        return from == completing;
    }
    return false;
}

/// The phase's name, for the assertion's message.
const char* phase_name(entry_phase p) noexcept;

/// Report an illegal transition, or an entry destroyed before it was done,
/// and abort (src/admission/entry_phase.cpp).
[[noreturn]] void illegal_phase_transition(entry_phase from, entry_phase to) noexcept;
[[noreturn]] void destroyed_in_phase(entry_phase p) noexcept;
[[noreturn]] void unexpected_phase(entry_phase p, const char* where) noexcept;

/// What a request to stop (S20) found, at the moment it was made.
enum class stop_found : std::uint8_t {
    waiting,  // still in the queue: S13's case, the queue removes it
    before_start,  // granted, its body not started: it never starts
    running,  // its body runs: the body is asked to stop
    too_late,  // not yet offered, or its body is over: nothing to stop
};

/// The phase of one entry (or of a permit queue waiter, which is its first
/// part), and whether it was asked to stop (S20). The phase has one writer at
/// a time; the stop request comes from whoever asks (the caller's
/// cancellation slot), so every move of the phase is a read-modify-write that
/// keeps the request, and "has the body started" is decided by one
/// compare-and-swap, try_start(), against request_stop()'s.
class entry_phase_cell {
public:
    entry_phase get() const noexcept { return phase_of(bits_.load(std::memory_order_relaxed)); }
    /// A stop was asked for (sticky).
    bool stop_requested() const noexcept { return (bits_.load(std::memory_order_acquire) & stop_bit) != 0; }

    /// Marks an entry that can be asked to stop (its cancellation handler is
    /// installed), before anyone else can see it. Only such an entry's moves
    /// need read-modify-writes: nobody sets a bit in another's byte.
    void make_stoppable() noexcept {
        bits_.store(static_cast<std::uint8_t>(bits_.load(std::memory_order_relaxed) | stoppable_bit),
                    std::memory_order_relaxed);
    }

    /// Marks an entry whose running body is asked to stop when its deadline
    /// passes (S20, session_options::stop_at_deadline), before anyone else
    /// can see it. Such an entry is stoppable as well (make_stoppable).
    void make_stoppable_at_deadline() noexcept {
        bits_.store(static_cast<std::uint8_t>(bits_.load(std::memory_order_relaxed) | at_deadline_bit),
                    std::memory_order_relaxed);
    }
    bool stops_at_deadline() const noexcept { return (bits_.load(std::memory_order_relaxed) & at_deadline_bit) != 0; }
    /// The first request to stop came from the deadline (S20: the first cause
    /// decides the code). Read after the body ended.
    bool stopped_at_deadline() const noexcept {
        return (bits_.load(std::memory_order_acquire) & deadline_cause_bit) != 0;
    }

    /// Moves to `to`, keeping a stop request; with assertions on, checks the
    /// move against may_follow.
    void advance(entry_phase to) noexcept {
        const std::uint8_t was = bits_.load(std::memory_order_relaxed);
        const entry_phase from = phase_of(was);
#ifndef NDEBUG
        if (!may_follow(from, to)) illegal_phase_transition(from, to);
#endif
        const auto change = static_cast<std::uint8_t>(static_cast<std::uint8_t>(from) ^ static_cast<std::uint8_t>(to));
        if ((was & stoppable_bit) == 0) {
            bits_.store(static_cast<std::uint8_t>(was ^ change), std::memory_order_relaxed);
            return;
        }
        // Only this owner changes the phase bits; a concurrent request only
        // sets the stop bit, which the exclusive-or leaves as it finds it.
        bits_.fetch_xor(change, std::memory_order_acq_rel);
    }

    /// The runner's turn: handed_off -> running, unless a stop was asked
    /// first (then the phase stays handed_off and the body never starts).
    bool try_start() noexcept {
        std::uint8_t was = bits_.load(std::memory_order_relaxed);
        for (;;) {
#ifndef NDEBUG
            if (phase_of(was) != entry_phase::handed_off) illegal_phase_transition(phase_of(was), entry_phase::running);
#endif
            if ((was & stop_bit) != 0) return false;
            const auto running =
                static_cast<std::uint8_t>((was & ~phase_mask) | static_cast<std::uint8_t>(entry_phase::running));
            if ((was & stoppable_bit) == 0) {
                bits_.store(running, std::memory_order_relaxed);
                return true;
            }
            if (bits_.compare_exchange_weak(was, running, std::memory_order_acq_rel, std::memory_order_relaxed))
                return true;
        }
    }

    /// Records a request to stop, where it applies: to a granted entry whose
    /// body has not started (any request), or to a running body when
    /// `may_stop_running` (S20: a mask with terminal or partial). Says what
    /// it found; `waiting` and `too_late` record nothing.
    stop_found request_stop(bool may_stop_running) noexcept {
        std::uint8_t was = bits_.load(std::memory_order_relaxed);
        for (;;) {
            stop_found found = stop_found::too_late;
            switch (phase_of(was)) {
            case entry_phase::waiting:
                return stop_found::waiting;
            case entry_phase::granted:
            case entry_phase::admitted:
            case entry_phase::handed_off:
            case entry_phase::parked_runner:
                found = stop_found::before_start;
                break;
            case entry_phase::running:
                if (!may_stop_running) return stop_found::too_late;
                found = stop_found::running;
                break;
            default:
                return stop_found::too_late;
            }
            if ((was & stop_bit) != 0) return found;  // asked before: once is enough
            if (bits_.compare_exchange_weak(was, static_cast<std::uint8_t>(was | stop_bit), std::memory_order_acq_rel,
                                            std::memory_order_relaxed))
                return found;
        }
    }

    /// The deadline passed while the body runs (S20): records the request,
    /// and that the deadline caused it, when the body runs and nobody asked
    /// before. True when this call made the request (the caller then asks the
    /// body's stop state); false when the body is not running, or was asked
    /// already (the first cause stands).
    bool request_stop_at_deadline() noexcept {
        std::uint8_t was = bits_.load(std::memory_order_relaxed);
        for (;;) {
            if (phase_of(was) != entry_phase::running || (was & stop_bit) != 0) return false;
            if (bits_.compare_exchange_weak(was, static_cast<std::uint8_t>(was | stop_bit | deadline_cause_bit),
                                            std::memory_order_acq_rel, std::memory_order_relaxed))
                return true;
        }
    }

    /// With assertions on, checks that the phase is `a` or `b` at `where`
    /// (a place that relies on it: a list that borrows the entry's links).
    void expect(entry_phase a, entry_phase b, const char* where) const noexcept {
#ifndef NDEBUG
        const entry_phase p = get();
        if (p != a && p != b) unexpected_phase(p, where);
#else
        (void)a, (void)b, (void)where;
#endif
    }

    /// With assertions on, checks that an entry being destroyed is done, or
    /// never left idle (its initiation failed before it was offered).
    void check_destroyable() const noexcept {
#ifndef NDEBUG
        const entry_phase p = get();
        if (p != entry_phase::done && p != entry_phase::idle) destroyed_in_phase(p);
#endif
    }

private:
    static constexpr std::uint8_t phase_mask = 0x0f;
    static constexpr std::uint8_t at_deadline_bit = 0x10;
    static constexpr std::uint8_t deadline_cause_bit = 0x20;
    static constexpr std::uint8_t stop_bit = 0x40;
    static constexpr std::uint8_t stoppable_bit = 0x80;
    static constexpr entry_phase phase_of(std::uint8_t bits) noexcept {
        return static_cast<entry_phase>(bits & phase_mask);
    }

    std::atomic<std::uint8_t> bits_{static_cast<std::uint8_t>(entry_phase::idle)};
};

}  // namespace tenferro::detail
