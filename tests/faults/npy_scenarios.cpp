// The allocation-failure scenarios of .npy file I/O: async_read_npy and
// async_write_npy over an existing file, on the process's engine and on the
// pread/pwrite pool; a failed write leaves the old file whole.

#include "fault_scenario.hpp"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include <tenferro/tenferro.hpp>

#include "fault_loop.hpp"
#include "test_asio.hpp"

namespace tenferro::test::faults {
namespace {

std::string file_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// A scratch directory for one child, removed with it.
struct scratch_dir {
    std::filesystem::path path;
    scratch_dir() {
        char tmpl[] = "/tmp/tenferro-faults-XXXXXX";
        const char* made = mkdtemp(tmpl);
        path = made != nullptr ? made : "/tmp";
    }
    ~scratch_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    std::size_t entries() const {
        std::error_code ec;
        std::size_t n = 0;
        for (auto it = std::filesystem::directory_iterator(path, ec); !ec && it != std::filesystem::end(it);
             it.increment(ec))
            ++n;
        return n;
    }
};

/// How the scenario's operation completes: a callback bound to the
/// io_context, a callback bound to Asio's system executor (which must complete
/// in the library's context: this process never makes the system context), or
/// `co_await`.
enum class npy_completion_kind { io_callback, system_callback, awaited };

/// async_write_npy over an existing file, or async_read_npy, on the process's
/// engine (io_uring where the kernel allows it) or the pread/pwrite pool;
/// with a callback, or `co_await`ed with the default token (`awaited`), whose
/// initiation Asio runs inside a noexcept function: the failure must arrive at
/// the co_await, as an exception.
scenario npy(bool write, bool pool_engine, npy_completion_kind how = npy_completion_kind::io_callback,
             std::optional<adapter> adapted = std::nullopt) {
    const char* suffixes[] = {"", "/system-callback", "/awaited"};
    const bool awaited = how == npy_completion_kind::awaited;
    return {std::string("npy/") + (write ? "write" : "read") + (pool_engine ? "/pool" : "/default") +
                suffixes[static_cast<int>(how)] + (adapted ? std::string("-") + adapter_name(*adapted) : std::string()),
            [write, pool_engine, how, awaited, adapted](const run_config& c, verdict& v, std::uint64_t& injected) {
                if (pool_engine) setenv("TENFERRO_IO_URING", "0", 1);  // before the engine is chosen
                scratch_dir dir;
                const std::filesystem::path file = dir.path / "t.npy";
                asio::io_context io;
                std::vector<float> old_values(1000, 1.0f), new_values(1000, 2.0f);
                const tensor old_t = tensor::from(std::span<const float>(old_values), {10, 100});
                const tensor new_t = tensor::from(std::span<const float>(new_values), {10, 100});
                std::atomic<int> completions{0}, ok{0};
                std::atomic<bool> wrong_data{false};
                // The set-up write runs to its completion (its directory sync
                // included) before the window opens: one still running when the
                // scenario ends would complete into the destroyed io_context.
                bool set_up = false;
                asio::co_spawn(
                    io,
                    [&]() -> asio::awaitable<void> {
                        co_await async_write_npy(io.get_executor(), file, old_t);
                        set_up = true;
                    },
                    asio::detached);
                drive(
                    io, v, [&] { return set_up; }, 5s);
                const std::string old_bytes = file_bytes(file);
                if (old_bytes.empty()) v.fail("set-up: the first write failed");
                bool threw = false;
                if (awaited) {
                    asio::co_spawn(
                        io,
                        [&]() -> asio::awaitable<void> {
                            if (adapted && needs_warm_up(*adapted)) {
                                // The same operation once, unarmed (the write writes the old
                                // values again): needs_warm_up.
                                const auto base = tenferro::test::as_tuple(asio::use_awaitable);
                                if (write)
                                    (void)co_await await_adapted<std::tuple<asio_error_code>>(
                                        *adapted, base, [&](auto token) {
                                            return async_write_npy(io.get_executor(), file, old_t, std::move(token));
                                        });
                                else
                                    (void)co_await await_adapted<std::tuple<asio_error_code, tensor>>(
                                        *adapted, base, [&](auto token) {
                                            return async_read_npy(io.get_executor(), file, std::move(token));
                                        });
                                detail::empty_op_cache();
                            }
                            arm(c);
                            try {
                                // (An adapter's scenario awaits as_tuple(use_awaitable)
                                // inside it: use_awaitable itself would have Asio make
                                // the system_error of an error in its handler, where
                                // Asio ends the process when that allocation fails;
                                // docs/contract.md, S19.)
                                const auto base = tenferro::test::as_tuple(asio::use_awaitable);
                                if (write && adapted) {
                                    auto [ec] = co_await await_adapted<std::tuple<asio_error_code>>(
                                        *adapted, base, [&](auto token) {
                                            return async_write_npy(io.get_executor(), file, new_t, std::move(token));
                                        });
                                    if (ec) throw asio_system_error(ec);
                                } else if (write) {
                                    co_await async_write_npy(io.get_executor(), file, new_t);
                                } else {
                                    std::optional<tensor> t;
                                    if (adapted) {
                                        auto [ec, read] = co_await await_adapted<std::tuple<asio_error_code, tensor>>(
                                            *adapted, base, [&](auto token) {
                                                return async_read_npy(io.get_executor(), file, std::move(token));
                                            });
                                        if (ec) throw asio_system_error(ec);
                                        t.emplace(std::move(read));
                                    } else {
                                        t.emplace(co_await async_read_npy(io.get_executor(), file));
                                    }
                                    if (t->size() != 1000 || t->data<float>()[999] != 1.0f) wrong_data = true;
                                }
                                ok.fetch_add(1);
                            } catch (const std::bad_alloc&) {
                                // delivered at the co_await: allowed
                            } catch (const asio_system_error&) {
                                // an error code, named with the path
                            }
                            completions.fetch_add(1);
                        },
                        asio::detached);
                } else
                    try {
                        arm(c);
                        const auto start = [&](auto bind) {
                            if (write) {
                                async_write_npy(io.get_executor(), file, new_t, bind([&](asio_error_code ec) {
                                                    if (!ec) ok.fetch_add(1);
                                                    completions.fetch_add(1);
                                                }));
                            } else {
                                async_read_npy(io.get_executor(), file, bind([&](asio_error_code ec, tensor t) {
                                                   if (!ec) {
                                                       ok.fetch_add(1);
                                                       if (t.size() != 1000 || t.data<float>()[999] != 1.0f)
                                                           wrong_data = true;
                                                   }
                                                   completions.fetch_add(1);
                                               }));
                            }
                        };
                        if (how == npy_completion_kind::system_callback)
                            start([](auto f) { return asio::bind_executor(asio::system_executor(), std::move(f)); });
                        else
                            start([&io](auto f) { return asio::bind_executor(io, std::move(f)); });
                    } catch (const std::bad_alloc&) {
                        threw = true;
                    } catch (const std::system_error& e) {
                        // Starting the library's context (system_callback): a
                        // thread that cannot be made for want of memory
                        // (pthread_create's EAGAIN), thrown at the initiation.
                        if (e.code() != std::errc::resource_unavailable_try_again) throw;
                        threw = true;
                    }
                const int expected = threw ? 0 : 1;
                if (!drive(
                        io, v, [&] { return completions.load() >= expected && af::window_closed(); }, 10s))
                    v.fail("no completion after 10 s");
                const std::uint64_t events = af::disarm();
                injected = af::failures();
                drive(
                    io, v, [] { return false; }, 5ms);
                if (completions.load() != expected)
                    v.fail("completed %d times, expected %d", completions.load(), expected);
                if (wrong_data) v.fail("read completed with the wrong data");
                if (write) {
                    const std::string now = file_bytes(file);
                    if (ok.load() == 1) {
                        if (now == old_bytes) v.fail("the write reported success and left the old file");
                    } else if (now != old_bytes) {
                        v.fail("a failed write changed the file (%zu bytes, was %zu)", now.size(), old_bytes.size());
                    }
                    if (dir.entries() != 1) v.fail("%zu entries in the directory: a temporary was left", dir.entries());
                }
                return events;
            }};
}

}  // namespace

std::vector<scenario> npy_scenarios() {
    std::vector<scenario> s;
    for (bool pool : {false, true}) {
        for (npy_completion_kind how : {npy_completion_kind::io_callback, npy_completion_kind::awaited}) {
            s.push_back(npy(false, pool, how));
            s.push_back(npy(true, pool, how));
        }
    }
    // A callback bound to the system executor, in a process that has no host
    // (so no library context) yet: the context is started at the initiation.
    s.push_back(npy(false, true, npy_completion_kind::system_callback));
    s.push_back(npy(true, true, npy_completion_kind::system_callback));
    // Under each adapter of use_awaitable, on the pool engine (the engines'
    // own allocations are the same as above).
    for (adapter a : adapters()) {
        s.push_back(npy(false, true, npy_completion_kind::awaited, a));
        s.push_back(npy(true, true, npy_completion_kind::awaited, a));
    }
    return s;
}

}  // namespace tenferro::test::faults
