#pragma once
// The probe backend of the session_host tests: a session_backend whose
// open_session follows a plan (open, reject with a code, throw) and records
// every call (permits, executor's context, thread) and every session's open
// and close in a log that outlives the host; its session can be neither
// copied nor moved.

#include <atomic>
#include <cstddef>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <tenferro/session_host.hpp>
#include "host_internals.hpp"
#include "test_asio.hpp"

namespace tenferro::test::probe {

inline const char* name_of(placement where) {
    return where == placement::caller ? "caller placement" : "compute placement";
}

/// What the probe backend's open_session does with the next grant.
enum class open_plan {
    open,
    reject_contended,
    reject_incompatible,
    reject_code_zero,
    reject_code_large,
    throw_runtime_error,
    throw_int
};

/// Everything a probe backend and its sessions record; outlives the host.
struct probe_log {
    std::mutex m;
    std::vector<std::string> events;       // "open #n k=p", "reject k=p", "throw k=p", "close #n", bodies' own
    std::deque<open_plan> plan;            // one per open_session call; empty: open
    std::vector<std::size_t> grant_permits;        // each call's grant.permits
    std::vector<const void*> grant_contexts;       // each call's grant.executor's execution context
    std::vector<std::thread::id> open_threads;     // the thread of each call
    int next_id = 0;
    std::atomic<int> opened{0}, closed{0}, live{0};

    void push(std::string e) {
        std::lock_guard lock(m);
        events.push_back(std::move(e));
    }
    std::vector<std::string> take_events() {
        std::lock_guard lock(m);
        return std::exchange(events, {});
    }
    void will(open_plan p) {
        std::lock_guard lock(m);
        plan.push_back(p);
    }
    template <class T>
    std::vector<T> copy(const std::vector<T>& v) {
        std::lock_guard lock(m);
        return v;
    }
};

/// A session that can be neither copied nor moved.
class probe_session {
public:
    probe_session(probe_log& log, int id, std::size_t permits) : log_(&log), id_(id), permits_(permits) {
        log_->opened.fetch_add(1);
        log_->live.fetch_add(1);
    }
    ~probe_session() {
        magic_ = 0;
        log_->live.fetch_sub(1);
        log_->closed.fetch_add(1);
        log_->push("close #" + std::to_string(id_));
    }
    probe_session(const probe_session&) = delete;
    probe_session& operator=(const probe_session&) = delete;

    int id() const noexcept { return id_; }
    std::size_t parallelism() const noexcept { return permits_; }
    /// False once destroyed (read through a dangling reference, ASan reports it first).
    bool alive() const noexcept { return magic_ == 0x5e55; }

private:
    probe_log* log_;
    int id_;
    std::size_t permits_;
    volatile unsigned magic_ = 0x5e55;
};

/// A backend whose open_session follows the log's plan and records each call.
class probe_backend {
public:
    using session_type = probe_session;

    explicit probe_backend(probe_log& log, std::string name = "probe") : log_(&log), name_(std::move(name)) {}

    std::string_view name() const noexcept { return name_; }

    session_result<probe_session> open_session(const session_grant& grant) {
        open_plan p = open_plan::open;
        int id = 0;
        const std::string k = " k=" + std::to_string(grant.permits);
        {
            std::lock_guard lock(log_->m);
            if (!log_->plan.empty()) {
                p = log_->plan.front();
                log_->plan.pop_front();
            }
            log_->grant_permits.push_back(grant.permits);
            log_->grant_contexts.push_back(&asio::query(grant.executor, asio::execution::context));
            log_->open_threads.push_back(std::this_thread::get_id());
            if (p == open_plan::open) {
                id = ++log_->next_id;
                log_->events.push_back("open #" + std::to_string(id) + k);
            } else {
                log_->events.push_back(
                    (p == open_plan::throw_runtime_error || p == open_plan::throw_int ? "throw" : "reject") + k);
            }
        }
        switch (p) {
        case open_plan::reject_contended:
            return tl::make_unexpected(session_entry_error(session_entry_errc::contended, name_, "the device is busy"));
        case open_plan::reject_incompatible:
            return tl::make_unexpected(
                session_entry_error(session_entry_errc::incompatible_context, name_, "wrong device generation"));
        case open_plan::reject_code_zero:  // not a session_entry_errc
            return tl::make_unexpected(session_entry_error(session_entry_errc{}, name_, "zero"));
        case open_plan::reject_code_large:
            return tl::make_unexpected(session_entry_error(static_cast<session_entry_errc>(1000), name_, "large"));
        case open_plan::throw_runtime_error:
            throw std::runtime_error("device lost");
        case open_plan::throw_int:
            throw 42;
        case open_plan::open:
            break;
        }
        return session_result<probe_session>(tl::in_place, *log_, id, grant.permits);
    }

private:
    probe_log* log_;
    std::string name_;
};

/// The host of the session_host tests; `inspectable` for `pool_id`.
using probe_host = inspectable<session_host<probe_backend>>;

/// The execution context of `io`, as grant_contexts records it.
inline const void* context_id(asio::io_context& io) { return static_cast<asio::execution_context*>(&io); }
/// The execution context of `host`'s compute workers.
template <class Host>
const void* pool_id(inspectable<Host>& host) {
    return host.pool_id();
}

inline bool balanced(const admission_stats& st) { return st.available == st.permits && st.admitted == st.completed; }

}  // namespace tenferro::test::probe
