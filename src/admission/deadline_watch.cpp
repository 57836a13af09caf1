#include "tenferro/detail/admission/deadline_watch.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

namespace tenferro::detail {

struct deadline_watch::state {
    std::function<clock::time_point(clock::time_point)> expire;
    std::mutex mutex;
    std::condition_variable wake;
    clock::time_point next = clock::time_point::max();  // guarded by mutex
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
};

deadline_watch::deadline_watch() : state_(std::make_shared<state>()) {}

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
    if (state_->thread.joinable() || state_->stop) return;
    state_->expire = std::move(expire);
    state_->thread = std::thread([self = state_] { state::loop(self); });
}

void deadline_watch::arm(clock::time_point when) noexcept {
    {
        std::lock_guard lock(state_->mutex);
        if (when >= state_->next) return;
        state_->next = when;
    }
    state_->wake.notify_all();
}

}  // namespace tenferro::detail
