#pragma once
// The typed half of a batcher's shared state: the host, the body, and the
// one step of the batcher core that needs them, entering a session and
// running the body in it (once per batch). Everything else is the compiled
// batcher core (batcher_core.hpp).

#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/batch_executor.hpp"
#include "tenferro/detail/admission/batch_run.hpp"
#include "tenferro/detail/admission/batcher_core.hpp"
#include "tenferro/detail/base/session_stopped.hpp"
#include "tenferro/session_options.hpp"

namespace tenferro::detail {

template <class Body, class Session, class In>
using batch_body_result = std::invoke_result_t<Body&, Session&, std::span<In>>;

template <class Host, class In, class Out>
class typed_batcher_core final : public batcher_core {
public:
    using session_type = typename Host::session_type;
    using run_type = batch_run<In, Out>;
    using sync_body = std::function<std::vector<Out>(session_type&, std::span<In>)>;
    using async_body = std::function<asio::awaitable<std::vector<Out>>(session_type&, std::span<In>)>;

    /// Exactly one of `sb` and `ab` is set.
    typed_batcher_core(Host& host, const batch_options& options, session_options session, sync_body sb, async_body ab)
        : batcher_core(host.name(), host.permits(), options),
          host_(&host),
          session_(session),
          sync_(std::move(sb)),
          async_(std::move(ab)) {}

private:
    void enter(std::shared_ptr<batch_run_base>& run) override {
        auto typed = std::make_shared<run_type>(this->shared_from_this());
        run = typed;
        if (async_) {
            host_->with_backend_session(
                session_,
                [typed](session_type& s) -> asio::awaitable<batch_done> {
                    co_await of(*typed).run_async(*typed, s);
                    co_return batch_done{};
                },
                batch_session_done{run});
        } else {
            host_->with_backend_session(
                session_,
                [typed](session_type& s) {
                    of(*typed).run_sync(*typed, s);
                    return batch_done{};
                },
                batch_session_done{run});
        }
    }

    static typed_batcher_core& of(run_type& run) noexcept { return static_cast<typed_batcher_core&>(*run.core); }

    void run_sync(run_type& run, session_type& s) {
        if (!run.taken.load(std::memory_order_acquire)) take(run);
        if (run.items.empty()) return;  // all cancelled meanwhile: the body never sees an empty batch
        note_batch(run.items.size());
        run.body_ran = true;
        try {
            run.outputs = sync_(s, std::span<In>(run.inputs));
        } catch (const session_stopped&) {
            // The session's own exit (S20): a stop asked of it (its deadline,
            // B7) completes it, and its items, with the stop's code.
            throw;
        } catch (...) {
            run.body_error = std::current_exception();
        }
    }

    asio::awaitable<void> run_async(run_type& run, session_type& s) {
        if (!run.taken.load(std::memory_order_acquire)) take(run);
        if (run.items.empty()) co_return;
        note_batch(run.items.size());
        run.body_ran = true;
        try {
            run.outputs = co_await async_(s, std::span<In>(run.inputs));
        } catch (const session_stopped&) {
            throw;  // as run_sync
        } catch (...) {
            run.body_error = std::current_exception();
        }
    }

    Host* host_;
    session_options session_;
    sync_body sync_;
    async_body async_;
};

}  // namespace tenferro::detail
