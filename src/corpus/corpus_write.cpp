// corpus_write (the builder of one write) and the corpus's error category.

#include <algorithm>
#include <string>

#include "tenferro/live_corpus.hpp"

namespace tenferro {
namespace {

class corpus_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "tenferro.corpus"; }
    std::string message(int code) const override {
        switch (static_cast<corpus_errc>(code)) {
        case corpus_errc::wrong_dimension:
            return "vector length differs from the corpus's dimension";
        case corpus_errc::not_finite:
            return "vector holds NaN or an infinity";
        case corpus_errc::duplicate_id:
            return "id appears more than once in one write";
        case corpus_errc::too_many_labels:
            return "more than 16 labels";
        case corpus_errc::dimension_mismatch:
            return "dimension differs from the stored corpus's";
        case corpus_errc::corrupt:
            return "corpus files are corrupt";
        case corpus_errc::zero_vector:
            return "vector is all zeros: it has no direction";
        }
        return "unknown corpus error";
    }
};

}  // namespace

const std::error_category& corpus_category() noexcept {
    static const corpus_category_impl category;
    return category;
}

std::error_code make_error_code(corpus_errc e) noexcept { return {static_cast<int>(e), corpus_category()}; }

namespace {

// Room for `more` elements, growing geometrically (reserving exactly size + more on every call
// would make building a large write quadratic: each reserve reallocates and copies).
template <class V>
void make_room(V& v, std::size_t more) {
    if (v.capacity() - v.size() < more) v.reserve(std::max(v.size() + more, 2 * v.capacity()));
}

}  // namespace

void corpus_write::upsert(row_id id, std::span<const float> vector, std::span<const row_label> labels) {
    // Room for everything first, so that a bad_alloc leaves the builder as it was.
    make_room(entries_, 1);
    make_room(values_, vector.size());
    make_room(labels_, labels.size());
    entries_.push_back(
        entry{id, values_.size(), vector.size(), labels_.size(), static_cast<std::uint32_t>(labels.size()), false});
    values_.insert(values_.end(), vector.begin(), vector.end());
    labels_.insert(labels_.end(), labels.begin(), labels.end());
}

void corpus_write::erase(row_id id) {
    make_room(entries_, 1);
    entries_.push_back(entry{id, 0, 0, 0, 0, true});
}

corpus_write::item corpus_write::operator[](std::size_t i) const noexcept {
    const entry& e = entries_[i];
    item it;
    it.id = e.id;
    it.erase = e.erase;
    if (!e.erase) {
        it.vector = std::span<const float>(values_.data() + e.value_begin, e.value_count);
        it.labels = std::span<const row_label>(labels_.data() + e.label_begin, e.label_count);
    }
    return it;
}

void corpus_write::clear() noexcept {
    entries_.clear();
    values_.clear();
    labels_.clear();
}

}  // namespace tenferro
