// cli.h: the distsampler command line, callable in-process (tests) and from main().
#ifndef DISTSAMPLER_TOOLS_CLI_H_
#define DISTSAMPLER_TOOLS_CLI_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "distsampler/sampler.h"
#include "output.h"

namespace distsampler::cli {

// Exit codes: 0 success, 1 a check that failed (audit), 2 a usage error, 3 the output could not
// be written (2 and 3 with one line on stderr).
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitOutput = 3;

// Runs `distsampler ARGS...` (args excludes the program name); writes to out and err. A failed
// write to out (see output.h) stops the command: one line on err naming the cause, kExitOutput.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// A bad flag or value; the message is printed as one line.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parsed --flag value / --flag=value / --switch arguments of one subcommand. Each flag is declared
// with take_*; finish() rejects what was given but never declared.
class Flags {
 public:
  // `switches` are the flags that take no value; `repeatable` the flags that may be given more
  // than once (take_all).
  Flags(const std::vector<std::string>& args, size_t first, std::vector<std::string> switches,
        std::vector<std::string> repeatable = {});

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool take_switch(const std::string& name);
  std::string take_string(const std::string& name, const std::string& fallback);
  uint64_t take_u64(const std::string& name, uint64_t fallback);
  uint64_t take_required_u64(const std::string& name);
  // Every value of a repeatable flag, in the order given (none when absent).
  std::vector<std::string> take_all(const std::string& name);
  // Throws UsageError for every flag given but not taken.
  void finish() const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> taken_;
  std::set<std::string> with_value_;     // given as --flag=value or --flag value
  std::set<std::string> missing_value_;  // given without a value, not as a switch
  std::vector<std::string> switches_;
  std::vector<std::string> repeatable_;
  std::map<std::string, std::vector<std::string>> lists_;  // every value of a repeatable flag
};

// Strict decimal uint64 parsing: digits only, no sign, no overflow.
uint64_t parse_u64(std::string_view text, std::string_view flag);

// Takes the flags that fix an epoch's order: --size (required), --seed, --order, --randperm,
// --no-shuffle, --drop-last. World size and rank are left at their defaults.
SamplerOptions parse_order_flags(Flags& flags);

// The audit subcommand (audit.cc): exit 0 when exactly-once holds, 1 when violated.
int run_audit(const std::vector<std::string>& args, std::ostream& out);

// The tokens subcommand (tokens.cc): plan, audit; prepare replaces the process with Python.
int run_tokens(const std::vector<std::string>& args, std::ostream& out);
extern const char* const kTokensHelp;

// The demo subcommand (demo.cc).
int run_demo(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace distsampler::cli

#endif  // DISTSAMPLER_TOOLS_CLI_H_
