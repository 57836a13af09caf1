#pragma once
// Heap-block counting for a whole process: malloc and its kin are replaced by
// forwarders to glibc's own entry points that first report each block to a
// hook. Used by tests/admission/parked_memory_test.cpp and bench/admission.cpp
// to see every heap block of an entry, which counting operator new alone would
// miss: Asio's coroutine frames and recycled operations come from
// aligned_alloc.
//
// Include it in exactly one translation unit of a program (the replacements
// are definitions), and define the hook there:
//
//     void tenferro::malloc_interpose::on_block(std::size_t bytes) noexcept { ... }
//
// It is called on every allocating call (malloc, calloc, realloc, memalign,
// aligned_alloc, posix_memalign) with the requested size, from any thread, and
// must not allocate. `free` is forwarded without a call.
//
// Under a sanitizer, whose runtime owns malloc, nothing is replaced and
// TENFERRO_MALLOC_INTERPOSED is 0: the hook is never called, and a program
// that counts must say that it did not.

#include <cerrno>
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_HWADDRESS__)
#define TENFERRO_MALLOC_INTERPOSED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(hwaddress_sanitizer)
#define TENFERRO_MALLOC_INTERPOSED 0
#endif
#endif
#ifndef TENFERRO_MALLOC_INTERPOSED
#define TENFERRO_MALLOC_INTERPOSED 1
#endif

namespace tenferro::malloc_interpose {
/// Defined by the program that includes this header; see above.
void on_block(std::size_t bytes) noexcept;
}  // namespace tenferro::malloc_interpose

#if TENFERRO_MALLOC_INTERPOSED
// Forwarded to glibc's own entry points, so that free, malloc_usable_size,
// mallinfo2 and the rest stay consistent with the replacements.
extern "C" {
void* __libc_malloc(std::size_t) noexcept;
void __libc_free(void*) noexcept;
void* __libc_calloc(std::size_t, std::size_t) noexcept;
void* __libc_realloc(void*, std::size_t) noexcept;
void* __libc_memalign(std::size_t, std::size_t) noexcept;

void* malloc(std::size_t n) noexcept {
    tenferro::malloc_interpose::on_block(n);
    return __libc_malloc(n);
}
void free(void* p) noexcept { __libc_free(p); }
void* calloc(std::size_t a, std::size_t b) noexcept {
    tenferro::malloc_interpose::on_block(a * b);
    return __libc_calloc(a, b);
}
void* realloc(void* p, std::size_t n) noexcept {
    tenferro::malloc_interpose::on_block(n);
    return __libc_realloc(p, n);
}
void* memalign(std::size_t al, std::size_t n) noexcept {
    tenferro::malloc_interpose::on_block(n);
    return __libc_memalign(al, n);
}
void* aligned_alloc(std::size_t al, std::size_t n) noexcept {
    tenferro::malloc_interpose::on_block(n);
    return __libc_memalign(al, n);
}
int posix_memalign(void** out, std::size_t al, std::size_t n) noexcept {
    if (al < sizeof(void*) || (al & (al - 1)) != 0) return EINVAL;
    tenferro::malloc_interpose::on_block(n);
    void* p = __libc_memalign(al, n);
    if (p == nullptr) return ENOMEM;
    *out = p;
    return 0;
}
}
#endif
