// The entry's phases (entry_phase.hpp): the transition table keeps the
// contract's promises as properties of a graph, and a build with assertions
// stops at a transition outside it. The transitions the entries actually take
// are checked by every other test of a build with assertions (CI's sanitizer
// stages, the simulation among them): each advance() is asserted there.
#include <tenferro/detail/admission/entry_phase.hpp>
#include <tenferro/detail/admission/permit_waiter.hpp>

#include <unistd.h>
#include <array>
#include <csignal>
#include <cstddef>
#include <sys/wait.h>

#include <catch2/catch.hpp>

using namespace tenferro::detail;

namespace {

constexpr std::size_t phase_count = static_cast<std::size_t>(entry_phase::done) + 1;

constexpr entry_phase at(std::size_t i) { return static_cast<entry_phase>(i); }

/// Phases reachable from `from` without passing through `avoid` (itself
/// excluded unless it is `from`).
std::array<bool, phase_count> reachable(entry_phase from, entry_phase avoid) {
    std::array<bool, phase_count> seen{};
    seen[static_cast<std::size_t>(from)] = true;
    for (bool grew = true; grew;) {
        grew = false;
        for (std::size_t a = 0; a < phase_count; ++a) {
            if (!seen[a] || (at(a) == avoid && at(a) != from)) continue;
            for (std::size_t b = 0; b < phase_count; ++b)
                if (!seen[b] && may_follow(at(a), at(b))) seen[b] = grew = true;
        }
    }
    return seen;
}

constexpr entry_phase none = static_cast<entry_phase>(255);  // avoids nothing

bool reaches(entry_phase from, entry_phase to, entry_phase avoid = none) {
    return reachable(from, avoid)[static_cast<std::size_t>(to)];
}

}  // namespace

TEST_CASE("entry phases: every phase is reachable from idle, and every phase can end in done") {
    for (std::size_t i = 0; i < phase_count; ++i) {
        INFO(phase_name(at(i)));
        CHECK(reaches(entry_phase::idle, at(i)));
        CHECK(reaches(at(i), entry_phase::done));
        CHECK_FALSE(may_follow(at(i), entry_phase::idle));   // nothing goes back to the start
        CHECK_FALSE(may_follow(entry_phase::done, at(i)));   // nothing leaves the end
        CHECK_FALSE(may_follow(at(i), at(i)));               // every advance changes the phase
    }
}

TEST_CASE("entry phases: a body starts only holding a grant, at its runner's turn (S4, S17)") {
    // Every way from idle to running goes through granted and handed_off.
    CHECK_FALSE(reaches(entry_phase::idle, entry_phase::running, entry_phase::granted));
    CHECK_FALSE(reaches(entry_phase::idle, entry_phase::running, entry_phase::handed_off));
    // A waiter the queue removed never runs (S13, P4, S12).
    CHECK_FALSE(reaches(entry_phase::rejected, entry_phase::running));
    CHECK_FALSE(reaches(entry_phase::rejected, entry_phase::finishing));
    // A body runs once: nothing leads back to running from after it.
    for (const entry_phase after : {entry_phase::finishing, entry_phase::completing, entry_phase::done})
        CHECK_FALSE(reaches(after, entry_phase::running));
}

TEST_CASE("entry phases: every entry completes exactly once, through completing (S1)") {
    for (std::size_t i = 0; i < phase_count; ++i) {
        if (at(i) == entry_phase::completing || at(i) == entry_phase::parked_completion || at(i) == entry_phase::done)
            continue;
        INFO(phase_name(at(i)));
        CHECK_FALSE(reaches(at(i), entry_phase::done, entry_phase::completing));
    }
    // Once completing, the permits are back: no way to a phase that holds them.
    for (const entry_phase holds : {entry_phase::granted, entry_phase::admitted, entry_phase::handed_off,
                                    entry_phase::running, entry_phase::finishing})
        CHECK_FALSE(reaches(entry_phase::completing, holds));
    // Permits are released in finishing only: a granted entry reaches
    // completing through finishing, or gives its grant back (rejected).
    CHECK_FALSE(reaches(entry_phase::admitted, entry_phase::completing, entry_phase::finishing));
}

TEST_CASE("entry phases: a waiter starts idle, and the cell moves as told") {
    permit_waiter w;
    CHECK(w.phase() == entry_phase::idle);
    w.phase_.advance(entry_phase::waiting);
    w.phase_.advance(entry_phase::granted);
    CHECK(w.phase() == entry_phase::granted);
}

#ifndef NDEBUG
TEST_CASE("entry phases: with assertions on, a transition outside the table aborts the process") {
    for (const auto& [from, to] :
         {std::pair{entry_phase::idle, entry_phase::running}, std::pair{entry_phase::done, entry_phase::completing}}) {
        INFO(phase_name(from) << " -> " << phase_name(to));
        const pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            // The default action, not Catch's reporter (which is not
            // signal-safe, and ThreadSanitizer says so).
            std::signal(SIGABRT, SIG_DFL);
            // Walk to `from` legally (a path the table allows), then break the rule.
            entry_phase_cell cell;
            if (from == entry_phase::done) {
                cell.advance(entry_phase::completing);
                cell.advance(entry_phase::done);
            }
            cell.advance(to);
            _exit(0);  // not reached when the check works
        }
        int status = 0;
        REQUIRE(waitpid(child, &status, 0) == child);
        CHECK(WIFSIGNALED(status));
        CHECK(WTERMSIG(status) == SIGABRT);
    }
}
#endif
