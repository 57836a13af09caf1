#include "demo.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>

#include <tenferro/tenferro.hpp>

#include "corpus.hpp"
#include "demo_impatient.hpp"
#include "demo_live.hpp"
#include "demo_progress.hpp"
#include "demo_report.hpp"
#include "demo_tenants.hpp"
#include "demo_trial.hpp"
#include "json_writer.hpp"
#include "run_blocking.hpp"
#include "search_engine.hpp"

namespace tf = tenferro;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace embedding_search {

namespace {

std::size_t cores() { return std::max(1u, std::thread::hardware_concurrency()); }

fs::path self_path() {
    std::error_code ec;
    fs::path p = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return "tenferro-search";
    const fs::path relative = p.lexically_relative(fs::current_path(ec));
    return !ec && !relative.empty() && *relative.begin() != ".." ? relative : p;
}

std::string corpus_file(const std::string& dir, std::int64_t rows, std::int64_t dim, std::uint64_t seed) {
    return (fs::path(dir) / ("embedding-corpus-" + std::to_string(rows) + "x" + std::to_string(dim) + "-seed" +
                             std::to_string(seed) + ".npy"))
        .string();
}

tf::tensor load_corpus_for_demo(std::int64_t rows, std::int64_t dim, std::uint64_t seed, const std::string& path,
                                corpus_origin& origin) {
    corpus_source source;
    source.rows = rows;
    source.dim = dim;
    source.seed = seed;
    source.path = path;
    std::error_code ec;
    tf::cpu_backend generator(tf::cpu_backend_options{});  // every core, just for building the corpus
    if (!path.empty() && fs::exists(path, ec)) {
        try {
            tf::tensor corpus = run_blocking(obtain_corpus(generator, source, &origin));
            if (corpus.shape()[0] == rows && corpus.shape()[1] == dim) return corpus;
            std::printf("  (%s holds a %s corpus, not %lld x %lld: generating it again)\n", path.c_str(),
                        tf::to_string(corpus.shape()).c_str(), static_cast<long long>(rows),
                        static_cast<long long>(dim));
        } catch (const std::exception& e) {
            std::printf("  (%s: generating it again)\n", e.what());
        }
    }
    source.generate = true;
    return run_blocking(obtain_corpus(generator, source, &origin));
}

}  // namespace

int run_demo(const demo_options& o) {
    std::error_code ec;
    fs::create_directories(o.data_dir, ec);
    const std::string path = corpus_file(o.data_dir, o.rows, o.dim, o.seed);

    std::printf("tenferro-search demo\n");
    corpus_origin origin;
    const tf::tensor corpus = load_corpus_for_demo(o.rows, o.dim, o.seed, path, origin);
    std::printf("  corpus     %lld x %lld f32, unit rows, seed %llu: %s in %.2f s%s%s\n",
                static_cast<long long>(o.rows), static_cast<long long>(o.dim), static_cast<unsigned long long>(o.seed),
                origin.generated ? "generated" : ("read from " + path).c_str(), origin.seconds,
                origin.written ? (", saved to " + path).c_str() : "",
                origin.note.empty() ? "" : (" (" + origin.note + ")").c_str());
    if (o.tenants) return run_tenants_demo(o, corpus, origin, path);
    if (o.impatient) return run_impatient_demo(o, corpus, origin, path);

    const std::vector<std::string> requests = make_requests(corpus, 512, o.k, o.seed);
    trial_setup setup;
    setup.connections = o.connections;
    setup.duration_seconds = o.duration_seconds;
    setup.k = o.k;
    setup.healthz_interval_ms = o.healthz_interval_ms;
    setup.seed = o.seed;
    setup.sample_query = true;
    progress_bar bar(o.progress);
    setup.progress = [&bar](const load_progress& p) { bar(p); };

    const std::size_t permits = backend_options_for(o.mode, nullptr).permits;
    std::printf(
        "  server     127.0.0.1 (ephemeral port), %s: %zu permit%s, %zu I/O thread%s, batches of up to %zu, "
        "queue bound %zu, compute workers at nice %d\n",
        o.mode.inline_compute ? "inline compute on the I/O threads" : "tenferro sessions", permits,
        permits == 1 ? "" : "s", o.mode.io_threads, o.mode.io_threads == 1 ? "" : "s",
        o.mode.inline_compute ? std::size_t{1} : o.mode.max_batch, o.mode.max_waiters,
        o.mode.inline_compute ? 0 : o.mode.compute_nice);
    std::printf("  load       %zu keep-alive connections for %.0f s (k = %lld), /healthz probed every %d ms\n",
                o.connections, o.duration_seconds, static_cast<long long>(o.k), o.healthz_interval_ms);
    std::fflush(stdout);

    const trial_result t = run_trial(corpus, requests, o.mode, setup);
    bar.finish();

    print_demo_results(o, t);

    std::optional<live_result> live;
    if (o.live) {
        live = run_live_phase(o, corpus);
        print_live_results(*live);
    }

    const demo_report_files report = write_demo_report(o, origin, path, t, live ? &*live : nullptr);
    std::printf("\nreport: %s\n        %s\n", report.json.string().c_str(), report.svg.string().c_str());

    const std::string exe = self_path().string();
    std::printf("\nrun the server alone:\n");
    if (origin.written || !origin.generated) {
        std::printf("  %s --corpus %s --port 8080\n", exe.c_str(), path.c_str());
    } else {
        std::printf("  %s --generate %lld %lld --port 8080\n", exe.c_str(), static_cast<long long>(o.rows),
                    static_cast<long long>(o.dim));
    }
    std::printf("and query it from another shell:\n");
    std::printf("  curl -s localhost:8080/healthz\n");
    std::printf(
        "  python3 -c 'import json, random; print(json.dumps({\"vector\": [random.gauss(0, 1) for _ in "
        "range(%lld)], \"k\": 5}))' | curl -s -d @- localhost:8080/v1/search\n",
        static_cast<long long>(o.dim));
    std::printf("  curl -s localhost:8080/v1/stats\n");
    std::printf("(Ctrl-C drains the requests in flight and exits.)\n");

    const bool ok = t.load.errors == 0 && t.sample_check.ok && t.load.ok > 0;
    if (!ok) std::printf("\ndemo FAILED: %s\n", t.load.errors ? "errors during the load" : "the sample query");
    const bool live_ok = !live || live->ok;
    if (!live_ok) std::printf("\ndemo FAILED: the live phase's check against the brute force\n");
    return ok && live_ok ? 0 : 1;
}

double wakeup_lateness_p99_ms(int samples) {
    std::vector<double> late;
    for (int i = 0; i < samples; ++i) {
        const auto t = clock_type::now() + std::chrono::milliseconds(10);
        std::this_thread::sleep_until(t);
        late.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t).count());
    }
    std::sort(late.begin(), late.end());
    return late[std::size_t(0.99 * double(samples - 1))];
}

int run_bench(const bench_options& o) {
    std::printf("tenferro-search bench: %zu connections, %.0f s per run, %d rounds, corpus %lld x %lld\n",
                o.connections, o.duration_seconds, o.rounds, static_cast<long long>(o.rows),
                static_cast<long long>(o.dim));
    corpus_origin origin;
    const tf::tensor corpus = load_corpus_for_demo(o.rows, o.dim, o.seed, "", origin);
    const std::vector<std::string> requests = make_requests(corpus, 512, o.k, o.seed);

    struct variant {
        std::string name;
        server_mode mode;
    };
    std::vector<variant> variants;
    server_mode tenferro_mode;
    tenferro_mode.io_threads = o.tenferro_io_threads;
    tenferro_mode.max_batch = o.max_batch;
    tenferro_mode.compute_nice = o.compute_nice;
    variants.push_back({"tenferro", tenferro_mode});
    if (o.max_batch > 1) {
        server_mode single = tenferro_mode;
        single.max_batch = 1;
        variants.push_back({"tenferro-batch1", single});
    }
    server_mode inline_mode;
    inline_mode.inline_compute = true;
    inline_mode.io_threads = o.inline_io_threads ? o.inline_io_threads : cores();
    variants.push_back({"inline", inline_mode});

    trial_setup setup;
    setup.connections = o.connections;
    setup.duration_seconds = o.duration_seconds;
    setup.k = o.k;
    setup.healthz_interval_ms = o.healthz_interval_ms;
    setup.seed = o.seed;

    const double floor_before = wakeup_lateness_p99_ms();
    std::printf("scheduler floor before the runs: a 10 ms sleep wakes up late by %.2f ms (p99)\n", floor_before);
    std::fflush(stdout);

    std::ofstream json_lines;
    if (!o.json_path.empty()) json_lines.open(o.json_path);
    std::map<std::string, std::vector<trial_result>> results;
    std::uint64_t errors = 0;
    // A B C A B C ...: drift on a shared machine hits every variant alike.
    for (int round = 0; round < o.rounds; ++round) {
        for (const variant& v : variants) {
            trial_result t = run_trial(corpus, requests, v.mode, setup);
            json_writer w;
            w.begin_object().field("variant", v.name).field("round", round);
            write_mode(w, t);
            write_results(w, t);
            w.end_object();
            std::printf("%s\n", w.str().c_str());
            std::fflush(stdout);
            if (json_lines) json_lines << w.str() << '\n';
            errors += t.load.errors;
            results[v.name].push_back(std::move(t));
        }
    }

    const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.empty() ? 0.0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
    };
    std::printf("\n%-16s %10s %10s %10s %12s %12s %8s\n", "variant", "req/s", "p50 ms", "p99 ms", "healthz p50",
                "healthz p99", "503s");
    std::map<std::string, std::pair<double, double>> summary;  // req/s, p99
    std::map<std::string, double> healthz_p99;
    for (const variant& v : variants) {
        std::vector<double> rps, p50, p99, h50, h99;
        std::uint64_t shed = 0;
        for (const auto& t : results[v.name]) {
            rps.push_back(requests_per_second(t.load));
            p50.push_back(t.load.latency.percentile_ms(0.5));
            p99.push_back(t.load.latency.percentile_ms(0.99));
            h50.push_back(t.load.healthz.percentile_ms(0.5));
            h99.push_back(t.load.healthz.percentile_ms(0.99));
            shed += t.load.shed;
        }
        summary[v.name] = {median(rps), median(p99)};
        healthz_p99[v.name] = median(h99);
        std::printf("%-16s %10.0f %10.2f %10.2f %12.2f %12.2f %8llu\n", v.name.c_str(), median(rps), median(p50),
                    median(p99), median(h50), median(h99), static_cast<unsigned long long>(shed));
    }
    const auto& [tf_rps, tf_p99] = summary["tenferro"];
    const auto& [in_rps, in_p99] = summary["inline"];
    std::printf("\ntenferro / inline: req/s x%.2f, p99 x%.2f; /healthz p99 %.2f ms vs %.2f ms\n",
                in_rps > 0 ? tf_rps / in_rps : 0.0, in_p99 > 0 ? tf_p99 / in_p99 : 0.0, healthz_p99["tenferro"],
                healthz_p99["inline"]);
    const double floor_after = wakeup_lateness_p99_ms();
    std::printf("scheduler floor after the runs: %.2f ms (p99 wake-up lateness of a 10 ms sleep)\n", floor_after);
    const bool healthz_ok = healthz_p99["tenferro"] < 5.0;
    std::printf("/healthz p99 under 5 ms: tenferro %s, inline %s\n", healthz_ok ? "yes" : "NO",
                healthz_p99["inline"] < 5.0 ? "yes" : "no");
    if (errors) std::printf("errors during the runs: %llu\n", static_cast<unsigned long long>(errors));
    return errors == 0 ? 0 : 1;
}

}  // namespace embedding_search
