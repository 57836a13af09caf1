// Must compile: proves the compile-fail check uses a working include path, so
// the other snippet fails for the reason it names and no other.
#include <tenferro/tenferro.hpp>

int main() {
    tenferro::backend_session* s = nullptr;
    return s == nullptr ? 0 : 1;
}
