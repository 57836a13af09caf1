#include "load_generator.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>

#include <simdjson.h>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "http_client.hpp"

using clock_type = std::chrono::steady_clock;

namespace embedding_search {

namespace {

struct load_state {
    explicit load_state(const load_options& o) : options(o) {}

    const load_options& options;
    bool stop = false;  // single-threaded: every coroutine runs on the one io_context thread
    std::size_t running = 0;
    load_result result;
    latency_histogram latency, healthz;
    std::vector<std::unique_ptr<latency_histogram>> tenant_latency;  // by tenant
    clock_type::time_point last_answer;

    void error(std::string what) {
        ++result.errors;
        if (result.error_samples.size() < 5) result.error_samples.push_back(std::move(what));
    }
};

/// `tenant`: an index into result.tenants, or none (no tenants).
asio::awaitable<void> search_worker(load_state& st, std::size_t id, const std::vector<std::string>& requests,
                                    std::size_t tenant) {
    http_client client(co_await asio::this_coro::executor);
    tenant_load* mine = tenant < st.result.tenants.size() ? &st.result.tenants[tenant] : nullptr;
    std::size_t next = id;
    while (!st.stop) {
        try {
            if (!client.is_open()) {
                co_await client.connect(st.options.host, st.options.port);
                ++st.result.connects;
            }
            const std::string& request = requests[next++ % requests.size()];
            const auto sent = clock_type::now();
            const http_reply reply = co_await client.roundtrip(request);
            st.last_answer = clock_type::now();
            if (reply.status == 200) {
                if (valid_search_response(reply.body, st.options.expected_results)) {
                    ++st.result.ok;
                    st.latency.record(st.last_answer - sent);
                    if (mine) {
                        ++mine->ok;
                        st.tenant_latency[tenant]->record(st.last_answer - sent);
                    }
                } else {
                    st.error("malformed 200 body: " + reply.body.substr(0, 200));
                    if (mine) ++mine->errors;
                }
            } else if (reply.status == 503) {
                ++st.result.shed;
                if (mine) ++mine->shed;
            } else {
                st.error("status " + std::to_string(reply.status) + ": " + reply.body.substr(0, 200));
                if (mine) ++mine->errors;
            }
            if (!reply.keep_alive) client.close();
        } catch (const std::exception& e) {
            st.error(std::string("connection: ") + e.what());
            if (mine) ++mine->errors;
            client.close();
        }
    }
    --st.running;
}

/// An impatient client: on its schedule, a search it gives up on after
/// client_timeout, closing the connection (the server is not told why) and
/// connecting again for the next one. Only answers read before the timeout
/// count; they are all in time.
asio::awaitable<void> impatient_worker(load_state& st, std::size_t id, const std::vector<std::string>& requests) {
    const auto ex = co_await asio::this_coro::executor;
    http_client client(ex);
    asio::steady_timer pace(ex), give_up(ex);
    const load_options& o = st.options;
    const auto interval = o.offered_per_second > 0
                              ? std::chrono::duration_cast<clock_type::duration>(
                                    std::chrono::duration<double>(double(o.connections) / o.offered_per_second))
                              : clock_type::duration::zero();
    // Staggered starts, so that the connections do not send in lockstep.
    auto next = clock_type::now() + interval * std::int64_t(id) / std::int64_t(std::max<std::size_t>(1, o.connections));
    std::size_t turn = id;
    // Shared with give_up's handler (on this thread), which may run after an
    // answer that came at the same moment, or after this frame is gone: it
    // acts only on the search it was set for.
    struct attempt_state {
        std::uint64_t attempt = 0;
        bool timed_out = false;
        http_client* client = nullptr;
    };
    const auto shared = std::make_shared<attempt_state>();
    shared->client = &client;
    while (!st.stop) {
        if (interval > clock_type::duration::zero()) {
            pace.expires_at(next);
            std::error_code ignored;
            co_await pace.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
            if (st.stop) break;
            // Behind schedule (the last search took longer): send now, without
            // a burst to catch up.
            next = std::max(next + interval, clock_type::now());
        }
        try {
            if (!client.is_open()) {
                co_await client.connect(o.host, o.port);
                ++st.result.connects;
            }
            const std::string& request = requests[turn++ % requests.size()];
            const auto sent = clock_type::now();
            ++st.result.sent;
            shared->timed_out = false;
            const std::uint64_t attempt = ++shared->attempt;
            give_up.expires_at(sent + o.client_timeout);
            give_up.async_wait([shared, attempt](std::error_code ec) {
                if (ec || shared->attempt != attempt || shared->client == nullptr) return;  // answered in time
                shared->timed_out = true;
                shared->client->close();  // a full close: the pending read ends with operation_aborted
            });
            const http_reply reply = co_await client.roundtrip(request);
            ++shared->attempt;  // its give_up, if already due, does nothing now
            give_up.cancel();
            st.last_answer = clock_type::now();
            if (shared->timed_out) {
                // Read in the same turn as the timeout fired: the client had
                // already closed the connection, so it counts as given up.
                ++st.result.gave_up;
                continue;
            }
            if (reply.status == 200 && valid_search_response(reply.body, o.expected_results)) {
                ++st.result.ok;
                st.latency.record(st.last_answer - sent);
            } else if (reply.status == 503) {
                ++st.result.shed;
            } else {
                st.error("status " + std::to_string(reply.status) + ": " + reply.body.substr(0, 200));
            }
            if (!reply.keep_alive) client.close();
        } catch (const std::exception& e) {
            ++shared->attempt;
            give_up.cancel();
            if (shared->timed_out) {
                ++st.result.gave_up;
            } else {
                st.error(std::string("connection: ") + e.what());
            }
            client.close();
        }
    }
    shared->client = nullptr;
    --st.running;
}

// One probe per interval on a fixed schedule. A probe that takes longer than
// the interval also stands for the probes that would have been sent meanwhile:
// they are recorded too, each with the latency it would have seen (HdrHistogram's
// "expected interval" correction), so a stalled server is charged for every
// probe it held up instead of for one (no coordinated omission).
asio::awaitable<void> healthz_probe(load_state& st) {
    http_client client(co_await asio::this_coro::executor);
    asio::steady_timer tick(co_await asio::this_coro::executor);
    const std::string request = make_request("GET", "/healthz");
    const auto interval = std::chrono::duration_cast<clock_type::duration>(st.options.healthz_interval);
    auto scheduled = clock_type::now();
    while (!st.stop) {
        try {
            if (!client.is_open()) co_await client.connect(st.options.host, st.options.port);
            const http_reply reply = co_await client.roundtrip(request);
            if (reply.status == 200) {
                const auto latency = clock_type::now() - scheduled;
                st.healthz.record(latency);
                for (auto missed = latency - interval; missed >= interval; missed -= interval)
                    st.healthz.record(missed);
            } else {
                ++st.result.healthz_errors;
            }
            if (!reply.keep_alive) client.close();
        } catch (const std::exception&) {
            ++st.result.healthz_errors;
            client.close();
        }
        const auto now = clock_type::now();
        do {
            scheduled += interval;
        } while (scheduled < now);
        tick.expires_at(scheduled);
        std::error_code ignored;
        co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
    --st.running;
}

asio::awaitable<void> conductor(load_state& st, clock_type::time_point start,
                                const std::function<void(const load_progress&)>& progress) {
    asio::steady_timer tick(co_await asio::this_coro::executor);
    const auto deadline = start + std::chrono::duration_cast<clock_type::duration>(st.options.duration);
    for (;;) {
        const auto now = clock_type::now();
        if (progress) {
            load_progress p;
            p.elapsed_seconds = std::chrono::duration<double>(now - start).count();
            p.duration_seconds = st.options.duration.count();
            p.ok = st.result.ok;
            p.shed = st.result.shed;
            p.errors = st.result.errors;
            progress(p);
        }
        if (now >= deadline) break;
        tick.expires_at(std::min(deadline, now + st.options.progress_interval));
        std::error_code ignored;
        co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
    st.stop = true;
}

}  // namespace

bool valid_search_response(std::string_view body, std::int64_t expected) {
    thread_local simdjson::dom::parser parser;
    simdjson::dom::array results;
    if (parser.parse(body.data(), body.size())["results"].get_array().get(results)) return false;
    std::int64_t n = 0;
    double previous = 2.0;
    for (const simdjson::dom::element hit : results) {
        std::uint64_t id = 0;
        double score = 0.0;
        if (hit["id"].get_uint64().get(id) || hit["score"].get_double().get(score)) return false;
        if (score > previous) return false;
        previous = score;
        ++n;
    }
    return n == expected;
}

load_result run_load(const load_options& options, const std::function<void(const load_progress&)>& progress) {
    asio::io_context io(1);
    load_state st{options};
    const auto start = clock_type::now();
    st.last_answer = start;
    if (options.client_timeout.count() > 0) {
        for (std::size_t i = 0; i < options.connections; ++i) {
            ++st.running;
            asio::co_spawn(io, impatient_worker(st, i, options.requests), asio::detached);
        }
    } else if (options.tenants.empty()) {
        for (std::size_t i = 0; i < options.connections; ++i) {
            ++st.running;
            asio::co_spawn(io, search_worker(st, i, options.requests, 0), asio::detached);
        }
    }
    // Interleaved (one connection of each tenant in turn) so that no tenant
    // gets a head start at the beginning of the run.
    std::size_t most = 0;
    for (const load_tenant& t : options.tenants) {
        tenant_load& added = st.result.tenants.emplace_back();
        added.name = t.name;
        added.connections = t.connections;
        st.tenant_latency.push_back(std::make_unique<latency_histogram>());
        most = std::max(most, t.connections);
    }
    for (std::size_t i = 0; i < most && options.client_timeout.count() == 0; ++i) {
        for (std::size_t t = 0; t < options.tenants.size(); ++t) {
            if (i >= options.tenants[t].connections || options.tenants[t].requests.empty()) continue;
            ++st.running;
            asio::co_spawn(io, search_worker(st, i, options.tenants[t].requests, t), asio::detached);
        }
    }
    if (options.healthz_interval.count() > 0) {
        ++st.running;
        asio::co_spawn(io, healthz_probe(st), asio::detached);
    }
    asio::co_spawn(io, conductor(st, start, progress), asio::detached);
    io.run();

    // Impatient clients: over the load's own duration (a last answer may come
    // well before its end, when all give up).
    st.result.seconds = std::chrono::duration<double>(options.client_timeout.count() > 0 ? clock_type::now() - start
                                                                                         : st.last_answer - start)
                            .count();
    st.result.latency = st.latency.snapshot();
    st.result.healthz = st.healthz.snapshot();
    for (std::size_t t = 0; t < st.result.tenants.size(); ++t)
        st.result.tenants[t].latency = st.tenant_latency[t]->snapshot();
    return std::move(st.result);
}

}  // namespace embedding_search
