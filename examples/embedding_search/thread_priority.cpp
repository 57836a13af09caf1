#include "thread_priority.hpp"

#if defined(__linux__)
#include <unistd.h>
#include <sys/resource.h>
#endif

namespace embedding_search {

void set_thread_nice(int nice) noexcept {
#if defined(__linux__)
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
#else
    (void)nice;
#endif
}

}  // namespace embedding_search
