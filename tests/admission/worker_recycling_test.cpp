// A compute worker is a thread "running an io_context" for Asio's handler
// memory (compute_pool::worker_main runs inside an io_context of its own):
// asio::recycling_allocator, which is documented to cache small blocks in
// thread-local storage on such threads only, reuses a block there. What the
// pool relies on for the coroutine frames of an asynchronous body and the
// handler memory of what it awaits, allocated and freed on the worker; a
// version of Asio that recycled otherwise fails here, on its own.
//
// Blocks are counted per thread by interposing malloc in this program only
// (support/malloc_interpose.hpp: Asio allocates its blocks with
// aligned_alloc). Not under a sanitizer, whose runtime owns malloc: there the
// test runs but counts nothing.

#include "tenferro/detail/admission/compute_pool.hpp"

#include <atomic>
#include <cstddef>
#include <future>
#include <thread>
#include <catch2/catch.hpp>
#include "test_asio.hpp"

#include "malloc_interpose.hpp"

namespace {
// This thread's heap blocks (constant-initialised plain data: the hook reads
// it at a fixed offset from the thread pointer and allocates nothing).
constinit thread_local std::size_t t_blocks = 0;
}  // namespace

void tenferro::malloc_interpose::on_block(std::size_t) noexcept { ++t_blocks; }

using namespace tenferro;

namespace {

/// What reusing one block with Asio's recycling allocator costs this thread.
struct reuse {
    std::size_t blocks = 0;  // heap blocks allocated by the second allocation
    bool same_block = false;
};

/// Allocates a block of Asio's recycling allocator, frees it, and allocates
/// one of the same size again: on a thread where Asio recycles, the second
/// is the first block, from the thread's cache, without malloc.
reuse reuse_one_block() {
    asio::recycling_allocator<unsigned char> alloc;
    constexpr std::size_t n = 96;  // a completion handler's size
    unsigned char* first = alloc.allocate(n);
    alloc.deallocate(first, n);
    const std::size_t before = t_blocks;
    unsigned char* second = alloc.allocate(n);
    reuse r{t_blocks - before, second == first};
    alloc.deallocate(second, n);
    return r;
}

}  // namespace

TEST_CASE("A compute worker is an Asio thread for handler memory: the recycling allocator reuses a block there") {
    detail::compute_pool pool(1, {});
    std::promise<reuse> on_worker;
    asio::post(pool.get_executor(), [&] { on_worker.set_value(reuse_one_block()); });
    const reuse worker = on_worker.get_future().get();

    // The control: a thread of no io_context, where Asio does not recycle.
    // (Were the interposition bypassed, both counts would be 0 and the check
    // on the worker would hold vacuously.)
    reuse plain;
    std::thread([&] { plain = reuse_one_block(); }).join();

    if (TENFERRO_DETAIL_ASIO_DISABLE_SMALL_BLOCK_RECYCLING) {
        WARN("built with ASIO_DISABLE_SMALL_BLOCK_RECYCLING: Asio recycles nothing");
    } else if (TENFERRO_MALLOC_INTERPOSED) {
        INFO("heap blocks for the second allocation: worker " << worker.blocks << ", plain thread " << plain.blocks);
        REQUIRE(plain.blocks == 1);
        CHECK(worker.blocks == 0);
        CHECK(worker.same_block);
    } else {
        // (ASan's allocator would not give the freed block back at once.)
        CHECK(worker.same_block);
        WARN("built with a sanitizer: heap blocks not counted");
    }
}

TEST_CASE("A worker started by grow_to is an Asio thread for handler memory too") {
    detail::compute_pool pool(1, {});
    pool.grow_to(2);
    REQUIRE(pool.threads() == 2);
    // Both workers take tasks; two tasks that each wait for the other run on
    // both of them.
    std::atomic<int> arrived{0};
    std::promise<reuse> a, b;
    auto both = [&](std::promise<reuse>& out) {
        arrived.fetch_add(1);
        while (arrived.load() < 2) std::this_thread::yield();
        out.set_value(reuse_one_block());
    };
    asio::post(pool.get_executor(), [&] { both(a); });
    asio::post(pool.get_executor(), [&] { both(b); });
    const reuse first = a.get_future().get(), second = b.get_future().get();
    if (TENFERRO_DETAIL_ASIO_DISABLE_SMALL_BLOCK_RECYCLING) return;
    if (TENFERRO_MALLOC_INTERPOSED) {
        CHECK(first.blocks == 0);
        CHECK(second.blocks == 0);
    }
    CHECK(first.same_block);
    CHECK(second.same_block);
}
