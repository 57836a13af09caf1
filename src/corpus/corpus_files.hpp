#pragma once
// A durable live corpus's directory (L6; design in docs/design/live-corpus.md, "Durability"):
//
//   CORPUS                        what the corpus is: "tenferro-live-corpus 1", its dimension and
//                                 whether it normalises; written once, when the directory is new
//   CHECKPOINT                    the last checkpoint: "seq S" and "rows N"; replaced atomically
//   checkpoint-S-rows.npy         its N rows as written (f32, N x dim)
//   checkpoint-S-ids.npy          their ids (i64, the u64 bits)
//   checkpoint-S-label_ends.npy   one past each row's last label in ...-labels.npy (i64)
//   checkpoint-S-labels.npy       every row's labels, one after the other (i64)
//   wal-F.log                     write-ahead logs (write_log.hpp), F the first seq each may hold
//                                 (20 digits, so that names sort as numbers)
//
// Recovery loads the checkpoint, then replays every log in order, skipping the records the
// checkpoint holds. And the encoding of one write as a log record.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "tenferro/live_corpus.hpp"

namespace tenferro::detail::corpus {

/// One write as a log record's payload: the item count (u64), then per item its id (u64), a
/// flags word (u32: bit 0 an erasure), its label count (u32), the labels (u32 each) and, for an
/// upsert, its `dim` values (f32). Host byte order (the log does not travel between machines).
std::vector<std::byte> encode_write(const corpus_write& w);
/// The write a payload holds; corpus_errc::corrupt when it does not parse for `dim`.
std::error_code decode_write(std::span<const std::byte> payload, std::int64_t dim, corpus_write& out);

struct corpus_identity {
    std::int64_t dim = 0;
    bool normalize = false;
};

/// Reads DIR/CORPUS, or writes it (durably) when the directory holds no corpus yet; creates DIR
/// when missing. corpus_errc::dimension_mismatch when it describes another corpus.
std::error_code open_identity(const std::string& dir, const corpus_identity& want, bool& created);

/// The checkpoint named by DIR/CHECKPOINT: its seq and row count (0, 0 when there is none).
struct checkpoint_info {
    std::uint64_t seq = 0;
    std::int64_t rows = 0;
};
std::error_code read_checkpoint_info(const std::string& dir, checkpoint_info& out);

/// The rows of a checkpoint, as written (raw vectors), with their ids and labels.
struct checkpoint_rows {
    std::vector<float> values;  // rows x dim
    std::vector<row_id> ids;
    std::vector<std::uint32_t> label_ends;
    std::vector<row_label> labels;
};
/// A checkpoint as read: the files' tensors, checked (shapes, dtypes, label counts and values),
/// so that recovery builds its segment from them with no copy in between.
struct checkpoint_tensors {
    tensor values;      // rows x dim, f32
    tensor ids;         // rows, i64 (the u64 bits)
    tensor label_ends;  // rows, i64
    tensor labels;      // i64
};
std::error_code read_checkpoint(const std::string& dir, const checkpoint_info& info, std::int64_t dim,
                                checkpoint_tensors& out);
/// Writes `rows` as checkpoint `seq` (each file replaced atomically by async_write_npy), then
/// replaces DIR/CHECKPOINT durably. Blocking.
std::error_code write_checkpoint(const std::string& dir, std::uint64_t seq, std::int64_t dim,
                                 const checkpoint_rows& rows);
/// Removes the checkpoint files of every checkpoint but `keep_seq`'s, and the logs whose name
/// says they start before `keep_first_seq` (best effort: an error leaves a file behind, which
/// the next call removes).
void remove_stale_files(const std::string& dir, std::uint64_t keep_seq, std::uint64_t keep_first_seq);

/// The write-ahead logs of DIR, by first seq.
struct log_file {
    std::uint64_t first_seq = 0;
    std::string path;
};
std::error_code list_logs(const std::string& dir, std::vector<log_file>& out);
std::string log_path(const std::string& dir, std::uint64_t first_seq);

}  // namespace tenferro::detail::corpus
