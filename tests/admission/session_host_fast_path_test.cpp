// What section 6 of the contract (custom backends, session_host.hpp) adds to
// S1-S20, for the inline fast path: an entry admitted at once
// delivers what the general path delivers, in every outcome, and keeps the
// host and the caller's io_context lifetimes the general path keeps.
#include <tenferro/session_host.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
#include <catch2/catch.hpp>
#include <tenferro/cpu_backend.hpp>
#include "test_asio.hpp"

#include "entry_helpers.hpp"
#include "probe_backend.hpp"
#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

using namespace tenferro;
using namespace tenferro::test::probe;
using tenferro::test::gate;
using tenferro::test::on_caller;
using tenferro::test::on_compute;
using tenferro::test::placed;
using tenferro::test::run_until;
using tenferro::test::spawn;

namespace {
/// What an entry delivered, and what it left behind, for comparing two paths.
struct entry_outcome {
    bool body_ran_in_initiation = false;  // the body ran before the initiating call returned
    // The general path installs its cancellation handler in the handler's slot
    // and clears it only at completion; the fast path never touches the slot.
    // Seen right after the initiating call returns, this tells the paths apart.
    bool slot_taken_after_initiation = false;
    int body_runs = 0;
    std::string exception;  // what() of the first argument ("" when null, "?" when not a std::exception)
    std::optional<int> value;
    int code = 0;
    std::string backend, detail;
    int inner_code = -1;  // re-entry case: the nested entry's error code
    std::vector<std::string> events;
    admission_stats stats;

    bool operator==(const entry_outcome&) const = default;
};

enum class outcome_case {
    value,
    reject_contended,
    reject_code_zero,
    open_throws,
    open_throws_int,
    body_throws,
    reentry
};

/// Enters one caller-placed entry on a fresh host with a callback token bound
/// to `io`'s executor (concrete, or behind any_io_executor), either from inside
/// a handler running on `io` (the inline fast path: admitted at once on a
/// thread of the handler's io_context) or from this thread outside io.run()
/// (the general path: an operation state and a posted runner).
entry_outcome enter_once(outcome_case c, bool from_io_thread, bool type_erased) {
    probe_log log;
    asio::io_context io;
    probe_host host({.permits = 2}, log);
    switch (c) {
    case outcome_case::reject_contended:
        log.will(open_plan::reject_contended);
        break;
    case outcome_case::reject_code_zero:
        log.will(open_plan::reject_code_zero);
        break;
    case outcome_case::open_throws:
        log.will(open_plan::throw_runtime_error);
        break;
    case outcome_case::open_throws_int:
        log.will(open_plan::throw_int);
        break;
    default:
        break;
    }
    entry_outcome out;
    bool initiating = false, completed = false;
    auto body = [&](probe_session& s) -> int {
        ++out.body_runs;
        out.body_ran_in_initiation = initiating;
        if (c == outcome_case::body_throws) throw std::runtime_error("body failed");
        if (c == outcome_case::reentry) {
            host.with_backend_session(
                on_caller(), [](probe_session&) { return 0; },
                asio::bind_executor(io.get_executor(), [&](std::exception_ptr, session_result<int> r) {
                    out.inner_code = static_cast<int>(r.error().code());
                }));
        }
        return 40 + s.id();
    };
    auto done = [&](std::exception_ptr e, session_result<int> r) {
        completed = true;
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (const std::exception& x) {
                out.exception = x.what();
            } catch (...) {
                out.exception = "?";
            }
        }
        if (r) {
            out.value = *r;
        } else {
            out.code = static_cast<int>(r.error().code());
            out.backend = std::string(r.error().backend());
            out.detail = std::string(r.error().detail());
        }
    };
    asio::cancellation_signal signal;
    auto initiate = [&] {
        initiating = true;
        if (type_erased)
            host.with_backend_session(
                on_caller(), body,
                asio::bind_cancellation_slot(signal.slot(),
                                             asio::bind_executor(asio::any_io_executor(io.get_executor()), done)));
        else
            host.with_backend_session(
                on_caller(), body,
                asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io.get_executor(), done)));
        initiating = false;
        out.slot_taken_after_initiation = signal.slot().has_handler();
    };
    if (from_io_thread)
        asio::post(io, initiate);
    else
        initiate();
    io.run();
    REQUIRE(completed);
    out.events = log.take_events();
    out.stats = host.stats();
    return out;
}
}  // namespace

TEST_CASE("The inline fast path delivers what the general path delivers, in every outcome") {
    // An entry admitted at once on its io_context's thread runs without an
    // operation state (entry_op::try_run_inline). Whatever happens to it must
    // be what happens on the general path: the value, the backend's
    // rejections (a code outside the enumeration too), open_session throwing,
    // the body throwing, a re-entry from the body, the session's open and
    // close, and every counter.
    for (outcome_case c :
         {outcome_case::value, outcome_case::reject_contended, outcome_case::reject_code_zero,
          outcome_case::open_throws, outcome_case::open_throws_int, outcome_case::body_throws, outcome_case::reentry})
        for (bool type_erased : {false, true}) {
            INFO("case " << static_cast<int>(c) << (type_erased ? ", any_io_executor" : ", io_context's executor"));
            const entry_outcome fast = enter_once(c, /*from_io_thread=*/true, type_erased);
            const entry_outcome general = enter_once(c, /*from_io_thread=*/false, type_erased);
            // Not vacuous: the first entry took the fast path (no operation
            // state ever took the cancellation slot) and ran its body inside the
            // initiation; the second took the general path.
            const bool opens = c == outcome_case::value || c == outcome_case::body_throws || c == outcome_case::reentry;
            CHECK_FALSE(fast.slot_taken_after_initiation);
            CHECK(general.slot_taken_after_initiation);
            CHECK(fast.body_ran_in_initiation == opens);
            CHECK_FALSE(general.body_ran_in_initiation);
            CHECK(fast.body_runs == (opens ? 1 : 0));
            CHECK(fast.exception == general.exception);
            CHECK(fast.value == general.value);
            CHECK(fast.code == general.code);
            CHECK(fast.backend == general.backend);
            CHECK(fast.detail == general.detail);
            CHECK(fast.inner_code == general.inner_code);
            CHECK(fast.events == general.events);
            CHECK(fast.stats.admitted == general.stats.admitted);
            CHECK(fast.stats.completed == general.stats.completed);
            CHECK(fast.stats.rejected == general.stats.rejected);
            CHECK(fast.stats.available == general.stats.available);
            CHECK(balanced(fast.stats));
            switch (c) {
            case outcome_case::value:
                CHECK(fast.value == 41);
                break;
            case outcome_case::reject_contended:
                CHECK(fast.code == static_cast<int>(session_entry_errc::contended));
                CHECK(fast.detail == "the device is busy");
                break;
            case outcome_case::reject_code_zero:
                CHECK(fast.code == static_cast<int>(session_entry_errc::executor));
                CHECK(fast.detail.find("which is not a session_entry_errc") != std::string::npos);
                break;
            case outcome_case::open_throws:
                CHECK(fast.detail == "the backend's open_session threw: device lost");
                break;
            case outcome_case::open_throws_int:
                CHECK(fast.detail == "the backend's open_session threw");
                break;
            case outcome_case::body_throws:
                CHECK(fast.exception == "body failed");
                CHECK(fast.code == static_cast<int>(session_entry_errc::executor));
                break;
            case outcome_case::reentry:
                CHECK(fast.inner_code == static_cast<int>(session_entry_errc::reentered));
                CHECK(fast.value == 41);
                break;
            }
            CHECK(fast.stats.rejected == (c == outcome_case::value || c == outcome_case::body_throws ? 0u : 1u));
        }
}

TEST_CASE("A body holding the last reference to its host: the host goes after the permits, on either path") {
    // A keep-alive capture (`[self = shared_from_this()]`, a shared_ptr to the
    // host) makes the body's copy the host's last owner. The host's destructor
    // waits until every permit is back, on the thread that destroys the body:
    // the body must therefore go after the release, as finish() does on the
    // general path. Destroyed before the release, it would hang this test in
    // ~session_host (wait_until_idle).
    for (bool from_io_thread : {true, false}) {
        INFO((from_io_thread ? "inline fast path" : "general path"));
        probe_log log;
        asio::io_context io;
        auto host = std::make_shared<probe_host>(host_options{.permits = 1}, log);
        probe_host* raw = host.get();
        std::weak_ptr<probe_host> watch = host;
        bool initiating = false, ran_in_initiation = false, slot_taken = false;
        std::optional<session_result<int>> r;
        asio::cancellation_signal signal;  // tells the paths apart (see entry_outcome)
        auto initiate = [&] {
            initiating = true;
            raw->with_backend_session(
                on_caller(),
                [&, keep = std::move(host)](probe_session& s) {
                    ran_in_initiation = initiating;
                    return s.id();
                },
                asio::bind_cancellation_slot(
                    signal.slot(),
                    asio::bind_executor(io.get_executor(), [&](std::exception_ptr, session_result<int> v) {
                        // The host is gone by now, whichever path ran the entry.
                        CHECK(watch.expired());
                        r = std::move(v);
                    })));
            initiating = false;
            if (from_io_thread) slot_taken = signal.slot().has_handler();
        };
        if (from_io_thread)
            asio::post(io, initiate);
        else
            initiate();
        io.run();
        CHECK(ran_in_initiation == from_io_thread);
        CHECK_FALSE(slot_taken);  // the fast path ran it (the general path's slot is checked above)
        REQUIRE(r.has_value());
        CHECK(r->value() == 1);
        CHECK(watch.expired());
        CHECK(log.take_events() == std::vector<std::string>{"open #1 k=1", "close #1"});
    }
}

TEST_CASE("An io_context destroyed with a fast-path completion still queued destroys the handler unrun") {
    // The inline fast path posts its completion (a block of the per-thread
    // entry cache, inline_completion_for) and returns. A caller that tears its
    // io_context down before running it must find the handler destroyed, never
    // called, the block freed (ASan: no leak, no use after free) and every
    // permit back.
    probe_log log;
    probe_host host(host_options{.permits = 1}, log);
    auto token = std::make_shared<int>(7);
    std::weak_ptr<int> watch = token;
    bool called = false, slot_taken = true;
    {
        asio::io_context io;
        asio::cancellation_signal signal;  // untouched on the fast path (see entry_outcome)
        asio::post(io, [&] {
            host.with_backend_session(
                on_caller(), [](probe_session& s) { return s.id(); },
                asio::bind_cancellation_slot(
                    signal.slot(), asio::bind_executor(io.get_executor(), [&called, keep = std::move(token)](
                                                                              std::exception_ptr, session_result<int>) {
                        called = true;
                    })));
            slot_taken = signal.slot().has_handler();
        });
        CHECK(io.run_one() == 1);  // the initiation: the body runs, the completion is queued
        CHECK(log.take_events() == std::vector<std::string>{"open #1 k=1", "close #1"});
        CHECK_FALSE(watch.expired());  // the handler waits in the queue
    }
    CHECK_FALSE(slot_taken);
    CHECK_FALSE(called);
    CHECK(watch.expired());
    CHECK(balanced(host.stats()));
}
