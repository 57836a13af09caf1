// tenferro-search: an embedding-search HTTP server on tenferro.
//
//   tenferro-search --corpus corpus.npy [--port 8080] ...   serve a corpus
//   tenferro-search --generate 200000 128 [--corpus out.npy] generate one (and save it) first
//   tenferro-search demo [--duration 10] ...                 the load demo `./dev run` runs
//   tenferro-search bench [--duration 5] ...                 tenferro vs compute inline on the I/O threads
#include <unistd.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <future>
#include <limits>
#include <new>
#include <thread>

#include <CLI/CLI.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/address.hpp>
#include <asio/use_future.hpp>
#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "demo.hpp"
#include "http_server.hpp"
#include "permit_usage.hpp"
#include "search_engine.hpp"
#include "tenant_groups.hpp"

namespace tf = tenferro;
using namespace embedding_search;

namespace {

struct serve_options {
    std::int64_t dim = 0;  // --dim: 0 when not given
    std::string data_dir;
    std::string corpus_path;
    std::vector<std::int64_t> generate;  // rows, dim
    std::uint64_t seed = 42;
    server_options server;
    server_mode mode;
    double idle_timeout_s = 30, request_timeout_s = 10, drain_timeout_s = 10;
};

std::chrono::milliseconds to_ms(double seconds) { return std::chrono::milliseconds(std::int64_t(seconds * 1000.0)); }

// Every flag is checked when the command line is parsed, so that a bad value
// stops the program at once with a message naming the flag, what it got and
// what it accepts, instead of surfacing later as an exception's text (or, for
// --max-k, in a response to a client).

/// Whole numbers in [lo, hi] (CLI11's message: "Value -5 not in range 1 to 1000").
template <class T>
CLI::Range whole(T lo, T hi = std::numeric_limits<T>::max()) {
    return CLI::Range(lo, hi);
}

/// Seconds: a finite number in (0, one day]. (CLI11's Range lets NaN through,
/// and a value beyond about 9e15 s would overflow the conversion to milliseconds.)
const CLI::Validator seconds_validator(
    [](std::string& input) -> std::string {
        double v = 0.0;
        if (!CLI::detail::lexical_cast(input, v) || !std::isfinite(v) || v < 0.001 || v > 86400.0) {
            return "'" + input + "' is not a number of seconds from 0.001 to 86400";
        }
        return {};
    },
    "SECONDS in [0.001, 86400]");

/// A numeric IP address: the server binds it as given, without name resolution.
const CLI::Validator ip_address_validator(
    [](std::string& input) -> std::string {
        std::error_code ec;
        (void)asio::ip::make_address(input, ec);
        if (ec) {
            return "'" + input +
                   "' is not an IP address; give an IPv4 or IPv6 address such as 127.0.0.1, 0.0.0.0 or :: "
                   "(host names are not resolved)";
        }
        return {};
    },
    "IPv4 or IPv6 address");

/// `--group NAME:WEIGHT`, e.g. `interactive:4`.
const CLI::Validator group_spec_validator(
    [](std::string& input) -> std::string {
        const auto parsed = parse_group_spec(input);
        return parsed ? std::string() : parsed.error();
    },
    "NAME:WEIGHT");

/// Why a rows x dim f32 corpus cannot be held in memory, or "" when it can.
/// (Without this, an absurd size ends in "std::bad_alloc" or the OOM killer.)
std::string corpus_size_problem(const char* flags, std::int64_t rows, std::int64_t dim) {
    const std::string what = std::string(flags) + " " + std::to_string(rows) + " x " + std::to_string(dim);
    constexpr auto max_bytes = std::uint64_t(std::numeric_limits<std::int64_t>::max());
    if (std::uint64_t(rows) > max_bytes / sizeof(float) / std::uint64_t(dim)) {
        return what + ": the corpus would not fit in a 64-bit address space";
    }
    const std::uint64_t bytes = std::uint64_t(rows) * std::uint64_t(dim) * sizeof(float);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0 && bytes > std::uint64_t(pages) * std::uint64_t(page)) {
        char text[200];
        std::snprintf(text, sizeof text,
                      ": the corpus needs %.3g GB of f32 (4 bytes per element), this machine has %.3g GB",
                      double(bytes) / 1e9, double(pages) * double(page) / 1e9);
        return what + text;
    }
    return {};
}

int serve(serve_options o) {
    corpus_source source;
    source.path = o.corpus_path;
    source.seed = o.seed;
    if (!o.generate.empty()) {
        if (const std::string problem = corpus_size_problem("--generate", o.generate[0], o.generate[1]);
            !problem.empty()) {
            std::fprintf(stderr, "tenferro-search: %s\n", problem.c_str());
            return 2;
        }
        source.generate = true;
        source.rows = o.generate[0];
        source.dim = o.generate[1];
    } else if (o.corpus_path.empty() && o.dim == 0) {
        std::fprintf(stderr,
                     "tenferro-search: give --dim D (an empty corpus, or DIR's with --data-dir DIR), --corpus "
                     "FILE.npy, or --generate ROWS DIM (see --help)\n");
        return 2;
    }
    // A new directory takes the file's (or the generated) rows; one that holds a corpus serves it.
    const bool dir_is_new =
        o.data_dir.empty() || !std::filesystem::exists(std::filesystem::path(o.data_dir) / "CORPUS");
    if (!dir_is_new && (source.generate || !o.corpus_path.empty())) {
        std::fprintf(stderr, "tenferro-search: %s already holds a corpus: serving it, not loading %s\n",
                     o.data_dir.c_str(), source.generate ? "a generated corpus" : o.corpus_path.c_str());
        source.generate = false;
        o.corpus_path.clear();
        if (o.dim == 0) {
            std::fprintf(stderr, "tenferro-search: give --dim D with --data-dir %s\n", o.data_dir.c_str());
            return 2;
        }
    }

    const std::size_t io_threads = std::max<std::size_t>(1, o.mode.io_threads);
    std::int64_t dim = o.dim;
    tf::tensor rows;
    if (source.generate || !o.corpus_path.empty()) {
        corpus_origin origin;
        source.normalise = false;  // the live corpus normalises, and keeps the rows as read for GET
        tf::cpu_backend generator(tf::cpu_backend_options{});  // every core, for generating only
        asio::io_context io(1);
        auto loaded = asio::co_spawn(io, obtain_corpus(generator, source, &origin), asio::use_future);
        io.run();
        rows = loaded.get();
        std::fprintf(stderr, "tenferro-search: corpus %s x %s %s in %.2f s%s\n",
                     std::to_string(rows.shape()[0]).c_str(), std::to_string(rows.shape()[1]).c_str(),
                     origin.generated ? "generated" : "read", origin.seconds,
                     origin.note.empty() ? "" : (" (" + origin.note + ")").c_str());
        if (dim != 0 && dim != rows.shape()[1]) {
            std::fprintf(stderr, "tenferro-search: --dim %lld disagrees with the corpus's dimension %lld\n",
                         static_cast<long long>(dim), static_cast<long long>(rows.shape()[1]));
            return 2;
        }
        dim = rows.shape()[1];
    }
    std::shared_ptr<tf::live_corpus> corpus;
    try {
        const auto start = std::chrono::steady_clock::now();
        corpus = std::make_shared<tf::live_corpus>(
            tf::live_corpus_options{.dim = dim, .directory = o.data_dir, .normalize = true});
        if (!o.data_dir.empty())
            std::fprintf(stderr, "tenferro-search: %s: %lld rows at seq %llu, recovered in %.2f s\n",
                         o.data_dir.c_str(), static_cast<long long>(corpus->snapshot().rows()),
                         static_cast<unsigned long long>(corpus->snapshot().seq()),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    } catch (const std::system_error& e) {
        if (e.code() == tf::corpus_errc::dimension_mismatch) {
            std::fprintf(stderr, "tenferro-search: --dim %lld disagrees with the corpus in %s (%s)\n",
                         static_cast<long long>(dim), o.data_dir.c_str(), e.what());
            return 2;
        }
        std::fprintf(stderr, "tenferro-search: cannot open the corpus: %s\n", e.what());
        return 1;
    }
    if (rows.size() != 0) {
        load_rows(*corpus, rows, 0);
        rows = tf::tensor();  // the corpus holds them now
        corpus->compact();
        if (const std::error_code ec = corpus->checkpoint()) {
            std::fprintf(stderr, "tenferro-search: checkpoint of the loaded rows failed: %s\n", ec.message().c_str());
            return 1;
        }
    } else if (corpus->needs_compaction()) {
        corpus->compact();  // what recovery replayed, merged before serving
    }

    // The patience policy learns from clients that leave: a server that does
    // not watch for them keeps today's behaviour.
    if (!o.server.notice_closed) o.mode.patience = false;
    auto usage = std::make_shared<permit_usage_observer>();
    tf::cpu_backend cpu(backend_options_for(o.mode, usage));
    search_engine engine(cpu, corpus, engine_options_for(o.mode), usage);

    o.server.io_threads = io_threads;
    o.server.idle_timeout = to_ms(o.idle_timeout_s);
    o.server.request_timeout = to_ms(o.request_timeout_s);
    o.server.drain_timeout = to_ms(o.drain_timeout_s);
    o.server.handle_signals = true;
    search_server server(engine, o.server);
    server.start();
    std::string groups;
    for (std::size_t g = 0; g < engine.groups(); ++g)
        groups += (g ? ", " : "") + engine.group_name(g) + ":" + std::to_string(cpu.group_stats(g).weight);
    std::printf("tenferro-search: listening on http://%s:%u (%s, %zu permit(s), %zu I/O thread(s), groups %s)\n",
                o.server.host.c_str(), unsigned(server.port()),
                o.mode.inline_compute ? "inline compute" : "tenferro sessions", cpu.permits(), io_threads,
                groups.c_str());
    std::fflush(stdout);
    server.wait();
    std::fprintf(stderr, "tenferro-search: drained, bye\n");
    return 0;
}

void add_mode_options(CLI::App& app, server_mode& mode) {
    app.add_option("--io-threads", mode.io_threads, "threads running the HTTP I/O")
        ->check(whole<std::size_t>(1, 1024))
        ->capture_default_str();
    app.add_option("--permits", mode.permits, "tenferro compute permits (0: one per core)")
        ->check(whole<std::size_t>(0, 4096))
        ->capture_default_str();
    app.add_option("--max-waiters", mode.max_waiters, "queued searches beyond which requests get 503")
        ->check(whole<std::size_t>(1, std::size_t(1) << 30))
        ->capture_default_str();
    app.add_option("--batch", mode.max_batch, "most queries scored together in one session (1: no batching)")
        ->check(whole<std::size_t>(1, 4096))
        ->capture_default_str();
    app.add_option("--batch-permits", mode.batch_permits,
                   "permits each batch session takes, its corpus split over that many workers (0: all)")
        ->check(whole<std::size_t>(0, 4096))
        ->capture_default_str();
    app.add_option_function<std::int64_t>(
           "--batch-delay-us", [&mode](std::int64_t us) { mode.max_delay = std::chrono::microseconds(us); },
           "wait up to this long for a batch to fill (0: never wait; batches form from what queues anyway)")
        ->check(whole<std::int64_t>(0, 10'000'000))
        ->default_str("0");
    app.add_flag("!--no-patience", mode.patience,
                 "compute every query a batch takes, also those whose clients will have left before it ends "
                 "(default: learn the clients' patience and answer those 503 at once; off with --keep-abandoned)");
    app.add_option("--compute-nice", mode.compute_nice,
                   "nice value the compute workers give themselves, below the I/O threads' (0: leave them)")
        ->check(whole(0, 19))
        ->capture_default_str();
    // Each --group is checked as it is parsed (the spec), and again as a whole
    // (a name given twice) by the callback of the last one.
    app.add_option_function<std::vector<std::string>>(
           "--group",
           [&mode](const std::vector<std::string>& specs) {
               mode.groups.clear();
               for (const std::string& spec : specs) mode.groups.push_back(*parse_group_spec(spec));
               if (const std::string problem = check_groups(mode.groups); !problem.empty())
                   throw CLI::ValidationError("--group", problem);
           },
           "a tenant group NAME:WEIGHT (repeat for each); requests name theirs in the X-Tenferro-Group header, "
           "none: the first group. No --group: one FIFO queue")
        ->type_name("NAME:WEIGHT")
        ->check(group_spec_validator);
    app.add_flag("--inline", mode.inline_compute,
                 "baseline without tenferro admission: compute on the I/O threads that parsed the request");
}

}  // namespace

int main(int argc, char** argv) {
    // The demo holds both ends of its load connections (2 x 257 descriptors by
    // default) and the server may face many clients: lift the soft limit to the
    // hard one, which some systems set far higher than the 1024 default.
    if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
    CLI::App app{"tenferro-search: embedding search over HTTP on tenferro compute sessions"};
    app.require_subcommand(0, 1);

    serve_options serve_opts;
    app.add_option("--dim", serve_opts.dim,
                   "the vectors' length: serve an empty corpus of this dimension (with "
                   "--corpus or --generate it must agree with theirs)")
        ->check(whole<std::int64_t>(1, 1 << 20));
    app.add_option("--data-dir", serve_opts.data_dir,
                   "keep the corpus durable in DIR: recover it (or start an empty one there); every write "
                   "completes once it is in DIR's write-ahead log");
    app.add_option("--corpus", serve_opts.corpus_path,
                   "rows 0..N-1 of the corpus, from an N x D f32 .npy file (written when generating)");
    app.add_option("--generate", serve_opts.generate, "generate a random corpus of ROWS x DIM unit rows")
        ->expected(2)
        ->type_name("ROWS DIM")
        ->check(whole<std::int64_t>(1));
    app.add_option("--seed", serve_opts.seed, "seed of the generated corpus")->capture_default_str();
    app.add_option("--host", serve_opts.server.host, "IP address to listen on")
        ->check(ip_address_validator)
        ->capture_default_str();
    app.add_option("--port", serve_opts.server.port, "port (0: any free port)")
        ->check(whole(0, 65535))
        ->capture_default_str();
    add_mode_options(app, serve_opts.mode);
    app.add_option("--max-body", serve_opts.server.max_body_bytes, "largest request body (bytes); larger get 413")
        ->check(whole<std::size_t>(1, std::size_t(1) << 30))
        ->capture_default_str();
    app.add_option("--max-k", serve_opts.server.max_k, "largest k accepted (capped at the corpus rows)")
        ->check(whole<std::int64_t>(1))
        ->capture_default_str();
    app.add_option("--idle-timeout", serve_opts.idle_timeout_s, "seconds an idle keep-alive connection stays open")
        ->check(seconds_validator)
        ->capture_default_str();
    app.add_option("--request-timeout", serve_opts.request_timeout_s,
                   "seconds a client has to send a whole request, or to take a response")
        ->check(seconds_validator)
        ->capture_default_str();
    app.add_option("--drain-timeout", serve_opts.drain_timeout_s, "seconds SIGINT/SIGTERM waits for requests in flight")
        ->check(seconds_validator)
        ->capture_default_str();
    app.add_option("--retry-after", serve_opts.server.retry_after_seconds, "Retry-After seconds sent with 503")
        ->check(whole(0, 86400))
        ->capture_default_str();
    app.add_flag("!--keep-abandoned", serve_opts.server.notice_closed,
                 "do not watch connections while their search waits or runs: a search whose client left stays "
                 "queued and is computed (the behaviour before issue 46)");

    demo_options demo_opts;
    CLI::App* demo = app.add_subcommand("demo", "generate a corpus, serve it and drive it with the built-in load");
    demo->add_option("--rows", demo_opts.rows, "corpus rows")->check(whole<std::int64_t>(1))->capture_default_str();
    demo->add_option("--dim", demo_opts.dim, "corpus dimension")->check(whole<std::int64_t>(1))->capture_default_str();
    demo->add_option("--seed", demo_opts.seed, "corpus seed")->capture_default_str();
    demo->add_option("--data-dir", demo_opts.data_dir, "where the corpus and the reports go")
        ->check(CLI::ExistingDirectory)
        ->capture_default_str();
    demo->add_option("--connections", demo_opts.connections, "keep-alive connections")
        ->check(whole<std::size_t>(1, 100'000))
        ->capture_default_str();
    demo->add_option("--duration", demo_opts.duration_seconds, "seconds of load")
        ->check(seconds_validator)
        ->capture_default_str();
    demo->add_option("-k", demo_opts.k, "results per query")->check(whole<std::int64_t>(1))->capture_default_str();
    demo->add_option("--healthz-interval-ms", demo_opts.healthz_interval_ms, "/healthz probe period")
        ->check(whole(1, 60'000))
        ->capture_default_str();
    demo->add_flag("!--no-progress", demo_opts.progress, "no progress bar");
    add_mode_options(*demo, demo_opts.mode);
    demo->add_flag("--tenants", demo_opts.tenants,
                   "two tenants (bulk and interactive connections), FIFO vs a tenant group each, side by side");
    demo->add_option("--bulk-connections", demo_opts.bulk_connections, "--tenants: the bulk tenant's connections")
        ->check(whole<std::size_t>(1, 100'000))
        ->capture_default_str();
    demo->add_option("--interactive-connections", demo_opts.interactive_connections,
                     "--tenants: the interactive tenant's connections")
        ->check(whole<std::size_t>(1, 100'000))
        ->capture_default_str();
    demo->add_flag("--impatient", demo_opts.impatient,
                   "clients that give up after --client-timeout-ms and reconnect, at --overload times the measured "
                   "capacity: a server that stops abandoned searches vs one that keeps them, side by side");
    demo->add_option("--client-timeout-ms", demo_opts.client_timeout_ms,
                     "--impatient: how long a client waits for an answer (the server is not told)")
        ->check(whole(1, 60'000))
        ->capture_default_str();
    demo->add_option("--overload", demo_opts.overload, "--impatient: offered searches / the measured capacity")
        ->check(CLI::Range(0.1, 100.0))
        ->capture_default_str();
    demo->add_option("--capacity-duration", demo_opts.capacity_seconds,
                     "--impatient: seconds of the closed-loop run that measures the capacity")
        ->check(seconds_validator)
        ->capture_default_str();
    demo->add_flag("!--no-live", demo_opts.live,
                   "skip the live phase (searches alone, then with writers changing the corpus, checked against "
                   "a brute force)");
    demo->add_option("--live-seconds", demo_opts.live_seconds,
                     "seconds of the live phase's load: half searches alone, half with writers")
        ->check(seconds_validator)
        ->capture_default_str();

    bench_options bench_opts;
    CLI::App* bench = app.add_subcommand("bench", "tenferro sessions vs compute inline on the I/O threads");
    bench->add_option("--rows", bench_opts.rows, "corpus rows")->check(whole<std::int64_t>(1))->capture_default_str();
    bench->add_option("--dim", bench_opts.dim, "corpus dimension")
        ->check(whole<std::int64_t>(1))
        ->capture_default_str();
    bench->add_option("--connections", bench_opts.connections, "keep-alive connections")
        ->check(whole<std::size_t>(1, 100'000))
        ->capture_default_str();
    bench->add_option("--duration", bench_opts.duration_seconds, "seconds per run")
        ->check(seconds_validator)
        ->capture_default_str();
    bench->add_option("--rounds", bench_opts.rounds, "rounds (each runs every variant once)")
        ->check(whole(1, 1000))
        ->capture_default_str();
    bench->add_option("-k", bench_opts.k, "results per query")->check(whole<std::int64_t>(1))->capture_default_str();
    bench->add_option("--batch", bench_opts.max_batch, "tenferro batch bound")
        ->check(whole<std::size_t>(1, 4096))
        ->capture_default_str();
    bench->add_option("--compute-nice", bench_opts.compute_nice, "nice value of tenferro's compute workers")
        ->check(whole(0, 19))
        ->capture_default_str();
    bench->add_option("--io-threads", bench_opts.tenferro_io_threads, "I/O threads of the tenferro server")
        ->check(whole<std::size_t>(1, 1024))
        ->capture_default_str();
    bench
        ->add_option("--inline-io-threads", bench_opts.inline_io_threads,
                     "I/O threads of the inline server (0: one per core)")
        ->check(whole<std::size_t>(0, 1024))
        ->capture_default_str();
    bench->add_option("--healthz-interval-ms", bench_opts.healthz_interval_ms, "/healthz probe period")
        ->check(whole(1, 60'000))
        ->capture_default_str();
    bench->add_option("--json", bench_opts.json_path, "also write every run as a JSON line to this file");

    CLI11_PARSE(app, argc, argv);

    try {
        if (demo->parsed()) {
            if (demo_opts.tenants && demo_opts.impatient) {
                std::fprintf(stderr, "tenferro-search: demo: give --tenants or --impatient, not both\n");
                return 2;
            }
            if (demo_opts.impatient && demo->count("--duration") == 0)
                demo_opts.duration_seconds = impatient_default_duration_seconds;
            if (demo_opts.impatient && demo->count("--rows") == 0) demo_opts.rows = impatient_default_rows;
            if (demo_opts.tenants) {
                if (demo->count("--rows") == 0) demo_opts.rows = tenants_default_rows;
                if (demo->count("--duration") == 0) demo_opts.duration_seconds = tenants_default_duration_seconds;
                if (demo->count("--batch") == 0) demo_opts.mode.max_batch = tenants_default_max_batch;
            }
            if (const std::string p = corpus_size_problem("demo --rows --dim", demo_opts.rows, demo_opts.dim);
                !p.empty()) {
                std::fprintf(stderr, "tenferro-search: %s\n", p.c_str());
                return 2;
            }
            return run_demo(demo_opts);
        }
        if (bench->parsed()) {
            if (const std::string p = corpus_size_problem("bench --rows --dim", bench_opts.rows, bench_opts.dim);
                !p.empty()) {
                std::fprintf(stderr, "tenferro-search: %s\n", p.c_str());
                return 2;
            }
            return run_bench(bench_opts);
        }
        return serve(std::move(serve_opts));
    } catch (const std::bad_alloc&) {
        // Within the physical memory but not available now (other processes,
        // an address-space limit): say so rather than "std::bad_alloc".
        std::fprintf(stderr,
                     "tenferro-search: out of memory: the corpus (and its packed copy, the same size again) "
                     "did not fit; try a smaller corpus\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tenferro-search: %s\n", e.what());
        return 1;
    }
}
