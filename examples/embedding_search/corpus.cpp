#include "corpus.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <system_error>

#include <asio/this_coro.hpp>
#include <tenferro/io.hpp>

namespace tf = tenferro;

namespace embedding_search {

namespace {

std::uint64_t splitmix64(std::uint64_t& state) noexcept {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/// A uniform double in (0, 1]: never 0, so its logarithm is finite.
double uniform_open0(std::uint64_t& state) noexcept { return double((splitmix64(state) >> 11) + 1) * 0x1.0p-53; }

/// Fills `out[0, n)` with standard normal samples (Box-Muller), from a stream
/// that depends only on `stream_seed`.
void fill_normal(float* out, std::int64_t n, std::uint64_t stream_seed) noexcept {
    std::uint64_t state = stream_seed;
    for (std::int64_t j = 0; j < n; j += 2) {
        const double radius = std::sqrt(-2.0 * std::log(uniform_open0(state)));
        const double angle = 2.0 * std::numbers::pi * uniform_open0(state);
        out[j] = static_cast<float>(radius * std::cos(angle));
        if (j + 1 < n) out[j + 1] = static_cast<float>(radius * std::sin(angle));
    }
}

void normalise(float* row, std::int64_t n) noexcept {
    double norm_squared = 0.0;
    for (std::int64_t j = 0; j < n; ++j) norm_squared += double(row[j]) * double(row[j]);
    const double inverse = norm_squared > 0.0 ? 1.0 / std::sqrt(norm_squared) : 0.0;
    for (std::int64_t j = 0; j < n; ++j) row[j] = static_cast<float>(double(row[j]) * inverse);
}

/// As `normalise`, but leaves a row whose length is already 1 to f32 precision
/// untouched, so that a saved generated corpus reads back bit for bit.
void normalise_unless_unit(float* row, std::int64_t n) noexcept {
    double norm_squared = 0.0;
    for (std::int64_t j = 0; j < n; ++j) norm_squared += double(row[j]) * double(row[j]);
    if (std::abs(norm_squared - 1.0) > 1e-6) normalise(row, n);
}

std::uint64_t row_stream(std::uint64_t seed, std::int64_t row) noexcept {
    std::uint64_t s = seed ^ (0xD1B54A32D192ED03ull * std::uint64_t(row + 1));
    return splitmix64(s);
}

asio::awaitable<tf::tensor> read_corpus_file(const std::string& path) {
    // Throws std::system_error naming the path (missing file, not .npy, truncated, ...).
    const auto executor = co_await asio::this_coro::executor;
    co_return co_await tf::async_read_npy(executor, path);
}

/// Saves a generated corpus; returns why it could not, or an empty string.
asio::awaitable<std::string> write_corpus_file(const std::string& path, const tf::tensor& corpus) {
    const auto executor = co_await asio::this_coro::executor;
    std::string failure;
    try {
        co_await tf::async_write_npy(executor, path, corpus);
    } catch (const std::system_error& e) {
        failure = std::string("not saved: ") + e.what();
    }
    co_return failure;
}

}  // namespace

asio::awaitable<tf::tensor> generate_corpus(tf::cpu_backend& cpu, std::int64_t rows, std::int64_t dim,
                                            std::uint64_t seed) {
    if (rows < 1 || dim < 1) {
        throw std::invalid_argument("generate_corpus: rows and dim must be positive, got " + std::to_string(rows) +
                                    " x " + std::to_string(dim));
    }
    tf::tensor corpus = tf::tensor::empty(tf::dtype::f32, {rows, dim});
    float* const data = corpus.data<float>();
    tf::session_options options;
    options.permits = cpu.permits();
    auto body = [data, rows, dim, seed](tf::backend_session& s) {
        s.parallel_for(rows, 1024, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t r = begin; r < end; ++r) {
                float* row = data + r * dim;
                fill_normal(row, dim, row_stream(seed, r));
                normalise(row, dim);
            }
        });
    };
    tf::session_result<void> done = co_await cpu.with_backend_session(options, body);
    if (!done) throw std::runtime_error("generate_corpus: " + done.error().message());
    co_return corpus;
}

asio::awaitable<tf::tensor> obtain_corpus(tf::cpu_backend& cpu, const corpus_source& source, corpus_origin* origin) {
    const auto start = std::chrono::steady_clock::now();
    corpus_origin info;
    tf::tensor corpus;
    if (source.generate) {
        corpus = co_await generate_corpus(cpu, source.rows, source.dim, source.seed);
        info.generated = true;
        if (!source.path.empty()) {
            info.note = co_await write_corpus_file(source.path, corpus);
            info.written = info.note.empty();
        }
    } else {
        corpus = co_await read_corpus_file(source.path);
        if (corpus.type() != tf::dtype::f32 || corpus.rank() != 2 || corpus.shape()[0] < 1 || corpus.shape()[1] < 1) {
            throw std::runtime_error("corpus " + source.path + " must be a non-empty 2-D f32 array, got " +
                                     std::string(tf::to_string(corpus.type())) + " " + tf::to_string(corpus.shape()));
        }
        // Scores are cosines only if every row has unit length; a file from
        // elsewhere need not. (Rows of zeros stay zero: they score 0.)
        // A row holding inf or NaN would normalise to NaN, outrank every row
        // for every query and be served with a null score, so such a corpus
        // is refused, naming the first bad element (skipping the row instead
        // would renumber the rows after it, or leave a hole that still
        // scores): the file must be fixed.
        float* const data = corpus.data<float>();
        const std::int64_t rows = corpus.shape()[0], dim = corpus.shape()[1];
        const std::int64_t none = rows * dim;
        std::atomic<std::int64_t> first_bad{none};  // flat index of the first non-finite element
        tf::session_options options;
        options.permits = cpu.permits();
        auto body = [data, rows, dim, &first_bad, normalise = source.normalise](tf::backend_session& s) {
            s.parallel_for(rows, 1024, [&](std::int64_t begin, std::int64_t end) {
                for (std::int64_t r = begin; r < end; ++r) {
                    const float* row = data + r * dim;
                    const float* bad = std::find_if(row, row + dim, [](float v) { return !std::isfinite(v); });
                    if (bad != row + dim) {
                        // Keep the smallest index over all blocks: the first in the file.
                        std::int64_t at = r * dim + (bad - row), seen = first_bad.load();
                        while (at < seen && !first_bad.compare_exchange_weak(seen, at)) {
                        }
                        return;  // rows after it in this block cannot come first
                    }
                    if (normalise) normalise_unless_unit(data + r * dim, dim);
                }
            });
        };
        tf::session_result<void> done = co_await cpu.with_backend_session(options, body);
        if (!done) throw std::runtime_error("normalising the corpus: " + done.error().message());
        if (const std::int64_t at = first_bad.load(); at != none) {
            const float v = data[at];
            throw std::runtime_error("corpus " + source.path + ": row " + std::to_string(at / dim) + ", column " +
                                     std::to_string(at % dim) + " is " +
                                     (std::isnan(v) ? "NaN"
                                      : v > 0       ? "inf"
                                                    : "-inf") +
                                     "; every element must be a finite number (rows and columns count from 0)");
        }
    }
    info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (origin) *origin = std::move(info);
    co_return corpus;
}

std::vector<float> query_near_row(const tf::tensor& corpus, std::int64_t row, double noise, std::uint64_t seed) {
    const std::int64_t dim = corpus.shape()[1];
    const float* source = corpus.data<float>() + row * dim;
    std::vector<float> q(static_cast<std::size_t>(dim));
    fill_normal(q.data(), dim, row_stream(seed ^ 0x5EA5C4ull, row));
    for (std::int64_t j = 0; j < dim; ++j) {
        q[std::size_t(j)] = static_cast<float>(source[j] + noise * q[std::size_t(j)] / std::sqrt(double(dim)));
    }
    return q;
}

std::vector<search_hit> brute_force_top_k(const tf::tensor& corpus, std::span<const float> query, std::int64_t k) {
    const std::int64_t rows = corpus.shape()[0], dim = corpus.shape()[1];
    double norm_squared = 0.0;
    for (const float v : query) norm_squared += double(v) * double(v);
    const double inverse = 1.0 / std::sqrt(norm_squared);
    std::vector<std::pair<double, std::int64_t>> scored(static_cast<std::size_t>(rows));
    const float* data = corpus.data<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
        double dot = 0.0;
        for (std::int64_t j = 0; j < dim; ++j) dot += double(data[r * dim + j]) * double(query[std::size_t(j)]);
        scored[std::size_t(r)] = {dot * inverse, r};
    }
    k = std::min(k, rows);
    std::partial_sort(scored.begin(), scored.begin() + k, scored.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::vector<search_hit> hits;
    for (std::int64_t i = 0; i < k; ++i)
        hits.push_back(
            {static_cast<std::uint64_t>(scored[std::size_t(i)].second), float(scored[std::size_t(i)].first)});
    return hits;
}

reference_check compare_with_reference(const tf::tensor& corpus, std::span<const float> query,
                                       const std::vector<search_hit>& served, const std::vector<search_hit>& exact) {
    constexpr double tolerance = 1e-4;
    reference_check c;
    if (served.size() != exact.size()) {
        c.detail = "served " + std::to_string(served.size()) + " results, expected " + std::to_string(exact.size());
        return c;
    }
    const std::int64_t dim = corpus.shape()[1];
    double norm_squared = 0.0;
    for (const float v : query) norm_squared += double(v) * double(v);
    const double inverse = 1.0 / std::sqrt(norm_squared);
    for (std::size_t i = 0; i < served.size(); ++i) {
        c.max_score_error = std::max(c.max_score_error, std::abs(double(served[i].score) - double(exact[i].score)));
        if (served[i].id == exact[i].id) continue;
        if (served[i].id >= static_cast<std::uint64_t>(corpus.shape()[0])) {
            c.detail = "rank " + std::to_string(i + 1) + ": id out of range";
            return c;
        }
        const float* row = corpus.data<float>() + static_cast<std::int64_t>(served[i].id) * dim;
        double dot = 0.0;
        for (std::int64_t j = 0; j < dim; ++j) dot += double(row[j]) * double(query[std::size_t(j)]);
        if (std::abs(dot * inverse - double(exact[i].score)) > tolerance) {
            c.detail = "rank " + std::to_string(i + 1) + ": served row " + std::to_string(served[i].id) +
                       ", reference row " + std::to_string(exact[i].id);
            return c;
        }
    }
    if (c.max_score_error > tolerance) {
        c.detail = "scores differ by " + std::to_string(c.max_score_error);
        return c;
    }
    c.ok = true;
    return c;
}

}  // namespace embedding_search
