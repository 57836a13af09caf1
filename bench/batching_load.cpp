// The single-client and open-loop loads of the batching benchmark
// (batching_load.hpp).

#include "batching_load.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <random>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include "http_client.hpp"
#include "load_generator.hpp"

using clock_type = std::chrono::steady_clock;
using embedding_search::http_client;
using embedding_search::http_reply;

namespace batching_bench {

double samples::quantile(double q, bool* lower_bound) const {
    if (lower_bound) *lower_bound = false;
    std::vector<double> all = ms;
    all.insert(all.end(), censored_ms.begin(), censored_ms.end());
    if (all.empty()) return 0.0;
    std::sort(all.begin(), all.end());
    const std::size_t rank = std::size_t(std::ceil(q * double(all.size())));
    const double v = all[std::min(all.size() - 1, rank == 0 ? 0 : rank - 1)];
    if (lower_bound && !censored_ms.empty() && *std::min_element(censored_ms.begin(), censored_ms.end()) <= v) {
        *lower_bound = true;
    }
    return v;
}

void samples::append(const samples& other) {
    ms.insert(ms.end(), other.ms.begin(), other.ms.end());
    censored_ms.insert(censored_ms.end(), other.censored_ms.begin(), other.censored_ms.end());
}

namespace {

double ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

void note_error(run_stats& s, std::string what) {
    ++s.errors;
    if (s.error_samples.size() < 5) s.error_samples.push_back(std::move(what));
}

/// Classifies one reply; true for a well-formed 200.
bool account(run_stats& s, const http_reply& reply, std::int64_t expected) {
    if (reply.status == 200) {
        if (embedding_search::valid_search_response(reply.body, expected)) {
            ++s.ok;
            return true;
        }
        note_error(s, "malformed 200 body: " + reply.body.substr(0, 200));
    } else if (reply.status == 503) {
        ++s.shed;
    } else {
        note_error(s, "status " + std::to_string(reply.status) + ": " + reply.body.substr(0, 200));
    }
    return false;
}

asio::awaitable<void> single_client(const closed_loop_options& o, run_stats& s) {
    http_client client(co_await asio::this_coro::executor);
    co_await client.connect(o.host, o.port);
    std::size_t next = o.first_request;
    const auto start = clock_type::now();
    const auto deadline = start + std::chrono::duration_cast<clock_type::duration>(o.duration);
    auto last = start;
    while (last < deadline) {
        try {
            if (!client.is_open()) co_await client.connect(o.host, o.port);
            const std::string& request = o.requests[next++ % o.requests.size()];
            const auto sent = clock_type::now();
            const http_reply reply = co_await client.roundtrip(request);
            last = clock_type::now();
            if (account(s, reply, o.expected_results)) s.latency.ms.push_back(ms_between(sent, last));
            if (!reply.keep_alive) client.close();
        } catch (const std::exception& e) {
            last = clock_type::now();
            note_error(s, std::string("connection: ") + e.what());
            client.close();
        }
    }
    s.seconds = std::chrono::duration<double>(last - start).count();
}

struct open_state {
    const open_loop_options& options;
    std::vector<clock_type::time_point> arrivals;
    std::size_t next = 0;  // single-threaded: every coroutine runs on the one io_context thread
    clock_type::time_point start, window_end, last_answer;
    std::vector<std::unique_ptr<http_client>> clients;
    run_stats stats;
};

asio::awaitable<void> open_worker(open_state& st, http_client& client, std::size_t id) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
        if (st.next >= st.arrivals.size() || clock_type::now() >= st.window_end) break;
        const std::size_t j = st.next++;
        const auto at = st.arrivals[j];
        if (at > clock_type::now()) {
            timer.expires_at(at);
            std::error_code ignored;
            co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
        }
        try {
            if (!client.is_open()) co_await client.connect(st.options.host, st.options.port);
            const std::string& request = st.options.requests[(j + id) % st.options.requests.size()];
            const http_reply reply = co_await client.roundtrip(request);
            const auto now = clock_type::now();
            st.last_answer = std::max(st.last_answer, now);
            if (account(st.stats, reply, st.options.expected_results))
                st.stats.latency.ms.push_back(ms_between(at, now));
            if (!reply.keep_alive) client.close();
        } catch (const std::exception& e) {
            st.last_answer = std::max(st.last_answer, clock_type::now());
            note_error(st.stats, std::string("connection: ") + e.what());
            client.close();
        }
    }
}

asio::awaitable<void> open_loop(open_state& st) {
    const auto ex = co_await asio::this_coro::executor;
    // Connections first, so that their set-up is not charged to the first arrivals.
    for (std::size_t i = 0; i < st.options.connections; ++i) {
        st.clients.push_back(std::make_unique<http_client>(ex));
        co_await st.clients.back()->connect(st.options.host, st.options.port);
    }
    std::mt19937_64 rng(st.options.seed);
    std::exponential_distribution<double> gap(st.options.rate_per_s);
    st.start = clock_type::now() + std::chrono::milliseconds(5);
    st.window_end = st.start + std::chrono::duration_cast<clock_type::duration>(st.options.duration);
    st.last_answer = st.start;
    double t = gap(rng);
    while (t < st.options.duration.count()) {
        st.arrivals.push_back(st.start +
                              std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(t)));
        t += gap(rng);
    }
    for (std::size_t i = 0; i < st.clients.size(); ++i) {
        asio::co_spawn(ex, open_worker(st, *st.clients[i], i), asio::detached);
    }
}

}  // namespace

run_stats run_single_client(const closed_loop_options& options) {
    asio::io_context io(1);
    run_stats s;
    asio::co_spawn(io, single_client(options, s), [&](std::exception_ptr e) {
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (const std::exception& x) {
                note_error(s, std::string("connect: ") + x.what());
            }
        }
    });
    io.run();
    return s;
}

run_stats run_open_loop(const open_loop_options& options) {
    asio::io_context io(1);
    open_state st{options, {}, 0, {}, {}, {}, {}, {}};
    asio::co_spawn(io, open_loop(st), [&](std::exception_ptr e) {
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (const std::exception& x) {
                note_error(st.stats, std::string("connect: ") + x.what());
            }
        }
    });
    io.run();
    // Arrivals no connection took before the window closed: they waited at
    // least until then.
    for (std::size_t j = st.next; j < st.arrivals.size(); ++j) {
        st.stats.latency.censored_ms.push_back(std::max(0.0, ms_between(st.arrivals[j], st.window_end)));
    }
    st.stats.seconds = std::chrono::duration<double>(st.last_answer - st.start).count();
    for (auto& c : st.clients) c->close();
    return std::move(st.stats);
}

}  // namespace batching_bench
