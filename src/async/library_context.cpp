// The thread and the io_context of include/tenferro/detail/async/library_context.hpp.

#include "tenferro/detail/async/library_context.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "tenferro/asio.hpp"

namespace tenferro::detail {

namespace {

class library_context {
public:
    void start() {
        if (running_.load(std::memory_order_acquire)) return;
        const std::lock_guard<std::mutex> lock(mutex_);
        if (running_.load(std::memory_order_relaxed)) return;
        // One thread runs it: a concurrency hint of 1 lets Asio skip the
        // locking that several threads would need.
        auto context = std::make_unique<asio::io_context>(1);
        // Outstanding work keeps run() from returning while idle.
        auto work = asio::prefer(context->get_executor(), asio::execution::outstanding_work.tracked);
        thread_ = std::thread([c = context.get()] { c->run(); });  // throws: the caller may throw
        work_.emplace(std::move(work));
        context_ = context.release();
        running_.store(true, std::memory_order_release);
    }

    asio::io_context& context() noexcept { return *context_; }
    bool runs_this_thread() const noexcept {
        return running_.load(std::memory_order_acquire) && thread_.get_id() == std::this_thread::get_id();
    }

    // At exit: the context stops and its thread is joined (a handler running
    // there finishes first). The io_context itself is left as it is, as Asio
    // leaves nothing of a stopped context to run: destroying it would destroy
    // the handlers still queued, whose captures may belong to objects the
    // program has already destroyed.
    ~library_context() {
        if (!running_.load(std::memory_order_acquire)) return;
        work_.reset();
        context_->stop();
        if (thread_.get_id() == std::this_thread::get_id())
            thread_.detach();  // exit() called from a handler running there
        else
            thread_.join();
    }

private:
    using tracked_executor = std::decay_t<decltype(asio::prefer(std::declval<asio::io_context::executor_type>(),
                                                                asio::execution::outstanding_work.tracked))>;

    std::mutex mutex_;
    std::atomic<bool> running_{false};
    asio::io_context* context_ = nullptr;
    std::optional<tracked_executor> work_;
    std::thread thread_;
};

library_context& the_context() noexcept {
    // Constant-initialisable members: no allocation to build it.
    static library_context context;
    return context;
}

}  // namespace

void start_library_context() { the_context().start(); }

library_executor_type library_executor() noexcept { return the_context().context().get_executor(); }

bool in_library_context() noexcept { return the_context().runs_this_thread(); }

}  // namespace tenferro::detail
