// The demo's progress display (demo_progress.hpp).

#include "demo_progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace embedding_search {

progress_bar::progress_bar(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {}

void progress_bar::operator()(const load_progress& p) {
    if (!enabled_) return;
    const double rate = p.elapsed_seconds > 0 ? double(p.ok) / p.elapsed_seconds : 0.0;
    if (tty_) {
        constexpr int width = 32;
        const int filled = std::clamp(int(width * p.elapsed_seconds / p.duration_seconds + 0.5), 0, width);
        std::fprintf(stderr, "\r  [%s%s] %4.1f / %.0f s  %7.0f req/s  503s %llu  errors %llu ",
                     std::string(std::size_t(filled), '#').c_str(),
                     std::string(std::size_t(width - filled), '.').c_str(), p.elapsed_seconds, p.duration_seconds, rate,
                     static_cast<unsigned long long>(p.shed), static_cast<unsigned long long>(p.errors));
        std::fflush(stderr);
        shown_ = true;
    } else if (p.elapsed_seconds >= next_line_) {
        std::fprintf(stderr, "  %4.1f / %.0f s  %7.0f req/s  503s %llu  errors %llu\n", p.elapsed_seconds,
                     p.duration_seconds, rate, static_cast<unsigned long long>(p.shed),
                     static_cast<unsigned long long>(p.errors));
        next_line_ += 2.0;
    }
}

void progress_bar::finish() {
    if (shown_) std::fputc('\n', stderr);
}

}  // namespace embedding_search
