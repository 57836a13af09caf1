#pragma once
// The CPU a benchmark ran on, for its report: /proc/cpuinfo's model name with
// the family and model numbers, which say more than a name some hypervisors
// cut short ("AMD EPYC" for every generation).

#include <fstream>
#include <string>

namespace tenferro::bench {

inline std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string name, family, model;
    const auto value = [](const std::string& line) {
        const auto colon = line.find(':');
        if (colon == std::string::npos) return std::string();
        const auto start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? std::string() : line.substr(start);
    };
    for (std::string line; std::getline(in, line) && (name.empty() || family.empty() || model.empty());) {
        if (line.rfind("model name", 0) == 0)
            name = value(line);
        else if (line.rfind("cpu family", 0) == 0)
            family = value(line);
        else if (line.rfind("model", 0) == 0 && line.rfind("model name", 0) != 0)
            model = value(line);
    }
    if (name.empty()) return "unknown";
    if (family.empty() || model.empty()) return name;
    return name + " (family " + family + " model " + model + ")";
}

}  // namespace tenferro::bench
