#pragma once
// Permit utilisation from tenferro's admission hooks: the integral over time of
// the number of permits held, so that "busy permit-seconds / (permits x wall
// seconds)" over any window is the fraction of the compute capacity in use.

#include <chrono>
#include <cstddef>
#include <mutex>

#include <tenferro/admission_observer.hpp>

namespace embedding_search {

class permit_usage_observer final : public tenferro::admission_observer {
public:
    void on_admitted(std::size_t permits) override { advance(static_cast<long>(permits)); }
    void on_released(std::size_t permits) override { advance(-static_cast<long>(permits)); }

    /// Permit-seconds held since construction, up to now.
    double busy_permit_seconds() const {
        std::lock_guard lock(mutex_);
        const auto now = std::chrono::steady_clock::now();
        return busy_ + double(held_) * std::chrono::duration<double>(now - last_).count();
    }

private:
    // The hooks run on whichever thread admits or releases, concurrently; the
    // critical section is a handful of instructions.
    void advance(long delta) {
        std::lock_guard lock(mutex_);
        const auto now = std::chrono::steady_clock::now();
        busy_ += double(held_) * std::chrono::duration<double>(now - last_).count();
        last_ = now;
        held_ += delta;
    }

    mutable std::mutex mutex_;
    std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
    long held_ = 0;
    double busy_ = 0.0;
};

}  // namespace embedding_search
