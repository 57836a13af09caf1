// Must NOT compile: no session exists outside a host's admission (spec §3).
#include <tenferro/tenferro.hpp>

int main() {
    tenferro::default_backend_session* s = nullptr;
    return s == nullptr ? 0 : 1;
}
