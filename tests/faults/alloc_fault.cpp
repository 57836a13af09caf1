// The replacements of the global operator new family and, outside a
// sanitizer, of the malloc family (alloc_fault.hpp): forwarders that count and
// fail what the injector chooses. Linked once into the program.

#include "alloc_fault.hpp"

// ---------------------------------------------------------------------------
// The replacements.
// ---------------------------------------------------------------------------

void* operator new(std::size_t n) {
    if (void* p = tenferro::test::alloc_fault::new_or_null(n)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t al) {
    if (void* p = tenferro::test::alloc_fault::aligned_new_or_null(n, al)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) { return ::operator new(n, al); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    return tenferro::test::alloc_fault::new_or_null(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    return tenferro::test::alloc_fault::new_or_null(n);
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
    return tenferro::test::alloc_fault::aligned_new_or_null(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
    return tenferro::test::alloc_fault::aligned_new_or_null(n, al);
}
void operator delete(void* p) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete[](void* p) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete(void* p, std::size_t) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete[](void* p, std::size_t) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { tenferro::test::alloc_fault::raw_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
    tenferro::test::alloc_fault::raw_free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
    tenferro::test::alloc_fault::raw_free(p);
}

#if TENFERRO_ALLOC_FAULT_MALLOC
// A failed call sets errno to ENOMEM, as glibc's own do (glibc's thread
// creation asserts it).
#define TENFERRO_ALLOC_FAULT_FAIL(value) \
    do {                                 \
        errno = ENOMEM;                  \
        return value;                    \
    } while (0)
extern "C" {
void* malloc(std::size_t n) noexcept {
    if (tenferro::test::alloc_fault::should_fail()) TENFERRO_ALLOC_FAULT_FAIL(nullptr);
    return __libc_malloc(n);
}
void free(void* p) noexcept { __libc_free(p); }
void* calloc(std::size_t a, std::size_t b) noexcept {
    if (tenferro::test::alloc_fault::should_fail()) TENFERRO_ALLOC_FAULT_FAIL(nullptr);
    return __libc_calloc(a, b);
}
void* realloc(void* p, std::size_t n) noexcept {
    if (n != 0 && tenferro::test::alloc_fault::should_fail()) TENFERRO_ALLOC_FAULT_FAIL(nullptr);
    return __libc_realloc(p, n);
}
void* memalign(std::size_t al, std::size_t n) noexcept {
    if (tenferro::test::alloc_fault::should_fail()) TENFERRO_ALLOC_FAULT_FAIL(nullptr);
    return __libc_memalign(al, n);
}
void* aligned_alloc(std::size_t al, std::size_t n) noexcept {
    if (tenferro::test::alloc_fault::should_fail()) TENFERRO_ALLOC_FAULT_FAIL(nullptr);
    return __libc_memalign(al, n);
}
int posix_memalign(void** out, std::size_t al, std::size_t n) noexcept {
    if (al < sizeof(void*) || (al & (al - 1)) != 0) return EINVAL;
    if (tenferro::test::alloc_fault::should_fail()) return ENOMEM;
    void* p = __libc_memalign(al, n);
    if (p == nullptr) return ENOMEM;
    *out = p;
    return 0;
}
}
#endif
