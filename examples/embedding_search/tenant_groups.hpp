#pragma once
// Tenants and deadlines in the server, the parts that are plain functions:
// `--group NAME:WEIGHT` specs, the timeout header's value, and the predicted
// wait that decides early rejection and the Retry-After of a 503
// `deadline_exceeded` (docs/embedding_search.md, "Tenants and deadlines").

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <tenferro/admission_group.hpp>
#include <tl/expected.hpp>

namespace embedding_search {

/// The request header naming a request's tenant group (no header: the first group).
inline constexpr std::string_view group_header = "X-Tenferro-Group";
/// The request header giving a request's timeout in milliseconds.
inline constexpr std::string_view timeout_header = "X-Tenferro-Timeout-Ms";

/// Longest group name; names are 1 to this many of [A-Za-z0-9_.-].
inline constexpr std::size_t max_group_name = 64;
/// Largest weight a `--group` accepts.
inline constexpr unsigned max_group_weight = 10'000;
/// Largest timeout accepted (one day), in the body's `timeout_ms` and the header.
inline constexpr std::int64_t max_timeout_ms = 86'400'000;

/// `NAME:WEIGHT` -> a group; the error says what was wrong with `spec`.
tl::expected<tenferro::group_options, std::string> parse_group_spec(std::string_view spec);

/// "" when the groups can configure a host; otherwise why not (a name given twice).
std::string check_groups(const std::vector<tenferro::group_options>& groups);

/// Whether `name` could be a group's name (so that it may be echoed in an error).
bool valid_group_name(std::string_view name);

/// The timeout header's value: digits only, at most `max_timeout_ms`.
tl::expected<std::int64_t, std::string> parse_timeout_header(std::string_view value);

/// What the server knows when it predicts how long a search arriving in a
/// group will wait for its batch body to start.
struct wait_inputs {
    std::size_t waiting_ahead = 0;      ///< the group's items already waiting in its batcher
    std::size_t max_batch = 1;          ///< items per batch
    double mean_batch_seconds = 0.0;    ///< the group's recent mean batch-body duration (0: none yet)
    unsigned weight = 1;                ///< the group's weight
    unsigned backlogged_weight = 1;     ///< its weight plus that of every other group with items waiting
};

/// waiting_ahead / max_batch batches of the group's own work are ahead of the
/// new item, each mean_batch_seconds long; while the other backlogged groups
/// stay backlogged the group gets weight / backlogged_weight of the permit-time,
/// so that work takes backlogged_weight / weight times as long in wall time.
/// Errs low on purpose (the batch running at arrival and the item's own batch
/// are left out; other groups may drain): early rejection only refuses what
/// cannot make it, and the deadline timer catches the rest.
double predicted_wait_seconds(const wait_inputs& in);

/// Retry-After for a `deadline_exceeded` 503: the predicted wait in whole
/// seconds, rounded up, at least 1 (and at most a day).
int retry_after_for(double predicted_wait_seconds);

}  // namespace embedding_search
