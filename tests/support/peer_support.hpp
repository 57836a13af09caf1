#pragma once
// Helpers for the peer test ports (tests/peers/): the scenarios of other
// libraries' semaphore and async-mutex suites, mapped onto cpu_backend (and,
// built with TENFERRO_TEST_GENERIC_HOST, onto session_host<device_backend>:
// test_host.hpp).
//
// The mapping: a permit holder is an entry whose body holds its permits. A
// `holder` is an async body, placed on the caller's io_context, that holds its
// permits until the test calls release(); the test steps that one io_context
// (poll / poll_one) and asserts exact orders. Every wait is bounded: `settle`
// and `step_until` give up after a fixed number of handlers, `run_until`
// (test_support.hpp) after a deadline.

#include <chrono>
#include <cstddef>
#include <deque>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "entry_helpers.hpp"
#include "spawn.hpp"
#include "test_host.hpp"
#include "test_support.hpp"

namespace tenferro::peer {

using tenferro::test::on_caller;
using tenferro::test::try_on_caller;

/// co_spawn that rethrows a coroutine's escaping exception out of run()/poll().
using tenferro::test::spawn;

/// Runs ready handlers until none is left (at most `max_handlers`). Returns
/// false when the bound was hit: something keeps posting work forever.
inline bool settle(asio::io_context& io, std::size_t max_handlers = 100000) {
    std::size_t n = 0;
    for (;;) {
        io.restart();
        const std::size_t ran = io.poll_one();
        if (ran == 0) return true;
        if (++n > max_handlers) return false;
    }
}

/// Runs ready handlers one at a time until `done()` holds. Returns false when
/// the queue ran dry or `max_handlers` ran first.
template <class Pred>
bool step_until(asio::io_context& io, Pred done, std::size_t max_handlers = 10000) {
    for (std::size_t n = 0; !done(); ++n) {
        io.restart();
        if (n > max_handlers || io.poll_one() == 0) return done();
    }
    return true;
}

/// An entry whose async body holds its permits until release(). Records when
/// the body started and finished and what the entry completed with.
class holder {
public:
    explicit holder(asio::io_context& io, std::string name = {})
        : name_(std::move(name)), gate_(io, std::chrono::hours(24)) {}
    holder(const holder&) = delete;
    holder& operator=(const holder&) = delete;

    /// Initiates the entry (on a fresh coroutine of `io`); it starts when the
    /// test next runs `io`. `log`, when given, receives the body's name.
    void enter(test_host& cpu, asio::io_context& io, session_options opts = on_caller(),
               std::vector<std::string>* log = nullptr) {
        spawn(io, [this, &cpu, opts, log]() -> asio::awaitable<void> {
            initiated_ = true;
            auto body = [this, log](test_session& s) -> asio::awaitable<int> {
                started_ = true;
                parallelism_ = s.parallelism();
                if (log) log->push_back(name_);
                tenferro::asio_error_code ec;
                co_await gate_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
                finished_ = true;
                co_return 1;
            };
            result_ = co_await cpu.with_backend_session(
                opts, std::move(body), asio::bind_cancellation_slot(cancel_.slot(), asio::use_awaitable));
        });
    }
    /// Lets the body finish (its permits return when the test runs `io`); a
    /// body that has not started yet will finish as soon as it starts.
    void release() { gate_.expires_at(std::chrono::steady_clock::time_point::min()); }
    /// Per-operation cancellation of the entry (only a waiting entry leaves).
    void cancel(asio::cancellation_type type = asio::cancellation_type::terminal) { cancel_.emit(type); }

    bool initiated() const { return initiated_; }
    bool started() const { return started_; }
    bool finished() const { return finished_; }
    bool completed() const { return result_.has_value(); }
    std::size_t parallelism() const { return parallelism_; }
    const std::optional<session_result<int>>& result() const { return result_; }
    /// The admission error the entry completed with, if it did with one.
    std::optional<session_entry_errc> error() const {
        if (result_ && !result_->has_value()) return result_->error().code();
        return std::nullopt;
    }
    bool succeeded() const { return result_ && result_->has_value(); }

private:
    std::string name_;
    asio::steady_timer gate_;
    asio::cancellation_signal cancel_;
    bool initiated_ = false, started_ = false, finished_ = false;
    std::size_t parallelism_ = 0;
    std::optional<session_result<int>> result_;
};

/// An entry with a synchronous body that records that it ran (and appends
/// its name to `log`) and returns `value`; for entries that only need to be
/// admitted, rejected or cancelled, not to hold.
class probe {
public:
    explicit probe(std::string name = {}, int value = 1) : name_(std::move(name)), value_(value) {}
    probe(const probe&) = delete;
    probe& operator=(const probe&) = delete;

    /// Initiates the entry on a fresh coroutine of `io` (at the next poll).
    void enter(test_host& cpu, asio::io_context& io, session_options opts = on_caller(),
               std::vector<std::string>* log = nullptr) {
        spawn(io, [this, &cpu, opts, log]() -> asio::awaitable<void> {
            auto body = [this, log](test_session&) {
                ++runs_;
                if (log) log->push_back(name_);
                return value_;
            };
            result_ = co_await cpu.with_backend_session(
                opts, std::move(body), asio::bind_cancellation_slot(cancel_.slot(), asio::use_awaitable));
        });
    }
    void cancel(asio::cancellation_type type = asio::cancellation_type::terminal) { cancel_.emit(type); }

    int runs() const { return runs_; }
    bool completed() const { return result_.has_value(); }
    bool succeeded() const { return result_ && result_->has_value(); }
    std::optional<session_entry_errc> error() const {
        if (result_ && !result_->has_value()) return result_->error().code();
        return std::nullopt;
    }
    const std::optional<session_result<int>>& result() const { return result_; }

private:
    std::string name_;
    int value_;
    int runs_ = 0;
    asio::cancellation_signal cancel_;
    std::optional<session_result<int>> result_;
};

/// Owns the holders of one test. Declare it after the io_context and the
/// cpu_backend: its destructor releases every holder and settles `io`, so the
/// backend's destructor (which waits for running sessions) never waits for a
/// caller-placed body that nobody will run, even when a REQUIRE failed.
class holders {
public:
    explicit holders(asio::io_context& io) : io_(io) {}
    holders(const holders&) = delete;
    holders& operator=(const holders&) = delete;
    ~holders() {
        for (auto& h : all_) h.release();
        settle(io_);
    }
    holder& make(std::string name = {}) { return all_.emplace_back(io_, std::move(name)); }
    void release_all() {
        for (auto& h : all_) h.release();
    }

private:
    asio::io_context& io_;
    std::deque<holder> all_;
};

/// S14 at quiescence: every permit back, every admitted entry completed (and,
/// on the generic host, every session its backend opened destroyed).
inline bool quiescent(const test_host& cpu) {
    const admission_stats st = cpu.stats();
    return st.available == st.permits && st.waiting == 0 && st.admitted == st.completed &&
           test::all_sessions_closed(cpu);  // (always true for cpu_backend)
}

}  // namespace tenferro::peer

/// Failure messages name the error (or its absence) instead of "{?}".
template <>
struct Catch::StringMaker<std::optional<tenferro::session_entry_errc>> {
    static std::string convert(const std::optional<tenferro::session_entry_errc>& e) {
        return e ? "errc " + std::to_string(static_cast<int>(*e)) + " (" + make_error_code(*e).message() + ")"
                 : std::string("no admission error (succeeded, or not completed)");
    }
};
