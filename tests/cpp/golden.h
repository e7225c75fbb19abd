// golden.h: reads the known-answer files in tests/golden (see regenerate.py there).
#ifndef DISTSAMPLER_TESTS_GOLDEN_H_
#define DISTSAMPLER_TESTS_GOLDEN_H_

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace distsampler::testing {

// One line "a b c | x y z": the fields before '|' as strings, the values after as uint64.
struct GoldenCase {
  std::vector<std::string> fields;
  std::vector<uint64_t> values;
  std::string line;
};

inline std::vector<GoldenCase> read_golden(const std::string& name) {
  const std::string path = std::string(DISTSAMPLER_GOLDEN_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open golden file " + path);
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    GoldenCase c;
    c.line = line.substr(0, line.find('|'));
    const size_t bar = line.find('|');
    std::istringstream head(line.substr(0, bar));
    for (std::string f; head >> f;) c.fields.push_back(f);
    if (bar != std::string::npos) {
      std::istringstream tail(line.substr(bar + 1));
      for (uint64_t v; tail >> v;) c.values.push_back(v);
    }
    cases.push_back(std::move(c));
  }
  if (cases.empty()) throw std::runtime_error("golden file " + path + " has no cases");
  return cases;
}

}  // namespace distsampler::testing

#endif  // DISTSAMPLER_TESTS_GOLDEN_H_
