// The embedding-search server and clients that leave (issue 46, item 7): a
// connection closed while its query waits or runs cancels the query (it leaves
// the queue; a batch whose every query is gone stops inside its matmul, B7),
// counted in /metrics, no permit kept; bytes a client pipelines meanwhile are
// kept; a half-close counts as gone; `notice_closed = false` keeps the old
// behaviour. Every step waits on the server's own counters or on a batch body
// held still by the test (engine_options::on_batch_start), never on a sleep.
// The patience policy (patience.hpp) is tested on given values and, through
// the server, on the engine's injected clock (engine_options::clock).
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <tenferro/tenferro.hpp>

#include "http_client.hpp"
#include "http_server.hpp"
#include "patience.hpp"
#include "search_engine.hpp"

#include "../support/embedding_search_fixture.hpp"

namespace tf = tenferro;
using namespace embedding_search;
using namespace embedding_search::testing;
using namespace std::chrono_literals;
using asio::ip::tcp;

namespace {

/// A blocking client on the test's own thread: what it sends, when it closes
/// and how (a full close, or a shutdown of its sending side) are the test's.
class raw_client {
public:
    explicit raw_client(std::uint16_t port) : socket_(io_) {
        socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        socket_.set_option(tcp::no_delay(true));
        // A test that goes wrong fails on a timeout instead of hanging.
        timeval limit{10, 0};
        setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    }
    void send(std::string_view bytes) { asio::write(socket_, asio::buffer(bytes.data(), bytes.size())); }
    void close() { socket_.close(); }
    void shutdown_send() { socket_.shutdown(tcp::socket::shutdown_send); }

    /// The next response's status and body (the server always sends Content-Length).
    std::pair<int, std::string> receive() {
        std::size_t head_end;
        while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) read_more();
        const int status = std::atoi(buffer_.c_str() + 9);
        const std::size_t cl = buffer_.find("Content-Length: ");
        const std::size_t length = cl < head_end ? std::size_t(std::atoll(buffer_.c_str() + cl + 16)) : 0;
        while (buffer_.size() < head_end + 4 + length) read_more();
        std::string body = buffer_.substr(head_end + 4, length);
        buffer_.erase(0, head_end + 4 + length);
        return {status, body};
    }
    /// True when the server ends the stream without sending anything more.
    bool closed_without_answer() {
        char c;
        std::error_code ec;
        const std::size_t n = socket_.read_some(asio::buffer(&c, 1), ec);
        return n == 0 && buffer_.empty() && (ec == asio::error::eof || ec == asio::error::connection_reset);
    }

private:
    void read_more() {
        char chunk[4096];
        const std::size_t n = socket_.read_some(asio::buffer(chunk));
        buffer_.append(chunk, n);
    }

    asio::io_context io_;
    tcp::socket socket_;
    std::string buffer_;
};

/// A batch body held still by the test: the first batch waits in
/// on_batch_start until the test lets it go or its session is asked to stop.
struct batch_gate {
    std::atomic<int> batches{0};
    std::atomic<bool> entered{false}, go{false}, stop_seen{false};

    std::function<void(tf::backend_session&)> hook() {
        return [this](tf::backend_session& s) {
            if (batches.fetch_add(1) != 0) return;  // only the first batch is held
            entered = true;
            const auto until = std::chrono::steady_clock::now() + 10s;
            while (!go && !s.stop_requested() && std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(1ms);
            stop_seen = s.stop_requested();
        };
    }
};

bool contains(const std::string& text, std::string_view what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("a client that closes while its query waits: the query leaves the queue, no permit is kept",
          "[embedding_search][abandon]") {
    server_fixture f({}, 1, 1000, 8);
    const std::vector<float> q = query_near_row(test_corpus(), 321, 0.3, 4);
    permit_holder hold(f.cpu);

    raw_client c(f.server.port());
    c.send(search_request(q, 5));
    REQUIRE(eventually([&] { return f.engine.snapshot().batcher.waiting == 1; }));
    c.close();
    const bool noticed =
        eventually([&] { return f.engine.snapshot().abandoned_waiting == 1 && f.server.snapshot().abandoned == 1; });
    const engine_snapshot gone = f.engine.snapshot();
    hold.release();
    REQUIRE(noticed);
    CHECK(gone.batcher.waiting == 0);
    CHECK(gone.batcher.cancelled == 1);  // B4: removed, answered `cancelled`
    CHECK(gone.clients_gone == 1);
    CHECK(gone.abandoned_taken == 0);

    // The batch session queued for it finds no query: it runs no body and
    // gives its permit back.
    CHECK(eventually([&] { return f.cpu.stats().available == f.cpu.permits() && f.cpu.stats().waiting == 0; }));
    CHECK(f.engine.snapshot().sessions == 0);
    CHECK(f.engine.snapshot().batched_queries == 0);
    // Nothing was written for it.
    for (const auto& [status, n] : f.server.snapshot().responses) CHECK(status != 499);

    // The server serves on, and /metrics says what happened.
    const http_reply again = f.call(search_request(q, 5));
    CHECK(again.status == 200);
    CHECK(hits_of(again.body).at(0).id == 321);
    const std::string metrics = f.call(make_request("GET", "/metrics")).body;
    CHECK(contains(metrics, "tenferro_search_abandoned_total{stage=\"waiting\"} 1\n"));
    CHECK(contains(metrics, "tenferro_search_abandoned_total{stage=\"taken\"} 0\n"));
    CHECK(contains(metrics, "tenferro_search_stopped_batches_total 0\n"));
    CHECK(contains(metrics, "tenferro_http_abandoned_total 1\n"));
    CHECK(f.cpu.stats().available == f.cpu.permits());
}

TEST_CASE("a batch whose every client closed stops inside its body (B7)", "[embedding_search][abandon]") {
    batch_gate gate;
    server_fixture f({}, 2, 1000, 8, false, gate.hook());
    const tf::tensor& corpus = test_corpus();
    permit_holder hold(f.cpu);

    raw_client a(f.server.port()), b(f.server.port());
    a.send(search_request(query_near_row(corpus, 10, 0.3, 1), 3));
    b.send(search_request(query_near_row(corpus, 20, 0.3, 2), 3));
    REQUIRE(eventually([&] { return f.engine.snapshot().batcher.waiting == 2; }));
    hold.release();
    REQUIRE(eventually([&] { return gate.entered.load(); }));  // both taken, the body held

    a.close();
    REQUIRE(eventually([&] { return f.engine.snapshot().clients_gone == 1; }));
    b.close();
    // The last one gone: the batcher asks the session to stop, the held body
    // sees it, and the matmul after it throws session_stopped at its start.
    const bool stopped = eventually([&] { return f.engine.snapshot().stopped_batches == 1; });
    const bool both = eventually([&] { return f.engine.snapshot().abandoned_taken == 2; });
    REQUIRE(stopped);
    CHECK(both);
    CHECK(gate.stop_seen);
    const engine_snapshot s = f.engine.snapshot();
    CHECK(s.stopped_queries == 2);
    CHECK(s.batched_queries == 0);  // never computed
    CHECK(s.abandoned_waiting == 0);
    CHECK(s.batcher.cancelled == 2);  // B7: the items complete `cancelled`
    CHECK(eventually([&] { return f.server.snapshot().abandoned == 2; }));
    CHECK(eventually([&] { return f.cpu.stats().available == f.cpu.permits(); }));
    CHECK(f.cpu.stats().stopped == 1);

    const std::string metrics = f.call(make_request("GET", "/metrics")).body;
    CHECK(contains(metrics, "tenferro_search_stopped_batches_total 1\n"));
    CHECK(contains(metrics, "tenferro_search_abandoned_total{stage=\"taken\"} 2\n"));
    CHECK(contains(metrics, "tenferro_admission_stopped_total{host=\"cpu\"} 1\n"));
    // The next batch computes as usual.
    CHECK(hits_of(f.call(search_request(query_near_row(corpus, 30, 0.3, 3), 3)).body).at(0).id == 30);
}

TEST_CASE("a batch with one client still waiting runs on, and answers it", "[embedding_search][abandon]") {
    batch_gate gate;
    server_fixture f({}, 2, 1000, 8, false, gate.hook());
    const tf::tensor& corpus = test_corpus();
    permit_holder hold(f.cpu);

    raw_client a(f.server.port()), b(f.server.port());
    a.send(search_request(query_near_row(corpus, 10, 0.3, 1), 3));
    b.send(search_request(query_near_row(corpus, 20, 0.3, 2), 3));
    REQUIRE(eventually([&] { return f.engine.snapshot().batcher.waiting == 2; }));
    hold.release();
    REQUIRE(eventually([&] { return gate.entered.load(); }));
    a.close();
    REQUIRE(eventually([&] { return f.engine.snapshot().clients_gone == 1; }));
    gate.go = true;

    const auto [status, body] = b.receive();
    CHECK(status == 200);
    CHECK(hits_of(body).at(0).id == 20);
    CHECK_FALSE(gate.stop_seen);
    CHECK(eventually([&] { return f.engine.snapshot().abandoned_taken == 1; }));
    const engine_snapshot s = f.engine.snapshot();
    CHECK(s.stopped_batches == 0);
    CHECK(s.batched_queries == 2);  // the one that left was computed with its batch
    CHECK(f.server.snapshot().abandoned == 1);
    CHECK(f.cpu.stats().stopped == 0);
}

TEST_CASE("bytes pipelined while a query waits are kept for the next requests", "[embedding_search][abandon]") {
    server_fixture f({}, 1, 1000, 8);
    const tf::tensor& corpus = test_corpus();
    permit_holder hold(f.cpu);

    raw_client c(f.server.port());
    c.send(search_request(query_near_row(corpus, 77, 0.2, 5), 1));
    REQUIRE(eventually([&] { return f.engine.snapshot().batcher.waiting == 1; }));
    // Two more requests, the second split across writes, while the first waits:
    // the watch reads them, and they must still be answered, in order.
    const std::string more = make_request("GET", "/healthz") + search_request(query_near_row(corpus, 88, 0.2, 5), 1);
    c.send(more.substr(0, more.size() / 2));
    std::this_thread::sleep_for(20ms);  // (only to make a separate read likely; the outcome does not depend on it)
    c.send(more.substr(more.size() / 2));
    hold.release();

    const auto [s1, b1] = c.receive();
    const auto [s2, b2] = c.receive();
    const auto [s3, b3] = c.receive();
    CHECK(s1 == 200);
    CHECK(hits_of(b1).at(0).id == 77);
    CHECK(s2 == 200);
    CHECK(b2 == "{\"status\":\"ok\"}\n");
    CHECK(s3 == 200);
    CHECK(hits_of(b3).at(0).id == 88);
    const server_snapshot s = f.server.snapshot();
    CHECK(s.abandoned == 0);
    CHECK(s.requests == 3);
    CHECK(s.keepalive_reused == 2);
    CHECK(f.engine.snapshot().clients_gone == 0);

    // Then a full close while idle is an ordinary end of a keep-alive connection.
    c.close();
    CHECK(eventually([&] { return f.server.snapshot().connections_open == 0; }));
    CHECK(f.server.snapshot().abandoned == 0);
}

TEST_CASE("a client that shuts down its sending side while its query waits is taken as gone",
          "[embedding_search][abandon]") {
    server_fixture f({}, 1, 1000, 8);
    permit_holder hold(f.cpu);

    raw_client c(f.server.port());
    c.send(search_request(query_near_row(test_corpus(), 5, 0.3, 9), 3));
    REQUIRE(eventually([&] { return f.engine.snapshot().batcher.waiting == 1; }));
    c.shutdown_send();
    // The end of its stream cannot be told apart from a full close without
    // writing to it: the query is cancelled and the connection closed unanswered.
    CHECK(c.closed_without_answer());
    hold.release();
    CHECK(f.engine.snapshot().abandoned_waiting == 1);
    CHECK(eventually([&] { return f.server.snapshot().abandoned == 1; }));
    CHECK(eventually([&] { return f.cpu.stats().available == f.cpu.permits(); }));
}

TEST_CASE("notice_closed = false: a query whose client left stays queued and is computed",
          "[embedding_search][abandon]") {
    server_options so;
    so.notice_closed = false;
    server_fixture f(so, 1, 1000, 8);
    permit_holder hold(f.cpu);

    raw_client c(f.server.port());
    c.send(search_request(query_near_row(test_corpus(), 5, 0.3, 9), 3));
    REQUIRE(eventually([&] { return f.engine.snapshot().batcher.waiting == 1; }));
    c.close();
    // (Nothing to wait for: nothing happens. A server that noticed would within a millisecond.)
    std::this_thread::sleep_for(50ms);
    CHECK(f.engine.snapshot().batcher.waiting == 1);
    hold.release();
    CHECK(eventually([&] { return f.engine.snapshot().batched_queries == 1; }));
    CHECK(eventually([&] { return f.server.snapshot().connections_open == 0; }));
    const engine_snapshot s = f.engine.snapshot();
    CHECK(s.clients_gone == 0);
    CHECK(s.abandoned_waiting + s.abandoned_taken == 0);
    CHECK(f.server.snapshot().abandoned == 0);
}

TEST_CASE("patience: the estimate is a low quantile of the recent close ages", "[embedding_search][patience]") {
    patience_options o;
    o.min_samples = 4;
    o.window = 8;
    o.quantile = 0.25;
    patience_estimator p(o);
    const patience_estimator::time_point t{};
    for (const double age : {0.05, 0.06, 0.04}) p.record_close(age, t);
    CHECK_FALSE(p.estimate(t).has_value());  // fewer than min_samples
    p.record_close(0.07, t);
    REQUIRE(p.estimate(t).has_value());
    // {0.04, 0.05, 0.06, 0.07}: the 0.25 quantile is the second (index round(0.75) = 1).
    CHECK(*p.estimate(t) == Approx(0.05));
    p.record_close(-1.0, t);  // not an age: ignored
    CHECK(p.samples() == 4);
    // The window forgets: eight ages of 0.2 s replace the old ones.
    for (int i = 0; i < 8; ++i) p.record_close(0.2, t);
    CHECK(*p.estimate(t) == Approx(0.2));
    CHECK(p.samples() == 12);
}

TEST_CASE("patience: close ages shorter than a one-query batch do not teach the patience",
          "[embedding_search][patience]") {
    patience_options o;
    o.min_samples = 4;
    patience_estimator p(o);
    const patience_estimator::time_point t{};
    // 17 clients wait 50-66 ms; 3 (15 %) close at once.
    for (int i = 0; i < 17; ++i) p.record_close(0.050 + 0.001 * i, t);
    for (const double age : {0.0, 0.0001, 0.0002}) p.record_close(age, t);
    // All counted, the 0.1 quantile is one of the instant closes.
    CHECK(*p.estimate(t) == Approx(0.0002));
    // Left out below a one-query batch of 1 ms: the clients that waited decide.
    CHECK(*p.estimate(t, 0.001) == Approx(0.052));
    // Too few ages count: no estimate.
    patience_estimator q(o);
    for (const double age : {0.0, 0.0001, 0.0002, 0.05}) q.record_close(age, t);
    CHECK(q.estimate(t).has_value());
    CHECK_FALSE(q.estimate(t, 0.001).has_value());
}

TEST_CASE("patience: delivered ages hold the estimate up; ages older than 30 s are forgotten",
          "[embedding_search][patience]") {
    patience_options o;
    o.min_samples = 4;
    o.quantile = 0.25;
    patience_estimator p(o);
    const patience_estimator::time_point t0{};
    // Clients closed at 10-40 ms under a past load: the estimate is 20 ms.
    for (const double age : {0.01, 0.02, 0.03, 0.04}) p.record_close(age, t0);
    CHECK(*p.estimate(t0) == Approx(0.02));
    // Shedding works now, no one closes; answers go out at 50-80 ms: those
    // clients waited at least that long, and the estimate follows them.
    for (const double age : {0.05, 0.06, 0.07}) p.record_delivered(age, t0 + 1s);
    CHECK(*p.estimate(t0 + 1s) == Approx(0.02));  // three delivered: too few yet
    p.record_delivered(0.08, t0 + 1s);
    CHECK(*p.estimate(t0 + 1s) == Approx(0.06));
    // Delivered ages alone make no estimate: no client leaves, nothing to shed.
    patience_estimator q(o);
    for (const double age : {0.05, 0.06, 0.07, 0.08}) q.record_delivered(age, t0);
    CHECK_FALSE(q.estimate(t0).has_value());
    // Delivered ages below the close quantile do not lower it.
    for (int i = 0; i < 4; ++i) p.record_delivered(0.001, t0 + 2s);
    CHECK(*p.estimate(t0 + 2s) == Approx(0.02));

    // 30 s later the close ages of t0 are forgotten: no estimate until
    // clients leave again.
    CHECK(p.estimate(t0 + 30s).has_value());
    CHECK_FALSE(p.estimate(t0 + 31s).has_value());
    for (const double age : {0.1, 0.2, 0.3, 0.4}) p.record_close(age, t0 + 31s);
    // (the delivered ages of t0 + 1 s and 2 s are still within 30 s, all below 0.2)
    CHECK(*p.estimate(t0 + 31s) == Approx(0.2));
}

TEST_CASE("patience: the batch cost model fits fixed + per-query time", "[embedding_search][patience]") {
    batch_cost_model m;
    CHECK_FALSE(m.predict(10).has_value());
    // Alike sizes: proportional.
    m.record(100, 0.02);
    m.record(100, 0.02);
    CHECK(m.current().fixed_seconds == 0.0);
    CHECK(*m.predict(50) == Approx(0.01));
    // Sizes that spread: 2 ms + 0.1 ms per query.
    batch_cost_model f;
    for (const std::size_t n : {10, 50, 200, 30, 120}) f.record(n, 0.002 + 0.0001 * double(n));
    const batch_cost_model::fit fit = f.current();
    CHECK(fit.fixed_seconds == Approx(0.002).margin(1e-9));
    CHECK(fit.per_query_seconds == Approx(0.0001).margin(1e-12));
    CHECK(*f.predict(256) == Approx(0.002 + 0.0256));
}

TEST_CASE("patience: a batch keeps the queries with the most time left that can finish in it",
          "[embedding_search][patience]") {
    const auto cost = [](std::size_t n) { return 0.1 * double(n); };
    // Oldest first: time left 0.01 ... 0.5 s.
    const std::vector<double> left = {0.01, 0.05, 0.2, 0.3, 0.5};
    // Two fit (0.3 >= 0.2); three do not (0.2 < 0.3): the two youngest.
    CHECK(plan_patient_batch(left, cost, 1.0, 0.0) == std::vector<bool>{false, false, false, true, true});
    // A margin makes it stricter: 0.3 < 1.6 x 0.2.
    CHECK(plan_patient_batch(left, cost, 1.6, 0.0) == std::vector<bool>{false, false, false, false, true});
    // Order does not matter, only time left.
    const std::vector<double> mixed = {0.5, 0.01, 0.3, 0.2, 0.05};
    CHECK(plan_patient_batch(mixed, cost, 1.0, 0.0) == std::vector<bool>{true, false, true, false, false});
    // Nothing fits: the one with the most time left is still computed.
    const std::vector<double> late = {0.0, 0.02, 0.01};
    CHECK(plan_patient_batch(late, cost, 1.0, 0.0) == std::vector<bool>{false, true, false});
    // Everything fits.
    const std::vector<double> early = {5.0, 6.0, 7.0};
    CHECK(plan_patient_batch(early, cost, 1.0, 0.0) == std::vector<bool>{true, true, true});
    CHECK(plan_patient_batch(std::vector<double>{}, cost, 1.0, 0.0).empty());
}

TEST_CASE("patience: a query with its own deadline is judged by that deadline only", "[embedding_search][patience]") {
    // Learned patience 10 s, reserve 0.3: a query without a deadline, 2 s
    // old, has 10 - 2 - 3 = 5 s.
    CHECK(patient_time_left(2.0, std::nullopt, 10.0, 0.3) == Approx(5.0));
    // Its own deadline, 7 s away, decides, though the learned patience would
    // give it only 5 s (and 0.5 s at 6.5 s old); no reserve is taken off.
    CHECK(patient_time_left(2.0, 7.0, 10.0, 0.3) == Approx(7.0));
    CHECK(patient_time_left(6.5, 7.0, 10.0, 0.3) == Approx(7.0));
    // A deadline shorter than the patience decides too.
    CHECK(patient_time_left(0.0, 1.0, 10.0, 0.3) == Approx(1.0));

    // In a batch: the old query with a far deadline is kept, the one of the
    // same age without a deadline is not (a batch of n takes n seconds).
    const auto cost = [](std::size_t n) { return 1.0 * double(n); };
    const std::vector<double> left = {patient_time_left(6.5, 7.0, 10.0, 0.3),
                                      patient_time_left(6.5, std::nullopt, 10.0, 0.3),
                                      patient_time_left(0.0, std::nullopt, 10.0, 0.3)};
    CHECK(plan_patient_batch(left, cost, 1.1, 0.0) == std::vector<bool>{true, false, true});
}

TEST_CASE("patience: on in the server's mode, off with --no-patience and inline", "[embedding_search][patience]") {
    server_mode mode;
    CHECK(engine_options_for(mode).patience.enabled);
    mode.patience = false;
    CHECK_FALSE(engine_options_for(mode).patience.enabled);
    server_mode inline_mode;
    inline_mode.inline_compute = true;
    CHECK_FALSE(engine_options_for(inline_mode).patience.enabled);
    CHECK_FALSE(engine_options{}.patience.enabled);  // an engine built directly: off
}

TEST_CASE("patience: learned from clients that leave; a batch sheds, at once, the query that cannot finish in time",
          "[embedding_search][patience]") {
    // The engine's clock is the test's: ages and the batch's start are exact.
    struct virtual_clock {
        const clock_type::time_point base = clock_type::now();
        std::atomic<std::int64_t> ms{0};
        clock_type::time_point now() const { return base + std::chrono::milliseconds(ms.load()); }
    } clock;
    std::atomic<int> batches{0};
    // `held`: the first batch body is inside the hook (set on entry, cleared
    // as it leaves, whether let go, stopped or timed out).
    std::atomic<bool> entered{false}, held{false}, go{false};

    tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 2, .max_waiters = 1000});
    engine_options eo;
    eo.max_batch = 8;
    eo.max_waiting = 1000;
    eo.patience.enabled = true;
    eo.patience.min_samples = 4;
    eo.patience.per_query_cost_seconds = 1.0;  // a batch of n takes n seconds (margin 1.1, reserve 0.3)
    eo.clock = [&clock] { return clock.now(); };
    // The first batch body is held after the policy chose, before its matmul,
    // for at most 2 s: a policy that answers A only with its batch fails in
    // about that time, not on the client's 10 s receive timeout.
    eo.on_batch_start = [&](tf::backend_session& s) {
        if (batches.fetch_add(1) != 0) return;
        held = true;
        entered = true;
        const auto until = std::chrono::steady_clock::now() + 2s;
        while (!go && !s.stop_requested() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
        held = false;
    };
    search_engine engine(cpu, test_corpus(), eo);
    server_options so;
    so.port = 0;
    search_server server(engine, so);
    server.start();
    const tf::tensor& corpus = test_corpus();
    permit_holder hold(cpu);

    // Four clients send at t = 0 and leave at t = 10 s, their queries still
    // waiting: the patience learned is 10 s.
    std::vector<std::unique_ptr<raw_client>> leavers;
    for (int i = 0; i < 4; ++i) {
        leavers.push_back(std::make_unique<raw_client>(server.port()));
        leavers.back()->send(search_request(query_near_row(corpus, 100 + i, 0.3, 10 + i), 3));
    }
    REQUIRE(eventually([&] { return engine.snapshot().batcher.waiting == 4; }));
    CHECK(engine.snapshot().patience_seconds == 0.0);  // not known yet
    clock.ms = 10'000;
    for (auto& c : leavers) c->close();
    REQUIRE(eventually([&] { return engine.snapshot().patience_samples == 4; }));
    CHECK(engine.snapshot().patience_seconds == Approx(10.0));
    REQUIRE(eventually([&] { return engine.snapshot().batcher.waiting == 0; }));

    // A arrives at t = 10 s, B at 16 s, C at 18 s; their batch starts at
    // 19 s: time left 1, 7 and 9 s. Two need 2 x 1.1 + 0.3 x 10 = 5.2 s: B
    // and C fit (7 s); three would need 6.3 s, more than A's 1 s.
    raw_client a(server.port()), b(server.port()), c(server.port());
    a.send(search_request(query_near_row(corpus, 10, 0.3, 1), 3));
    REQUIRE(eventually([&] { return engine.snapshot().batcher.waiting == 1; }));
    clock.ms = 16'000;
    b.send(search_request(query_near_row(corpus, 20, 0.3, 2), 3));
    REQUIRE(eventually([&] { return engine.snapshot().batcher.waiting == 2; }));
    clock.ms = 18'000;
    c.send(search_request(query_near_row(corpus, 30, 0.3, 3), 3));
    REQUIRE(eventually([&] { return engine.snapshot().batcher.waiting == 3; }));
    clock.ms = 19'000;
    hold.release();
    REQUIRE(eventually([&] { return entered.load(); }));

    // A's 503 comes while the batch is still held: at once, not with the batch
    // (nothing of it computed yet).
    const auto [status_a, body_a] = a.receive();
    const bool held_at_a = held.load();
    const std::uint64_t computed_at_a = engine.snapshot().batched_queries;
    CHECK(status_a == 503);
    CHECK(contains(body_a, "before its client would give up"));
    CHECK(held_at_a);
    CHECK(computed_at_a == 0);
    go = true;
    const auto [status_b, body_b] = b.receive();
    const auto [status_c, body_c] = c.receive();
    CHECK(status_b == 200);
    CHECK(hits_of(body_b).at(0).id == 20);
    CHECK(status_c == 200);
    CHECK(hits_of(body_c).at(0).id == 30);

    const engine_snapshot s = engine.snapshot();
    CHECK(s.patience_enabled);
    CHECK(s.patience_shed == 1);
    CHECK(s.batched_queries == 2);  // A was not computed
    CHECK(s.stopped_batches == 0);
    CHECK(s.abandoned_waiting == 4);
    CHECK(s.abandoned_taken == 0);

    // A's connection is kept: its next query, young, is computed.
    a.send(search_request(query_near_row(corpus, 40, 0.3, 4), 3));
    const auto [status_a2, body_a2] = a.receive();
    CHECK(status_a2 == 200);
    CHECK(hits_of(body_a2).at(0).id == 40);

    const std::string metrics =
        run_blocking(server_fixture::roundtrip(server.port(), make_request("GET", "/metrics"))).body;
    CHECK(contains(metrics, "tenferro_search_patience_enabled 1\n"));
    CHECK(contains(metrics, "tenferro_search_patience_shed_total 1\n"));
    CHECK(contains(metrics, "tenferro_search_patience_seconds 10\n"));
    CHECK(contains(metrics, "tenferro_search_patience_close_ages_total 4\n"));
    CHECK(contains(metrics, "tenferro_search_batch_cost_seconds{term=\"per_query\"}"));
    const std::string stats =
        run_blocking(server_fixture::roundtrip(server.port(), make_request("GET", "/v1/stats"))).body;
    CHECK(contains(stats, "\"patience\":{\"enabled\":true,\"shed\":1,"));
    server.drain();
    server.wait();
}
