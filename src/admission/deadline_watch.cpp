#include "tenferro/detail/admission/deadline_watch.hpp"

#include <mutex>
#include <utility>

#include "tenferro/detail/async/library_timer.hpp"

namespace tenferro::detail {

struct deadline_watch::state : timer_node, std::enable_shared_from_this<state> {
    explicit state(std::shared_ptr<admission_timer> t) : timer(std::move(t)) {}

    const std::shared_ptr<admission_timer> timer;  // null: the library's timer thread
    std::function<clock::time_point(clock::time_point)> expire;  // written once, by start(), under mutex
    std::mutex mutex;
    clock::time_point next = clock::time_point::max();  // guarded by mutex: the wake-up asked of `timer`
    bool stop = false;                                   // guarded by mutex

    // The library timer's call. The state is held meanwhile: the host, and
    // this watch with it, may be destroyed inside `expire`.
    clock::time_point fire(clock::time_point now) noexcept override {
        const std::shared_ptr<state> self = shared_from_this();
        {
            const std::lock_guard lock(mutex);
            if (stop || !expire) return clock::time_point::max();
        }
        return expire(now);  // written once, before any arm; called in place
    }

    // The timer's flavour: `fired` is the call the timer makes for the
    // wake-up asked at `when`. A call for a wake-up since replaced by an
    // earlier one, or made before its time, expires what is due and asks
    // again for the earliest deadline left.
    void fired() noexcept {
        {
            std::lock_guard lock(mutex);
            if (stop || !expire) return;
            next = clock::time_point::max();
        }
        // `expire` is written once, before any wake-up is asked for, and lives
        // as long as this state (the caller holds it): called in place. (A
        // copy would allocate, here where nothing may throw; the allocation
        // failure loop found that.)
        clock::time_point later = clock::time_point::max();
        try {
            later = expire(timer->now());
        } catch (...) {  // now() threw: try again at the next arm
            return;
        }
        arm_timer(later);
    }

    void arm_timer(clock::time_point when) noexcept {
        if (when == clock::time_point::max()) return;
        {
            std::lock_guard lock(mutex);
            if (stop || when >= next) return;
            next = when;
        }
        try {
            timer->wake_at(when, [weak = weak_from_this()] {
                if (const std::shared_ptr<state> self = weak.lock()) self->fired();
            });
        } catch (...) {
            // No wake-up could be asked for (out of memory, S19): forget it,
            // so that the next arm asks again. The entry still cannot start
            // after its deadline (checked at its grant and its start).
            std::lock_guard lock(mutex);
            if (next == when) next = clock::time_point::max();
        }
    }
};

deadline_watch::deadline_watch(std::shared_ptr<admission_timer> timer)
    : state_(std::make_shared<state>(std::move(timer))) {}

deadline_watch::~deadline_watch() {
    {
        std::lock_guard lock(state_->mutex);
        state_->stop = true;
    }
    if (!state_->timer) cancel_library_timer(*state_);  // (waits for a call running elsewhere)
}

void deadline_watch::start(std::function<clock::time_point(clock::time_point)> expire) {
    std::lock_guard lock(state_->mutex);
    if (state_->stop || state_->expire) return;
    if (!state_->timer) start_library_timer();
    state_->expire = std::move(expire);
}

void deadline_watch::arm(clock::time_point when) noexcept {
    if (state_->timer) return state_->arm_timer(when);
    arm_library_timer(*state_, when);
}

}  // namespace tenferro::detail
