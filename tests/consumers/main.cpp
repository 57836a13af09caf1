// The program every consumer project in tests/consumers/ builds (CMake,
// Meson dependency() and subproject, plain pkg-config): one session on a
// cpu_backend, its value checked. Exits 0 and prints "consumer ok: 2096128"
// when the installed (or subproject) library works. Written for either Asio
// flavour (docs/boost-asio.md): the package's TENFERRO_ASIO_BOOST decides.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <tenferro/tenferro.hpp>

#if TENFERRO_ASIO_BOOST
#include <boost/asio.hpp>
namespace asio = boost::asio;
#else
#include <asio.hpp>
#endif

namespace {

asio::awaitable<void> sum(tenferro::cpu_backend& cpu, long& out) {
    tenferro::session_result<long> r = co_await cpu.with_backend_session([](tenferro::backend_session& s) {
        std::atomic<long> total{0};
        s.parallel_for(1 << 11, 256, [&](std::int64_t b, std::int64_t e) {
            long t = 0;
            for (std::int64_t i = b; i < e; ++i) t += i;
            total += t;
        });
        return total.load();
    });
    out = r ? *r : -1;
}

}  // namespace

int main() {
    asio::io_context io;
    tenferro::cpu_backend cpu({.permits = 2});
    long value = 0;
    asio::co_spawn(io, sum(cpu, value), asio::detached);
    io.run();
    constexpr long expected = (1L << 11) * ((1L << 11) - 1) / 2;  // 0 + 1 + ... + 2047
    if (value != expected) {
        std::printf("consumer FAILED: got %ld, expected %ld\n", value, expected);
        return 1;
    }
    std::printf("consumer ok: %ld\n", value);
    return 0;
}
