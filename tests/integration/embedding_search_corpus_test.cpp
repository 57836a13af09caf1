// The embedding-search corpus and the tenferro-search binary: corpora saved
// and loaded as .npy, normalised or refused on load naming the file, row and
// column; the binary serving, draining on SIGTERM and refusing bad flags
// (TENFERRO_SEARCH_BINARY names it), and its demos (`--tenants`, `--impatient`, the
// plain one with its live phase) at a tiny size.
#include "http_server.hpp"

#include <signal.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <simdjson.h>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <tenferro/io.hpp>
#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "demo_report.hpp"
#include "http_client.hpp"
#include "json_writer.hpp"
#include "latency_histogram.hpp"
#include "run_blocking.hpp"
#include "search_engine.hpp"

#include "../support/embedding_search_fixture.hpp"

namespace tf = tenferro;
using namespace embedding_search;
using namespace std::chrono_literals;
using namespace embedding_search::testing;

TEST_CASE("a generated corpus saved as .npy reads back bit for bit and serves the same results", "[embedding_search]") {
    temp_dir dir;
    const std::string file = (dir.path / "corpus.npy").string();
    tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 2});

    corpus_source generate;
    generate.generate = true;
    generate.rows = 1500;
    generate.dim = 20;
    generate.seed = 99;
    generate.path = file;
    corpus_origin made;
    const tf::tensor generated = run_blocking(obtain_corpus(cpu, generate, &made));
    CHECK(made.generated);
    CHECK(made.written);
    CHECK(made.note.empty());
    REQUIRE(std::filesystem::exists(file));

    corpus_source read;
    read.path = file;
    corpus_origin loaded;
    const tf::tensor back = run_blocking(obtain_corpus(cpu, read, &loaded));
    CHECK_FALSE(loaded.generated);
    REQUIRE(back.type() == tf::dtype::f32);
    REQUIRE(back.shape()[0] == 1500);
    REQUIRE(back.shape()[1] == 20);
    CHECK(std::memcmp(back.data<float>(), generated.data<float>(), 1500 * 20 * sizeof(float)) == 0);

    // The same seed gives the same bytes, file or not.
    const tf::tensor again = run_blocking(generate_corpus(cpu, 1500, 20, 99));
    CHECK(std::memcmp(again.data<float>(), generated.data<float>(), 1500 * 20 * sizeof(float)) == 0);
}

TEST_CASE("a corpus file is normalised on load; bad files are refused naming the file", "[embedding_search]") {
    temp_dir dir;
    tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 2});
    const auto write = [&](const std::string& name, const tf::tensor& t) {
        const std::string path = (dir.path / name).string();
        const auto save = [&]() -> asio::awaitable<void> {
            const auto executor = co_await asio::this_coro::executor;
            co_await tf::async_write_npy(executor, path, t);
        };
        run_blocking(save());
        return path;
    };

    SECTION("rows of any length become unit rows") {
        corpus_source read;
        read.path = write("raw.npy", tf::tensor::from<float>({3, 4, 0, 0, 0, 0, 0, 2}, {4, 2}));
        const tf::tensor c = run_blocking(obtain_corpus(cpu, read));
        const float* d = c.data<float>();
        CHECK(d[0] == Approx(0.6f));
        CHECK(d[1] == Approx(0.8f));
        CHECK(d[2] == 0.0f);  // a zero row stays zero
        CHECK(d[3] == 0.0f);
        CHECK(d[6] == 0.0f);
        CHECK(d[7] == 1.0f);
    }
    SECTION("wrong dtype or rank") {
        for (const std::string& path : {write("f64.npy", tf::tensor::zeros(tf::dtype::f64, {3, 2})),
                                        write("rank1.npy", tf::tensor::zeros(tf::dtype::f32, {6}))}) {
            corpus_source read;
            read.path = path;
            try {
                run_blocking(obtain_corpus(cpu, read));
                FAIL("accepted " << path);
            } catch (const std::runtime_error& e) {
                CHECK_THAT(e.what(), Catch::Contains(path));
            }
        }
    }
    SECTION("missing or not .npy") {
        corpus_source missing;
        missing.path = (dir.path / "nope.npy").string();
        CHECK_THROWS_WITH(run_blocking(obtain_corpus(cpu, missing)), Catch::Contains("nope.npy"));
        const std::string junk = (dir.path / "junk.npy").string();
        std::FILE* f = std::fopen(junk.c_str(), "wb");
        REQUIRE(f);
        std::fputs("this is not a numpy file", f);
        std::fclose(f);
        corpus_source bad;
        bad.path = junk;
        CHECK_THROWS_WITH(run_blocking(obtain_corpus(cpu, bad)), Catch::Contains("junk.npy"));
    }
}

TEST_CASE("the tenferro-search binary serves, then exits 0 on SIGTERM", "[embedding_search]") {
    const char* binary = std::getenv("TENFERRO_SEARCH_BINARY");
    if (!binary) {
        WARN("TENFERRO_SEARCH_BINARY is not set; skipping");
        return;
    }
    temp_dir dir;
    const std::string corpus_file = (dir.path / "served.npy").string();
    int out[2];
    REQUIRE(pipe(out) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        close(out[0]);
        close(out[1]);
        execl(binary, binary, "--generate", "2000", "16", "--corpus", corpus_file.c_str(), "--port", "0", "--permits",
              "1", static_cast<char*>(nullptr));
        _exit(127);
    }
    close(out[1]);
    // "tenferro-search: listening on http://127.0.0.1:PORT (...)"
    std::string line;
    char ch;
    while (line.find('\n') == std::string::npos && read(out[0], &ch, 1) == 1) line += ch;
    close(out[0]);
    const auto at = line.find("127.0.0.1:");
    REQUIRE(at != std::string::npos);
    const auto port = static_cast<std::uint16_t>(std::stoi(line.substr(at + 10)));

    std::vector<float> q(16, 0.25f);
    const http_reply r = run_blocking(server_fixture::roundtrip(port, search_request(q, 4)));
    CHECK(r.status == 200);
    CHECK(hits_of(r.body).size() == 4);

    REQUIRE(kill(pid, SIGTERM) == 0);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    if (done == 0) kill(pid, SIGKILL), waitpid(pid, &status, 0);
    REQUIRE(done == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    // --generate with --corpus saved the corpus: 2000 x 16 f32 after numpy's 128-byte header.
    CHECK(std::filesystem::file_size(corpus_file) == 128 + 2000 * 16 * 4);
}

TEST_CASE("a corpus with inf or NaN is refused at load, naming the first bad row and column", "[embedding_search]") {
    temp_dir dir;
    tf::cpu_backend cpu(tf::cpu_backend_options{.permits = 2});
    struct bad_corpus {
        const char* name;
        std::int64_t row, column;
        float value;
        const char* shown;
    };
    const float inf = std::numeric_limits<float>::infinity();
    for (const bad_corpus& c :
         {bad_corpus{"nan.npy", 1500, 3, std::numeric_limits<float>::quiet_NaN(), "NaN"},
          bad_corpus{"inf.npy", 2, 0, inf, "inf"}, bad_corpus{"ninf.npy", 4999, 7, -inf, "-inf"}}) {
        INFO(c.name);
        // 5000 rows: more than one parallel_for block, with a second bad value
        // later in the file that must not be the one reported.
        std::vector<float> values(5000 * 8, 0.5f);
        values[std::size_t(c.row * 8 + c.column)] = c.value;
        if (c.row < 4000) values[4000 * 8 + 1] = std::numeric_limits<float>::quiet_NaN();
        const std::string path = (dir.path / c.name).string();
        const tf::tensor t = tf::tensor::from<float>(values, {5000, 8});
        const auto save = [&]() -> asio::awaitable<void> {
            const auto executor = co_await asio::this_coro::executor;
            co_await tf::async_write_npy(executor, path, t);
        };
        run_blocking(save());
        corpus_source read;
        read.path = path;
        try {
            run_blocking(obtain_corpus(cpu, read));
            FAIL("accepted " << c.name);
        } catch (const std::runtime_error& e) {
            const std::string what = e.what();
            CHECK_THAT(what, Catch::Contains(path));
            CHECK_THAT(what, Catch::Contains("row " + std::to_string(c.row) + ", column " + std::to_string(c.column) +
                                             " is " + c.shown + ";"));
        }
    }
}

namespace {

struct process_result {
    int exit_code = -1;  ///< -1: did not exit in time (killed)
    std::string err;     ///< what it wrote to stderr
    std::string out;     ///< what it wrote to stdout
};

/// Runs the tenferro-search binary with `args`, for at most `limit`.
process_result run_search_binary(const char* binary, const std::vector<std::string>& args,
                                 std::chrono::milliseconds limit = 10s) {
    temp_dir dir;
    const std::string err_file = (dir.path / "stderr").string();
    const std::string out_file = (dir.path / "stdout").string();
    const pid_t pid = fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) {
        std::FILE* err = std::freopen(err_file.c_str(), "w", stderr);
        std::FILE* out = std::freopen(out_file.c_str(), "w", stdout);
        if (!err || !out) _exit(126);
        std::vector<char*> argv{const_cast<char*>(binary)};
        for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        execv(binary, argv.data());
        _exit(127);
    }
    process_result result;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    } else if (WIFEXITED(status)) {
        result.exit_code = WEXITSTATUS(status);
    }
    for (const auto& [file, text] : {std::pair{&err_file, &result.err}, std::pair{&out_file, &result.out}}) {
        if (std::FILE* f = std::fopen(file->c_str(), "r")) {
            char buf[4096];
            std::size_t n = 0;
            while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text->append(buf, n);
            std::fclose(f);
        }
    }
    return result;
}

}  // namespace

TEST_CASE("the tenferro-search binary refuses bad flags at start-up, saying what is accepted", "[embedding_search]") {
    const char* binary = std::getenv("TENFERRO_SEARCH_BINARY");
    if (!binary) {
        WARN("TENFERRO_SEARCH_BINARY is not set; skipping");
        return;
    }
    struct flag_case {
        std::vector<std::string> args;
        std::string expected;  // in the message on stderr
    };
    // Each would otherwise start a server (bounded by the 10 s limit below):
    // a small generated corpus on an ephemeral port.
    const std::vector<std::string> base = {"--generate", "50", "4", "--port", "0"};
    const std::vector<flag_case> cases = {
        {{"--max-k", "-5"}, "--max-k: Value -5 not in range 1 to"},
        {{"--max-k", "0"}, "--max-k: Value 0 not in range 1 to"},
        {{"--host", "not-an-ip"}, "'not-an-ip' is not an IP address; give an IPv4 or IPv6 address"},
        {{"--port", "70000"}, "--port"},
        {{"--batch", "0"}, "--batch: Value 0 not in range 1 to 4096"},
        {{"--batch-delay-us", "-1"}, "--batch-delay-us: Value -1 not in range 0 to 10000000"},
        {{"--io-threads", "0"}, "--io-threads: Value 0 not in range 1 to 1024"},
        {{"--max-body", "0"}, "--max-body: Value 0 not in range 1 to"},
        {{"--compute-nice", "40"}, "--compute-nice: Value 40 not in range 0 to 19"},
        {{"--request-timeout", "nan"}, "'nan' is not a number of seconds from 0.001 to 86400"},
        {{"--idle-timeout", "-1"}, "'-1' is not a number of seconds"},
        {{"--drain-timeout", "1e300"}, "'1e300' is not a number of seconds"},
        {{"--group", "bulk:0"}, "--group: 'bulk:0': the weight must be a whole number from 1 to 10000"},
        {{"--group", "bulk"}, "--group: 'bulk' is not NAME:WEIGHT (no colon)"},
        {{"--group", "b@d:1"}, "the group name must be 1 to 64 characters"},
        {{"--group", "bulk:1", "--group", "bulk:2"}, "--group: the group 'bulk' is given twice"},
    };
    for (const flag_case& c : cases) {
        std::vector<std::string> args = base;
        args.insert(args.end(), c.args.begin(), c.args.end());
        INFO(c.args[0] << " " << c.args[1]);
        const process_result r = run_search_binary(binary, args);
        INFO(r.err);
        CHECK(r.exit_code > 0);
        CHECK_THAT(r.err, Catch::Contains(c.expected));
    }
    // A corpus that cannot fit: said in those words, not "std::bad_alloc".
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--generate", "100000000000", "128", "--port", "0"},
          std::vector<std::string>{"--generate", "9223372036854775807", "9223372036854775807", "--port", "0"}}) {
        INFO(args[1]);
        const process_result r = run_search_binary(binary, args);
        INFO(r.err);
        CHECK(r.exit_code > 0);
        CHECK_THAT(r.err, Catch::Contains("--generate " + args[1] + " x " + args[2] + ": the corpus"));
        CHECK_THAT(r.err, !Catch::Contains("bad_alloc"));
    }
    {
        const process_result r = run_search_binary(binary, {"--generate", "0", "4", "--port", "0"});
        CHECK(r.exit_code > 0);
        CHECK_THAT(r.err, Catch::Contains("--generate: Value 0 not in range 1 to"));
    }
}

TEST_CASE("demo --tenants runs FIFO and groups side by side and writes its report", "[embedding_search]") {
    const char* binary = std::getenv("TENFERRO_SEARCH_BINARY");
    if (!binary) {
        WARN("TENFERRO_SEARCH_BINARY is not set; skipping");
        return;
    }
    temp_dir dir;
    const process_result r = run_search_binary(
        binary,
        {"demo", "--tenants", "--rows", "2000", "--dim", "16", "--duration", "0.5", "--bulk-connections", "6",
         "--interactive-connections", "2", "--no-progress", "--data-dir", dir.path.string()},
        60s);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    std::FILE* f = std::fopen((dir.path / "embedding_search_tenants.json").c_str(), "rb");
    REQUIRE(f != nullptr);
    std::string json;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) json.append(buf, n);
    std::fclose(f);
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    REQUIRE_FALSE(parser.parse(json).get(doc));
    simdjson::dom::array variants;
    REQUIRE_FALSE(doc["variants"].get_array().get(variants));
    REQUIRE(variants.size() == 2);
    for (const simdjson::dom::element v : variants) {
        simdjson::dom::array tenants;
        REQUIRE_FALSE(v["tenants"].get_array().get(tenants));
        REQUIRE(tenants.size() == 2);
        CHECK(tenants.at(0).value()["name"].get_string().value() == "bulk");
        CHECK(tenants.at(1).value()["name"].get_string().value() == "interactive");
        for (const simdjson::dom::element t : tenants) {
            CHECK(t["requests"].get_uint64().value() > 0);
            CHECK(t["errors"].get_uint64().value() == 0);
        }
    }
    CHECK(variants.at(0).value()["variant"].get_string().value() == "fifo");
    CHECK(variants.at(1).value()["groups"].get_array().value().size() == 2);
    CHECK(std::filesystem::exists(dir.path / "embedding_search_tenants.svg"));
}

TEST_CASE("demo --impatient runs the three servers side by side and writes its report", "[embedding_search]") {
    const char* binary = std::getenv("TENFERRO_SEARCH_BINARY");
    if (!binary) {
        WARN("TENFERRO_SEARCH_BINARY is not set; skipping");
        return;
    }
    temp_dir dir;
    const process_result r = run_search_binary(
        binary,
        {"demo", "--impatient", "--rows", "2000", "--dim", "16", "--duration", "0.5", "--capacity-duration", "0.3",
         "--connections", "8", "--no-progress", "--data-dir", dir.path.string()},
        60s);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    std::FILE* f = std::fopen((dir.path / "embedding_search_impatient.json").c_str(), "rb");
    REQUIRE(f != nullptr);
    std::string json;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) json.append(buf, n);
    std::fclose(f);
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    REQUIRE_FALSE(parser.parse(json).get(doc));
    CHECK(doc["capacity"]["requests_per_s"].get_double().value() > 0);
    CHECK(doc["load"]["client_timeout_ms"].get_int64().value() == 50);
    simdjson::dom::array variants;
    REQUIRE_FALSE(doc["variants"].get_array().get(variants));
    REQUIRE(variants.size() == 3);
    CHECK(variants.at(0).value()["variant"].get_string().value() == "keep");
    CHECK_FALSE(variants.at(0).value()["notice_closed"].get_bool().value());
    CHECK_FALSE(variants.at(0).value()["patience"].get_bool().value());
    CHECK(variants.at(1).value()["variant"].get_string().value() == "stop");
    CHECK(variants.at(1).value()["notice_closed"].get_bool().value());
    CHECK_FALSE(variants.at(1).value()["patience"].get_bool().value());
    CHECK(variants.at(2).value()["variant"].get_string().value() == "patient");
    CHECK(variants.at(2).value()["notice_closed"].get_bool().value());
    CHECK(variants.at(2).value()["patience"].get_bool().value());
    CHECK(doc["load"]["offered_over_capacity"].get_double().value() > 0);
    for (const simdjson::dom::element v : variants) {
        CHECK(v["sent"].get_uint64().value() > 0);
        CHECK(v["errors"].get_uint64().value() == 0);
        CHECK(v["server_cpu_s"].get_double().value() > 0);
    }
    CHECK(variants.at(2).value()["delivered_in_time"].get_uint64().value() > 0);
    CHECK(std::filesystem::exists(dir.path / "embedding_search_impatient.svg"));
}

TEST_CASE("demo runs its live phase, checks it against the brute force and reports it", "[embedding_search]") {
    const char* binary = std::getenv("TENFERRO_SEARCH_BINARY");
    if (!binary) {
        WARN("TENFERRO_SEARCH_BINARY is not set; skipping");
        return;
    }
    temp_dir dir;
    const process_result r =
        run_search_binary(binary,
                          {"demo", "--rows", "2000", "--dim", "16", "--duration", "0.5", "--connections", "8",
                           "--live-seconds", "1", "--no-progress", "--data-dir", dir.path.string()},
                          60s);
    INFO(r.out);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    for (const char* figure : {"live phase", "searches alone", "searches with writes", "filtered searches", "writes/s",
                               "rows/s", "write latency", "with writes / without", "search throughput x",
                               "search p99 x", "queries match the float64 brute force", "read your writes"})
        CHECK_THAT(r.out, Catch::Contains(figure));
    CHECK_THAT(r.out, !Catch::Contains("MISMATCH"));

    std::FILE* f = std::fopen((dir.path / "embedding_search_report.json").c_str(), "rb");
    REQUIRE(f != nullptr);
    std::string json;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) json.append(buf, n);
    std::fclose(f);
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    REQUIRE_FALSE(parser.parse(json).get(doc));
    simdjson::dom::element live;
    REQUIRE_FALSE(doc["live"].get(live));
    CHECK(live["without_writes"]["searches"].get_uint64().value() > 0);
    CHECK(live["with_writes"]["searches"].get_uint64().value() > 0);
    CHECK(live["with_writes"]["puts"].get_uint64().value() > 0);
    CHECK(live["with_writes"]["rows_upserted"].get_uint64().value() > 0);
    CHECK(live["throughput_ratio"].get_double().value() > 0);
    CHECK(live["p99_ratio"].get_double().value() > 0);
    CHECK(live["check"]["ok"].get_bool().value());
    CHECK(live["check"]["queries"].get_uint64().value() > 0);
    CHECK(live["check"]["matched"].get_uint64().value() == live["check"]["queries"].get_uint64().value());
    CHECK(live["corpus_after"]["rows"].get_int64().value() == live["check"]["model_rows"].get_int64().value());

    // --no-live: no live phase, no "live" object.
    const process_result plain =
        run_search_binary(binary,
                          {"demo", "--rows", "2000", "--dim", "16", "--duration", "0.3", "--connections", "4",
                           "--no-live", "--no-progress", "--data-dir", dir.path.string()},
                          60s);
    INFO(plain.out);
    CHECK(plain.exit_code == 0);
    CHECK_THAT(plain.out, !Catch::Contains("live phase"));
}

TEST_CASE("the latency chart keeps its labels inside the picture and apart", "[embedding_search]") {
    // p50 and p99 close together near the top of the range, p99.9 at its end:
    // the case where the marks' labels used to overlap and the last axis label
    // ("1000 ms") was cut off.
    latency_histogram h;
    for (int i = 0; i < 900; ++i) h.record(std::chrono::microseconds(300'000 + 50 * i));
    for (int i = 0; i < 95; ++i) h.record(std::chrono::microseconds(360'000));
    for (int i = 0; i < 5; ++i) h.record(std::chrono::microseconds(900'000));
    const std::string svg = latency_svg(h.snapshot(), "test");
    CHECK(svg.find("1000 ms") == std::string::npos);
    CHECK(svg.find(">1 s</text>") != std::string::npos);

    // Every label box (the white ground behind a mark's text): inside the
    // picture's 720 px, and no two of them overlapping.
    struct box {
        double x0, x1, y0;
    };
    std::vector<box> boxes;
    for (std::size_t at = 0; (at = svg.find("fill=\"white\" fill-opacity", at)) != std::string::npos; ++at) {
        const std::size_t start = svg.rfind("<rect", at);
        double x = 0, y = 0, w = 0;
        REQUIRE(std::sscanf(svg.c_str() + start, "<rect x=\"%lf\" y=\"%lf\" width=\"%lf\"", &x, &y, &w) == 3);
        boxes.push_back({x, x + w, y});
    }
    REQUIRE(boxes.size() == 3);
    for (std::size_t i = 0; i < boxes.size(); ++i) {
        CHECK(boxes[i].x0 >= 0);
        CHECK(boxes[i].x1 <= 720);
        for (std::size_t j = 0; j < i; ++j) {
            const bool apart = boxes[i].y0 != boxes[j].y0 || boxes[i].x1 <= boxes[j].x0 || boxes[j].x1 <= boxes[i].x0;
            CHECK(apart);
        }
    }
}
