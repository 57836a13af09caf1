#pragma once
// The corpus: an N x D f32 matrix of unit rows (cosine similarity is then a dot
// product), generated reproducibly or loaded from a .npy file, and the
// brute-force reference that search results are checked against.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <asio/awaitable.hpp>
#include <tenferro/tenferro.hpp>

namespace embedding_search {

struct search_hit {
    std::uint64_t id = 0;  ///< the row's id (its row number in a corpus loaded from a file)
    float score = 0.0f;
};

/// A random corpus: each row is drawn from a standard normal distribution and
/// scaled to unit length, i.e. a uniformly random direction. Row `r` depends
/// only on `(seed, r, dim)`, never on the number of threads, so the same
/// arguments give the same bytes everywhere. Runs in one tenferro session that
/// holds every permit of `cpu`.
asio::awaitable<tenferro::tensor> generate_corpus(tenferro::cpu_backend& cpu, std::int64_t rows, std::int64_t dim,
                                                  std::uint64_t seed);

/// Where the corpus comes from: a file, or generated (and then written to
/// `path` when it is not empty).
struct corpus_source {
    std::string path;       ///< a .npy file (f32, 2-D, C order); may be empty when generating
    bool generate = false;  ///< generate rows x dim instead of reading `path`
    std::int64_t rows = 200'000;
    std::int64_t dim = 128;
    std::uint64_t seed = 42;
    /// Scale the rows of a file to unit length (false: leave them as read, for a corpus that
    /// normalises them itself and keeps them as written: tenferro::live_corpus_options::normalize).
    bool normalise = true;
};

/// What `obtain_corpus` did, for the demo's report.
struct corpus_origin {
    bool generated = false;
    bool written = false;  ///< the generated corpus was saved to `path`
    double seconds = 0.0;
    std::string note;  ///< e.g. why a file could not be written
};

/// Reads or generates the corpus described by `source` (see `corpus_source`).
/// A corpus read from a file gets its rows scaled to unit length (in a session
/// on `cpu`), so that dot products are cosines whatever the file held.
/// \throws std::system_error or std::runtime_error naming the file for an
/// unreadable or malformed corpus, and std::runtime_error naming the row and
/// column of the first inf or NaN for a corpus that holds one.
asio::awaitable<tenferro::tensor> obtain_corpus(tenferro::cpu_backend& cpu, const corpus_source& source,
                                                corpus_origin* origin = nullptr);

/// A deterministic query near corpus row `row`: the row plus Gaussian noise of
/// relative size `noise`, not normalised.
std::vector<float> query_near_row(const tenferro::tensor& corpus, std::int64_t row, double noise, std::uint64_t seed);

/// The exact top `k` by cosine similarity, in double precision, one thread:
/// the reference the served results are checked against.
std::vector<search_hit> brute_force_top_k(const tenferro::tensor& corpus, std::span<const float> query, std::int64_t k);

/// The outcome of `compare_with_reference`.
struct reference_check {
    bool ok = false;
    double max_score_error = 0.0;
    std::string detail;
};

/// The served top-k against the exact one: the same rows in the same order,
/// except that rows whose exact scores differ by less than 1e-4 may
/// trade places (f32 rounding decides such near-ties); every served score
/// within 1e-4 of the exact score at its rank.
reference_check compare_with_reference(const tenferro::tensor& corpus, std::span<const float> query,
                                       const std::vector<search_hit>& served, const std::vector<search_hit>& exact);

}  // namespace embedding_search
