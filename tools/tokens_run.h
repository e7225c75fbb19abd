// tokens_run.h: a token run as the `tokens` subcommands take it from their flags (tokens.cc),
// shared by plan, audit, explain (explain.cc) and index, where, takedown (where.cc).
#ifndef DISTSAMPLER_TOOLS_TOKENS_RUN_H_
#define DISTSAMPLER_TOOLS_TOKENS_RUN_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli.h"
#include "distsampler/loader/tokens.h"
#include "distsampler/tokens/plan.h"
#include "distsampler/tokens/stream.h"

namespace distsampler::cli {

struct TokenFlags {
  std::vector<std::vector<std::string>> prefixes;
  std::vector<TokenEdit> edits;
  TokenPlanOptions options;
  std::optional<EodToken> eod;  // --append-eod
};

// The sources, options and edits of the flags (--source, --seq-len, ...; kTokensHelp's list).
TokenFlags parse_run(Flags& flags);
// The run's stream: tokens/stream.h's runtime, the one Python's TokenStream and the libtorch
// adapter drive (opening the sources with the edits and the EOD id, open_token_run's checks).
TokenStreamRuntime make_stream(const TokenFlags& run);

// The Python that runs the package's modules: DISTSAMPLER_PYTHON, else python3 on PATH
// (`from_env`: whether the variable named it).
std::string helper_python(bool* from_env);
// Runs `PY -m MODULE ARGS...` with `input` on its standard input and this process's standard
// output and error, `prog_variable` set to `prog` (the module's program name in its messages);
// returns its exit status (2 when it was killed). Throws UsageError naming `what` when PY
// cannot be started.
int run_python_module(const std::string& module, const std::vector<std::string>& args,
                      const std::string& input, const std::string& what,
                      const std::string& prog_variable, const std::string& prog);

// `tokens explain` (explain.cc).
int run_token_explain(Flags& flags, std::ostream& out);
// `tokens index`, `tokens where` and `tokens takedown` (where.cc).
int run_token_index(Flags& flags, std::ostream& out);
int run_token_where(Flags& flags, std::ostream& out);
int run_token_takedown(Flags& flags, std::ostream& out);

}  // namespace distsampler::cli

#endif  // DISTSAMPLER_TOOLS_TOKENS_RUN_H_
