// `--group` specs, the timeout header and the wait prediction (tenant_groups.hpp).

#include "tenant_groups.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

namespace embedding_search {

namespace {

tl::unexpected<std::string> fail(std::string message) { return tl::unexpected(std::move(message)); }

bool all_digits(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool valid_group_name(std::string_view name) {
    return !name.empty() && name.size() <= max_group_name && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
               c == '.';
    });
}

tl::expected<tenferro::group_options, std::string> parse_group_spec(std::string_view spec) {
    // (Appended, not `"'" + std::string(...)`: GCC 12 warns -Wrestrict on that.)
    std::string quoted(1, '\'');
    quoted.append(spec.substr(0, 100)).append(spec.size() > 100 ? "...'" : "'");
    const std::size_t colon = spec.rfind(':');
    if (colon == std::string_view::npos) return fail(quoted + " is not NAME:WEIGHT (no colon), e.g. bulk:1");
    const std::string_view name = spec.substr(0, colon), weight_text = spec.substr(colon + 1);
    if (!valid_group_name(name)) {
        return fail(quoted + ": the group name must be 1 to " + std::to_string(max_group_name) +
                    " characters of A-Z a-z 0-9 _ - .");
    }
    unsigned weight = 0;
    const auto [end, ec] = std::from_chars(weight_text.data(), weight_text.data() + weight_text.size(), weight);
    if (!all_digits(weight_text) || ec != std::errc() || end != weight_text.data() + weight_text.size() || weight < 1 ||
        weight > max_group_weight) {
        return fail(quoted + ": the weight must be a whole number from 1 to " + std::to_string(max_group_weight));
    }
    tenferro::group_options g;
    g.name = std::string(name);
    g.weight = weight;
    return g;
}

std::string check_groups(const std::vector<tenferro::group_options>& groups) {
    std::set<std::string_view> seen;
    for (const tenferro::group_options& g : groups) {
        if (!seen.insert(g.name).second) return "the group '" + g.name + "' is given twice";
    }
    return {};
}

tl::expected<std::int64_t, std::string> parse_timeout_header(std::string_view value) {
    const std::string expected = "expected a whole number of milliseconds from 0 to " + std::to_string(max_timeout_ms);
    // 9 digits is already beyond a day: longer values are refused without converting.
    if (!all_digits(value) || value.size() > 9) return fail(expected);
    std::int64_t ms = 0;
    std::from_chars(value.data(), value.data() + value.size(), ms);
    if (ms > max_timeout_ms) return fail(expected);
    return ms;
}

double predicted_wait_seconds(const wait_inputs& in) {
    if (in.mean_batch_seconds <= 0.0 || in.waiting_ahead == 0) return 0.0;
    const double batches_ahead = double(in.waiting_ahead) / double(std::max<std::size_t>(1, in.max_batch));
    const double stretch = double(std::max(in.backlogged_weight, in.weight)) / double(std::max(1u, in.weight));
    return batches_ahead * in.mean_batch_seconds * stretch;
}

int retry_after_for(double predicted_wait_seconds) {
    if (!(predicted_wait_seconds > 1.0)) return 1;  // NaN included
    return int(std::min(std::ceil(predicted_wait_seconds), 86'400.0));
}

}  // namespace embedding_search
