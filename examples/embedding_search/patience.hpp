#pragma once
// The patience policy (`demo --impatient`, docs/embedding_search.md "Clients
// that leave"): serve the queries that can still be answered before their
// clients give up, and do not spend CPU on the ones that cannot.
//
// Clients rarely tell the server how long they will wait. The server learns it
// from the ages at which connections close while their query is pending (a
// low quantile of the recent ones: `patience_estimator`), and how long a batch
// of n queries takes from recent batches (`batch_cost_model`: a fit of
// fixed + per-query time). Each batch body then keeps the queries with the
// most time left (the youngest), as many as can finish within the time the
// last of them has left (`plan_patient_batch`), and answers the others 503 at
// once instead of computing them. The batcher still hands items in submission
// order (B2); only the body chooses.
//
// Pure and thread-safe: the engine feeds it and asks it; the tests give it
// values directly.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace embedding_search {

struct patience_options {
    /// Off: every taken query is computed (the server before this policy).
    bool enabled = false;
    /// The estimate is this quantile of the recent close ages: a low one, so
    /// that the clients leaving first (and the server noticing late) do not
    /// make it optimistic.
    double quantile = 0.1;
    /// How many recent close ages are kept (older ones are forgotten).
    std::size_t window = 256;
    /// Below this many close ages there is no estimate (nothing is shed).
    std::size_t min_samples = 16;
    /// Close and delivered ages recorded longer ago than this are forgotten:
    /// an estimate learned under a past load does not stay forever, and with
    /// no recent close ages there is none (everything is computed) until
    /// clients leave again.
    double max_sample_age_seconds = 30.0;
    /// A query is kept when its time left is at least margin x overrun x the
    /// batch's predicted time + reserve x the patience, where overrun is the
    /// `overrun_quantile` of the recent batches' actual / predicted times
    /// (batch_cost_model::overrun), and the reserve covers what the server
    /// cannot see: the request's way in before its age starts, the delay in
    /// noticing a close (both in the learned patience), and the answer's way
    /// back; none of these scales with the batch, so it is a share of the
    /// patience (0.3: a setting, not a fitted value).
    double margin = 1.1;
    double overrun_quantile = 0.9;
    double reserve = 0.3;
    /// Tests: a batch of n costs fixed + n x per_query seconds, instead of
    /// what the recent batches measured (both 0: learn).
    double fixed_cost_seconds = 0.0, per_query_cost_seconds = 0.0;
};

/// The clients' patience, from the ages at which their connections closed
/// while their query was pending: the `quantile` of the last `window` ages
/// recorded within `max_sample_age_seconds`.
///
/// Clients the policy sheds do not close while pending, so once shedding
/// works the close ages alone could only pull the estimate down. An answer
/// delivered at age t shows that its client waited at least t: the estimate is
/// at least the same quantile of the recently delivered ages (a second
/// window, same rules) once there are `min_samples` of them.
class patience_estimator {
public:
    using time_point = std::chrono::steady_clock::time_point;

    explicit patience_estimator(const patience_options& o = {});
    /// A client closed at `age_seconds`, at time `at`.
    void record_close(double age_seconds, time_point at);
    /// A query was answered at `age_seconds`, at time `at`.
    void record_delivered(double age_seconds, time_point at);
    /// At time `now`. Close ages below `ignore_below_seconds` are left out
    /// (the engine passes the learned time of a one-query batch): a client
    /// that closes sooner could not have been answered by any schedule, so it
    /// says nothing about how long the clients wait, and a tenth of such
    /// closes would otherwise drive a low quantile to about 0 and every batch
    /// to one query. None before `min_samples` recent close ages that count.
    std::optional<double> estimate(time_point now, double ignore_below_seconds = 0.0) const;
    /// Close ages recorded, all time.
    std::uint64_t samples() const;

private:
    struct sample {
        double age;
        time_point at;
    };
    struct ring {
        std::vector<sample> v;
        std::size_t next = 0;
    };
    void push(ring& r, double age_seconds, time_point at);
    std::optional<double> quantile_of(const ring& r, time_point now, double ignore_below_seconds) const;

    mutable std::mutex mutex_;
    ring closes_, delivered_;
    std::size_t window_, min_samples_;
    double quantile_, max_age_;
    std::uint64_t samples_ = 0;
};

/// How long a batch of n queries takes: a least-squares fit of
/// seconds = fixed + n x per_query over the recent batches, each batch's
/// weight decaying by `decay` per newer batch. While the batch sizes seen are
/// too alike to separate the two terms, the cost is taken as proportional to
/// n (fixed = 0).
class batch_cost_model {
public:
    explicit batch_cost_model(double decay = 0.95);
    /// Also keeps how far the batch's time was above what the fit predicted
    /// for it just before (the last 64 ratios), for `overrun`.
    void record(std::size_t n, double seconds);
    /// The `quantile` of the recent actual / predicted batch times, at least 1
    /// (1 before any): how much a prediction must be stretched to cover that
    /// share of the batches on a machine whose speed varies.
    double overrun(double quantile) const;
    /// None before the first batch.
    std::optional<double> predict(std::size_t n) const;
    struct fit {
        double fixed_seconds = 0.0, per_query_seconds = 0.0;
        bool known = false;
    };
    fit current() const;

private:
    fit fit_locked() const;

    mutable std::mutex mutex_;
    double decay_;
    double s0_ = 0, sn_ = 0, snn_ = 0, st_ = 0, snt_ = 0;
    std::vector<double> overruns_;
    std::size_t next_overrun_ = 0;
};

/// What `plan_patient_batch` gets for one query: the time it has left, less
/// what is kept in reserve. A query that carries its own deadline: the
/// deadline's time left, and only that (the server enforces the deadline
/// itself; the learned patience and its reserve are for the clients that say
/// nothing). Otherwise the learned patience less the query's age, less
/// reserve x the patience.
double patient_time_left(double age_seconds, std::optional<double> deadline_left_seconds, double patience_seconds,
                         double reserve);

/// Which queries of a batch to compute. `time_left[j]` is how long query j
/// (in batch order) has before its client gives up; `cost(n)` the predicted
/// seconds of a batch of n. Keeps the queries with the most time left, the
/// largest n of them whose least time left is at least
/// margin x cost(n) + slack; at least one (the one with the most time left),
/// so the server always makes progress and keeps measuring its cost. Returns
/// one flag per query: true to compute it.
template <class Cost>
    requires std::invocable<Cost&, std::size_t>
std::vector<bool> plan_patient_batch(std::span<const double> time_left, Cost&& cost, double margin,
                                     double slack_seconds);

/// The same with a fitted model, for the engine and the tests.
std::vector<bool> plan_patient_batch(std::span<const double> time_left, const batch_cost_model::fit& cost,
                                     double margin, double slack_seconds);

}  // namespace embedding_search

#include <algorithm>
#include <numeric>

namespace embedding_search {

template <class Cost>
    requires std::invocable<Cost&, std::size_t>
std::vector<bool> plan_patient_batch(std::span<const double> time_left, Cost&& cost, double margin,
                                     double slack_seconds) {
    std::vector<bool> keep(time_left.size(), false);
    if (time_left.empty()) return keep;
    std::vector<std::size_t> order(time_left.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    // Most time left first; ties keep batch order.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return time_left[a] > time_left[b]; });
    // time_left of the n-th falls and cost(n) rises with n: the first n that
    // does not fit ends the search.
    std::size_t n = 1;
    while (n < order.size() && time_left[order[n]] >= margin * cost(n + 1) + slack_seconds) ++n;
    for (std::size_t i = 0; i < n; ++i) keep[order[i]] = true;
    return keep;
}

}  // namespace embedding_search
