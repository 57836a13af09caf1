#pragma once
// What this thread's op cache (op_allocator.cpp) was last asked: the tests'
// view of the S19 reservation, which must reserve exactly the size that the
// initiation then allocates (tests/admission/op_reservation_test.cpp), no
// less (the initiation would allocate inside Asio's noexcept function) and no
// more (a block kept per thread that no entry fills, which the fault loop
// cannot see). Recorded in every build: a store on reserve and a compare on
// allocate, in the thread-local data those functions read anyway; a macro
// for the tests alone would need a second build of the library.

#include <cstddef>

namespace tenferro::detail {

struct op_cache_record {
    std::size_t reserved = 0;    // this thread's last take_reserved_op_block(size): `size` (0: none since cleared)
    std::size_t asked = 0;       // the first allocate_op_memory(size) after it: `size` (0: none yet)
    std::size_t last_asked = 0;  // the last one after it (an entry refused the inline grant allocates twice)
    std::size_t from_heap = 0;   // the ones after it that the cache could not serve (operator new)
};

/// This thread's record.
op_cache_record last_op_cache_record() noexcept;
/// Empties this thread's record.
void clear_op_cache_record() noexcept;
/// Frees the blocks this thread's cache keeps, so that the next op of this
/// thread allocates (the fault loop: a warm-up run must not leave the block
/// that the run under test is to reserve).
void empty_op_cache() noexcept;

}  // namespace tenferro::detail
