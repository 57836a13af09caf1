// The allocation-failure scenarios of the live corpus (L7, S19): a durable write through
// async_apply (on the process's engine and on the pread/pwrite pool), a write in memory, and a
// filtered search. Each completes exactly once or throws std::bad_alloc at its initiation; a
// failed write changes nothing, in memory or in the directory (reopened afterwards); a search
// returns the right hits or throws.

#include "fault_scenario.hpp"

#include <filesystem>
#include <optional>
#include <system_error>

#include <tenferro/live_corpus.hpp>

#include "cpu_session_fixture.hpp"

namespace tenferro::test::faults {
namespace {

struct scratch_dir {
    std::filesystem::path path;
    scratch_dir() {
        char tmpl[] = "/tmp/tenferro-faults-XXXXXX";
        const char* made = mkdtemp(tmpl);
        path = made != nullptr ? made : "/tmp";
    }
    ~scratch_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

constexpr std::int64_t dim = 4;

corpus_write write_of(row_id first, int rows) {
    corpus_write w;
    for (int r = 0; r < rows; ++r) {
        const float v[dim] = {float(first) + float(r), 1, 2, 3};
        const row_label l[1] = {static_cast<row_label>(r % 3)};
        w.upsert(first + static_cast<row_id>(r), v, l);
    }
    return w;
}

/// async_apply of a 3-row write into a corpus holding 5 rows: durable (on `pool_engine` or the
/// process's engine) or in memory.
scenario corpus_write_scenario(bool durable, bool pool_engine) {
    return {std::string("corpus/write/") + (durable ? (pool_engine ? "durable-pool" : "durable") : "memory"),
            [durable, pool_engine](const run_config& c, verdict& v, std::uint64_t& injected) {
                if (pool_engine) setenv("TENFERRO_IO_URING", "0", 1);  // before the engine is chosen
                scratch_dir dir;
                live_corpus_options o;
                o.dim = dim;
                if (durable) o.directory = dir.path.string();
                std::optional<live_corpus> corpus(std::in_place, o);
                if (!corpus->apply(write_of(100, 5))) v.fail("set-up: the first write failed");
                asio::io_context io;
                std::atomic<int> completions{0};
                std::optional<write_result> result;
                bool threw = false;
                arm(c);
                try {
                    corpus->async_apply(write_of(200, 3), asio::bind_executor(io, [&](write_result r) {
                                            result = std::move(r);
                                            completions.fetch_add(1);
                                        }));
                } catch (const std::bad_alloc&) {
                    threw = true;
                } catch (const std::system_error& e) {
                    // Starting the library's timer thread (the hand-off's retry): a thread that
                    // cannot be made for want of memory, thrown at the initiation.
                    if (e.code() != std::errc::resource_unavailable_try_again) throw;
                    threw = true;
                }
                const int expected = threw ? 0 : 1;
                if (!drive(
                        io, v, [&] { return completions.load() >= expected && af::window_closed(); }, 10s))
                    v.fail("no completion after 10 s");
                const std::uint64_t events = af::disarm();
                injected = af::failures();
                if (completions.load() != expected)
                    v.fail("completed %d times, expected %d", completions.load(), expected);
                const bool applied = result && *result;
                // In memory: the write is there iff it succeeded; the corpus serves further writes.
                const std::int64_t rows = corpus->snapshot().rows();
                if (rows != (applied ? 8 : 5))
                    v.fail("%lld rows after a write that %s", static_cast<long long>(rows),
                           applied ? "succeeded" : "failed");
                if (applied && result->seq != 2) v.fail("seq %llu", static_cast<unsigned long long>(result->seq));
                const write_result next = corpus->apply(write_of(300, 1));
                // A durable write whose application ran out of memory leaves the corpus refusing
                // writes until it is reopened (docs/contract.md, L7): then, and only then, the
                // reopened directory may hold the failed write.
                const bool poisoned = !next && next.error == std::errc::not_enough_memory;
                if (!next && !poisoned) v.fail("the next write failed: %s", next.error.message().c_str());
                if (durable) {
                    corpus.reset();
                    live_corpus again(o);
                    const bool has_write = again.get(200).has_value();
                    if (applied && !has_write) v.fail("an applied write was not recovered");
                    if (!applied && has_write && !poisoned) v.fail("a failed write was recovered");
                    if (!poisoned && !again.get(300)) v.fail("the next write was not recovered");
                    if (!again.get(100)) v.fail("the set-up write was not recovered");
                }
                return events;
            }};
}

/// A batch of two queries, one filtered, over a corpus of two segments, one compacted.
scenario corpus_search_scenario() {
    return {"corpus/search", [](const run_config& c, verdict& v, std::uint64_t& injected) {
                live_corpus corpus({.dim = dim, .segment_rows = 8});
                (void)corpus.apply(write_of(0, 20));
                cpu_session_fixture f(1);
                (void)corpus.compact(f.session);
                (void)corpus.apply(write_of(50, 5));
                const float q[2 * dim] = {1, 0, 0, 0, 0, 1, 0, 0};
                const tensor queries = tensor::from(std::span<const float>(q, 2 * dim), {2, dim});
                std::vector<row_filter> filters(2);
                filters[1].labels = std::vector<row_label>{1};
                const corpus_hits want = search(f.session, corpus.snapshot(), queries.view(), 3, filters);
                const corpus_snapshot snap = corpus.snapshot();
                arm(c);
                std::optional<corpus_hits> got;
                try {
                    got.emplace(search(f.session, snap, queries.view(), 3, filters));
                } catch (const std::bad_alloc&) {
                }
                const std::uint64_t events = af::disarm();
                injected = af::failures();
                if (got && (got->hits != want.hits || got->offsets != want.offsets)) v.fail("wrong hits");
                if (corpus.snapshot().rows() != 25) v.fail("the corpus changed");
                return events;
            }};
}

}  // namespace

std::vector<scenario> corpus_scenarios() {
    return {corpus_write_scenario(false, false), corpus_write_scenario(true, false), corpus_write_scenario(true, true),
            corpus_search_scenario()};
}

}  // namespace tenferro::test::faults
