// Many client coroutines on one I/O thread share two compute permits.
// Shows FIFO admission, typed rejections and where each part runs.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <asio.hpp>
#include <tenferro/tenferro.hpp>

namespace tf = tenferro;

int main() {
    asio::io_context io;
    tf::cpu_backend cpu({.permits = 2, .max_waiters = 64});
    std::atomic<int> ran{0}, contended{0};
    const auto io_thread = std::this_thread::get_id();

    for (int client = 0; client < 100; ++client) {
        asio::co_spawn(
            io,
            [&, client]() -> asio::awaitable<void> {
                tf::session_result<long> r = co_await cpu.with_backend_session([&](tf::backend_session& s) {
                    long sum = 0;
                    for (long i = 0; i < 200000; ++i) sum += i % (client + 1);
                    ran.fetch_add(1);
                    return sum + static_cast<long>(s.parallelism());
                });
                if (!r) {
                    if (client == 0) std::printf("client 0: %s\n", r.error().message().c_str());
                    if (r.error() == tf::session_entry_errc::contended) contended.fetch_add(1);
                    co_return;
                }
                if (std::this_thread::get_id() != io_thread) std::puts("resumed on the wrong thread!");
            },
            asio::detached);
    }
    const auto t0 = std::chrono::steady_clock::now();
    io.run();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const tf::admission_stats st = cpu.stats();
    std::printf("100 clients, 2 permits, queue bound 64: %d sessions ran, %d shed as contended, %.1f ms\n", ran.load(),
                contended.load(), ms);
    std::printf("stats: admitted=%llu completed=%llu rejected=%llu cancelled=%llu available=%zu/%zu\n",
                static_cast<unsigned long long>(st.admitted), static_cast<unsigned long long>(st.completed),
                static_cast<unsigned long long>(st.rejected), static_cast<unsigned long long>(st.cancelled),
                st.available, st.permits);
    return st.admitted == st.completed && st.available == st.permits ? 0 : 1;
}
