// The choice of I/O engine: io_engine() picks io_uring or the pread/pwrite pool
// fallback once per process, and active_io_backend() reports it (<tenferro/io.hpp>).
// Also the engines' fault shim (io_testing.hpp), which both engines call into.

#include <array>
#include <cstdlib>
#include <string_view>

#include "io/file_engine.hpp"
#include "io/io_testing.hpp"
#include "tenferro/io.hpp"

namespace tenferro {
namespace detail::io {

// ---------------------------------------------------------------------------
// The fault shim. The plan is written only while no operation runs (like the
// other seams); the counters are atomics because several engine threads make
// boundary calls at once.
// ---------------------------------------------------------------------------

std::atomic<bool> io_fault_plan_set{false};

namespace {

constexpr std::size_t fault_log_size = 4096;

io_fault_plan fault_plan;
std::atomic<std::uint64_t> fault_calls{0};
std::atomic<std::uint64_t> fault_faulted{0};
std::atomic<std::uint64_t> fault_first{0};
// 0: not logged; else 1 + io_call.
std::array<std::atomic<unsigned char>, fault_log_size> fault_log{};

bool fault_applies(io_fault f, io_call call) noexcept {
    switch (f) {
    case io_fault::none:
        return false;
    case io_fault::short_transfer:
        return call == io_call::read || call == io_call::write;
    case io_fault::submit_ebusy:
    case io_fault::submit_eagain:
        return call == io_call::submit;
    case io_fault::ring_full:
        return call == io_call::get_sqe;
    default:  // the errno faults
        return call != io_call::get_sqe && call != io_call::submit;
    }
}

}  // namespace

io_fault io_fault_at_slow(io_call call) noexcept {
    const std::uint64_t n = fault_calls.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n <= fault_log_size)
        fault_log[n - 1].store(static_cast<unsigned char>(1 + static_cast<unsigned>(call)), std::memory_order_relaxed);
    const io_fault_plan& p = fault_plan;
    if (p.at == 0 || n < p.at || (p.count != 0 && n - p.at >= p.count) || !fault_applies(p.fault, call))
        return io_fault::none;
    if (fault_faulted.fetch_add(1, std::memory_order_relaxed) == 0) fault_first.store(n, std::memory_order_relaxed);
    return p.fault;
}

void set_io_fault_plan(const io_fault_plan& plan) noexcept {
    io_fault_plan_set.store(false, std::memory_order_seq_cst);
    fault_plan = plan;
    fault_calls.store(0, std::memory_order_relaxed);
    fault_faulted.store(0, std::memory_order_relaxed);
    fault_first.store(0, std::memory_order_relaxed);
    for (auto& e : fault_log) e.store(0, std::memory_order_relaxed);
    io_fault_plan_set.store(true, std::memory_order_seq_cst);
}

void clear_io_fault_plan() noexcept { io_fault_plan_set.store(false, std::memory_order_seq_cst); }

io_fault_record io_fault_counts() noexcept {
    return {fault_calls.load(std::memory_order_relaxed), fault_faulted.load(std::memory_order_relaxed),
            fault_first.load(std::memory_order_relaxed)};
}

bool io_fault_logged_call(std::uint64_t n, io_call& call) noexcept {
    if (n == 0 || n > fault_log_size) return false;
    const unsigned char v = fault_log[n - 1].load(std::memory_order_relaxed);
    if (v == 0) return false;
    call = static_cast<io_call>(v - 1);
    return true;
}

file_engine& io_engine() {
    static file_engine* const engine = [] {
        const char* env = std::getenv("TENFERRO_IO_URING");
        if (env != nullptr && std::string_view(env) == "0") return &pool_io_engine();
        if (file_engine* uring = uring_io_engine()) return uring;
        return &pool_io_engine();
    }();
    return *engine;
}

#if !TENFERRO_HAVE_IO_URING
file_engine* uring_io_engine() { return nullptr; }
#endif

}  // namespace detail::io

io_backend active_io_backend() noexcept { return detail::io::io_engine().kind(); }

std::string_view to_string(io_backend b) noexcept {
    switch (b) {
    case io_backend::io_uring:
        return "io_uring";
    case io_backend::thread_pool:
        return "thread_pool";
    }
    return "invalid";
}

}  // namespace tenferro
