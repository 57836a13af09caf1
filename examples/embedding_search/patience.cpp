// The patience policy's estimators (patience.hpp).

#include "patience.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace embedding_search {

patience_estimator::patience_estimator(const patience_options& o)
    : window_(std::max<std::size_t>(1, o.window)),
      min_samples_(std::max<std::size_t>(1, o.min_samples)),
      quantile_(std::clamp(o.quantile, 0.0, 1.0)),
      max_age_(o.max_sample_age_seconds > 0 ? o.max_sample_age_seconds : std::numeric_limits<double>::infinity()) {
    closes_.v.reserve(window_);
    delivered_.v.reserve(window_);
}

void patience_estimator::push(ring& r, double age_seconds, time_point at) {
    if (r.v.size() < window_) {
        r.v.push_back({age_seconds, at});
    } else {
        r.v[r.next] = {age_seconds, at};
    }
    r.next = (r.next + 1) % window_;
}

void patience_estimator::record_close(double age_seconds, time_point at) {
    if (!std::isfinite(age_seconds) || age_seconds < 0) return;
    const std::lock_guard lock(mutex_);
    push(closes_, age_seconds, at);
    ++samples_;
}

void patience_estimator::record_delivered(double age_seconds, time_point at) {
    if (!std::isfinite(age_seconds) || age_seconds < 0) return;
    const std::lock_guard lock(mutex_);
    push(delivered_, age_seconds, at);
}

// Called with the mutex held.
std::optional<double> patience_estimator::quantile_of(const ring& r, time_point now,
                                                      double ignore_below_seconds) const {
    std::vector<double> ages;
    ages.reserve(r.v.size());
    for (const sample& x : r.v)
        if (x.age >= ignore_below_seconds && std::chrono::duration<double>(now - x.at).count() <= max_age_)
            ages.push_back(x.age);
    if (ages.empty() || ages.size() < std::min(min_samples_, window_)) return std::nullopt;
    const auto at = std::size_t(quantile_ * double(ages.size() - 1) + 0.5);
    std::nth_element(ages.begin(), ages.begin() + std::ptrdiff_t(at), ages.end());
    return ages[at];
}

std::optional<double> patience_estimator::estimate(time_point now, double ignore_below_seconds) const {
    const std::lock_guard lock(mutex_);
    const std::optional<double> closed = quantile_of(closes_, now, ignore_below_seconds);
    if (!closed) return std::nullopt;
    const std::optional<double> waited = quantile_of(delivered_, now, 0.0);
    return waited ? std::max(*closed, *waited) : *closed;
}

std::uint64_t patience_estimator::samples() const {
    const std::lock_guard lock(mutex_);
    return samples_;
}

batch_cost_model::batch_cost_model(double decay) : decay_(std::clamp(decay, 0.0, 1.0)) {}

void batch_cost_model::record(std::size_t n, double seconds) {
    if (n == 0 || !std::isfinite(seconds) || seconds < 0) return;
    const double x = double(n);
    const std::lock_guard lock(mutex_);
    if (const fit f = fit_locked(); f.known) {
        const double predicted = f.fixed_seconds + x * f.per_query_seconds;
        if (predicted > 0) {
            const double ratio = seconds / predicted;
            constexpr std::size_t kept = 64;
            if (overruns_.size() < kept) {
                overruns_.push_back(ratio);
            } else {
                overruns_[next_overrun_] = ratio;
            }
            next_overrun_ = (next_overrun_ + 1) % kept;
        }
    }
    s0_ = s0_ * decay_ + 1;
    sn_ = sn_ * decay_ + x;
    snn_ = snn_ * decay_ + x * x;
    st_ = st_ * decay_ + seconds;
    snt_ = snt_ * decay_ + x * seconds;
}

batch_cost_model::fit batch_cost_model::fit_locked() const {
    fit f;
    if (s0_ <= 0 || sn_ <= 0) return f;
    f.known = true;
    const double mean_n = sn_ / s0_, mean_t = st_ / s0_;
    const double var_n = snn_ / s0_ - mean_n * mean_n;
    // Sizes spread by at least a tenth of their mean: fit both terms.
    if (var_n > 0.01 * mean_n * mean_n) {
        const double cov = snt_ / s0_ - mean_n * mean_t;
        double b = cov / var_n;
        double a = mean_t - b * mean_n;
        // Noise can tip the line: neither term is negative.
        if (b < 0) {
            b = 0;
            a = mean_t;
        } else if (a < 0) {
            a = 0;
            b = snt_ / snn_;  // through the origin
        }
        f.fixed_seconds = a;
        f.per_query_seconds = b;
    } else {
        f.per_query_seconds = mean_t / mean_n;
    }
    return f;
}

double batch_cost_model::overrun(double quantile) const {
    std::vector<double> r;
    {
        const std::lock_guard lock(mutex_);
        r = overruns_;
    }
    if (r.empty()) return 1.0;
    const auto at = std::size_t(std::clamp(quantile, 0.0, 1.0) * double(r.size() - 1) + 0.5);
    std::nth_element(r.begin(), r.begin() + std::ptrdiff_t(at), r.end());
    return std::max(1.0, r[at]);
}

batch_cost_model::fit batch_cost_model::current() const {
    const std::lock_guard lock(mutex_);
    return fit_locked();
}

std::optional<double> batch_cost_model::predict(std::size_t n) const {
    const fit f = current();
    if (!f.known) return std::nullopt;
    return f.fixed_seconds + double(n) * f.per_query_seconds;
}

double patient_time_left(double age_seconds, std::optional<double> deadline_left_seconds, double patience_seconds,
                         double reserve) {
    if (deadline_left_seconds) return *deadline_left_seconds;
    return patience_seconds - age_seconds - reserve * patience_seconds;
}

std::vector<bool> plan_patient_batch(std::span<const double> time_left, const batch_cost_model::fit& cost,
                                     double margin, double slack_seconds) {
    return plan_patient_batch(
        time_left, [&cost](std::size_t n) { return cost.fixed_seconds + double(n) * cost.per_query_seconds; }, margin,
        slack_seconds);
}

}  // namespace embedding_search
