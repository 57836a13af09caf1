// A non-CPU resource behind tenferro's admission: a device with two streams
// whose kernels complete asynchronously on the device's own thread. Each
// session owns one stream; bodies are coroutines that hold their permit until
// the device says done. FIFO, re-entry, cancellation, shutdown: session_host's.
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <tenferro/session_host.hpp>

// Either Asio flavour (docs/boost-asio.md): tenferro/asio.hpp says which one
// the library was built against.
#if TENFERRO_ASIO_BOOST
#include <boost/asio.hpp>
namespace asio = boost::asio;
#else
#include <asio.hpp>
#endif

using namespace std::chrono_literals;

class fake_device {  // stands in for a driver: launches complete on its thread
public:
    fake_device() : thread_([this] { ctx_.run(); }) {}
    ~fake_device() { work_.reset(), thread_.join(); }
    asio::awaitable<void> launch(int stream, std::chrono::microseconds duration) {
        asio::steady_timer done(ctx_, duration);  // the kernel "runs" on the device
        co_await done.async_wait(asio::use_awaitable);
        std::printf("  stream %d: kernel of %lld us done\n", stream, static_cast<long long>(duration.count()));
    }

private:
    asio::io_context ctx_;
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_{ctx_.get_executor()};
    std::thread thread_;
};

struct stream_pool;
struct stream_session {  // what a body receives: one stream, returned on close
    stream_pool& pool;
    int stream;
    ~stream_session();
    asio::awaitable<void> launch(std::chrono::microseconds d);
};

struct stream_pool {  // the backend: a name, a session type, open_session
    using session_type = stream_session;
    fake_device& device;
    std::mutex mutex;
    std::vector<int> free_streams{1, 0};
    // (A constructor: clang 14 has no parenthesised aggregate initialisation,
    // which session_host's forwarding constructor uses.)
    explicit stream_pool(fake_device& d) : device(d) {}
    std::string_view name() const { return "fake-gpu"; }
    stream_session open_session(const tenferro::session_grant&) {  // after admission: a stream is free
        const std::lock_guard lock(mutex);
        const int s = free_streams.back();
        free_streams.pop_back();
        return {*this, s};
    }
};
stream_session::~stream_session() {
    const std::lock_guard lock(pool.mutex);
    pool.free_streams.push_back(stream);
}
asio::awaitable<void> stream_session::launch(std::chrono::microseconds d) { return pool.device.launch(stream, d); }

int main() {
    fake_device device;
    tenferro::session_host<stream_pool> gpu({.permits = 2}, device);  // 2 permits: one per stream
    asio::io_context io;
    int done = 0;
    for (int client = 0; client < 5; ++client)
        asio::co_spawn(
            io,
            [&, client]() -> asio::awaitable<void> {
                const tenferro::session_options on_caller{1, tenferro::wait_policy::fifo, tenferro::placement::caller};
                auto r = co_await gpu.with_backend_session(on_caller, [](stream_session& s) -> asio::awaitable<int> {
                    co_await s.launch(2000us);  // the permit is held until the device is done
                    co_return s.stream;
                });
                if (r)
                    std::printf("client %d ran on stream %d\n", client, *r), ++done;
                else
                    std::printf("client %d: %s\n", client, r.error().message().c_str());
            },
            asio::detached);
    io.run();
    const tenferro::admission_stats st = gpu.stats();
    std::printf("%s: %d done; admitted %llu, completed %llu, available %zu of %zu\n", std::string(gpu.name()).c_str(),
                done, static_cast<unsigned long long>(st.admitted), static_cast<unsigned long long>(st.completed),
                st.available, st.permits);
    return done == 5 && st.admitted == st.completed && st.available == st.permits ? 0 : 1;
}
