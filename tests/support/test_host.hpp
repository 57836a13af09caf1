#pragma once
// The host the admission tests run against: the same deterministic,
// stress and peer scenarios run through `cpu_backend` (the default) and, built
// with TENFERRO_TEST_GENERIC_HOST defined, through `session_host<B>` over a
// backend that is not the CPU's (`device_backend` below). Every admission rule
// (S1–S20) is the template's, so both must pass the same tests.
//
//   test_host          cpu_backend                  | session_host<device_backend>
//   test_session       backend_session              | device_session
//   test_host_name     "cpu"                        | "device"
//
// `test_host` derives from the host of the build (through `inspectable`, so
// that a test may reach its admission core: host_internals.hpp) and is built
// from `test_host_options`, an aggregate of the options both hosts take —
// `{.permits = 3, .max_waiters = 40}` — that it converts field by field, by
// name, to `cpu_backend_options` or `host_options`.

#include <atomic>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <tenferro/admission_observer.hpp>
#include <tenferro/session_grant.hpp>
#include <tenferro/session_host.hpp>
#include "host_internals.hpp"
#include "test_asio.hpp"

#ifndef TENFERRO_TEST_GENERIC_HOST
#include <tenferro/backend_session.hpp>
#include <tenferro/cpu_backend.hpp>
#endif

namespace tenferro::test {

/// How many sessions a `device_backend` opened and how many of them were
/// destroyed since; every opened session must be closed once its body ended.
struct session_counters {
    std::atomic<long> opened{0};
    std::atomic<long> closed{0};
};

/// The session of the test backend: what a body receives. Neither copyable
/// nor movable (open_session returns it as a prvalue). Records the grant it
/// was opened with and the thread that opened it.
class device_session {
public:
    device_session(std::string_view backend, const session_grant& grant, session_counters& counters)
        : backend_(backend),
          permits_(grant.permits),
          executor_(grant.executor),
          opened_on_(std::this_thread::get_id()),
          counters_(&counters) {
        counters_->opened.fetch_add(1, std::memory_order_relaxed);
    }
    ~device_session() { counters_->closed.fetch_add(1, std::memory_order_acq_rel); }
    device_session(const device_session&) = delete;
    device_session& operator=(const device_session&) = delete;

    /// The permits this session holds (the grant's).
    std::size_t parallelism() const noexcept { return permits_; }
    /// The backend's name.
    std::string_view backend() const noexcept { return backend_; }
    /// The executor of the grant (where the body runs).
    const asio::any_io_executor& executor() const noexcept { return executor_; }
    /// The thread open_session ran on.
    std::thread::id opened_on() const noexcept { return opened_on_; }

private:
    std::string_view backend_;
    std::size_t permits_;
    asio::any_io_executor executor_;
    std::thread::id opened_on_;
    session_counters* counters_;
};

/// A backend that is not the CPU's: a stand-in for a GPU stream pool. Its
/// sessions count themselves in and out.
class device_backend {
public:
    using session_type = device_session;

    explicit device_backend(std::string name = "device") : name_(std::move(name)) {}
    device_backend(const device_backend&) = delete;
    device_backend& operator=(const device_backend&) = delete;

    std::string_view name() const noexcept { return name_; }
    device_session open_session(const session_grant& grant) { return device_session(name_, grant, counters_); }

    long sessions_opened() const noexcept { return counters_.opened.load(std::memory_order_acquire); }
    long sessions_closed() const noexcept { return counters_.closed.load(std::memory_order_acquire); }

private:
    std::string name_;
    session_counters counters_;
};

/// Every session the host's backend opened has been destroyed.
inline bool all_sessions_closed(const session_host<device_backend>& host) {
    return host.backend().sessions_opened() == host.backend().sessions_closed();
}

}  // namespace tenferro::test

namespace tenferro::test {

/// The options the tests set, which both hosts take (see `test_host`).
struct test_host_options {
    std::size_t permits = 0;
    std::size_t max_waiters = std::numeric_limits<std::size_t>::max();
    std::vector<unsigned> cpus = {};
    std::shared_ptr<admission_observer> observer = nullptr;
    std::vector<group_options> groups = {};
    std::size_t memory_budget = 0;
    bool reject_late = false;
    std::shared_ptr<admission_timer> timer = nullptr;
};

#ifdef TENFERRO_TEST_GENERIC_HOST

using test_host_base = session_host<device_backend>;
inline constexpr std::string_view test_host_name = "device";

inline host_options host_options_of(test_host_options o) {
    return {.permits = o.permits,
            .max_waiters = o.max_waiters,
            .cpus = std::move(o.cpus),
            .observer = std::move(o.observer),
            .groups = std::move(o.groups),
            .memory_budget = o.memory_budget,
            .reject_late = o.reject_late,
            .timer = std::move(o.timer)};
}

#else

using test_host_base = cpu_backend;
inline constexpr std::string_view test_host_name = "cpu";

inline cpu_backend_options host_options_of(test_host_options o) {
    return {.permits = o.permits,
            .max_waiters = o.max_waiters,
            .cpus = std::move(o.cpus),
            .observer = std::move(o.observer),
            .groups = std::move(o.groups),
            .memory_budget = o.memory_budget,
            .reject_late = o.reject_late,
            .timer = std::move(o.timer)};
}

/// cpu_backend does not count its sessions (its own tests check the buffer
/// pool and the runtime caches instead).
inline bool all_sessions_closed(const cpu_backend&) { return true; }

#endif

/// The host the admission tests run against (see the table above).
class test_host : public inspectable<test_host_base> {
public:
    explicit test_host(test_host_options options = {})
        : inspectable<test_host_base>(host_options_of(std::move(options))) {}
};

}  // namespace tenferro::test

namespace tenferro::test {
using test_session = test_host::session_type;
}  // namespace tenferro::test

// Checks that only the generic host can make (its backend counts its
// sessions); nothing at all in the CPU variant, which keeps exactly the checks
// it had. Catch2's CHECK must be visible where they are used.
#ifdef TENFERRO_TEST_GENERIC_HOST
/// Every session the host's backend opened has been destroyed.
#define TENFERRO_CHECK_SESSIONS_CLOSED(host) CHECK(::tenferro::test::all_sessions_closed(host))
/// The host's backend opened exactly `n` sessions (a rejected entry opens none).
#define TENFERRO_CHECK_SESSIONS_OPENED(host, n) CHECK((host).backend().sessions_opened() == (n))
#else
#define TENFERRO_CHECK_SESSIONS_CLOSED(host) ((void)0)
#define TENFERRO_CHECK_SESSIONS_OPENED(host, n) ((void)0)
#endif

// The tests name these unqualified, next to `using namespace tenferro;`.
namespace tenferro {
using test::test_host;
using test::test_host_name;
using test::test_host_options;
using test::test_session;
}  // namespace tenferro
