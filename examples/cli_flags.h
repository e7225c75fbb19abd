// cli_flags.h: the CLI11 validators the C++ examples share (mpi_train, mpi_checkpoint,
// libtorch_train).
#ifndef DISTSAMPLER_EXAMPLES_CLI_FLAGS_H_
#define DISTSAMPLER_EXAMPLES_CLI_FLAGS_H_

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace examples {

// Unsigned decimal integers, read as std::stoull reads them: CLI11 alone would take "010" as
// octal, "0x10" as hexadecimal and saturate on overflow. Normalises the text for CLI11.
inline const CLI::Validator kDecimal(
    [](std::string& s) -> std::string {
      const std::string max = std::to_string(UINT64_MAX);
      if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
        return "'" + s + "' is not a non-negative decimal integer";
      }
      s.erase(0, std::min(s.find_first_not_of('0'), s.size() - 1));
      if (s.size() > max.size() || (s.size() == max.size() && s > max)) {
        return s + " is too large; allowed: at most " + max;
      }
      return std::string();
    },
    "");

// After kDecimal: the value is at least 1.
inline const CLI::Validator kAtLeastOne(
    [](std::string& s) { return s == "0" ? "0 is not allowed; allowed: >= 1" : std::string(); },
    "");

// A check by one of the library's own parsers (--seed, --order), its message without the
// parameter's name (CLI11 puts the flag's name in front).
template <typename Parse>
CLI::Validator library_check(Parse parse) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        try {
          parse(s);
          return std::string();
        } catch (const std::invalid_argument& e) {
          const std::string message = e.what();
          const size_t eq = message.find(" = ");
          return eq == std::string::npos ? message : message.substr(eq + 3);
        }
      },
      "");
}

}  // namespace examples

#endif  // DISTSAMPLER_EXAMPLES_CLI_FLAGS_H_
