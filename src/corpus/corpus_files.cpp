// A durable live corpus's files (corpus_files.hpp).

#include "corpus/corpus_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tenferro/io.hpp"

namespace tenferro::detail::corpus {
namespace {

namespace fs = std::filesystem;

std::error_code errno_code() { return {errno, std::system_category()}; }

template <class T>
void put(std::vector<std::byte>& out, const T& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}

template <class T>
bool take(std::span<const std::byte>& in, T& v) {
    if (in.size() < sizeof(T)) return false;
    std::memcpy(&v, in.data(), sizeof(T));
    in = in.subspan(sizeof(T));
    return true;
}

// Writes `text` to DIR/NAME through a temporary, fdatasync'ed, renamed over NAME, and the
// directory fsync'ed: NAME is either the old file or the new one, whatever happens.
std::error_code replace_small_file(const std::string& dir, const std::string& name, const std::string& text) {
    const std::string tmp = dir + "/." + name + ".tmp";
    const std::string dst = dir + "/" + name;
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno_code();
    std::error_code ec;
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            ec = w < 0 ? errno_code() : std::make_error_code(std::errc::io_error);
            break;
        }
        done += static_cast<std::size_t>(w);
    }
    if (!ec && ::fdatasync(fd) != 0) ec = errno_code();
    ::close(fd);
    if (!ec && ::rename(tmp.c_str(), dst.c_str()) != 0) ec = errno_code();
    if (ec) {
        ::unlink(tmp.c_str());
        return ec;
    }
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return errno_code();
    if (::fsync(dfd) != 0) ec = errno_code();
    ::close(dfd);
    return ec;
}

std::error_code read_small_file(const std::string& path, std::string& out, bool& missing) {
    missing = false;
    std::ifstream in(path);
    if (!in) {
        missing = errno == ENOENT;
        return missing ? std::error_code() : errno_code();
    }
    std::ostringstream s;
    s << in.rdbuf();
    out = s.str();
    return {};
}

// Each line "key value": the value of `key`, or nullopt.
bool field(const std::string& text, std::string_view key, std::int64_t& out) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ' ') {
            const char* b = line.data() + key.size() + 1;
            const char* e = line.data() + line.size();
            return std::from_chars(b, e, out).ec == std::errc();
        }
    }
    return false;
}

std::string checkpoint_file(const std::string& dir, std::uint64_t seq, const char* part) {
    return dir + "/checkpoint-" + std::to_string(seq) + "-" + part + ".npy";
}

// The library's own atomic .npy writer and reader, run to completion on the calling thread.
std::error_code write_npy_blocking(const std::string& path, const const_tensor_view& v) {
    asio::io_context io;
    std::error_code ec;
    async_write_npy(io.get_executor(), path, v, [&](asio_error_code e) { ec = std::error_code(e); });
    io.run();
    return ec;
}

std::error_code read_npy_blocking(const std::string& path, tensor& out) {
    asio::io_context io;
    std::error_code ec;
    async_read_npy(io.get_executor(), path, [&](asio_error_code e, tensor t) {
        ec = std::error_code(e);
        out = std::move(t);
    });
    io.run();
    return ec;
}

}  // namespace

std::vector<std::byte> encode_write(const corpus_write& w) {
    std::vector<std::byte> out;
    std::size_t bytes = 8;
    for (std::size_t i = 0; i < w.size(); ++i) {
        const corpus_write::item it = w[i];
        bytes += 16 + 4 * it.labels.size() + 4 * it.vector.size();
    }
    out.reserve(bytes);
    put(out, static_cast<std::uint64_t>(w.size()));
    for (std::size_t i = 0; i < w.size(); ++i) {
        const corpus_write::item it = w[i];
        put(out, it.id);
        put(out, static_cast<std::uint32_t>(it.erase ? 1 : 0));
        put(out, static_cast<std::uint32_t>(it.labels.size()));
        for (const row_label l : it.labels) put(out, l);
        for (const float x : it.vector) put(out, x);
    }
    return out;
}

std::error_code decode_write(std::span<const std::byte> in, std::int64_t dim, corpus_write& out) {
    out.clear();
    const auto corrupt = make_error_code(corpus_errc::corrupt);
    std::uint64_t n = 0;
    if (!take(in, n)) return corrupt;
    std::vector<row_label> labels;
    std::vector<float> values(static_cast<std::size_t>(dim));
    for (std::uint64_t i = 0; i < n; ++i) {
        row_id id = 0;
        std::uint32_t flags = 0, nl = 0;
        if (!take(in, id) || !take(in, flags) || !take(in, nl) || nl > max_row_labels) return corrupt;
        labels.resize(nl);
        for (row_label& l : labels)
            if (!take(in, l)) return corrupt;
        if ((flags & 1U) != 0) {
            out.erase(id);
            continue;
        }
        if (in.size() < values.size() * 4) return corrupt;
        std::memcpy(values.data(), in.data(), values.size() * 4);
        in = in.subspan(values.size() * 4);
        out.upsert(id, values, labels);
    }
    return in.empty() ? std::error_code() : corrupt;
}

std::error_code open_identity(const std::string& dir, const corpus_identity& want, bool& created) {
    created = false;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return ec;
    std::string text;
    bool missing = false;
    if ((ec = read_small_file(dir + "/CORPUS", text, missing))) return ec;
    if (missing) {
        created = true;
        return replace_small_file(dir, "CORPUS",
                                  "tenferro-live-corpus 1\ndim " + std::to_string(want.dim) + "\nnormalize " +
                                      (want.normalize ? "1" : "0") + "\n");
    }
    std::int64_t version = 0, dim = 0, normalize = 0;
    if (!field(text, "tenferro-live-corpus", version) || version != 1 || !field(text, "dim", dim) ||
        !field(text, "normalize", normalize))
        return make_error_code(corpus_errc::corrupt);
    if (dim != want.dim || (normalize != 0) != want.normalize) return make_error_code(corpus_errc::dimension_mismatch);
    return {};
}

std::error_code read_checkpoint_info(const std::string& dir, checkpoint_info& out) {
    out = {};
    std::string text;
    bool missing = false;
    if (const std::error_code ec = read_small_file(dir + "/CHECKPOINT", text, missing)) return ec;
    if (missing) return {};
    std::int64_t seq = 0, rows = 0;
    if (!field(text, "seq", seq) || !field(text, "rows", rows) || seq < 0 || rows < 0)
        return make_error_code(corpus_errc::corrupt);
    out.seq = static_cast<std::uint64_t>(seq);
    out.rows = rows;
    return {};
}

std::error_code read_checkpoint(const std::string& dir, const checkpoint_info& info, std::int64_t dim,
                                checkpoint_tensors& out) {
    out = {};
    if (info.rows == 0) return {};
    std::error_code ec;
    if ((ec = read_npy_blocking(checkpoint_file(dir, info.seq, "rows"), out.values)) ||
        (ec = read_npy_blocking(checkpoint_file(dir, info.seq, "ids"), out.ids)) ||
        (ec = read_npy_blocking(checkpoint_file(dir, info.seq, "label_ends"), out.label_ends)) ||
        (ec = read_npy_blocking(checkpoint_file(dir, info.seq, "labels"), out.labels)))
        return ec;
    const auto n = info.rows;
    const auto corrupt = make_error_code(corpus_errc::corrupt);
    if (out.values.type() != dtype::f32 || out.values.rank() != 2 || out.values.shape()[0] != n ||
        out.values.shape()[1] != dim || out.ids.type() != dtype::i64 || out.ids.rank() != 1 ||
        out.ids.shape()[0] != n || out.label_ends.type() != dtype::i64 || out.label_ends.rank() != 1 ||
        out.label_ends.shape()[0] != n || out.labels.type() != dtype::i64 || out.labels.rank() != 1)
        return corrupt;
    const std::int64_t* e = out.label_ends.data<std::int64_t>();
    const std::int64_t* l = out.labels.data<std::int64_t>();
    const std::int64_t m = out.labels.shape()[0];
    std::int64_t prev = 0;
    for (std::int64_t r = 0; r < n; ++r) {
        if (e[r] < prev || e[r] > m || e[r] - prev > static_cast<std::int64_t>(max_row_labels)) return corrupt;
        prev = e[r];
    }
    for (std::int64_t i = 0; i < m; ++i)
        if (l[i] < 0 || l[i] > 0xFFFFFFFFLL) return corrupt;
    return {};
}

std::error_code write_checkpoint(const std::string& dir, std::uint64_t seq, std::int64_t dim,
                                 const checkpoint_rows& rows) {
    const auto n = static_cast<std::int64_t>(rows.ids.size());
    if (n > 0) {
        std::vector<std::int64_t> ids(rows.ids.begin(), rows.ids.end());
        std::vector<std::int64_t> ends(rows.label_ends.begin(), rows.label_ends.end());
        std::vector<std::int64_t> labels(rows.labels.begin(), rows.labels.end());
        const std::int64_t m = static_cast<std::int64_t>(labels.size());
        std::error_code ec;
        if ((ec = write_npy_blocking(checkpoint_file(dir, seq, "rows"),
                                     const_tensor_view(rows.values.data(), dtype::f32, {n, dim}))) ||
            (ec = write_npy_blocking(checkpoint_file(dir, seq, "ids"),
                                     const_tensor_view(ids.data(), dtype::i64, {n}))) ||
            (ec = write_npy_blocking(checkpoint_file(dir, seq, "label_ends"),
                                     const_tensor_view(ends.data(), dtype::i64, {n}))) ||
            (ec = write_npy_blocking(checkpoint_file(dir, seq, "labels"),
                                     m == 0 ? const_tensor_view(ends.data(), dtype::i64, {0})
                                            : const_tensor_view(labels.data(), dtype::i64, {m}))))
            return ec;
    }
    return replace_small_file(dir, "CHECKPOINT", "seq " + std::to_string(seq) + "\nrows " + std::to_string(n) + "\n");
}

void remove_stale_files(const std::string& dir, std::uint64_t keep_seq, std::uint64_t keep_first_seq) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        std::uint64_t seq = 0;
        if (name.starts_with("checkpoint-")) {
            const char* b = name.data() + 11;
            const auto [end, err] = std::from_chars(b, name.data() + name.size(), seq);
            if (err == std::errc() && seq != keep_seq) fs::remove(e.path(), ec);
        } else if (name.starts_with("wal-") && name.ends_with(".log")) {
            const auto [end, err] = std::from_chars(name.data() + 4, name.data() + name.size() - 4, seq);
            if (err == std::errc() && seq < keep_first_seq) fs::remove(e.path(), ec);
        }
    }
}

std::error_code list_logs(const std::string& dir, std::vector<log_file>& out) {
    out.clear();
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (!name.starts_with("wal-") || !name.ends_with(".log")) continue;
        std::uint64_t seq = 0;
        const auto [end, err] = std::from_chars(name.data() + 4, name.data() + name.size() - 4, seq);
        if (err != std::errc() || end != name.data() + name.size() - 4) continue;
        out.push_back(log_file{seq, e.path().string()});
    }
    if (ec) return ec;
    std::sort(out.begin(), out.end(), [](const log_file& a, const log_file& b) { return a.first_seq < b.first_seq; });
    return {};
}

std::string log_path(const std::string& dir, std::uint64_t first_seq) {
    char name[32];
    std::snprintf(name, sizeof name, "wal-%020llu.log", static_cast<unsigned long long>(first_seq));
    return dir + "/" + name;
}

}  // namespace tenferro::detail::corpus
