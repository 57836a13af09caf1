// A Boost.Beast HTTP server whose handler co_awaits a tenferro compute session:
// tenferro built as the Boost.Asio flavour (-Dasio=boost, docs/boost-asio.md),
// so its API takes Boost.Asio's executors and tokens, and Beast's coroutines
// compose with it directly.
//
//   GET /sum?n=N   200 and the sum 0 + 1 + ... + (N-1), computed with
//                  parallel_for on the compute workers while the connection's
//                  coroutine waits (its I/O thread serves other connections);
//                  503 when admission turns the request away (queue full)
//
//   beast_session [--port P]   serve on 127.0.0.1:P (default 8080) until SIGINT
//   beast_session --self-test  serve on an ephemeral loopback port, send requests
//                              with a Beast client in the same process, check the
//                              replies (meson test beast_session)
#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include <tenferro/tenferro.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

static_assert(TENFERRO_ASIO_BOOST, "examples/beast_session needs tenferro's Boost.Asio flavour (-Dasio=boost)");

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

using response = http::response<http::string_body>;

response reply(http::status status, unsigned version, std::string body) {
    response res{status, version};
    res.set(http::field::content_type, "text/plain");
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
}

// The handler: parses n, runs one session on the compute workers, answers.
asio::awaitable<response> handle(tenferro::cpu_backend& cpu, const http::request<http::string_body>& req) {
    constexpr std::string_view prefix = "/sum?n=";
    const std::string_view target = req.target();
    std::int64_t n = -1;
    if (target.starts_with(prefix)) {
        const std::string_view digits = target.substr(prefix.size());
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
        if (ec != std::errc{} || end != digits.data() + digits.size()) n = -1;
    }
    if (req.method() != http::verb::get || n < 0 || n > (std::int64_t{1} << 32))
        co_return reply(http::status::bad_request, req.version(), "usage: GET /sum?n=N (0 <= N <= 2^32)\n");

    // co_await with Boost.Asio's use_awaitable (the default token): the
    // connection's coroutine resumes on its own executor with the result.
    tenferro::session_result<std::int64_t> r = co_await cpu.with_backend_session([n](tenferro::backend_session& s) {
        std::atomic<std::int64_t> total{0};
        s.parallel_for(n, 1 << 16, [&](std::int64_t b, std::int64_t e) {
            std::int64_t t = 0;
            for (std::int64_t i = b; i < e; ++i) t += i;
            total += t;
        });
        return total.load();
    });
    if (!r) co_return reply(http::status::service_unavailable, req.version(), r.error().message() + "\n");
    co_return reply(http::status::ok, req.version(), std::to_string(*r) + "\n");
}

asio::awaitable<void> serve_connection(tcp::socket socket, tenferro::cpu_backend& cpu) {
    boost::beast::flat_buffer buffer;
    for (;;) {
        http::request<http::string_body> req;
        boost::system::error_code ec;
        co_await http::async_read(socket, buffer, req, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;  // end_of_stream, or a malformed request: drop the connection
        response res = co_await handle(cpu, req);
        res.keep_alive(req.keep_alive());
        co_await http::async_write(socket, res, asio::redirect_error(asio::use_awaitable, ec));
        if (ec || !res.keep_alive()) break;
    }
    boost::system::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, tenferro::cpu_backend& cpu) {
    for (;;) {
        boost::system::error_code ec;
        tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
        if (ec == asio::error::operation_aborted) co_return;  // acceptor closed
        if (!ec) asio::co_spawn(acceptor.get_executor(), serve_connection(std::move(socket), cpu), asio::detached);
    }
}

// The self-test's client: one GET, the reply as "STATUS BODY".
asio::awaitable<std::string> fetch(tcp::endpoint server, std::string target) {
    tcp::socket socket(co_await asio::this_coro::executor);
    co_await socket.async_connect(server, asio::use_awaitable);
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.keep_alive(false);
    co_await http::async_write(socket, req, asio::use_awaitable);
    boost::beast::flat_buffer buffer;
    response res;
    co_await http::async_read(socket, buffer, res, asio::use_awaitable);
    co_return std::to_string(res.result_int()) + " " + res.body();
}

int self_test(asio::io_context& io, tcp::acceptor& acceptor) {
    int failures = 0;
    auto expect = [&](const std::string& got, const std::string& want) {
        std::printf("%s: got '%.*s'\n", got == want ? "ok  " : "FAIL", static_cast<int>(got.size()) - 1, got.c_str());
        if (got != want) ++failures;
    };
    bool done = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            const tcp::endpoint server = acceptor.local_endpoint();
            expect(co_await fetch(server, "/sum?n=2048"), "200 2096128\n");          // 0 + ... + 2047
            expect(co_await fetch(server, "/sum?n=1000000"), "200 499999500000\n");  // several chunks
            expect((co_await fetch(server, "/sum?n=x")).substr(0, 4), "400 ");
            done = true;
            acceptor.close();  // ends accept_loop; then io.run() returns
        },
        [&](std::exception_ptr e) {
            if (e) {
                std::printf("FAIL: the client threw\n");
                ++failures;
                acceptor.close();
            }
        });
    io.run();
    if (!done) ++failures;
    std::printf("beast_session self-test: %s\n", failures == 0 ? "passed" : "FAILED");
    return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    bool test = false;
    unsigned short port = 8080;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == "--self-test") {
            test = true;
            port = 0;
        } else if (arg == "--port" && i + 1 < argc) {
            port = static_cast<unsigned short>(std::stoi(argv[++i]));
        } else {
            std::fprintf(stderr, "usage: %s [--port P | --self-test]\n", argv[0]);
            return 2;
        }
    }
    asio::io_context io;
    tenferro::cpu_backend cpu({.permits = 2, .max_waiters = 64});
    tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), port});
    asio::co_spawn(io, accept_loop(acceptor, cpu), asio::detached);
    if (test) return self_test(io, acceptor);

    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](boost::system::error_code, int) { acceptor.close(), io.stop(); });
    std::printf("serving http://127.0.0.1:%u/sum?n=N\n", static_cast<unsigned>(acceptor.local_endpoint().port()));
    io.run();
}
