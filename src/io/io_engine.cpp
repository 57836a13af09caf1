// The choice of I/O engine: io_engine() picks io_uring or the pread/pwrite pool
// fallback once per process, and active_io_backend() reports it (<tenferro/io.hpp>).

#include <cstdlib>
#include <string_view>

#include "io/file_engine.hpp"
#include "tenferro/io.hpp"

namespace tenferro {
namespace detail::io {

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
