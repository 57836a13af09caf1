// The README's example, compiled so that it never goes stale.
#include <atomic>
#include <cstdio>
#include <asio.hpp>
#include <tenferro/tenferro.hpp>

asio::awaitable<void> handle_request(tenferro::cpu_backend& cpu, int id) {
    tenferro::session_result<long> r =
        co_await cpu.with_backend_session([&](tenferro::backend_session& s) {  // runs on a compute worker
            std::atomic<long> total{0};
            s.parallel_for(1 << 16, 4096, [&](std::int64_t b, std::int64_t e) {
                long t = 0;  // on up to parallelism() threads
                for (std::int64_t i = b; i < e; ++i) t += (i * id) % 7;
                total += t;
            });
            return total.load();
        });
    if (r)
        std::printf("request %d: %ld\n", id, *r);  // back on the I/O thread
    else
        std::printf("request %d rejected: %s\n", id, r.error().message().c_str());
}

int main() {
    asio::io_context io;
    tenferro::cpu_backend cpu({.permits = 2, .max_waiters = 1000});
    for (int i = 0; i < 8; ++i) asio::co_spawn(io, handle_request(cpu, i), asio::detached);
    io.run();
}
