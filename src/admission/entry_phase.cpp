// The messages of entry_phase.hpp's checks.

#include "tenferro/detail/admission/entry_phase.hpp"

#include <cstdio>
#include <cstdlib>

namespace tenferro::detail {

const char* phase_name(entry_phase p) noexcept {
    switch (p) {
    case entry_phase::idle:
        return "idle";
    case entry_phase::waiting:
        return "waiting";
    case entry_phase::granted:
        return "granted";
    case entry_phase::rejected:
        return "rejected";
    case entry_phase::admitted:
        return "admitted";
    case entry_phase::handed_off:
        return "handed_off";
    case entry_phase::parked_runner:
        return "parked_runner";
    case entry_phase::running:
        return "running";
    case entry_phase::finishing:
        return "finishing";
    case entry_phase::completing:
        return "completing";
    case entry_phase::parked_completion:
        return "parked_completion";
    case entry_phase::done:
        return "done";
    }
    return "(not a phase)";
}

void illegal_phase_transition(entry_phase from, entry_phase to) noexcept {
    std::fprintf(stderr, "tenferro: internal error: an entry moved from phase %s to phase %s\n", phase_name(from),
                 phase_name(to));
    std::abort();
}

void destroyed_in_phase(entry_phase p) noexcept {
    std::fprintf(stderr, "tenferro: internal error: an entry was destroyed in phase %s\n", phase_name(p));
    std::abort();
}

void unexpected_phase(entry_phase p, const char* where) noexcept {
    std::fprintf(stderr, "tenferro: internal error: an entry was in phase %s at %s\n", phase_name(p), where);
    std::abort();
}

}  // namespace tenferro::detail
