// explain.cc: `distsampler tokens explain --step N` (tokens/explain.h): which documents made a
// step, row by row, with the rank and row each goes to on W ranks and the sources' ledger; a
// readable table, or one JSON object.
#include <cstdint>
#include <optional>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "distsampler/tokens/explain.h"
#include "distsampler/tokens/where.h"
#include "output.h"
#include "tokens_run.h"

namespace distsampler::cli {

namespace {

nlohmann::ordered_json to_json(const StepExplanation& e) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ExplainedRow& r : e.rows) {
    nlohmann::ordered_json spans = nlohmann::ordered_json::array();
    for (const Span& x : r.spans) {
      spans.push_back({{"source", x.source}, {"document", x.document}, {"begin", x.begin},
                       {"end", x.end}, {"source_epoch", x.epoch}});
    }
    rows.push_back({{"row", r.row}, {"sequence", r.sequence}, {"rank", r.rank},
                    {"rank_row", r.rank_row}, {"tokens", r.tokens}, {"spans", spans}});
  }
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (size_t s = 0; s < e.step_tokens.size(); ++s) {
    sources.push_back({{"source", s},
                       {"step_tokens", e.step_tokens[s]},
                       {"tokens_through", e.tokens_through[s]}});
  }
  return {{"step", e.step}, {"world_size", e.world_size}, {"rows", rows}, {"sources", sources}};
}

void table(const StepExplanation& e, const TokenFlags& run, std::ostream& out) {
  out << "step " << e.step << ": " << e.rows.size() << " sequences of up to "
      << run.options.seq_len + 1 << " tokens, on " << e.world_size << " rank"
      << (e.world_size == 1 ? "" : "s") << "\n";
  out << std::left << std::setw(6) << "row" << std::setw(12) << "sequence" << std::setw(10)
      << "rank:row" << std::setw(8) << "tokens"
      << "spans: source/document[begin, end) epoch\n";
  for (const ExplainedRow& r : e.rows) {
    std::ostringstream at;
    at << r.rank << ":" << r.rank_row;
    out << std::setw(6) << r.row << std::setw(12) << r.sequence << std::setw(10) << at.str()
        << std::setw(8) << r.tokens;
    for (size_t i = 0; i < r.spans.size(); ++i) {
      const Span& x = r.spans[i];
      out << (i ? "  " : "") << x.source << "/" << x.document << "[" << x.begin << ", " << x.end
          << ") " << x.epoch;
    }
    out << "\n";
  }
  out << std::setw(8) << "source" << std::setw(14) << "step tokens"
      << "tokens in steps 0.." << e.step << "\n";
  for (size_t s = 0; s < e.step_tokens.size(); ++s) {
    out << std::setw(8) << s << std::setw(14) << e.step_tokens[s] << e.tokens_through[s] << "\n";
  }
}

}  // namespace

int run_token_explain(Flags& flags, std::ostream& out) {
  TokenFlags run = parse_run(flags);
  const uint64_t step = flags.take_required_u64("--step");
  const uint64_t world = flags.take_u64("--world-size", 1);
  const std::string format = flags.take_string("--format", "table");
  const std::string index_path = flags.take_string("--index", "");
  const std::string tokenizer = flags.take_string("--tokenizer", "");
  const bool format_given = flags.has("--format");
  flags.finish();
  if (format != "table" && format != "json") {
    throw UsageError("--format " + format + ": allowed: table, json");
  }
  if (!tokenizer.empty() && format_given && format != "json") {
    throw UsageError("--tokenizer " + tokenizer + ": its output is JSON; allowed with it: "
                     "--format json");
  }
  rank_sequences(run.options.global_batch, world, 0, 0);  // the checks, before any work
  const TokenStreamRuntime stream = make_stream(run);
  std::optional<PlanIndex> index;
  if (!index_path.empty()) index = PlanIndex::load(index_path, stream.start());
  const StepExplanation e = stream.explain(step, world, index ? &*index : nullptr);
  if (!tokenizer.empty()) {
    // The text of each span: decoded by Python's tokenizers (distsampler.explain_text).
    nlohmann::ordered_json payload = {{"explanation", to_json(e)}, {"shards", stream.shards()}};
    payload["append_eod"] = run.eod && run.eod->appended ? nlohmann::ordered_json(run.eod->id)
                                                         : nlohmann::ordered_json();
    out.flush();
    return run_python_module("distsampler.explain_text", {"--tokenizer", tokenizer},
                             payload.dump(), "explain --tokenizer",
                             "DISTSAMPLER_EXPLAIN_PROG", "distsampler tokens explain");
  }
  if (format == "json") {
    out << to_json(e).dump() << "\n";
  } else {
    table(e, run, out);
  }
  check_output(out);
  return kExitOk;
}

}  // namespace distsampler::cli
