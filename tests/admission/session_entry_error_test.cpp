#include <tenferro/session_entry_error.hpp>

#include <memory>
#include <system_error>
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
