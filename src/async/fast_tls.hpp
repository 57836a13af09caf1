#pragma once
// Thread-locals in a shared library default to the general-dynamic TLS model:
// every access is a call to __tls_get_addr, on the hot path of every session
// entry and hand-off. The library is linked at start-up (not dlopen'ed), so the
// initial-exec model, a plain offset from the thread pointer, is safe.
#if defined(__GNUC__) || defined(__clang__)
#define TENFERRO_FAST_TLS __attribute__((tls_model("initial-exec")))
#else
#define TENFERRO_FAST_TLS
#endif
