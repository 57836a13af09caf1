#include "tenferro/session_entry_error.hpp"

#include <atomic>
#include <string>
#include <utility>

namespace tenferro {
namespace {

const char* reason(session_entry_errc e) noexcept {
    switch (e) {
    case session_entry_errc::reentered:
        return "it was started inside a running session of the same task";
    case session_entry_errc::contended:
        return "a resource it needs is busy and it may not wait";
    case session_entry_errc::incompatible_context:
        return "it does not fit the surrounding execution context";
    case session_entry_errc::resource_poisoned:
        return "the admission state was poisoned by an earlier failure";
    case session_entry_errc::executor:
        return "the compute executor cannot run it";
    case session_entry_errc::cancelled:
        return "it was cancelled (while it waited, or it was stopped while running, S20)";
    case session_entry_errc::deadline_exceeded:
        return "its deadline passed (before it started, or it was stopped at it while running, S20)";
    }
    return "of an unknown admission error";
}

class category final : public std::error_category {
public:
    const char* name() const noexcept override { return "tenferro.session_entry"; }
    std::string message(int ev) const override {
        return std::string("session entry rejected because ") + reason(static_cast<session_entry_errc>(ev));
    }
};

}  // namespace

const std::error_category& session_entry_category() noexcept {
    static const category instance;
    return instance;
}

std::error_code make_error_code(session_entry_errc e) noexcept {
    return {static_cast<int>(e), session_entry_category()};
}

struct session_entry_error::texts {
    std::atomic<std::size_t> refs{1};
    std::string backend;
    std::string detail;
};

session_entry_error::session_entry_error(session_entry_errc code, std::string_view backend, std::string detail) noexcept
    : code_(code), texts_(nullptr) {
    try {
        texts_ = new texts{{1}, std::string(backend), std::move(detail)};
    } catch (...) {
        // Out of memory: the code still says what happened.
    }
}

session_entry_error::session_entry_error(const session_entry_error& other) noexcept
    : code_(other.code_), texts_(other.texts_) {
    if (texts_ != nullptr) texts_->refs.fetch_add(1, std::memory_order_relaxed);
}

session_entry_error& session_entry_error::operator=(const session_entry_error& other) noexcept {
    session_entry_error copy(other);
    return *this = std::move(copy);
}

namespace {
template <class Texts>
void release(Texts* t) noexcept {
    if (t != nullptr && t->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete t;
}
}  // namespace

session_entry_error& session_entry_error::operator=(session_entry_error&& other) noexcept {
    if (this != &other) {
        texts* previous = std::exchange(texts_, std::exchange(other.texts_, nullptr));
        code_ = other.code_;
        release(previous);
    }
    return *this;
}

session_entry_error::~session_entry_error() { release(texts_); }

std::string_view session_entry_error::backend() const noexcept {
    return texts_ != nullptr ? std::string_view(texts_->backend) : std::string_view();
}

std::string_view session_entry_error::detail() const noexcept {
    return texts_ != nullptr ? std::string_view(texts_->detail) : std::string_view();
}

std::string session_entry_error::message() const {
    std::string out(backend());
    out += ": session entry rejected because ";
    out += reason(code_);
    if (!detail().empty()) {
        out += ": ";
        out += detail();
    }
    return out;
}

}  // namespace tenferro
