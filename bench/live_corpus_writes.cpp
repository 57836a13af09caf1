// Durable writes to a live corpus, and its recovery (issue 60, "Targets": writes and recovery),
// side by side with the disk's own bandwidth in the same run.
//
//   tenferro-bench-live-corpus-writes --json results.jsonl [--quick] [--dir DIR] ...
//
// Parts (each printed as a table, each measurement also a JSON line in --json):
//
// [1] The disk: one thread writes a new file in the data directory with pwrite, in 8 MiB chunks
//     with one fdatasync at the end (the sequential write-plus-fdatasync bandwidth), and in chunks
//     of one group's size (256 one-row records, and 64 KiB) with an fdatasync after each.
// [2] The log alone (src/corpus/write_log.hpp, no corpus): 256 appends of one-row records in
//     flight, each completion appending the next; records per fdatasync from the log's counters.
// [3] The corpus: 256 writes in flight through live_corpus::submit, each completion (on the I/O
//     engine's thread) submitting the next (a closed loop: 256 writers that each wait for their
//     write), each write of 1 (and 4) rows of d = 768 with fresh ids; rows/s, MB/s of vector
//     payload, the ratio to [1], write latency, and the device's flush count (sysfs) per write.
// [4] Searches meanwhile: batches of 16 queries (k = 10) through tenferro::search in sessions of
//     a cpu_backend of 1 permit pinned to CPU 0, one after the other, on a compacted corpus of
//     200k x 768: read-only, then with the writers of [3] writing (a) to another corpus in the
//     same directory (the searched corpus does not change: only the writers' load), (b) to the
//     searched corpus itself (it grows meanwhile), then read-only again on the grown corpus.
//     The process (and so the I/O engine's threads, which run the log's callbacks, i.e. the
//     corpus's apply and the writers' next submits) is pinned to CPU 1.
// [5] Recovery: rows written, checkpoint(), a log tail of one-row upserts (256 in flight), the
//     corpus destroyed; then constructing it again after dropping the page cache (cold) and
//     again (warm), against reading the same files with read() in 8 MiB chunks, cold and warm.
//     Scaled down (and said so) where the disk or the memory cannot hold it.

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <asio/use_future.hpp>

#include "corpus/corpus_files.hpp"
#include "corpus/write_log.hpp"
#include "hwy_target_select.hpp"
#include "tenferro/io.hpp"
#include "tenferro/tenferro.hpp"

namespace tf = tenferro;
namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

namespace {

double seconds_since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

struct options {
    std::string dir = "/var/tmp/tenferro-live-corpus-writes";
    std::string json;
    bool quick = false;
    std::int64_t dim = 768;
    std::int64_t writers = 256;
    std::vector<std::int64_t> rows_per_write = {1, 4};
    double write_s = 8.0;
    double max_write_gb = 4.0;  // a write phase stops earlier once this much vector payload is written
    std::int64_t search_rows = 200000;
    std::int64_t batch = 16;
    std::int64_t k = 10;
    double search_s = 5.0;
    std::int64_t recovery_rows = 1000000;
    std::int64_t tail_mb = 1024;
    bool recovery = true;
};

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: tenferro-bench-live-corpus-writes --json FILE [--quick] [--dir DIR] [--write-s S]\n"
                 "       [--rows-per-write 1,4] [--search-rows N] [--search-s S] [--recovery-rows N]\n"
                 "       [--tail-mb MB] [--no-recovery]\n"
                 "  --quick: about a minute (3 s write phases, 50k search rows, 200k rows + 256 MB tail)\n");
    std::exit(2);
}

options parse(int argc, char** argv) {
    options o;
    bool quick = false;
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (quick) {
        o.quick = true;
        o.write_s = 3.0;
        o.rows_per_write = {1};
        o.search_rows = 50000;
        o.search_s = 2.0;
        o.recovery_rows = 200000;
        o.tail_mb = 256;
    }
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) usage();
            return argv[++i];
        };
        if (a == "--quick") continue;
        if (a == "--json")
            o.json = next();
        else if (a == "--dir")
            o.dir = next();
        else if (a == "--write-s")
            o.write_s = std::stod(next());
        else if (a == "--search-rows")
            o.search_rows = std::stoll(next());
        else if (a == "--search-s")
            o.search_s = std::stod(next());
        else if (a == "--recovery-rows")
            o.recovery_rows = std::stoll(next());
        else if (a == "--tail-mb")
            o.tail_mb = std::stoll(next());
        else if (a == "--no-recovery")
            o.recovery = false;
        else if (a == "--rows-per-write") {
            o.rows_per_write.clear();
            std::stringstream ss(next());
            std::string part;
            while (std::getline(ss, part, ',')) o.rows_per_write.push_back(std::stoll(part));
        } else
            usage();
    }
    if (o.json.empty()) usage();
    return o;
}

std::string run_command(const std::string& cmd) {
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
        char buf[512];
        while (std::fgets(buf, sizeof buf, p)) out += buf;
        ::pclose(p);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
}

std::string cpu_name() {
    const std::string model = run_command("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'");
    const std::string family = run_command("grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'");
    return model + " (family " + family + (family == "26" ? ", Zen 5" : "") + ")";
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (const char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if (c == '\n') {
            o += "\\n";
            continue;
        }
        o += c;
    }
    return o;
}

// The environment, printed once and stamped on every JSON line.
struct env {
    std::string cpu, target, io, fs_type, device, sysfs_stat;
    FILE* json = nullptr;
    std::string prefix() const {
        return "{\"bench\": \"live_corpus_writes\", \"cpu\": \"" + json_escape(cpu) + "\", \"target\": \"" + target +
               "\", \"io_backend\": \"" + io + "\", \"fs\": \"" + fs_type + "\", \"device\": \"" + device + "\"";
    }
    // `fields`: ", \"key\": value, ..." (leading comma).
    void line(const std::string& part, const std::string& fields) const {
        if (json == nullptr) return;
        std::fprintf(json, "%s, \"part\": \"%s\"%s}\n", prefix().c_str(), part.c_str(), fields.c_str());
        std::fflush(json);
    }
};

std::string kv(const char* key, double v) {
    char b[96];
    std::snprintf(b, sizeof b, ", \"%s\": %.6g", key, v);
    return b;
}
std::string kv(const char* key, const std::string& v) { return std::string(", \"") + key + "\": \"" + v + "\""; }

// The block device's counters (/sys/dev/block/M:m/stat of the directory's device, or of its whole
// disk for a partition): writes, sectors written, flushes (fields 5, 7 and 16).
std::string sysfs_stat_path(const std::string& dir) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return {};
    const fs::path dev = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
    std::error_code ec;
    const fs::path real = fs::canonical(dev, ec);
    if (ec) return {};
    if (fs::exists(real / "partition")) return (real.parent_path() / "stat").string();
    return (real / "stat").string();
}
struct dev_counters {
    bool ok = false;
    std::uint64_t writes = 0, sectors = 0, flushes = 0;
};
dev_counters read_dev(const env& e) {
    dev_counters c;
    if (e.sysfs_stat.empty()) return c;
    std::ifstream f(e.sysfs_stat);
    std::vector<std::uint64_t> v;
    std::uint64_t x;
    while (f >> x) v.push_back(x);
    if (v.size() < 17) return c;
    c.ok = true;
    c.writes = v[4];
    c.sectors = v[6];
    c.flushes = v[15];
    return c;
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const auto i =
        static_cast<std::size_t>(std::min<double>(double(v.size() - 1), std::ceil(p * double(v.size())) - 1));
    return v[i];
}

void drop_caches() {
    ::sync();
    std::ofstream f("/proc/sys/vm/drop_caches");
    f << "3\n";
    f.close();
    if (!f) std::fprintf(stderr, "warning: cannot drop the page cache (not root?): 'cold' figures are warm\n");
}

// --- [1] the disk ------------------------------------------------------------------------------

struct disk_result {
    double bytes = 0, seconds = 0, syncs = 0;
    double mbps() const { return bytes / seconds / 1e6; }
};

// One thread writes a new file with pwrite in `chunk`-byte pieces up to `total` bytes (or until
// `max_s` have passed), with an fdatasync after each chunk (`sync_each`) or once at the end.
disk_result disk_write(const std::string& path, std::size_t chunk, std::size_t total, bool sync_each, double max_s) {
    std::vector<std::byte> buf(chunk);
    std::mt19937_64 rng(7);
    for (std::size_t i = 0; i + 8 <= chunk; i += 8) {
        const std::uint64_t r = rng();
        std::memcpy(buf.data() + i, &r, 8);
    }
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        std::perror(path.c_str());
        std::exit(1);
    }
    disk_result r;
    const auto t0 = clk::now();
    std::size_t off = 0;
    while (off < total) {
        std::size_t done = 0;
        while (done < chunk) {
            const ssize_t n = ::pwrite(fd, buf.data() + done, chunk - done, static_cast<off_t>(off + done));
            if (n <= 0) {
                std::perror("pwrite");
                std::exit(1);
            }
            done += static_cast<std::size_t>(n);
        }
        off += chunk;
        if (sync_each) {
            ::fdatasync(fd);
            ++r.syncs;
        }
        if (seconds_since(t0) > max_s) break;
    }
    if (!sync_each) {
        ::fdatasync(fd);
        ++r.syncs;
    }
    r.seconds = seconds_since(t0);
    r.bytes = double(off);
    ::close(fd);
    ::unlink(path.c_str());
    return r;
}

// --- vectors -----------------------------------------------------------------------------------

// `rows` random rows of `dim` floats in [-1, 1) (a plain LCG: build-final compiles the benchmarks
// at -O0, where std::mt19937 would take seconds for 200k rows).
std::vector<float> random_rows(std::int64_t rows, std::int64_t dim, std::uint64_t seed) {
    std::vector<float> v(static_cast<std::size_t>(rows * dim));
    std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    float* p = v.data();
    const std::size_t n = v.size();
    for (std::size_t i = 0; i < n; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = float(std::int32_t(x >> 32)) * (1.0f / 2147483648.0f);
    }
    return v;
}

// --- [2] the log alone -------------------------------------------------------------------------

struct log_result {
    double seconds = 0, records = 0, groups = 0, bytes = 0, flushes = 0, record_bytes = 0;
};

log_result log_only(const env& e, const std::string& dir, std::int64_t dim, std::int64_t in_flight, double secs) {
    namespace dc = tf::detail::corpus;
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::vector<float> row = random_rows(1, dim, 11);
    tf::corpus_write w;
    w.upsert(1, row);
    const std::vector<std::byte> payload = dc::encode_write(w);
    std::error_code ec;
    auto log = dc::write_log::open(
        dir + "/wal-1.log", [](const dc::log_record&) {}, ec);
    if (ec) {
        std::fprintf(stderr, "write_log::open: %s\n", ec.message().c_str());
        std::exit(1);
    }
    struct driver {
        dc::write_log* log;
        const std::vector<std::byte>* payload;
        std::mutex m;  // seq assignment and append, as the corpus's append mutex
        std::uint64_t seq = 1;
        std::atomic<bool> stop{false};
        std::mutex done_m;
        std::condition_variable done_cv;
        std::int64_t outstanding = 0;
        void append() {
            {
                const std::lock_guard l(done_m);
                ++outstanding;
            }
            const std::lock_guard l(m);
            const std::error_code ec2 = log->append(seq, *payload, [this](std::error_code err) {
                if (err) std::fprintf(stderr, "log append failed: %s\n", err.message().c_str());
                finished();
            });
            if (ec2) {
                std::fprintf(stderr, "append refused: %s\n", ec2.message().c_str());
                std::exit(1);
            }
            ++seq;
        }
        void finished() {
            if (!stop.load(std::memory_order_relaxed)) append();
            const std::lock_guard l(done_m);
            if (--outstanding == 0) done_cv.notify_all();
        }
    } d;
    d.log = log.get();
    d.payload = &payload;
    const dev_counters c0 = read_dev(e);
    const auto t0 = clk::now();
    for (std::int64_t i = 0; i < in_flight; ++i) d.append();
    std::this_thread::sleep_for(std::chrono::duration<double>(secs));
    d.stop.store(true);
    {
        std::unique_lock l(d.done_m);
        d.done_cv.wait(l, [&] { return d.outstanding == 0; });
    }
    log_result r;
    r.seconds = seconds_since(t0);
    const dev_counters c1 = read_dev(e);
    const dc::write_log_stats s = log->stats();
    r.records = double(s.records);
    r.groups = double(s.groups);
    r.bytes = double(log->bytes());
    r.record_bytes = r.bytes / r.records;
    r.flushes = c0.ok && c1.ok ? double(c1.flushes - c0.flushes) : -1.0;
    log.reset();
    fs::remove_all(dir);
    return r;
}

// --- [3] writers through submit ---------------------------------------------------------------

// `in_flight` writes kept in flight through live_corpus::submit: each completion (on the I/O
// engine's thread) records its latency and submits the next write, until stopped or `target_rows`
// rows have been submitted. Ids: fresh from `first_id` on, or (id_range > 0) first_id + i % id_range.
class write_load {
public:
    write_load(tf::live_corpus& lc, const std::vector<float>& pool, std::int64_t pool_rows, std::int64_t rows_per_write,
               std::uint64_t first_id, std::uint64_t id_range, std::int64_t target_rows)
        : lc_(lc),
          pool_(pool),
          pool_rows_(pool_rows),
          dim_(lc.dim()),
          rows_per_write_(rows_per_write),
          first_id_(first_id),
          id_range_(id_range),
          target_rows_(target_rows) {
        latencies_us_.reserve(1 << 20);
    }

    void start(std::int64_t in_flight) {
        t0_ = clk::now();
        c0_ = clk::now();
        for (std::int64_t i = 0; i < in_flight; ++i) issue();
    }
    void stop() { stop_.store(true); }
    // Waits until every write in flight has completed; returns the seconds since start().
    double wait() {
        std::unique_lock l(m_);
        cv_.wait(l, [&] { return outstanding_ == 0; });
        return seconds_since(t0_);
    }
    std::int64_t rows_done() const { return rows_done_.load(); }
    std::int64_t writes_done() const { return writes_done_.load(); }
    std::int64_t errors() const { return errors_.load(); }
    std::vector<double> latencies_us() {
        const std::lock_guard l(lat_m_);
        return std::vector<double>(latencies_us_.begin(), latencies_us_.end());
    }

private:
    struct completion final : tf::write_completion {
        write_load* load;
        clk::time_point t0;
        std::int64_t rows;
        completion(write_load* l, std::int64_t r) : load(l), t0(clk::now()), rows(r) {}
        void complete(std::unique_ptr<tf::write_completion> self, tf::write_result r) noexcept override {
            write_load* l = load;
            const double us = std::chrono::duration<double, std::micro>(clk::now() - t0).count();
            const std::int64_t n = rows;
            self.reset();
            l->finished(r, n, us);
        }
    };

    void issue() {
        std::int64_t n = rows_per_write_;
        std::uint64_t id0 = 0;
        {
            const std::lock_guard l(m_);
            if (stop_.load() || (target_rows_ > 0 && rows_issued_ >= target_rows_)) return;
            if (target_rows_ > 0) n = std::min(n, target_rows_ - rows_issued_);
            id0 = static_cast<std::uint64_t>(rows_issued_);
            rows_issued_ += n;
            ++outstanding_;
        }
        tf::corpus_write w;
        for (std::int64_t r = 0; r < n; ++r) {
            const std::uint64_t i = id0 + static_cast<std::uint64_t>(r);
            const std::uint64_t id = first_id_ + (id_range_ > 0 ? i % id_range_ : i);
            const std::int64_t p = static_cast<std::int64_t>(i % static_cast<std::uint64_t>(pool_rows_));
            w.upsert(id, std::span<const float>(pool_.data() + p * dim_, static_cast<std::size_t>(dim_)));
        }
        lc_.submit(std::move(w), std::make_unique<completion>(this, n));
    }

    void finished(const tf::write_result& r, std::int64_t rows, double us) {
        if (r) {
            rows_done_.fetch_add(rows);
            writes_done_.fetch_add(1);
        } else {
            if (errors_.fetch_add(1) == 0) std::fprintf(stderr, "write failed: %s\n", r.error.message().c_str());
        }
        {
            const std::lock_guard l(lat_m_);
            latencies_us_.push_back(float(us));
        }
        issue();
        const std::lock_guard l(m_);
        if (--outstanding_ == 0) cv_.notify_all();
    }

    tf::live_corpus& lc_;
    const std::vector<float>& pool_;
    std::int64_t pool_rows_, dim_, rows_per_write_;
    std::uint64_t first_id_, id_range_;
    std::int64_t target_rows_;
    std::atomic<bool> stop_{false};
    std::mutex m_;
    std::condition_variable cv_;
    std::int64_t outstanding_ = 0, rows_issued_ = 0;
    std::atomic<std::int64_t> rows_done_{0}, writes_done_{0}, errors_{0};
    std::mutex lat_m_;
    std::vector<float> latencies_us_;
    clk::time_point t0_, c0_;
};

struct write_phase_result {
    double seconds = 0, rows = 0, writes = 0, errors = 0, log_bytes = 0, flushes = -1, dev_bytes = 0;
    double p50_us = 0, p99_us = 0;
    double rows_per_s() const { return rows / seconds; }
    double payload_mbps(std::int64_t dim) const { return rows * double(dim) * 4.0 / seconds / 1e6; }
};

// Runs the load for `secs` (or until `max_rows` rows are written) on `lc`, meanwhile calling
// `meanwhile()` on this thread if given (it returns when it is done; the load is then stopped).
template <class F>
write_phase_result run_writes(const env& e, tf::live_corpus& lc, const std::vector<float>& pool, std::int64_t pool_rows,
                              std::int64_t rows_per_write, std::int64_t in_flight, std::uint64_t first_id, double secs,
                              std::int64_t max_rows, F&& meanwhile) {
    const std::uint64_t log0 = lc.stats().log_bytes;
    write_load load(lc, pool, pool_rows, rows_per_write, first_id, 0, max_rows);
    const dev_counters c0 = read_dev(e);
    load.start(in_flight);
    meanwhile(secs);
    load.stop();
    write_phase_result r;
    r.seconds = load.wait();
    const dev_counters c1 = read_dev(e);
    r.rows = double(load.rows_done());
    r.writes = double(load.writes_done());
    r.errors = double(load.errors());
    r.log_bytes = double(lc.stats().log_bytes - log0);
    if (c0.ok && c1.ok) {
        r.flushes = double(c1.flushes - c0.flushes);
        r.dev_bytes = double(c1.sectors - c0.sectors) * 512.0;
    }
    const std::vector<double> lat = load.latencies_us();
    r.p50_us = percentile(lat, 0.50);
    r.p99_us = percentile(lat, 0.99);
    return r;
}

// --- [4] searches -----------------------------------------------------------------------------

struct search_result {
    double seconds = 0, searches = 0, queries = 0, p50_us = 0, p99_us = 0, rows_seen = 0;
    double qps() const { return queries / seconds; }
};

// Batches of `queries` (one session each, one permit), one after the other, for `secs`.
search_result run_searches(tf::cpu_backend& cpu, tf::live_corpus& lc, const tf::tensor& queries, std::int64_t k,
                           double secs) {
    tf::session_options so;
    so.permits = 1;
    std::vector<double> lat;
    lat.reserve(1 << 16);
    search_result r;
    const auto t0 = clk::now();
    std::int64_t stored = 0;
    while (seconds_since(t0) < secs) {
        const auto s0 = clk::now();
        auto h = cpu.with_backend_session(
                        so,
                        [&](tf::backend_session& s) {
                            const tf::corpus_snapshot snap = lc.snapshot();
                            return tf::search(s, snap, queries.view(), k).hits.size();
                        },
                        asio::use_future)
                     .get();
        lat.push_back(std::chrono::duration<double, std::micro>(clk::now() - s0).count());
        if (!h || *h == 0) {
            std::fprintf(stderr, "search failed\n");
            std::exit(1);
        }
        r.queries += double(queries.shape()[0]);
        ++r.searches;
    }
    r.seconds = seconds_since(t0);
    r.p50_us = percentile(lat, 0.50);
    r.p99_us = percentile(lat, 0.99);
    stored = lc.stats().stored_rows;
    r.rows_seen = double(stored);
    return r;
}

// Loads `rows` rows (ids 0..rows-1) into `lc` in writes of 16384 rows, 4 in flight.
void bulk_load(tf::live_corpus& lc, const std::vector<float>& pool, std::int64_t pool_rows, std::int64_t rows,
               std::uint64_t first_id = 0, std::uint64_t id_range = 0) {
    write_load load(lc, pool, pool_rows, 16384, first_id, id_range, rows);
    load.start(4);
    load.wait();
    if (load.errors() > 0) std::exit(1);
}

// --- [5] recovery -----------------------------------------------------------------------------

std::uint64_t files_bytes(const std::string& dir, std::vector<std::string>* paths = nullptr) {
    std::uint64_t total = 0;
    for (const auto& ent : fs::directory_iterator(dir))
        if (ent.is_regular_file()) {
            total += ent.file_size();
            if (paths) paths->push_back(ent.path().string());
        }
    return total;
}

double read_files(const std::vector<std::string>& paths, std::uint64_t& bytes) {
    std::vector<char> buf(std::size_t{8} << 20);
    bytes = 0;
    const auto t0 = clk::now();
    for (const std::string& p : paths) {
        const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        for (;;) {
            const ssize_t n = ::read(fd, buf.data(), buf.size());
            if (n <= 0) break;
            bytes += static_cast<std::uint64_t>(n);
        }
        ::close(fd);
    }
    return seconds_since(t0);
}

std::uint64_t mem_available() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    std::uint64_t v = 0;
    std::string unit;
    while (f >> key >> v >> unit)
        if (key == "MemAvailable:") return v * 1024;
    return 0;
}

void pin_to(unsigned cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) std::perror("sched_setaffinity");
}

}  // namespace

int main(int argc, char** argv) {
    options o = parse(argc, argv);
    const unsigned ncpu = std::thread::hardware_concurrency();
    // This thread, and every thread it starts from now on (the I/O engine's, created at the first
    // I/O), on the last CPU; the search worker on CPU 0 (cpu_backend_options::cpus).
    const unsigned io_cpu = ncpu >= 2 ? ncpu - 1 : 0;
    // The searches' backend first (its worker pinned to CPU 0 by cpu_backend_options::cpus, which
    // must be in this thread's affinity), then this thread pinned.
    tf::cpu_backend_options bo;
    bo.permits = 1;
    bo.cpus = {0};
    tf::cpu_backend cpu(bo);
    pin_to(io_cpu);

    fs::create_directories(o.dir);
    env e;
    e.cpu = cpu_name();
    e.target = tf::bench::dispatched_highway_target();
    e.io = std::string(tf::to_string(tf::active_io_backend()));
    {
        const std::string df = run_command("df -T '" + o.dir + "' | tail -1");
        std::stringstream ss(df);
        ss >> e.device >> e.fs_type;
    }
    e.sysfs_stat = sysfs_stat_path(o.dir);
    e.json = std::fopen(o.json.c_str(), "w");
    if (e.json == nullptr) {
        std::perror(o.json.c_str());
        return 1;
    }
    const std::int64_t d = o.dim;
    std::printf("live_corpus_writes: durable writes and recovery of tenferro::live_corpus vs the disk\n");
    std::printf("  CPU %s, %u CPUs; Highway target %s; I/O backend %s\n", e.cpu.c_str(), ncpu, e.target.c_str(),
                e.io.c_str());
    std::printf("  data directory %s: file system %s on %s (counters %s)\n", o.dir.c_str(), e.fs_type.c_str(),
                e.device.c_str(), e.sysfs_stat.empty() ? "none" : e.sysfs_stat.c_str());
    std::printf("  mode %s; d = %lld; %lld writes in flight; load average at start: %s\n", o.quick ? "quick" : "full",
                static_cast<long long>(d), static_cast<long long>(o.writers),
                run_command("cut -d' ' -f1-3 /proc/loadavg").c_str());
    std::printf(
        "  threads: search worker (cpu_backend, 1 permit) pinned to CPU 0; this thread and the I/O engine's\n"
        "  threads (log callbacks: the corpus's apply, the writers' next submit) pinned to CPU %u\n",
        io_cpu);
    std::fflush(stdout);

    const std::int64_t pool_rows = 16384;
    const std::vector<float> pool = random_rows(pool_rows, d, 1);

    // [1] The disk.
    const double disk_max_s = o.quick ? 2.0 : 4.0;
    const std::size_t seq_total = o.quick ? (std::size_t{512} << 20) : (std::size_t{2} << 30);
    // One one-row record: what the log writes per write of one row (header, encoded write, padding).
    const std::size_t record_bytes = [&] {
        tf::corpus_write w;
        w.upsert(1, std::span<const float>(pool.data(), static_cast<std::size_t>(d)));
        return (32 + tf::detail::corpus::encode_write(w).size() + 7) / 8 * 8;
    }();
    std::printf("\n[1] the disk: one thread, pwrite of a new file in %s, fdatasync as said\n", o.dir.c_str());
    std::printf("%-44s %10s %8s %8s %10s\n", "how", "MB", "s", "syncs", "MB/s");
    struct disk_case {
        const char* name;
        std::size_t chunk;
        bool sync_each;
    };
    const disk_case cases[] = {
        {"8 MiB chunks, one fdatasync at the end", std::size_t{8} << 20, false},
        {"256 records (one group) + fdatasync each", 256 * record_bytes, true},
        {"64 KiB + fdatasync each", std::size_t{64} << 10, true},
    };
    double disk_seq = 0, disk_group = 0;
    const int disk_reps = o.quick ? 2 : 3;
    for (int rep = 0; rep < disk_reps; ++rep)
        for (const disk_case& c : cases) {
            const disk_result r = disk_write(o.dir + "/disk-bench.tmp", c.chunk, seq_total, c.sync_each, disk_max_s);
            std::printf("%-44s %10.0f %8.2f %8.0f %10.0f\n", c.name, r.bytes / 1e6, r.seconds, r.syncs, r.mbps());
            e.line("disk", kv("how", c.name) + kv("rep", double(rep)) + kv("chunk_bytes", double(c.chunk)) +
                               kv("bytes", r.bytes) + kv("seconds", r.seconds) + kv("syncs", r.syncs) +
                               kv("mb_per_s", r.mbps()));
            if (&c == &cases[0]) disk_seq = std::max(disk_seq, r.mbps());
            if (&c == &cases[1]) disk_group = std::max(disk_group, r.mbps());
        }
    std::printf("    the disk (best of %d): %.0f MB/s sequential with one fdatasync, %.0f MB/s with one per group\n",
                disk_reps, disk_seq, disk_group);
    e.line("disk_best",
           kv("seq_mb_per_s", disk_seq) + kv("group_mb_per_s", disk_group) + kv("reps", double(disk_reps)));
    std::fflush(stdout);

    // [2] The log alone.
    std::printf("\n[2] the write-ahead log alone (write_log, no corpus): %lld one-row records (%zu B) in flight\n",
                static_cast<long long>(o.writers), record_bytes);
    std::printf("%10s %10s %10s %12s %12s %10s\n", "records/s", "MB/s", "fdatasyncs", "records/sync", "dev flushes",
                "flush/sync");
    const log_result lr = log_only(e, o.dir + "/log-only", d, o.writers, o.write_s);
    const double flush_per_sync = lr.flushes > 0 ? lr.flushes / lr.groups : 0.0;
    std::printf("%10.0f %10.0f %10.0f %12.1f %12.0f %10.2f\n", lr.records / lr.seconds, lr.bytes / lr.seconds / 1e6,
                lr.groups, lr.records / lr.groups, lr.flushes, flush_per_sync);
    e.line("log_only", kv("in_flight", double(o.writers)) + kv("record_bytes", lr.record_bytes) +
                           kv("seconds", lr.seconds) + kv("records", lr.records) + kv("groups", lr.groups) +
                           kv("bytes", lr.bytes) + kv("dev_flushes", lr.flushes) +
                           kv("records_per_s", lr.records / lr.seconds) + kv("mb_per_s", lr.bytes / lr.seconds / 1e6) +
                           kv("records_per_sync", lr.records / lr.groups) +
                           kv("ratio_disk_seq", lr.bytes / lr.seconds / 1e6 / disk_seq));
    std::fflush(stdout);

    // [3] The corpus's writes.
    std::printf("\n[3] durable upserts through live_corpus::submit, %lld in flight, d = %lld, fresh ids, %.0f s each\n",
                static_cast<long long>(o.writers), static_cast<long long>(d), o.write_s);
    std::printf(
        "    (records/sync: device flushes / (flushes per fdatasync measured in [2]); ratio: payload MB/s over\n"
        "     the disk's [1] sequential figure, and over its per-group-sync figure)\n");
    std::printf("%5s %10s %10s %9s %9s %10s %10s %10s %8s %8s %6s\n", "rows", "rows/s", "payload", "log MB/s",
                "records", "p50 ms", "p99 ms", "recs/sync", "ratio", "ratio", ">=0.7");
    std::printf("%5s %10s %10s %9s %9s %10s %10s %10s %8s %8s %6s\n", "/wr", "", "MB/s", "", "/s", "", "", "", "seq",
                "group", "");
    const auto max_rows_for = [&](std::int64_t) {
        return static_cast<std::int64_t>(o.max_write_gb * 1e9 / (double(d) * 4.0));
    };
    for (const std::int64_t rpw : o.rows_per_write) {
        const std::string wdir = o.dir + "/writes";
        fs::remove_all(wdir);
        write_phase_result r;
        {
            tf::live_corpus lc({.dim = d, .directory = wdir});
            r = run_writes(e, lc, pool, pool_rows, rpw, o.writers, 0, o.write_s, max_rows_for(rpw),
                           [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); });
        }
        fs::remove_all(wdir);
        const double groups = r.flushes > 0 && flush_per_sync > 0 ? r.flushes / flush_per_sync : 0.0;
        const double mbps = r.payload_mbps(d);
        std::printf("%5lld %10.0f %10.0f %9.0f %9.0f %10.2f %10.2f %10.1f %8.2f %8.2f %6s\n",
                    static_cast<long long>(rpw), r.rows_per_s(), mbps, r.log_bytes / r.seconds / 1e6,
                    r.writes / r.seconds, r.p50_us / 1e3, r.p99_us / 1e3, groups > 0 ? r.writes / groups : 0.0,
                    mbps / disk_seq, mbps / disk_group, mbps >= 0.7 * disk_seq ? "yes" : "NO");
        e.line("writes", kv("rows_per_write", double(rpw)) + kv("in_flight", double(o.writers)) +
                             kv("seconds", r.seconds) + kv("rows", r.rows) + kv("writes", r.writes) +
                             kv("errors", r.errors) + kv("rows_per_s", r.rows_per_s()) + kv("payload_mb_per_s", mbps) +
                             kv("log_mb_per_s", r.log_bytes / r.seconds / 1e6) + kv("dev_flushes", r.flushes) +
                             kv("dev_mb_written", r.dev_bytes / 1e6) + kv("est_groups", groups) +
                             kv("writes_per_group", groups > 0 ? r.writes / groups : 0.0) + kv("p50_us", r.p50_us) +
                             kv("p99_us", r.p99_us) + kv("disk_seq_mb_per_s", disk_seq) +
                             kv("disk_group_mb_per_s", disk_group) + kv("ratio_disk_seq", mbps / disk_seq) +
                             kv("ratio_disk_group", mbps / disk_group));
        std::fflush(stdout);
    }

    // [4] Searches with and without the writers.
    {
        std::printf(
            "\n[4] searches: %lld x %lld compacted corpus, batches of %lld queries, k = %lld, one session of "
            "1 permit each (CPU 0),\n    one after the other, %.0f s per row; writers as in [3] (1 row per "
            "write, CPU %u)\n",
            static_cast<long long>(o.search_rows), static_cast<long long>(d), static_cast<long long>(o.batch),
            static_cast<long long>(o.k), o.search_s, io_cpu);
        const std::string sdir = o.dir + "/search";
        const std::string odir = o.dir + "/other";
        fs::remove_all(sdir);
        fs::remove_all(odir);
        const std::vector<float> base = random_rows(o.search_rows, d, 2);
        const std::int64_t base_rows = o.search_rows;
        const std::vector<float> qv = random_rows(o.batch, d, 3);
        const tf::tensor queries = tf::tensor::from(std::span<const float>(qv), {o.batch, d});
        tf::live_corpus lc({.dim = d, .directory = sdir});
        bulk_load(lc, base, base_rows, o.search_rows);
        lc.compact();
        (void)lc.checkpoint();  // the load's log goes: the searched corpus's directory is a checkpoint
        run_searches(cpu, lc, queries, o.k, 0.5);  // warm-up

        std::printf("%-46s %9s %9s %9s %9s %9s %10s %10s\n", "case", "stored", "q/s", "p50 ms", "p99 ms", "writer",
                    "q/s ratio", "p99 ratio");
        std::printf("%-46s %9s %9s %9s %9s %9s %10s %10s\n", "", "rows", "", "", "", "rows/s", ">=0.8", "<=1.5");
        auto show = [&](const char* name, const search_result& s, const write_phase_result* w,
                        const search_result* ro) {
            char qr[32] = "", pr[32] = "";
            if (ro != nullptr) {
                std::snprintf(qr, sizeof qr, "%.2f %s", s.qps() / ro->qps(), s.qps() >= 0.8 * ro->qps() ? "ok" : "NO");
                std::snprintf(pr, sizeof pr, "%.2f %s", s.p99_us / ro->p99_us,
                              s.p99_us <= 1.5 * ro->p99_us ? "ok" : "NO");
            }
            std::printf("%-46s %9.0f %9.0f %9.2f %9.2f %9.0f %10s %10s\n", name, s.rows_seen, s.qps(), s.p50_us / 1e3,
                        s.p99_us / 1e3, w ? w->rows_per_s() : 0.0, qr, pr);
            std::string f = kv("case", name) + kv("batch", double(o.batch)) + kv("k", double(o.k)) +
                            kv("base_rows", double(o.search_rows)) + kv("stored_rows", s.rows_seen) +
                            kv("seconds", s.seconds) + kv("searches", s.searches) + kv("qps", s.qps()) +
                            kv("p50_us", s.p50_us) + kv("p99_us", s.p99_us);
            if (w)
                f += kv("writer_rows_per_s", w->rows_per_s()) + kv("writer_payload_mb_per_s", w->payload_mbps(d)) +
                     kv("writer_p99_us", w->p99_us);
            if (ro) f += kv("qps_ratio", s.qps() / ro->qps()) + kv("p99_ratio", s.p99_us / ro->p99_us);
            e.line("search", f);
            std::fflush(stdout);
        };
        const search_result ro = run_searches(cpu, lc, queries, o.k, o.search_s);
        show("read-only", ro, nullptr, nullptr);

        // (a) The writers write to another corpus on the same disk.
        search_result sa;
        write_phase_result wa;
        {
            tf::live_corpus other({.dim = d, .directory = odir});
            wa = run_writes(e, other, pool, pool_rows, 1, o.writers, 0, o.search_s, 0,
                            [&](double s) { sa = run_searches(cpu, lc, queries, o.k, s); });
        }
        fs::remove_all(odir);
        show("(a) writers on another corpus, same disk", sa, &wa, &ro);

        // (b) The writers write to the searched corpus (new ids: it grows meanwhile).
        search_result sb;
        const write_phase_result wb =
            run_writes(e, lc, pool, pool_rows, 1, o.writers, std::uint64_t{1} << 40, o.search_s, 0,
                       [&](double s) { sb = run_searches(cpu, lc, queries, o.k, s); });
        const search_result after = run_searches(cpu, lc, queries, o.k, o.search_s);
        show("(b) writers on the searched corpus", sb, &wb, &ro);
        show("    read-only after (b), the grown corpus", after, nullptr, nullptr);
        // Against the mean of the read-only figures before and after: the corpus grew linearly.
        search_result mean = ro;
        mean.queries = 1.0;
        mean.seconds = 2.0 / (ro.qps() + after.qps());
        mean.p99_us = (ro.p99_us + after.p99_us) / 2;
        mean.rows_seen = (ro.rows_seen + after.rows_seen) / 2;
        show("(b) vs the mean of read-only before and after", sb, &wb, &mean);
    }
    fs::remove_all(o.dir + "/search");

    // [5] Recovery.
    if (o.recovery) {
        const std::string rdir = o.dir + "/recovery";
        fs::remove_all(rdir);
        std::int64_t rows = o.recovery_rows;
        std::uint64_t tail = static_cast<std::uint64_t>(o.tail_mb) << 20;
        struct statvfs vfs {};
        ::statvfs(o.dir.c_str(), &vfs);
        const std::uint64_t disk_free = std::uint64_t(vfs.f_bavail) * vfs.f_frsize;
        const std::uint64_t mem_free = mem_available();
        const auto row_bytes = static_cast<std::uint64_t>(d) * 4;
        // Disk: the rows' log and their checkpoint at once, then the tail, 2 GB spare. Memory: the
        // corpus, the checkpoint's copy, the tail's rows, 2 GB spare.
        auto need_disk = [&] { return 2 * rows * row_bytes + tail + (std::uint64_t{2} << 30); };
        auto need_mem = [&] { return 2 * rows * row_bytes + tail + (std::uint64_t{2} << 30); };
        std::string scaled;
        while ((need_disk() > disk_free || need_mem() > mem_free) && rows > 10000) {
            rows /= 2;
            tail /= 2;
            scaled = " (scaled down: " + std::to_string(disk_free >> 20) + " MiB free on disk, " +
                     std::to_string(mem_free >> 20) + " MiB memory available)";
        }
        std::printf(
            "\n[5] recovery: %lld x %lld rows checkpointed, then a log tail of %llu MiB of one-row upserts "
            "(%lld in flight)%s\n",
            static_cast<long long>(rows), static_cast<long long>(d), static_cast<unsigned long long>(tail >> 20),
            static_cast<long long>(o.writers), scaled.c_str());
        const std::int64_t tail_rows = static_cast<std::int64_t>(tail / record_bytes);
        double t_load = 0, t_ckpt = 0, t_tail = 0;
        {
            tf::live_corpus lc({.dim = d, .directory = rdir});
            auto t0 = clk::now();
            bulk_load(lc, pool, pool_rows, rows);
            t_load = seconds_since(t0);
            t0 = clk::now();
            if (const std::error_code ec = lc.checkpoint()) {
                std::fprintf(stderr, "checkpoint: %s\n", ec.message().c_str());
                return 1;
            }
            t_ckpt = seconds_since(t0);
            // The tail: upserts of existing ids (the corpus stays at `rows` live rows).
            t0 = clk::now();
            write_load load(lc, pool, pool_rows, 1, 0, static_cast<std::uint64_t>(rows), tail_rows);
            load.start(o.writers);
            load.wait();
            t_tail = seconds_since(t0);
        }
        std::vector<std::string> paths;
        const std::uint64_t on_disk = files_bytes(rdir, &paths);
        std::uint64_t log_bytes = 0, npy_bytes = 0;
        for (const std::string& p : paths) {
            const std::uint64_t sz = fs::file_size(p);
            if (p.find("wal-") != std::string::npos) log_bytes += sz;
            if (p.size() > 4 && p.substr(p.size() - 4) == ".npy") npy_bytes += sz;
        }
        std::printf(
            "    built in %.1f s (rows %.1f s, checkpoint %.1f s, tail %.1f s): %.0f MB of checkpoint, %.0f MB "
            "of log, %zu files\n",
            t_load + t_ckpt + t_tail, t_load, t_ckpt, t_tail, double(npy_bytes) / 1e6, double(log_bytes) / 1e6,
            paths.size());
        auto reopen = [&](bool cold, std::int64_t& live) {
            if (cold) drop_caches();
            const auto t0 = clk::now();
            tf::live_corpus lc({.dim = d, .directory = rdir});
            const double s = seconds_since(t0);
            live = lc.stats().rows;
            return s;
        };
        std::int64_t live_cold = 0, live_warm = 0;
        const double rec_cold = reopen(true, live_cold);
        const double rec_warm = reopen(false, live_warm);
        std::uint64_t read_cold_bytes = 0, read_warm_bytes = 0;
        paths.clear();
        files_bytes(rdir, &paths);
        drop_caches();
        const double read_cold = read_files(paths, read_cold_bytes);
        const double read_warm = read_files(paths, read_warm_bytes);
        std::printf("%-34s %10s %10s %10s %12s\n", "", "s", "MB/s", "live rows", "ratio <=1.5");
        auto row = [&](const char* name, double s, std::int64_t live, double base) {
            char r[32] = "";
            if (base > 0) std::snprintf(r, sizeof r, "%.2f %s", s / base, s <= 1.5 * base ? "ok" : "NO");
            std::printf("%-34s %10.2f %10.0f %10lld %12s\n", name, s, double(on_disk) / s / 1e6,
                        static_cast<long long>(live), r);
        };
        row("read() the files, cold", read_cold, 0, 0);
        row("reopen the corpus, cold", rec_cold, live_cold, read_cold);
        row("read() the files, warm", read_warm, 0, 0);
        row("reopen the corpus, warm", rec_warm, live_warm, read_warm);
        e.line("recovery", kv("rows", double(rows)) + kv("tail_rows", double(tail_rows)) +
                               kv("scaled", scaled.empty() ? "no" : "yes") + kv("checkpoint_bytes", double(npy_bytes)) +
                               kv("log_bytes", double(log_bytes)) + kv("files_bytes", double(on_disk)) +
                               kv("build_load_s", t_load) + kv("build_checkpoint_s", t_ckpt) +
                               kv("build_tail_s", t_tail) + kv("reopen_cold_s", rec_cold) +
                               kv("reopen_warm_s", rec_warm) + kv("read_cold_s", read_cold) +
                               kv("read_warm_s", read_warm) + kv("live_rows_cold", double(live_cold)) +
                               kv("live_rows_warm", double(live_warm)) + kv("ratio_cold", rec_cold / read_cold) +
                               kv("ratio_warm", rec_warm / read_warm));
        fs::remove_all(rdir);
    }
    std::fclose(e.json);
    return 0;
}
