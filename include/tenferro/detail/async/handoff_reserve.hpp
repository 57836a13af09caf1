#pragma once
// Blocks for Asio's first hand-offs of a coroutine, reserved where a failure
// can still be delivered (S19; docs/design/body-spawn.md).
//
// Every hand-off through an `any_io_executor` wraps the function in a
// type-erased block that Asio takes from a small per-thread cache
// (`ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE`, 2 by default), and allocates when
// that is empty. co_spawn's first dispatch makes its hand-off inside Asio's
// noexcept await_suspend (1.22), or where a throw escapes to whoever resumed
// the coroutine and destroys it (1.23 on): out of memory there, the process
// ends. A thread that has handed off nothing yet (a fresh compute worker,
// the first coroutine of a caller's thread) has an empty cache.
//
// reserve_handoff_blocks() fills this thread's cache for that purpose, with
// public names only: it hands two functions of `handoff_block_bytes` at once
// to an executor that destroys them unrun, so Asio frees both blocks into
// the cache, where the next hand-offs of this thread find them (Asio reuses a
// cached block for any smaller request). Called right before co_spawn, on the
// thread co_spawn runs on; nothing in between hands off on this thread. On a
// thread Asio does not run (no per-thread cache there) it costs two
// allocations and reserves nothing.
//
// The assumption it rests on (a freed block goes to the freeing thread's cache
// when a slot is free) is Asio's behaviour from 1.22 to 1.38, not a promise:
// the fault loop's scenarios that spawn bodies (`entry/awaitable-async-body/*`,
// `scope/*`, `batcher/async`) fail on a version where it no longer holds.

#include <cstddef>

namespace tenferro::detail {

/// Larger than any function the library's coroutines hand off (co_spawn's
/// dispatch, a post's binder): Asio caches blocks up to 1020 bytes.
inline constexpr std::size_t handoff_block_bytes = 320;

/// Fills this thread's cache of type-erased function blocks (see above).
/// \throws std::bad_alloc with nothing reserved, nothing else changed.
void reserve_handoff_blocks();

}  // namespace tenferro::detail
