#include <tenferro/session_entry_error.hpp>

#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <catch2/catch.hpp>

using namespace tenferro;

TEST_CASE("session_entry_errc is an error_code enum with its own category") {
    std::error_code ec = session_entry_errc::contended;
    CHECK(ec.category() == session_entry_category());
    CHECK(std::string(session_entry_category().name()) == "tenferro.session_entry");
    CHECK(ec.value() == 2);
    CHECK(ec == make_error_code(session_entry_errc::contended));
    CHECK(ec != make_error_code(session_entry_errc::cancelled));
    CHECK(static_cast<int>(session_entry_errc::reentered) == 1);
    CHECK(static_cast<int>(session_entry_errc::cancelled) == 6);
    for (int v = 1; v <= 6; ++v) CHECK_FALSE(session_entry_category().message(v).empty());
}

TEST_CASE("session_entry_error carries code, backend, detail and a message") {
    const session_entry_error e(session_entry_errc::resource_poisoned, "cpu", "observer threw");
    CHECK(e.code() == session_entry_errc::resource_poisoned);
    CHECK(e == session_entry_errc::resource_poisoned);
    CHECK_FALSE(e == session_entry_errc::executor);
    CHECK(e.backend() == "cpu");
    CHECK(e.detail() == "observer threw");
    CHECK(e.error_code() == make_error_code(session_entry_errc::resource_poisoned));
    CHECK(e.message().rfind("cpu: session entry rejected because ", 0) == 0);
    CHECK(e.message().find("observer threw") != std::string::npos);

    const session_entry_error bare(session_entry_errc::cancelled, "cpu");
    CHECK(bare.detail().empty());
    CHECK(bare.message().back() != ' ');
}

TEST_CASE("session_entry_error copies its backend name") {
    std::string name = "gpu0";
    const session_entry_error e(session_entry_errc::executor, name);
    name = "overwritten-and-longer-than-sso-buffer-xxxxxxxxxxxxxxxx";
    CHECK(e.backend() == "gpu0");
}

TEST_CASE("session_result holds values, void and move-only types beside the error") {
    session_result<int> ok = 3;
    CHECK(ok.value() == 3);
    session_result<int> bad = tl::make_unexpected(session_entry_error(session_entry_errc::contended, "cpu"));
    REQUIRE_FALSE(bad);
    CHECK(bad.error() == session_entry_errc::contended);
    session_result<void> v;
    CHECK(v.has_value());
    session_result<std::unique_ptr<int>> m = std::make_unique<int>(7);
    CHECK(**m == 7);
}

TEST_CASE("session_entry_error is two words; copies share its texts, which outlive the original") {
    // Every session_result<T> carries room for one, in each entry's operation
    // state and in each awaiting coroutine's frame (the memory of a parked
    // entry), so it stays two words.
    static_assert(sizeof(session_entry_error) <= 2 * sizeof(void*));
    static_assert(std::is_nothrow_copy_constructible_v<session_entry_error>);
    static_assert(std::is_nothrow_move_constructible_v<session_entry_error>);

    std::optional<session_entry_error> original(std::in_place, session_entry_errc::contended, "cpu",
                                                std::string(100, 'd'));  // no small-string buffer
    session_entry_error copy = *original;
    session_entry_error assigned(session_entry_errc::cancelled, "other");
    assigned = copy;
    original.reset();  // the copies keep the shared texts
    CHECK(copy.code() == session_entry_errc::contended);
    CHECK(copy.backend() == "cpu");
    CHECK(copy.detail() == std::string(100, 'd'));
    CHECK(assigned.code() == session_entry_errc::contended);
    CHECK(assigned.detail() == copy.detail());
    CHECK(assigned.detail().data() == copy.detail().data());  // shared, not copied

    auto& self = assigned;
    assigned = self;  // self-assignment keeps everything
    CHECK(assigned.backend() == "cpu");

    session_entry_error moved(std::move(copy));
    CHECK(moved.detail() == std::string(100, 'd'));
    CHECK(copy.code() == session_entry_errc::contended);  // NOLINT(bugprone-use-after-move): the code stays
    CHECK(copy.backend().empty());                        // NOLINT(bugprone-use-after-move): the texts went
    copy = moved;                                         // a moved-from error can be assigned again
    CHECK(copy.message() == moved.message());
}
