#pragma once
/// \file
/// Asynchronous tensor file I/O: `.npy` files (numpy's array format) read into a
/// `tensor` and written from any `const_tensor_view`, on io_uring where the kernel
/// offers it and on a small pread/pwrite thread pool otherwise.
///
/// ```cpp
/// asio::awaitable<void> reload(asio::any_io_executor ex) {
///     tensor w = co_await tenferro::async_read_npy(ex, "weights.npy");      // throws std::system_error
///     co_await tenferro::async_write_npy(ex, "weights.bak.npy", w);         // atomic replace
///     // (as_tuple is asio::experimental::as_tuple before Asio 1.24)
///     auto [ec, t] = co_await tenferro::async_read_npy(ex, "maybe.npy",
///                                                      asio::as_tuple(asio::use_awaitable));
/// }
/// ```
///
/// ## Format
///
/// `.npy` versions 1.0, 2.0 and 3.0; dtypes `<f4 <f8 <i4 <i8` (`f32 f64 i32 i64`) and their
/// big-endian `>` forms (byte-swapped on read), `=` and `|` meaning native; rank 0 to 8.
/// A file with `fortran_order: True` is read into a row-major tensor holding the same
/// values (the data is read into a scratch buffer and transposed: one extra copy and,
/// briefly, twice the memory). Writing produces exactly the bytes `numpy.save` produces:
/// version 1.0, little-endian descr, the data aligned to 64 bytes; a view that is Fortran-
/// contiguous (a transposed tensor) is written as-is with `fortran_order: True`, any other
/// non-contiguous view is first gathered into a contiguous buffer.
///
/// ## Errors
///
/// Format problems arrive as `npy_errc` codes (category `npy_category()`); OS errors as
/// `std::system_category()` codes (`ENOENT`, `EACCES`, `ENOTDIR`, `EISDIR`, `ENOSPC`, `ENOMEM`
/// when the tensor cannot be allocated, ...); a cancelled operation with
/// `asio::error::operation_aborted`. With the default token `asio::use_awaitable` an error
/// is thrown as `std::system_error` whose `what()` names the function and the path; other
/// tokens receive the bare `std::error_code`. (With the Boost.Asio flavour, docs/boost-asio.md:
/// `boost::system::system_error` and `boost::system::error_code`, OS errors in Boost's
/// system category; `asio_system_error` and `asio_error_code` name whichever applies.)
///
/// ## Execution and cancellation
///
/// The initiating functions never block and never run the handler inline. The I/O itself
/// runs on tenferro's process-wide I/O backend (`active_io_backend()`), and the handler is
/// then posted to its associated executor (the `executor` argument by default), whose
/// outstanding work is tracked meanwhile, as with any Asio I/O object; that executor's
/// execution context must outlive the operation (do not destroy an io_context with
/// tenferro I/O pending on it). Once the handler has run, nothing of the operation
/// touches that executor or its context again: the context may be destroyed at once
/// (docs/contract.md, S16). Every cancellation type (terminal, partial, total) is
/// supported through the handler's associated cancellation slot: the operation stops at
/// its next request boundary (requests already in flight, at most 16 MiB, finish first)
/// and completes with `operation_aborted`.
/// A cancelled or failed read allocates nothing the caller sees; a cancelled or failed
/// write leaves the destination untouched (see `async_write_npy`).

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <memory_resource>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tenferro/asio.hpp"

#include "tenferro/detail/async/cancellation.hpp"
#include "tenferro/detail/async/completion.hpp"
#include "tenferro/detail/async/handoff_gate.hpp"
#include "tenferro/detail/async/handoff_retry.hpp"
#include "tenferro/detail/async/noexcept_initiation.hpp"
#include "tenferro/detail/async/op_allocator.hpp"
#include "tenferro/detail/async/op_work.hpp"
#include "tenferro/npy_error.hpp"
#include "tenferro/tensor.hpp"

namespace tenferro {

/// Limits applied while reading, before anything is allocated.
struct npy_read_options {
    /// The largest data section accepted; a header describing more fails with
    /// `npy_errc::shape_overflow` (whatever the file's size).
    std::uint64_t max_data_bytes = std::numeric_limits<std::int64_t>::max();
    /// The largest header (the dict after the length field) accepted; a longer one
    /// fails with `npy_errc::header_too_large`. numpy writes ~128 bytes for rank <= 8.
    std::uint32_t max_header_bytes = 64 * 1024;
    /// Where the tensor's storage comes from (see `tensor::empty`); null: the global `operator new`.
    /// A `buffer_pool` here lets repeated loads reuse memory that is already faulted in,
    /// which for large files costs more than the copy from the page cache itself
    /// (docs/io.md).
    std::shared_ptr<std::pmr::memory_resource> memory_resource = nullptr;
};

/// Which mechanism carries tenferro's file I/O in this process.
enum class io_backend {
    io_uring,     ///< one io_uring instance (liburing) and one completion thread
    thread_pool,  ///< blocking open/pread/pwrite/fsync on a small thread pool
};

/// The backend in use; the first call (or the first I/O operation) decides it once per
/// process: io_uring when tenferro was built with it, the environment variable
/// `TENFERRO_IO_URING` is not `0`, and the kernel lets a ring be set up with every
/// operation needed; the thread pool otherwise.
io_backend active_io_backend() noexcept;

/// `"io_uring"` or `"thread_pool"`.
std::string_view to_string(io_backend b) noexcept;

namespace detail {

/// The library half of one `.npy` operation (src/io/npy_read.cpp, npy_write.cpp): created, then
/// started once; `cancel` may be called from any thread at any time, also after
/// completion (then it does nothing).
class npy_operation {
public:
    virtual ~npy_operation() = default;
    virtual void start() noexcept = 0;
    virtual void cancel() noexcept = 0;
};

/// Receives the outcome of a read exactly once, on a backend thread (or, for an
/// error found before any I/O, inside `start`).
class npy_read_receiver {
public:
    virtual void complete(std::error_code ec, tensor result) noexcept = 0;

protected:
    ~npy_read_receiver() = default;
};

/// Receives the outcome of a write exactly once, as `npy_read_receiver`.
class npy_write_receiver {
public:
    virtual void complete(std::error_code ec) noexcept = 0;

protected:
    ~npy_write_receiver() = default;
};

/// A read made before its receiver: `bind` it once, before `start`. (The
/// awaitable path makes the operation in its coroutine, where a failure still
/// reaches the co_await, and binds the completion inside the initiation.)
class npy_read_operation : public virtual npy_operation {
public:
    virtual void bind(npy_read_receiver& receiver) noexcept = 0;
};
/// A write made before its receiver, as `npy_read_operation`.
class npy_write_operation : public virtual npy_operation {
public:
    virtual void bind(npy_write_receiver& receiver) noexcept = 0;
};

/// Make the operation (and the process's I/O engine at the first one).
/// Throw what allocating them throws.
std::shared_ptr<npy_read_operation> make_read_npy_op(std::filesystem::path path, const npy_read_options& options);
std::shared_ptr<npy_write_operation> make_write_npy_op(std::filesystem::path path, const_tensor_view view);

/// Holds the handler and the outstanding work of its executor (op_work.hpp).
/// On completion (a backend thread) it stores the outcome and hands itself to
/// that executor (completion.hpp), where the completion routine calls the
/// handler: nothing of the operation touches the caller's executor or context
/// once the handler has run (S16).
template <class Handler, class IoExecutor, class Receiver, class... Rest>
class npy_completion final : public Receiver, public retry_node {
    friend struct completion_handoff<npy_completion>;
    friend struct completion_poster;
    // The handler's arguments: Asio's error code (converted from the library's
    // std::error_code, detail::to_asio_error_code) and the result, if any.
    using outcome_type = std::tuple<asio_error_code, Rest...>;

public:
    /// The handler is the last member built: if tracking work throws, it has
    /// not moved (S19).
    npy_completion(Handler&& handler, const IoExecutor& io_executor)
        : work_(handler, io_executor), handler_(std::move(handler)) {}

    void complete(std::error_code ec, Rest... rest) noexcept override {
        outcome_.emplace(to_asio_error_code(ec), std::move(rest)...);
        // Out of memory for the post, the completion is parked and posted
        // again when memory is back (S19).
        completion_poster::post(*this);
    }

    /// Completes with `ec` (and empty results): the operation was not started.
    void fail(std::error_code ec) noexcept { complete(ec, Rest{}...); }

private:
    handoff_gate& gate() noexcept { return gate_; }
    const auto& completion_executor() const noexcept { return work_.executor(); }

    void upcall() {
        std::apply([&](auto&... a) { complete_op<npy_completion>(this, handler_, work_, gate_, std::move(a)...); },
                   *outcome_);
    }

    /// The executor discarded the completion unrun.
    void discard() noexcept {
        clear_cancellation(handler_);  // (its handler holds the operation)
        free_op(this, op_allocator_for<npy_completion>(handler_));
    }

    op_work<Handler, IoExecutor> work_;
    Handler handler_;
    std::optional<outcome_type> outcome_;
    handoff_gate gate_;
};

/// Allocates the completion that owns `handler` (with the handler's associated
/// allocator, detail/async/op_allocator.hpp; if that throws, nothing was done),
/// binds `op` to it and starts `op` under the handler's cancellation slot. Out
/// of memory for the slot's handler, the completion fails with
/// `not_enough_memory` (posted), `op` unstarted.
/// Starts the library's completion context where a completion for `Handler`
/// goes there: a handler bound to Asio's system executor (completion_executor_t).
/// Throws what starting it throws; cheap once it runs.
template <class Handler, class IoExecutor>
void prepare_completion_executor() {
    if constexpr (binds_system_executor_v<Handler, IoExecutor>) start_library_context();
}

template <class Completion, class Handler, class IoExecutor, class Operation>
void launch_npy_operation(Handler&& handler, const IoExecutor& io_executor, std::shared_ptr<Operation> op) {
    prepare_handoff_retry();  // its completion may need it (S19); cheap once running
    prepare_completion_executor<std::decay_t<Handler>, IoExecutor>();
    auto slot = asio::get_associated_cancellation_slot(handler);
    Completion* receiver = make_op<Completion>(std::move(handler), io_executor);
    op->bind(*receiver);
    try {
        connect_cancellation<&npy_operation::cancel>(slot, std::shared_ptr<npy_operation>(op));
    } catch (...) {
        receiver->fail(std::make_error_code(std::errc::not_enough_memory));
        return;
    }
    op->start();
}

/// Runs `launch()`; with `FailsInline` (use_future, fails_inline), an
/// allocation failure thrown with the handler untouched completes it here, with
/// `not_enough_memory`, instead of destroying it uncalled.
template <bool FailsInline, class... Rest, class Handler, class Launch>
void launch_or_fail_inline(Handler& handler, Launch launch) {
    if constexpr (FailsInline) {
        try {
            launch();
        } catch (const std::bad_alloc&) {
            std::move(handler)(to_asio_error_code(std::make_error_code(std::errc::not_enough_memory)), Rest{}...);
        }
    } else {
        launch();
    }
}

/// The initiations expose the I/O executor the caller named, as Asio's I/O
/// objects do: the default for a handler with no executor of its own, and
/// where Asio's adapters (cancel_after's timer) put theirs.
template <class IoExecutor, bool FailsInline = false>
struct initiate_read_npy {
    IoExecutor io_executor;

    using executor_type = IoExecutor;
    executor_type get_executor() const noexcept { return io_executor; }

    template <class Handler>
    void operator()(Handler&& handler, std::filesystem::path path, const npy_read_options& options) const {
        using completion = npy_completion<std::decay_t<Handler>, IoExecutor, npy_read_receiver, tensor>;
        launch_or_fail_inline<FailsInline, tensor>(handler, [&] {
            launch_npy_operation<completion>(std::move(handler), io_executor,
                                             make_read_npy_op(std::move(path), options));
        });
    }
};

template <class IoExecutor, bool FailsInline = false>
struct initiate_write_npy {
    IoExecutor io_executor;

    using executor_type = IoExecutor;
    executor_type get_executor() const noexcept { return io_executor; }

    template <class Handler>
    void operator()(Handler&& handler, std::filesystem::path path, const_tensor_view view) const {
        using completion = npy_completion<std::decay_t<Handler>, IoExecutor, npy_write_receiver>;
        launch_or_fail_inline<FailsInline>(handler, [&] {
            launch_npy_operation<completion>(std::move(handler), io_executor, make_write_npy_op(std::move(path), view));
        });
    }
};

/// The initiation of the prepared paths (use_awaitable and its adapters), whose
/// operation was made beforehand and whose completion's block was reserved
/// (`Reservation`, prepared_npy_reservation_t): Asio runs it inside a noexcept
/// function, and it allocates nothing but that block (S19). The reservation
/// is checked against the handler Asio actually passes.
template <class IoExecutor, class Operation, class Receiver, class Reservation, class... Rest>
struct initiate_prepared_npy {
    IoExecutor io_executor;
    std::shared_ptr<Operation> op;
    [[no_unique_address]] mutable Reservation reserved;

    using executor_type = IoExecutor;
    executor_type get_executor() const noexcept { return io_executor; }

    template <class Handler>
    void operator()(Handler&& handler) const {
        using completion = npy_completion<std::decay_t<Handler>, IoExecutor, Receiver, Rest...>;
        static_assert(Reservation::template check<sizeof(completion), alignof(completion)>());
        [[maybe_unused]] const auto placed = reserved.place();  // the completion's allocation takes it
        launch_npy_operation<completion>(std::move(handler), io_executor, op);
    }
};

/// The completion of an operation completing with `void(asio_error_code, Rest...)`, as one
/// template of the handler (what op_reservation_t computes the reservation from).
template <class IoExecutor, class Receiver, class... Rest>
struct npy_completion_for {
    template <class Handler>
    using type = npy_completion<Handler, IoExecutor, Receiver, Rest...>;
};

/// What an initiation with `Token` (a token of noexcept_initiation) reserves
/// for the completion's block: what the prepared paths take beforehand.
template <class Token, class IoExecutor, class Receiver, class... Rest>
using prepared_npy_reservation_t =
    op_reservation_t<Token, npy_completion_for<IoExecutor, Receiver, Rest...>::template type,
                     void(asio_error_code, Rest...)>;

/// `function: 'path'`, the prefix of the exceptions thrown for `use_awaitable`.
std::string npy_error_context(std::string_view function, const std::filesystem::path& path);

/// Recognises the plain `asio::use_awaitable_t<Executor>` token (not wrapped in an adapter).
template <class T>
struct plain_use_awaitable : std::false_type {};
template <class Executor>
struct plain_use_awaitable<asio::use_awaitable_t<Executor>> : std::true_type {
    using executor_type = Executor;
};

template <class T>
concept io_executor = asio::execution::is_executor<T>::value || asio::is_executor<T>::value;

/// An adapter of use_awaitable (as_tuple, redirect_error, the binders, consign,
/// cancel_after; noexcept_initiation): the operation is made and the
/// completion's block reserved here, in the caller's coroutine before its
/// co_await, where a failure is thrown to it (S19); the initiation that Asio
/// runs inside a noexcept function then allocates nothing else.
template <class Token, class IoExecutor>
auto read_npy_prepared(const IoExecutor& io_executor, std::filesystem::path path, const npy_read_options& options,
                       Token&& token) {
    using reservation = prepared_npy_reservation_t<std::decay_t<Token>, IoExecutor, npy_read_receiver, tensor>;
    using initiation = initiate_prepared_npy<IoExecutor, npy_read_operation, npy_read_receiver, reservation, tensor>;
    using handler = typename noexcept_initiation<std::decay_t<Token>>::template handler<void(asio_error_code, tensor)>;
    prepare_handoff_retry();
    prepare_completion_executor<handler, IoExecutor>();
    initiation init{io_executor, make_read_npy_op(std::move(path), options), take_reservation<reservation>(token)};
    return asio::async_initiate<Token, void(asio_error_code, tensor)>(std::move(init), token);
}

template <class Token, class IoExecutor>
auto write_npy_prepared(const IoExecutor& io_executor, std::filesystem::path path, const_tensor_view view,
                        Token&& token) {
    using reservation = prepared_npy_reservation_t<std::decay_t<Token>, IoExecutor, npy_write_receiver>;
    using initiation = initiate_prepared_npy<IoExecutor, npy_write_operation, npy_write_receiver, reservation>;
    using handler = typename noexcept_initiation<std::decay_t<Token>>::template handler<void(asio_error_code)>;
    prepare_handoff_retry();
    prepare_completion_executor<handler, IoExecutor>();
    initiation init{io_executor, make_write_npy_op(std::move(path), view), take_reservation<reservation>(token)};
    return asio::async_initiate<Token, void(asio_error_code)>(std::move(init), token);
}

// For the default token the outcome is awaited through redirect_error, so that the
// exception can name the path (asio would throw a bare system_error). The
// operation is prepared as for any adapter of use_awaitable (read_npy_prepared).
template <class AwaitableExecutor, class IoExecutor>
asio::awaitable<tensor, AwaitableExecutor> read_npy_awaitable(IoExecutor io_executor, std::filesystem::path path,
                                                              npy_read_options options) {
    asio_error_code ec;
    tensor result = co_await read_npy_prepared(io_executor, path, options,
                                               asio::redirect_error(asio::use_awaitable_t<AwaitableExecutor>{}, ec));
    if (ec) throw asio_system_error(ec, npy_error_context("async_read_npy", path));
    co_return result;
}

template <class AwaitableExecutor, class IoExecutor>
asio::awaitable<void, AwaitableExecutor> write_npy_awaitable(IoExecutor io_executor, std::filesystem::path path,
                                                             const_tensor_view view) {
    asio_error_code ec;
    co_await write_npy_prepared(io_executor, path, view,
                                asio::redirect_error(asio::use_awaitable_t<AwaitableExecutor>{}, ec));
    if (ec) throw asio_system_error(ec, npy_error_context("async_write_npy", path));
}

}  // namespace detail

/// Reads the `.npy` file at `path` into a new row-major tensor.
///
/// Completion signature `void(asio_error_code, tensor)` (`std::error_code` with standalone
/// Asio, `boost::system::error_code` with Boost.Asio); on error the tensor is empty
/// (default-constructed). The header is validated against the file's size before the
/// tensor is allocated, so a header describing more (or less) data than the file holds
/// fails with `truncated_data` (`trailing_data`) without allocating. The data is read
/// straight into the tensor's 64-byte aligned storage, in chunks with several requests
/// in flight. The handler runs on its associated executor (default: `executor`);
/// cancellation as described in the file comment.
///
/// With the default token, `tensor t = co_await async_read_npy(ex, path);` throws
/// `asio_system_error` (`std::system_error` with standalone Asio) naming `path` on failure.
template <detail::io_executor Executor, class CompletionToken = asio::use_awaitable_t<>>
auto async_read_npy(const Executor& executor, std::filesystem::path path, const npy_read_options& options,
                    CompletionToken&& token = {}) {
    using token_traits = detail::plain_use_awaitable<std::decay_t<CompletionToken>>;
    if constexpr (token_traits::value) {
        using awaitable_executor = typename token_traits::executor_type;
        return detail::read_npy_awaitable<awaitable_executor>(executor, std::move(path), options);
    } else if constexpr (detail::noexcept_initiation<std::decay_t<CompletionToken>>::value) {
        return detail::read_npy_prepared(executor, std::move(path), options, std::forward<CompletionToken>(token));
    } else {
        return asio::async_initiate<CompletionToken, void(asio_error_code, tensor)>(
            detail::initiate_read_npy<Executor, detail::fails_inline_v<CompletionToken>>{executor}, token,
            std::move(path), options);
    }
}

/// `async_read_npy` with the default `npy_read_options`.
template <detail::io_executor Executor, class CompletionToken = asio::use_awaitable_t<>>
    requires(!std::same_as<std::remove_cvref_t<CompletionToken>, npy_read_options>)
auto async_read_npy(const Executor& executor, std::filesystem::path path, CompletionToken&& token = {}) {
    return async_read_npy(executor, std::move(path), npy_read_options{}, std::forward<CompletionToken>(token));
}

/// Writes `view` to `path` as a `.npy` file, atomically replacing any file there.
///
/// Completion signature `void(asio_error_code)`. `view` is not copied: the memory it
/// views must stay valid and unmodified until the handler runs (as Asio requires of
/// buffers). The file is written to a temporary in the same directory (an unnamed
/// `O_TMPFILE` inode where the file system supports it, else `.NAME.tenferro-XXXXXX`),
/// flushed with `fsync`, and renamed over `path`; the directory is then synced (best
/// effort). On any error or cancellation before the rename the temporary is removed and
/// `path` is untouched; a process killed mid-write leaves no file behind with `O_TMPFILE`
/// (and a `.NAME.tenferro-*` file without it). A cancellation that arrives once the
/// rename has started is too late: the operation then succeeds. The new file's mode is
/// `0666 & ~umask`, as for any new file.
///
/// With the default token, `co_await async_write_npy(ex, path, view);` throws
/// `asio_system_error` (`std::system_error` with standalone Asio) naming `path` on failure.
template <detail::io_executor Executor, class CompletionToken = asio::use_awaitable_t<>>
auto async_write_npy(const Executor& executor, std::filesystem::path path, const_tensor_view view,
                     CompletionToken&& token = {}) {
    using token_traits = detail::plain_use_awaitable<std::decay_t<CompletionToken>>;
    if constexpr (token_traits::value) {
        using awaitable_executor = typename token_traits::executor_type;
        return detail::write_npy_awaitable<awaitable_executor>(executor, std::move(path), view);
    } else if constexpr (detail::noexcept_initiation<std::decay_t<CompletionToken>>::value) {
        return detail::write_npy_prepared(executor, std::move(path), view, std::forward<CompletionToken>(token));
    } else {
        return asio::async_initiate<CompletionToken, void(asio_error_code)>(
            detail::initiate_write_npy<Executor, detail::fails_inline_v<CompletionToken>>{executor}, token,
            std::move(path), view);
    }
}

}  // namespace tenferro
