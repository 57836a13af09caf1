#include "tenferro/buffer_pool.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "tenferro/cpu_backend.hpp"
#include "tenferro/tensor.hpp"

using tenferro::buffer_pool;

TEST_CASE("buffer_pool: size classes are at least 256 bytes, four per octave", "[buffer_pool]") {
    CHECK(buffer_pool::class_size(1) == 256);
    CHECK(buffer_pool::class_size(256) == 256);
    CHECK(buffer_pool::class_size(257) == 320);
    CHECK(buffer_pool::class_size(320) == 320);
    CHECK(buffer_pool::class_size(321) == 384);
    CHECK(buffer_pool::class_size(512) == 512);
    CHECK(buffer_pool::class_size(513) == 640);
    // A 64 Mi-element f32 tensor (plus its 64-byte header) wastes at most a quarter.
    const std::size_t big = (std::size_t{64} << 20) * 4 + 64;
    CHECK(buffer_pool::class_size(big) >= big);
    CHECK(buffer_pool::class_size(big) <= big + big / 4);
    for (std::size_t n = 1; n < 100000; n += 97) {
        const std::size_t c = buffer_pool::class_size(n);
        CHECK(c >= n);
        CHECK(c <= std::max<std::size_t>(256, n + n / 4 + 1));
    }
}

TEST_CASE("buffer_pool: a returned block is reused for the same class", "[buffer_pool]") {
    buffer_pool pool(1 << 20);
    void* a = pool.allocate(1000, 64);
    CHECK(reinterpret_cast<std::uintptr_t>(a) % 64 == 0);
    auto s = pool.stats();
    CHECK(s.allocations == 1);
    CHECK(s.misses == 1);
    CHECK(s.outstanding_bytes == buffer_pool::class_size(1000));
    pool.deallocate(a, 1000, 64);
    s = pool.stats();
    CHECK(s.retained_blocks == 1);
    CHECK(s.retained_bytes == buffer_pool::class_size(1000));
    CHECK(s.outstanding_bytes == 0);
    void* b = pool.allocate(990, 64);  // same class
    CHECK(b == a);
    s = pool.stats();
    CHECK(s.hits == 1);
    CHECK(s.retained_blocks == 0);
    pool.deallocate(b, 990, 64);
    pool.trim();
    CHECK(pool.stats().retained_bytes == 0);
    CHECK(pool.stats().capacity_bytes == (1 << 20));
}

TEST_CASE("buffer_pool: retention never exceeds the cap", "[buffer_pool]") {
    buffer_pool pool(4096);
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(pool.allocate(1024, 64));
    for (void* p : blocks) pool.deallocate(p, 1024, 64);
    const auto s = pool.stats();
    CHECK(s.retained_bytes == 4096);
    CHECK(s.retained_blocks == 4);
    CHECK(s.discarded == 4);
    CHECK(s.releases == 8);

    buffer_pool none(0);
    void* p = none.allocate(100, 8);
    none.deallocate(p, 100, 8);
    CHECK(none.stats().retained_bytes == 0);
    CHECK(none.stats().discarded == 1);
}

TEST_CASE("buffer_pool: alignments above 64 bypass the classes", "[buffer_pool]") {
    buffer_pool pool(1 << 20);
    void* p = pool.allocate(100, 4096);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 4096 == 0);
    pool.deallocate(p, 100, 4096);
    CHECK(pool.stats().retained_blocks == 0);
    CHECK(pool.stats().outstanding_bytes == 0);
}

TEST_CASE("buffer_pool: tensors return their storage on the last release", "[buffer_pool]") {
    auto pool = std::make_shared<buffer_pool>(1 << 20);
    {
        tenferro::tensor t = tenferro::tensor::empty(tenferro::dtype::f32, std::vector<std::int64_t>{256}, pool);
        tenferro::tensor u = t;  // shares the storage
        t = tenferro::tensor();
        CHECK(pool->stats().retained_blocks == 0);
        CHECK(pool->stats().outstanding_bytes > 0);
    }
    CHECK(pool->stats().retained_blocks == 1);
    tenferro::tensor again = tenferro::tensor::empty(tenferro::dtype::f32, std::vector<std::int64_t>{250}, pool);
    CHECK(pool->stats().hits == 1);
}

TEST_CASE("buffer_pool: concurrent allocate and deallocate keep the books", "[buffer_pool]") {
    buffer_pool pool(1 << 16);
    std::atomic<int> misaligned{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            std::vector<std::pair<void*, std::size_t>> held;
            for (int i = 0; i < 2000; ++i) {
                const std::size_t n = 64 + static_cast<std::size_t>((i * 37 + t * 101) % 5000);
                void* p = pool.allocate(n, 64);
                if (reinterpret_cast<std::uintptr_t>(p) % 64 != 0) misaligned.fetch_add(1);
                static_cast<unsigned char*>(p)[n - 1] = 1;
                held.emplace_back(p, n);
                if (held.size() > 8) {
                    pool.deallocate(held.front().first, held.front().second, 64);
                    held.erase(held.begin());
                }
            }
            for (auto [p, n] : held) pool.deallocate(p, n, 64);
        });
    }
    for (auto& th : threads) th.join();
    const auto s = pool.stats();
    CHECK(misaligned.load() == 0);
    CHECK(s.outstanding_bytes == 0);
    CHECK(s.allocations == 8000);
    CHECK(s.releases == 8000);
    CHECK(s.hits + s.misses == 8000);
    CHECK(s.retained_bytes <= (1 << 16));
}

TEST_CASE("cpu_backend: buffer_pool_stats reports the configured cap", "[buffer_pool]") {
    tenferro::cpu_backend_options options;
    options.permits = 1;
    options.buffer_pool_bytes = 12345;
    tenferro::cpu_backend cpu(options);
    const tenferro::buffer_pool_stats s = cpu.buffer_pool_stats();
    CHECK(s.capacity_bytes == 12345);
    CHECK(s.allocations == 0);
    CHECK(tenferro::cpu_backend_options{}.buffer_pool_bytes == (std::size_t{64} << 20));
}
