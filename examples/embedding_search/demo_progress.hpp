#pragma once
// The demo's progress display on stderr while the load runs: a bar redrawn in
// place on a terminal, a line every 2 s otherwise (a log or a pipe).

#include "load_generator.hpp"

namespace embedding_search {

class progress_bar {
public:
    explicit progress_bar(bool enabled);

    void operator()(const load_progress& p);
    /// Ends the bar's line, if one was drawn.
    void finish();

private:
    bool enabled_, tty_;
    bool shown_ = false;
    double next_line_ = 0.0;
};

}  // namespace embedding_search
