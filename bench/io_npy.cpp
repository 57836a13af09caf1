// tenferro-bench-io-npy: reading (and writing) a large .npy file with
// async_read_npy / async_write_npy on this process's I/O backend.
//
//   tenferro-bench-io-npy --file PATH [--create-mib N] [--reads R] [--pool 0|1] [--fault-floor 0|1]
//
// --create-mib writes an N MiB f32 file at PATH first (timed as one "write" line:
// temporary + fsync + rename). Then R reads (default 3), each timed from initiation
// to the handler, allocation and page faults of the new tensor included. Each
// prints one JSON object per line:
//   {"system":"tenferro-io_uring","op":"read","bytes":1073741952,"seconds":0.2,"gb_per_s":5.3}
// The backend is chosen per process: run with TENFERRO_IO_URING=0 for the thread
// pool. With --pool 1 the tensors come from a buffer_pool (npy_read_options::
// memory_resource), so every read after the first reuses memory that is already
// faulted in ("op":"read-pooled"). --fault-floor 1 instead times allocating a tensor
// of the file's size and zero-filling it ("op":"fault-floor"): what faulting the
// fresh memory in costs, without any I/O. bench/io_compare runs both backends, fresh
// and pooled, against `cat FILE > /dev/null`, alternately.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

#include <asio/io_context.hpp>
#include <tenferro/buffer_pool.hpp>
#include <tenferro/io.hpp>

namespace tf = tenferro;
using clock_type = std::chrono::steady_clock;

namespace {

void print(const char* op, std::uint64_t bytes, double seconds) {
    std::printf("{\"system\":\"tenferro-%s\",\"op\":\"%s\",\"bytes\":%llu,\"seconds\":%.6f,\"gb_per_s\":%.3f}\n",
                std::string(tf::to_string(tf::active_io_backend())).c_str(), op, static_cast<unsigned long long>(bytes),
                seconds, static_cast<double>(bytes) / seconds / 1e9);
    std::fflush(stdout);
}

[[noreturn]] void die(const std::string& what, std::error_code ec) {
    std::fprintf(stderr, "tenferro-bench-io-npy: %s: %s\n", what.c_str(), ec.message().c_str());
    std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
    std::string path;
    long create_mib = 0, reads = 3, pooled = 0, fault_floor = 0;
    bool usage = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        const char* value = argv[i + 1];
        if (flag == "--file") {
            path = value;
        } else if (flag == "--create-mib") {
            create_mib = std::atol(value);
        } else if (flag == "--reads") {
            reads = std::atol(value);
        } else if (flag == "--pool") {
            pooled = std::atol(value);
        } else if (flag == "--fault-floor") {
            fault_floor = std::atol(value);
        } else {
            usage = true;
        }
    }
    if (usage || path.empty()) {
        std::fprintf(
            stderr,
            "usage: tenferro-bench-io-npy --file PATH [--create-mib N] [--reads R] [--pool 0|1] [--fault-floor 0|1]\n");
        return 2;
    }
    asio::io_context io;
    if (create_mib > 0) {
        const std::int64_t n = create_mib * (1 << 20) / 4;
        tf::tensor t = tf::tensor::empty(tf::dtype::f32, {n});
        auto* p = t.data<float>();
        for (std::int64_t k = 0; k < n; ++k) p[k] = static_cast<float>(k % 1000003);
        std::error_code result;
        const auto start = clock_type::now();
        tf::async_write_npy(io.get_executor(), path, t, [&](std::error_code ec) { result = ec; });
        io.run();
        const double s = std::chrono::duration<double>(clock_type::now() - start).count();
        if (result) die("write " + path, result);
        print("write", static_cast<std::uint64_t>(t.nbytes()), s);
    }
    if (fault_floor) {
        std::FILE* f = std::fopen(path.c_str(), "rb");
        if (f == nullptr) die("open " + path, std::error_code(errno, std::system_category()));
        std::fseek(f, 0, SEEK_END);
        const long bytes = std::ftell(f);
        std::fclose(f);
        for (long r = 0; r < reads; ++r) {
            const auto start = clock_type::now();
            tf::tensor t = tf::tensor::empty(tf::dtype::f32, {bytes / 4});
            std::memset(t.data(), 0, t.nbytes());
            const double s = std::chrono::duration<double>(clock_type::now() - start).count();
            print("fault-floor", static_cast<std::uint64_t>(t.nbytes()), s);
        }
        return 0;
    }
    tf::npy_read_options options;
    if (pooled) options.memory_resource = std::make_shared<tf::buffer_pool>(std::size_t{4} << 30);
    for (long r = 0; r < reads; ++r) {
        std::error_code result;
        tf::tensor t;
        const auto start = clock_type::now();
        tf::async_read_npy(io.get_executor(), path, options, [&](std::error_code ec, tf::tensor x) {
            result = ec;
            t = std::move(x);
        });
        io.restart();
        io.run();
        const double s = std::chrono::duration<double>(clock_type::now() - start).count();
        if (result) die("read " + path, result);
        print(pooled ? "read-pooled" : "read", static_cast<std::uint64_t>(t.nbytes()), s);
    }
    return 0;
}
