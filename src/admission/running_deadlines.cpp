#include "tenferro/detail/admission/running_deadlines.hpp"

#include <mutex>
#include <stop_token>

#include "tenferro/detail/admission/entry_base.hpp"

namespace tenferro::detail {

void running_deadlines::watch(running_deadline& d) noexcept {
    std::lock_guard lock(mutex_);
    // Sorted by deadline, scanning from the latest: deadlines are mostly
    // "now + the client's timeout", so a body that starts usually goes last.
    running_deadline* after = list_.back();
    while (after != nullptr && after->when > d.when) after = after->prev_;
    list_.insert_after(after, d);
    d.linked = true;
}

void running_deadlines::unwatch(running_deadline& d) noexcept {
    std::lock_guard lock(mutex_);
    if (!d.linked) return;
    list_.unlink(d);
    d.linked = false;
}

std::chrono::steady_clock::time_point running_deadlines::stop_due(std::chrono::steady_clock::time_point now) noexcept {
    for (;;) {
        std::stop_source stop(std::nostopstate);
        {
            std::lock_guard lock(mutex_);
            running_deadline* d = list_.front();
            if (d == nullptr) return std::chrono::steady_clock::time_point::max();
            if (d->when > now) return d->when;
            list_.unlink(*d);
            d->linked = false;
            // The entry is alive: it unlinks its node (under this lock)
            // before its body's end lets it go.
            stop = d->entry->stop_for_deadline();
        }
        // Outside the lock: the token's callbacks run here (a callback may
        // start another entry of this host, which may start a body).
        stop.request_stop();
    }
}

}  // namespace tenferro::detail
