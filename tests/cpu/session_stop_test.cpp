// S20, the operations' side: a CPU session built with a stop token sees a stop
// at the start of every operation, before each parallel_for range and between
// chunks inside the kernels (a GEMM micro-panel, a search tile, a block of
// element-operations), and throws session_stopped; every later operation
// throws again. The session is built directly on a compute pool here, as the
// host builds it from a grant (session_grant::stop); how an entry asks for a
// stop is the admission layer's (docs/contract.md, S20).
//
// "Mid-operation" needs no timing: the output is filled with NaN, a second
// thread waits until the operation has written its first element and only
// then asks for the stop; the operation must then throw, with some element
// still unwritten (it did not run to its end). On a loaded machine that thread
// may not be scheduled before a short operation ends: such an attempt proves
// nothing either way, and is run again on a fresh session (stop_mid_run).
#include <tenferro/detail/admission/compute_pool.hpp>
#include <tenferro/detail/cpu/cpu_session.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stop_token>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include "cpu_session_fixture.hpp"

using namespace tenferro;

namespace {

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();

using test::filled;
using session_fixture = test::cpu_session_fixture;

/// Asks `source` to stop once `watched` is no longer NaN (the operation has
/// started writing), from its own thread.
class stop_when_written {
public:
    stop_when_written(std::stop_source& source, float& watched)
        : thread_([&source, &watched](std::stop_token quit) {
              std::atomic_ref<float> w(watched);
              while (!quit.stop_requested() && std::isnan(w.load(std::memory_order_relaxed))) std::this_thread::yield();
              source.request_stop();
          }) {}

private:
    std::jthread thread_;
};

/// Runs `op`, which must throw session_stopped.
template <class Op>
bool throws_stopped(Op op) {
    try {
        op();
    } catch (const session_stopped&) {
        return true;
    }
    return false;
}

/// How one attempt of a mid-run stop ended.
struct mid_run_outcome {
    bool stopped = false;      // the operation threw session_stopped
    bool unfinished = false;   // some element of the output was never written
    bool sticky = false;       // the next operation threw session_stopped at its start
};

/// Runs `op(session, out)` on a fresh `permits`-permit session, with `out`
/// refilled with NaN, and asks for a stop from another thread once out[0] is
/// written. An attempt whose operation ended before that thread ran (a loaded
/// machine) is repeated, up to `attempts` times; the last outcome is returned.
/// A stop that does not work fails every attempt.
template <class Op>
mid_run_outcome stop_mid_run(std::size_t permits, tensor& out, Op op, int attempts = 50) {
    float* o = out.data<float>();
    const std::size_t n = out.size();
    mid_run_outcome outcome;
    for (int attempt = 0; attempt < attempts; ++attempt) {
        std::fill(o, o + n, nan_f);
        std::stop_source source;
        session_fixture f(permits, source.get_token());
        {
            const stop_when_written stopper(source, o[0]);
            outcome.stopped = throws_stopped([&] { op(f.session, out); });
        }
        if (!outcome.stopped) continue;  // the stop came after the end
        outcome.unfinished = std::any_of(o, o + n, [](float v) { return std::isnan(v); });
        outcome.sticky = f.session.stop_requested() && throws_stopped([&] { op(f.session, out); });
        break;
    }
    return outcome;
}

}  // namespace

TEST_CASE("S20: a session that cannot be asked to stop runs every operation") {
    session_fixture f(2);
    backend_session& s = f.session;
    CHECK_FALSE(s.stop_requested());
    CHECK_FALSE(s.stop_token().stop_possible());
    CHECK_NOTHROW(s.throw_if_stop_requested());
    const std::vector<float> v{1, 2, 3, 4};
    const tensor x = tensor::from(std::span<const float>(v), {2, 2});
    const tensor y = s.matmul(x, x);
    CHECK(y.data<float>()[0] == 7.0f);
}

TEST_CASE("S20: once asked, every operation throws session_stopped at its start, and keeps throwing") {
    std::stop_source source;
    session_fixture f(2, source.get_token());
    backend_session& s = f.session;
    const std::vector<float> v{1, 2, 3, 4};
    const tensor x = tensor::from(std::span<const float>(v), {2, 2});
    CHECK(s.add(x, x).data<float>()[3] == 8.0f);  // not asked yet
    CHECK(s.stop_token().stop_possible());

    source.request_stop();
    CHECK(s.stop_requested());
    CHECK(s.stop_token().stop_requested());
    CHECK_THROWS_AS(s.throw_if_stop_requested(), session_stopped);
    CHECK_THROWS_WITH(s.throw_if_stop_requested(), "tenferro: session stopped");

    tensor out = filled(2, 2, 0.0f);
    const std::int64_t all[] = {0, 1};
    // One op of each family; an _into form writes nothing when stopped at its start.
    CHECK(throws_stopped([&] { (void)s.add(x, x); }));
    CHECK(throws_stopped([&] { s.exp_into(x, out); }));
    CHECK(throws_stopped([&] { s.axpby(1.0, x, 1.0, out); }));
    CHECK(throws_stopped([&] { (void)s.reduce_sum(x, all); }));
    CHECK(throws_stopped([&] { (void)s.vdot(x, x); }));
    CHECK(throws_stopped([&] { (void)s.softmax(x, -1); }));
    CHECK(throws_stopped([&] { (void)s.top_k(x, 1, -1); }));
    CHECK(throws_stopped([&] { (void)s.matmul(x, x); }));
    CHECK(throws_stopped([&] { (void)s.matmul_top_k(x, x, 1); }));
    CHECK(throws_stopped([&] { (void)s.copy(x); }));
    CHECK(throws_stopped([&] { (void)s.transpose(x, {1, 0}); }));
    CHECK(throws_stopped([&] { (void)s.cast(x, dtype::f64); }));
    CHECK(throws_stopped([&] { (void)s.concatenate({x.view(), x.view()}, 0); }));
    for (const float v : std::span<const float>(out.data<float>(), 4)) CHECK(v == 0.0f);

    // parallel_for checks before each range: no range runs.
    std::atomic<int> ranges{0};
    CHECK(throws_stopped([&] { s.parallel_for(100, 1, [&](std::int64_t, std::int64_t) { ++ranges; }); }));
    CHECK(ranges.load() == 0);
}

TEST_CASE("S20: a stop asked while a GEMM runs ends it between micro-panels, on every thread") {
    // About 2 * 1536^3 = 7 GFLOP: milliseconds to seconds of work, stopped
    // after its first writes.
    const std::int64_t n = 1536;
    const tensor a = filled(n, n, 1.0f);
    tensor out = filled(n, n, nan_f);
    for (const std::size_t permits : {1, 2}) {
        INFO("permits " << permits);
        const mid_run_outcome r =
            stop_mid_run(permits, out, [&](detail::cpu_session& s, tensor& o) { s.matmul_into(a, a, o); });
        CHECK(r.stopped);
        CHECK(r.unfinished);
        CHECK(r.sticky);
    }
}

TEST_CASE("S20: a stop asked while an elementwise op runs ends it within one block of its range") {
    const std::int64_t n = std::int64_t{1} << 25;  // 32M exps: far more than a block
    const tensor x = filled(1, n, 0.5f);
    tensor out = filled(1, n, nan_f);
    for (const std::size_t permits : {1, 2}) {
        INFO("permits " << permits);
        const mid_run_outcome r =
            stop_mid_run(permits, out, [&](detail::cpu_session& s, tensor& o) { s.exp_into(x, o); });
        CHECK(r.stopped);
        CHECK(r.unfinished);
        CHECK(r.sticky);
    }
}

TEST_CASE("S20: a stop asked while a search runs ends it between tiles") {
    // 512 queries over 200k rows of d = 256: about 52 GFLOP, far more than
    // the 20 ms after which the stop is asked. A search writes its outputs at
    // its end, so the test cannot wait for a first write as the others do; an
    // attempt that ended before the stopping thread ran is repeated.
    const tensor q = filled(512, 256, 0.5f);
    const tensor corpus_t = filled(256, 200000, 0.25f);
    bool stopped = false;
    std::chrono::steady_clock::duration took{};
    for (int attempt = 0; attempt < 10 && !stopped; ++attempt) {
        std::stop_source source;
        session_fixture f(2, source.get_token());
        std::jthread stopper([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            source.request_stop();
        });
        const auto start = std::chrono::steady_clock::now();
        stopped = throws_stopped([&] { (void)f.session.matmul_top_k(q, corpus_t, 10); });
        took = std::chrono::steady_clock::now() - start;
    }
    CHECK(stopped);
    WARN("matmul_top_k of 512 queries over 200k rows of d = 256 stopped after "
         << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms (stop asked at 20 ms)");
}

TEST_CASE("S20: an operation that can be stopped, and is not, gives the same bits as one that cannot") {
    // A stoppable session runs each range in steps (for_range): the results
    // must not depend on it, at either parallelism.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    const auto random = [&](std::int64_t rows, std::int64_t cols) {
        std::vector<float> v(static_cast<std::size_t>(rows * cols));
        for (float& e : v) e = dist(rng);
        return tensor::from(std::span<const float>(v), {rows, cols});
    };
    const tensor x = random(300, 1111), y = random(300, 1111), w = random(1111, 97);
    const std::int64_t rows_axis[] = {1}, all[] = {0, 1}, swap[] = {1, 0};
    const auto same = [](const tensor& p, const tensor& q) {
        return p.shape().size() == q.shape().size() && p.size() == q.size() &&
               std::memcmp(p.data(), q.data(), p.size() * size_of(p.type())) == 0;
    };
    for (const std::size_t permits : {1, 2}) {
        INFO("permits " << permits);
        std::stop_source never;
        session_fixture plain(permits), stoppable(permits, never.get_token());
        backend_session& p = plain.session;
        backend_session& s = stoppable.session;
        CHECK(same(p.add(x, y), s.add(x, y)));
        CHECK(same(p.exp(x), s.exp(x)));
        CHECK(same(p.tanh(x), s.tanh(x)));
        CHECK(same(p.reduce_sum(x, all), s.reduce_sum(x, all)));
        CHECK(same(p.reduce_max(x, rows_axis), s.reduce_max(x, rows_axis)));
        CHECK(same(p.vdot(x, y), s.vdot(x, y)));
        CHECK(same(p.softmax(x, -1), s.softmax(x, -1)));
        CHECK(same(p.top_k(x, 7, -1).first, s.top_k(x, 7, -1).first));
        CHECK(same(p.top_k(x, 7, -1).second, s.top_k(x, 7, -1).second));
        CHECK(same(p.transpose(x, swap), s.transpose(x, swap)));
        CHECK(same(p.cast(x, dtype::f64), s.cast(x, dtype::f64)));
        CHECK(same(p.matmul(x, w), s.matmul(x, w)));
        CHECK(same(p.matmul_top_k(x, w, 5).second, s.matmul_top_k(x, w, 5).second));
        CHECK(same(p.concatenate({x.view(), y.view()}, 0), s.concatenate({x.view(), y.view()}, 0)));
        CHECK_FALSE(s.stop_requested());
    }
}
