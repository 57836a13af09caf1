#pragma once
// Running the test program again as a child: the crash tests' writers, and cases repeated on
// another I/O engine (tests/corpus/).

#include <spawn.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

extern char** environ;

namespace tenferro::test {

/// Runs this program again with the Catch2 test spec `spec` and `var` (NAME=VALUE) in its
/// environment, replacing any NAME there; `report` (unless -1) becomes the child's descriptor 3
/// (dup2 clears O_CLOEXEC).
inline pid_t spawn_self(const char* spec, const std::string& var, int report) {
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    const std::string name = var.substr(0, var.find('=') + 1);
    std::vector<std::string> strings{var};
    for (char** e = environ; *e != nullptr; ++e)
        if (std::strncmp(*e, name.c_str(), name.size()) != 0) strings.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& e : strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string arg0 = self, arg1 = spec;
    char* argv[] = {arg0.data(), arg1.data(), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (report >= 0) posix_spawn_file_actions_adddup2(&actions, report, 3);
    pid_t pid = -1;
    const int spawned = ::posix_spawn(&pid, self.c_str(), &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(spawned == 0);
    return pid;
}

}  // namespace tenferro::test
