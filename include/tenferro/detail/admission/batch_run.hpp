#pragma once
// One session of a batcher: the items it took, their inputs as the body's
// span, and what the body returned. The batcher core (batcher_core.hpp) works
// on batch_run_base; batch_run<In, Out> holds the typed values and does the
// steps that need them, each once per batch (a virtual call per batch, none
// per item).

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "tenferro/asio.hpp"

#include "tenferro/detail/admission/batch_item.hpp"
#include "tenferro/session_entry_error.hpp"

namespace tenferro::detail {

class batcher_core;
class entry_base;

/// The part of a batch session the batcher core works on.
class batch_run_base {
public:
    explicit batch_run_base(std::shared_ptr<batcher_core> c) noexcept : core(std::move(c)) {}
    batch_run_base(const batch_run_base&) = delete;
    batch_run_base& operator=(const batch_run_base&) = delete;
    virtual ~batch_run_base() = default;

    /// Makes room for `n` inputs, before any item is taken (may throw: out of
    /// memory, and then nothing is taken).
    virtual void reserve_inputs(std::size_t n) = 0;
    /// Moves the input of each item in `items` into the batch, in order
    /// (under the core's mutex, right after the items were taken).
    virtual void take_inputs() = 0;
    /// How many results the body returned.
    virtual std::size_t output_count() const noexcept = 0;
    /// Completes item i with the body's result i, for every item taken.
    virtual void complete_with_outputs() noexcept = 0;
    /// Drops the inputs and results (the items have completed).
    virtual void clear_values() noexcept = 0;

    std::shared_ptr<batcher_core> core;
    // Set once, by whoever takes the batch (under the core's mutex): the body
    // on a compute worker, the first hand-off to the caller's executor
    // (placement::caller), or the completion of a session that never ran.
    std::atomic<bool> taken{false};
    // placement::caller: the executor of the batch's first item; empty when
    // the batch is empty (then the session's hand-offs run inline).
    asio::any_io_executor target;
    std::vector<batch_item_base*> items;
    std::exception_ptr body_error;
    bool body_ran = false;
    // B7, under the core's mutex: the session's entry (set by the entry at
    // its initiation, before any item can be taken; alive until `ended`),
    // how many taken items are still waited for, whether they were all
    // cancelled, and whether the session has finished.
    entry_base* entry = nullptr;
    std::size_t live = 0;
    bool abandoned = false;
    bool ended = false;
};

/// A batch session's typed values: the body's span and its results.
template <class In, class Out>
class batch_run final : public batch_run_base {
public:
    using batch_run_base::batch_run_base;

    void reserve_inputs(std::size_t n) override { inputs.reserve(n); }

    void take_inputs() override {
        for (batch_item_base* taken_item : items) {
            auto& it = static_cast<batch_item<In, Out>&>(*taken_item);
            inputs.push_back(std::move(*it.input));
            it.input.reset();
        }
    }

    std::size_t output_count() const noexcept override { return outputs.size(); }

    void complete_with_outputs() noexcept override {
        for (std::size_t i = 0; i < items.size(); ++i)
            static_cast<batch_item<In, Out>&>(*items[i]).finish(nullptr, session_result<Out>(std::move(outputs[i])));
    }

    void clear_values() noexcept override {
        inputs.clear();
        outputs.clear();
    }

    std::vector<In> inputs;
    std::vector<Out> outputs;
};

}  // namespace tenferro::detail
