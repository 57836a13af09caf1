// A helper process for tests/io/io_test.cpp, which runs it where the test
// itself cannot act: as another user (permission errors when the tests run as
// root), or as a writer killed with SIGKILL in the middle of a write.
//
//   npy_io_child [--uid UID] read PATH           prints "ok" or "error VALUE CATEGORY"
//   npy_io_child [--uid UID] write PATH          writes a small tensor; prints as read
//   npy_io_child write-loop PATH MIB             writes MIB MiB of i32 (value k at k) to
//                                                PATH over and over, printing "writing N"
//                                                before each write and "wrote N" after
#include <grp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

#include <tenferro/io.hpp>
#include "test_asio.hpp"

using namespace tenferro;

namespace {

void print_outcome(std::error_code ec) {
    if (ec)
        std::printf("error %d %s\n", ec.value(), ec.category().name());
    else
        std::printf("ok\n");
    std::fflush(stdout);
}

int usage() {
    std::fprintf(stderr, "usage: npy_io_child [--uid UID] read|write PATH | write-loop PATH MIB\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    int i = 1;
    if (i + 1 < argc && std::strcmp(argv[i], "--uid") == 0) {
        const auto uid = static_cast<uid_t>(std::strtoul(argv[i + 1], nullptr, 10));
        // Drop every privilege before any thread exists.
        if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) {
            std::perror("npy_io_child: setuid");
            return 3;
        }
        i += 2;
    }
    if (i + 1 >= argc) return usage();
    const std::string cmd = argv[i], path = argv[i + 1];
    asio::io_context io;
    if (cmd == "read") {
        async_read_npy(io.get_executor(), path, [](std::error_code ec, tensor) { print_outcome(ec); });
        io.run();
        return 0;
    }
    if (cmd == "write") {
        const tensor t = tensor::from<float>({1, 2, 3}, {3});
        async_write_npy(io.get_executor(), path, t, [](std::error_code ec) { print_outcome(ec); });
        io.run();
        return 0;
    }
    if (cmd == "write-loop" && i + 2 < argc) {
        const std::int64_t n = std::atoll(argv[i + 2]) * (1 << 20) / 4;
        tensor t = tensor::empty(dtype::i32, {n});
        for (std::int64_t k = 0; k < n; ++k) t.data<std::int32_t>()[k] = static_cast<std::int32_t>(k);
        for (int round = 0;; ++round) {
            std::printf("writing %d\n", round);
            std::fflush(stdout);
            std::error_code result;
            async_write_npy(io.get_executor(), path, t, [&](std::error_code ec) { result = ec; });
            io.restart();
            io.run();
            if (result) {
                print_outcome(result);
                return 1;
            }
            std::printf("wrote %d\n", round);
            std::fflush(stdout);
        }
    }
    return usage();
}
