#include "tenferro/detail/admission/deadline_watch.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

namespace tenferro::detail {

struct deadline_watch::state : std::enable_shared_from_this<state> {
    explicit state(std::shared_ptr<admission_timer> t) : timer(std::move(t)) {}

    const std::shared_ptr<admission_timer> timer;  // null: the thread below
    std::function<clock::time_point(clock::time_point)> expire;  // written once, by start(), under mutex
    std::mutex mutex;
    std::condition_variable wake;
    clock::time_point next = clock::time_point::max();  // guarded by mutex: the wake-up asked for
    bool stop = false;                                   // guarded by mutex
    std::thread thread;                                  // written by start(), under mutex

    static void loop(const std::shared_ptr<state>& self) noexcept {
        std::unique_lock lock(self->mutex);
        for (;;) {
            if (self->stop) return;
            if (self->next == clock::time_point::max()) {
                self->wake.wait(lock);
                continue;
            }
            const clock::time_point now = clock::now();
            if (now < self->next) {
                self->wake.wait_until(lock, self->next);
                continue;
            }
            self->next = clock::time_point::max();
            lock.unlock();
            const clock::time_point later = self->expire(now);
            lock.lock();
            if (later < self->next) self->next = later;
        }
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
    std::thread thread;
    {
        std::lock_guard lock(state_->mutex);
        state_->stop = true;
        thread = std::move(state_->thread);
    }
    state_->wake.notify_all();
    if (!thread.joinable()) return;
    if (thread.get_id() == std::this_thread::get_id())
        thread.detach();  // the host died on its own deadline thread: the loop sees `stop` next
    else
        thread.join();
}

void deadline_watch::start(std::function<clock::time_point(clock::time_point)> expire) {
    std::lock_guard lock(state_->mutex);
    if (state_->stop || state_->expire) return;
    if (!state_->timer) state_->thread = std::thread([self = state_] { state::loop(self); });
    state_->expire = std::move(expire);
}

void deadline_watch::arm(clock::time_point when) noexcept {
    if (state_->timer) return state_->arm_timer(when);
    {
        std::lock_guard lock(state_->mutex);
        if (when >= state_->next) return;
        state_->next = when;
    }
    state_->wake.notify_all();
}

}  // namespace tenferro::detail
