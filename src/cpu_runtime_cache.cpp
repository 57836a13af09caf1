#include "tenferro/cpu_runtime_cache.hpp"

namespace tenferro {

void cpu_runtime_cache::clear() {
    stats_.entries = 0;
    stats_.retained_bytes = 0;
    ++stats_.clears;
}

cache_stats cpu_runtime_cache::stats() const { return stats_; }

}  // namespace tenferro
