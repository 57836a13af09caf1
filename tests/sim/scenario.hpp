#pragma once
// The scenarios of the deterministic simulation (docs/testing.md): what a seed
// generates (entries of random permits, placement, wait policy and body kind;
// cancellations; throwing observer hooks; shutdown; re-entry; scopes; batcher
// submits and cancels; tenant groups, virtual deadlines, byte budgets and
// resizes) and the exhaustive configurations.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <tenferro/session_options.hpp>

namespace tenferro::sim {

// `steps` and `steps_sync` (S20): bodies of `work` steps that look at their
// session's stop before each step (throw_if_stop_requested); `steps` is
// asynchronous and holds one virtual microsecond per step (so that
// cancellations and deadlines land while it runs), `steps_sync` is
// synchronous and compute-placed, and may emit its own entry's cancellation
// before step `emit_at`, standing for the caller's thread emitting while the
// body runs on a compute worker.
enum class body_kind : unsigned char { sync, async, throws, reenter, steps, steps_sync };

struct entry_spec {
    std::size_t permits = 1;
    wait_policy wait = wait_policy::fifo;
    placement where = placement::compute;
    body_kind body = body_kind::sync;
    int suspensions = 0;          // async bodies: co_await post this many times
    int ctx = 0;                  // shared caller context, or -1: a private one destroyed after its upcall
    int cancel = -1;              // cancellation type index (0 terminal, 1 partial, 2 total), -1 none
    bool scope = false;           // an execution scope (inner sessions: `inner`)
    int inner = 0;
    // Admission policies (docs/contract.md P1-P8):
    std::size_t group = 0;        // session_options::group (may be out of range)
    std::uint64_t deadline = 0;   // virtual microseconds after its initiation; 0: none
    std::size_t bytes = 0;        // session_options::bytes
    std::uint64_t sleep = 0;      // async bodies: virtual microseconds held before they end
    // Stopping (S20), for `steps` and `steps_sync` bodies:
    int work = 0;                 // steps, each after a look at the stop
    bool catches = false;         // catches session_stopped and returns its value
    bool rethrows = false;        // catches session_stopped and throws an exception of its own (S2)
    bool rogue = false;           // throws session_stopped at its end, unasked (S2: its own exception)
    int emit_at = -1;             // steps_sync: emits `cancel` on its own entry before this step
    bool stop_at_deadline = true; // session_options::stop_at_deadline
};

struct item_spec {
    int ctx = 0;
    bool cancel = false;
};

struct batch_spec {
    bool on = false;
    std::size_t max_batch = 2;
    placement where = placement::compute;
    bool async = false;
    int throw_on_batch = -1;  // the k-th batch's body throws (0-based), -1 never
    int wrong_count_on_batch = -1;
    std::uint64_t max_delay = 0;  // virtual microseconds; 0: no delay (B1), else B6 on the simulated timer
    std::vector<item_spec> items;
    std::size_t group = 0;  // batch_options::session.group
};

enum class op_kind : unsigned char { enter, cancel, shutdown, submit, cancel_item, set_permits, set_budget };

struct op {
    op_kind kind;
    int index = 0;          // entry or item; the new size of set_permits and set_budget
    std::uint64_t at = 0;   // virtual time (0: ready at once)
    int type = -1;          // cancel: its type (0 terminal, 1 partial, 2 total); -1: the entry's `cancel`
};

struct scenario {
    std::size_t permits = 1;
    int shared_ctxs = 1;
    int observer = 0;   // 0 none, 1 counting, 2 throws at hook call `throw_at` (1-based)
    int throw_at = 0;
    std::vector<int> open_throw;   // open_session calls (1-based) that throw
    std::vector<int> open_reject;  // open_session calls that return contended
    std::vector<entry_spec> entries;
    batch_spec batch;
    std::vector<op> ops;  // in order per context
    std::string name;
    // Admission policies: the groups' weights (empty: one group), the byte
    // budget (0: none), early rejection. The host's clock is always the
    // simulated one (host_options::timer), so deadlines are virtual.
    std::vector<unsigned> weights;
    std::size_t memory_budget = 0;
    bool reject_late = false;
    /// Whether any policy is on (groups, deadlines, bytes, resizes).
    bool policies() const;
};

const char* placement_name(placement p);
const char* body_name(body_kind b);
/// One line per entry, item and operation: what a failure report prints.
std::string describe(const scenario& sc);
/// The scenario of `seed`.
scenario generate(std::uint64_t seed);
/// Every small configuration the exhaustive mode explores.
std::vector<scenario> exhaustive_configs();
/// The scenario with only the operations at `keep` (indices into its ops).
scenario restrict_ops(const scenario& sc, const std::vector<std::uint32_t>& keep);

}  // namespace tenferro::sim
