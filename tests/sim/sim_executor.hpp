#pragma once
// The deterministic simulation's scheduler (docs/testing.md): one
// execution context that owns every handler posted, deferred or dispatched to
// any of its executors, and runs them one per step, chosen by a `chooser`
// (a seeded PRNG, a depth-first search over the choice points, or a replayed
// choice sequence). Single-threaded; time is virtual.
//
// Executors model what they stand for:
//  * a serial executor is a caller's io_context with one thread: its handlers
//    run in FIFO order, and dispatch from a handler already running on it
//    runs inline (running_in_this_thread);
//  * a parallel executor is a thread pool (the host's compute executor): any
//    of its handlers may run next.
// Each step chooses among the heads of the serial executors and every handler
// of the parallel ones.
//
// S16 is checked here: a serial executor can be destroyed (a caller's
// io_context gone after its upcall); any later touch of it (a post, a
// dispatch, a tracked-work count going up or down) is reported.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "test_asio.hpp"

namespace tenferro::sim {

/// splitmix64: a seed's whole stream from one 64-bit word.
class prng {
public:
    explicit prng(std::uint64_t seed) noexcept : state_(seed) {}
    std::uint64_t next() noexcept {
        std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    /// Uniform in [0, n).
    std::uint32_t below(std::uint32_t n) noexcept { return n <= 1 ? 0 : static_cast<std::uint32_t>(next() % n); }
    /// True with probability num/den.
    bool chance(std::uint32_t num, std::uint32_t den) noexcept { return below(den) < num; }

private:
    std::uint64_t state_;
};

/// Every scheduling decision goes through here.
class chooser {
public:
    enum class mode { random, dfs };

    explicit chooser(std::uint64_t seed) : mode_(mode::random), rng_(seed) {}
    /// Depth-first search (or, with `prefix`, a replay of a choice sequence).
    explicit chooser(std::vector<std::uint32_t> prefix) : mode_(mode::dfs), rng_(0) {
        for (std::uint32_t c : prefix) trail_.push_back({c, 0});
        replay_ = trail_.size();
    }

    std::uint32_t operator()(std::uint32_t n) {
        if (n <= 1) return 0;
        std::uint32_t c = 0;
        if (mode_ == mode::random) {
            c = rng_.below(n);
        } else if (pos_ < trail_.size()) {
            c = trail_[pos_].choice < n ? trail_[pos_].choice : n - 1;
            trail_[pos_].n = n;
        } else {
            trail_.push_back({0, n});
        }
        ++pos_;
        taken_.push_back(c);
        return c;
    }

    /// DFS: the next schedule's prefix; false when every schedule was run.
    bool advance() {
        trail_.resize(pos_);
        while (!trail_.empty() && trail_.back().choice + 1 >= trail_.back().n) trail_.pop_back();
        pos_ = 0;
        taken_.clear();
        if (trail_.empty()) return false;
        ++trail_.back().choice;
        return true;
    }

    const std::vector<std::uint32_t>& taken() const noexcept { return taken_; }

private:
    struct point {
        std::uint32_t choice, n;
    };
    mode mode_;
    prng rng_;
    std::vector<point> trail_;
    std::size_t pos_ = 0;
    std::size_t replay_ = 0;
    std::vector<std::uint32_t> taken_;
};

class sim_executor;

class sim_context : public asio::execution_context {
public:
    using report_fn = std::function<void(const std::string&)>;

    sim_context(chooser& choose, report_fn report) : choose_(&choose), report_(std::move(report)) {}
    ~sim_context() { drop_everything(); }

    /// A new executor: `serial` (an io_context with one thread) or a pool.
    int add_executor(std::string name, bool serial) {
        exec_state& e = execs_.emplace_back();
        e.name = std::move(name);
        e.serial = serial;
        return static_cast<int>(execs_.size()) - 1;
    }
    sim_executor executor(int id);

    /// The executor whose handler is running (-1: none, the driver).
    int current() const noexcept { return current_; }
    std::uint64_t now() const noexcept { return now_; }
    std::uint64_t steps() const noexcept { return steps_; }
    const std::string& name(int id) const { return execs_[id].name; }
    bool alive(int id) const { return execs_[id].alive; }
    long tracked_work(int id) const { return execs_[id].tracked; }
    std::size_t executors() const noexcept { return execs_.size(); }

    /// Runs `f` on executor `id` at virtual time `at` (a timer).
    template <class F>
    void post_at(int id, std::uint64_t at, F&& f) {
        timers_.push_back(timer{at, timer_seq_++, id, make_fn(std::forward<F>(f))});
    }

    template <class F>
    void execute(int id, bool never_blocking, F&& f) {
        exec_state& e = execs_[id];
        if (!e.alive) {
            report_("S16: a function was handed to executor '" + e.name + "' after its context was destroyed");
            return;  // destroyed unrun, as a destroyed io_context would
        }
        if (!never_blocking && current_ == id) {
            // dispatch from a handler of this executor: inline, as io_context does
            std::forward<F>(f)();
            return;
        }
        e.queue.push_back(make_fn(std::forward<F>(f)));
    }

    void work(int id, long delta) {
        exec_state& e = execs_[id];
        if (!e.alive) report_("S16: tracked work of executor '" + e.name + "' changed after its context was destroyed");
        e.tracked += delta;
    }

    /// The caller destroys its context (S16: right after its upcall).
    /// Pending handlers are destroyed unrun, as io_context's destructor does.
    void destroy_executor(int id) {
        exec_state& e = execs_[id];
        e.alive = false;
        std::deque<std::unique_ptr<fn>> pending = std::move(e.queue);
        e.queue.clear();
        pending.clear();
    }

    /// Runs one step. False when nothing is runnable and no timer is pending.
    bool step() {
        candidates_.clear();
        for (int id = 0; id < static_cast<int>(execs_.size()); ++id) {
            const exec_state& e = execs_[id];
            if (e.queue.empty()) continue;
            if (e.serial)
                candidates_.push_back({id, 0});
            else
                for (std::size_t i = 0; i < e.queue.size(); ++i) candidates_.push_back({id, i});
        }
        // Time may also move on while handlers are runnable (a timer firing
        // before the ready work ran): one more choice when a timer is pending.
        const bool timer_choice = !timers_.empty();
        const std::uint32_t n = static_cast<std::uint32_t>(candidates_.size()) + (timer_choice ? 1 : 0);
        if (n == 0) return false;
        const std::uint32_t c = (*choose_)(n);
        ++steps_;
        if (c == candidates_.size()) {
            fire_next_timer();
            return true;
        }
        const auto [id, index] = candidates_[c];
        std::deque<std::unique_ptr<fn>>& q = execs_[id].queue;
        std::unique_ptr<fn> f = std::move(q[index]);
        q.erase(q.begin() + static_cast<std::ptrdiff_t>(index));
        const int previous = current_;
        current_ = id;
        (*f)();
        f.reset();  // the handler's memory goes within the step, as in Asio
        current_ = previous;
        return true;
    }

    bool idle() const noexcept {
        if (!timers_.empty()) return false;
        for (const exec_state& e : execs_)
            if (!e.queue.empty()) return false;
        return true;
    }

    /// Destroys every pending handler unrun (end of a run).
    void drop_everything() {
        timers_.clear();
        for (exec_state& e : execs_) {
            std::deque<std::unique_ptr<fn>> pending = std::move(e.queue);
            e.queue.clear();
        }
    }

private:
    struct fn {
        virtual ~fn() = default;
        virtual void operator()() = 0;
    };
    template <class F>
    struct fn_of final : fn {
        explicit fn_of(F&& g) : f(std::move(g)) {}
        void operator()() override { f(); }
        F f;
    };
    template <class F>
    static std::unique_ptr<fn> make_fn(F&& f) {
        return std::make_unique<fn_of<std::decay_t<F>>>(std::decay_t<F>(std::forward<F>(f)));
    }
    struct exec_state {
        std::string name;
        bool serial = true;
        bool alive = true;
        long tracked = 0;
        std::deque<std::unique_ptr<fn>> queue;
    };
    struct timer {
        std::uint64_t at, seq;
        int id;
        std::unique_ptr<fn> f;
    };
    struct candidate {
        int id;
        std::size_t index;
    };

    void fire_next_timer() {
        std::size_t best = 0;
        for (std::size_t i = 1; i < timers_.size(); ++i)
            if (timers_[i].at < timers_[best].at ||
                (timers_[i].at == timers_[best].at && timers_[i].seq < timers_[best].seq))
                best = i;
        timer t = std::move(timers_[best]);
        timers_.erase(timers_.begin() + static_cast<std::ptrdiff_t>(best));
        if (t.at > now_) now_ = t.at;
        exec_state& e = execs_[t.id];
        if (e.alive) e.queue.push_back(std::move(t.f));
    }

    chooser* choose_;
    report_fn report_;
    std::deque<exec_state> execs_;  // (stable: a handler may add one while running)
    std::vector<timer> timers_;
    std::vector<candidate> candidates_;
    std::uint64_t timer_seq_ = 0;
    std::uint64_t now_ = 0;
    std::uint64_t steps_ = 0;
    int current_ = -1;
};

/// A standard executor (as Asio 1.22 models them) of one simulated context.
class sim_executor {
public:
    sim_executor(sim_context& ctx, int id, bool never_blocking = false, bool tracked = false) noexcept
        : ctx_(&ctx), id_(id), never_(never_blocking), tracked_(tracked) {
        if (tracked_) ctx_->work(id_, +1);
    }
    sim_executor(const sim_executor& other) noexcept
        : sim_executor(*other.ctx_, other.id_, other.never_, other.tracked_) {}
    sim_executor(sim_executor&& other) noexcept
        : ctx_(other.ctx_), id_(other.id_), never_(other.never_), tracked_(std::exchange(other.tracked_, false)) {}
    sim_executor& operator=(sim_executor other) noexcept {
        std::swap(ctx_, other.ctx_);
        std::swap(id_, other.id_);
        std::swap(never_, other.never_);
        std::swap(tracked_, other.tracked_);
        return *this;
    }
    ~sim_executor() {
        if (tracked_) ctx_->work(id_, -1);
    }

    int id() const noexcept { return id_; }
    sim_context& context() const noexcept { return *ctx_; }

    template <class F>
    void execute(F&& f) const {
        ctx_->execute(id_, never_, std::forward<F>(f));
    }

    asio::execution_context& query(asio::execution::context_t) const noexcept { return *ctx_; }
    asio::execution::blocking_t query(asio::execution::blocking_t) const noexcept {
        return never_ ? asio::execution::blocking_t(asio::execution::blocking.never)
                      : asio::execution::blocking_t(asio::execution::blocking.possibly);
    }
    static constexpr asio::execution::relationship_t query(asio::execution::relationship_t) noexcept {
        return asio::execution::relationship.fork;
    }
    asio::execution::outstanding_work_t query(asio::execution::outstanding_work_t) const noexcept {
        return tracked_ ? asio::execution::outstanding_work_t(asio::execution::outstanding_work.tracked)
                        : asio::execution::outstanding_work_t(asio::execution::outstanding_work.untracked);
    }

    sim_executor require(asio::execution::blocking_t::never_t) const noexcept {
        return sim_executor(*ctx_, id_, true, tracked_);
    }
    sim_executor require(asio::execution::blocking_t::possibly_t) const noexcept {
        return sim_executor(*ctx_, id_, false, tracked_);
    }
    sim_executor require(asio::execution::outstanding_work_t::tracked_t) const noexcept {
        return sim_executor(*ctx_, id_, never_, true);
    }
    sim_executor require(asio::execution::outstanding_work_t::untracked_t) const noexcept {
        return sim_executor(*ctx_, id_, never_, false);
    }
    sim_executor require(asio::execution::relationship_t::fork_t) const noexcept { return *this; }
    sim_executor require(asio::execution::relationship_t::continuation_t) const noexcept { return *this; }
    template <class Alloc>
    sim_executor require(const asio::execution::allocator_t<Alloc>&) const noexcept {
        return *this;
    }

    friend bool operator==(const sim_executor& a, const sim_executor& b) noexcept {
        return a.ctx_ == b.ctx_ && a.id_ == b.id_ && a.never_ == b.never_ && a.tracked_ == b.tracked_;
    }
    friend bool operator!=(const sim_executor& a, const sim_executor& b) noexcept { return !(a == b); }

private:
    sim_context* ctx_;
    int id_;
    bool never_;
    bool tracked_;
};

inline sim_executor sim_context::executor(int id) { return sim_executor(*this, id); }

}  // namespace tenferro::sim
