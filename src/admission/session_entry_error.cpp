#include "tenferro/session_entry_error.hpp"

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
        return "it was cancelled while waiting";
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

session_entry_error::session_entry_error(session_entry_errc code, std::string_view backend, std::string detail)
    : code_(code), backend_(backend), detail_(std::move(detail)) {}

std::string session_entry_error::message() const {
    std::string out = backend_;
    out += ": session entry rejected because ";
    out += reason(code_);
    if (!detail_.empty()) {
        out += ": ";
        out += detail_;
    }
    return out;
}

}  // namespace tenferro
