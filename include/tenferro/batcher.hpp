#pragma once
/// \file
/// `batcher<Host, In, Out>`: dynamic batching formed from the admission queue
/// itself. Items submitted while the batcher's sessions wait for admission or
/// run are folded into the next session that is granted, up to `max_batch`;
/// an item submitted to an idle host starts its own session at once. No timer
/// unless `max_delay` asks for one. Rules B1–B7 (docs/contract.md); the design
/// is in docs/design/batching.md.
///
/// \code
/// tenferro::batcher<tenferro::cpu_backend, tensor, tensor> search(
///     cpu, {.max_batch = 16},
///     [&](tenferro::backend_session& s, std::span<tensor> queries) {
///         return top_k_all(s, corpus, queries);   // one Out per item, in order
///     });
/// tenferro::session_result<tensor> r = co_await search.submit(std::move(query));
/// \endcode

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "tenferro/admission_timer.hpp"
#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/batch_item_op.hpp"
#include "tenferro/detail/admission/typed_batcher_core.hpp"
#include "tenferro/session_entry_error.hpp"
#include "tenferro/session_options.hpp"

namespace tenferro {

/// The timer behind `batch_options::max_delay` (B6), for a program that
/// wants to drive it itself: by default a batcher with a delay is woken, when
/// the next partial batch is due, by the library's one timer thread (shared by
/// every host and batcher); given a timer, it does not use that thread, stamps each item with the timer's `now()` and
/// asks it for the wake-ups instead (admission_timer.hpp). A replaced wake-up
/// that still happens finds nothing due.
using batch_timer = admission_timer;

/// How a batcher forms its batches.
struct batch_options {
    /// Items per session, at most (0 is taken as 1).
    std::size_t max_batch = 16;
    /// 0: never wait for more items (B1). Otherwise a batch's session is entered
    /// when the batch is full or when this long has passed since its first item
    /// was submitted, whichever comes first (B6, the timer policy of other servers).
    std::chrono::microseconds max_delay{0};
    /// How each batch's session is entered (permits, wait policy, placement).
    session_options session = {};
    /// With `max_delay > 0`: the timer that wakes the batcher when a partial
    /// batch is due. Null (the default): the library's timer thread.
    std::shared_ptr<batch_timer> timer = nullptr;
};

/// A snapshot of a batcher's counters. At quiescence
/// `submitted == completed + cancelled + rejected` and `waiting == 0`.
struct batch_stats {
    std::uint64_t submitted = 0;  ///< items submitted
    std::uint64_t completed = 0;  ///< items completed with their Out or with their batch body's exception
    std::uint64_t cancelled = 0;  ///< items completed with `cancelled`
    std::uint64_t rejected = 0;   ///< items completed with any other admission error
    std::uint64_t batches = 0;    ///< sessions whose body ran
    std::size_t largest_batch = 0;  ///< most items one body received
    std::size_t waiting = 0;        ///< items submitted and not yet taken into a batch
};

/// Folds the items submitted while `Host` is busy into one session (contract
/// section 7, rules B1–B7). `Host` is `cpu_backend` or any `session_host<B>`.
///
/// Thread-safe: `submit` and `stats` may be called from any thread. The host
/// must outlive the batcher; the batcher may be destroyed while its sessions
/// run (they finish with the items they took).
template <class Host, class In, class Out>
class batcher {
    using core_type = detail::typed_batcher_core<Host, In, Out>;

public:
    using host_type = Host;
    using session_type = typename Host::session_type;
    using input_type = In;
    using output_type = Out;

    /// `body(session, items)` runs once per batch, inside one session of
    /// `host`, with the items in submission order; it returns one Out per item,
    /// in the same order, as `std::vector<Out>` or
    /// `asio::awaitable<std::vector<Out>>`. `items` lives until the body (or
    /// its awaitable) has finished; the body may move from them.
    template <class Body>
    batcher(Host& host, batch_options options, Body body) : options_(std::move(options)) {
        if (options_.max_batch == 0) options_.max_batch = 1;
        using R = std::remove_cvref_t<detail::batch_body_result<Body, session_type, In>>;
        if constexpr (std::is_same_v<R, asio::awaitable<std::vector<Out>>>) {
            core_ = std::make_shared<core_type>(host, options_, options_.session, nullptr, std::move(body));
        } else {
            static_assert(std::is_convertible_v<R, std::vector<Out>>,
                          "a batch body returns std::vector<Out> or asio::awaitable<std::vector<Out>>");
            core_ = std::make_shared<core_type>(
                host, options_, options_.session,
                [b = std::move(body)](session_type& s, std::span<In> items) mutable -> std::vector<Out> {
                    return b(s, items);
                },
                nullptr);
        }
        if (options_.max_delay.count() > 0 && !options_.timer) core_->use_library_timer();
    }

    /// Items still waiting complete with `executor`; sessions already entered
    /// finish with the items they took.
    ~batcher() { core_->close(); }

    batcher(const batcher&) = delete;
    batcher& operator=(const batcher&) = delete;

    /// Submits one item. Completion signature
    /// `void(std::exception_ptr, session_result<Out>)`: the item's Out; the
    /// batch body's exception (every item of the batch gets it;
    /// `std::length_error` when it returned the wrong number of results); or
    /// the admission error of the session it was meant for. Per-operation
    /// cancellation (any type) removes an item not yet taken into a batch.
    /// Every Asio completion token; never completes inside this call.
    template <class CompletionToken = asio::use_awaitable_t<>>
    auto submit(In item, CompletionToken&& token = {}) {
        // S19: with a token whose initiation Asio runs inside a noexcept
        // function (use_awaitable), the item's block is taken here, where a
        // failure still reaches the caller (at its co_await), and carried by
        // the initiation.
        using reservation = detail::submit_reservation_t<CompletionToken, In, Out>;
        return asio::async_initiate<CompletionToken, detail::submit_signature<Out>>(
            detail::initiate_submit<In, Out, reservation, detail::fails_inline_v<CompletionToken>>{
                core_, detail::take_reservation<reservation>(token)},
            token, std::move(item));
    }

    /// A consistent snapshot of the counters.
    batch_stats stats() const { return core_->stats(); }

    /// The options, with `max_batch` 0 taken as 1.
    const batch_options& options() const noexcept { return options_; }

private:
    batch_options options_;
    std::shared_ptr<core_type> core_;
};

}  // namespace tenferro
