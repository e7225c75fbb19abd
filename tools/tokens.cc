// tokens.cc: `distsampler tokens plan` (the sequences a rank reads, step by step, as JSON lines),
// `distsampler tokens audit` (a run's checkpoints replayed: every document of every source once
// per source epoch) and `distsampler tokens prepare` (python -m distsampler.prepare, exec'd).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "tokens_run.h"
#include "distsampler/loader/tokens.h"
#include "distsampler/tokens/plan.h"
#include "distsampler/tokens/stream.h"

namespace distsampler::cli {

const char* const kTokensHelp = R"(usage: distsampler tokens plan|audit|explain|index|where|takedown --source PREFIX:WEIGHT ...
                         --seq-len L --global-batch B [flags]
       distsampler tokens prepare ARGS...  (= python -m distsampler.prepare ARGS...)

The global stream of training sequences over Megatron indexed sources (.bin + .idx, what
megatron-core's IndexedDatasetBuilder writes): documents of each source in a keyed order per
source epoch, sources mixed by token weight (each within L + 1 tokens of its share), packed into
sequences of L + 1 tokens, B per step, rank R of W reading sequences [s B + R B / W, + B / W).
The stream does not depend on W. docs/tokens.md describes it.

  plan    one JSON line per sequence rank R reads in steps FIRST..LAST (inclusive):
          {"step": s, "rank": r, "sequence": k, "spans": [[source, document, begin, end], ...]}
          (k the global sequence index; begin, end token offsets in the document; sources
          numbered in the order given)
  audit   replays the plan up to the last of the checkpoints given (state_dict() of
          distsampler.tokens.TokenStream, as JSON files) and checks that each is the plan's
          state at its position, that no token of any document is read twice within a source
          epoch and that every document of every finished source epoch is read whole; with
          --sequences, that the run read sequences [0, last checkpoint) exactly once each.
          Prints a line per skipped document ("skipped source S epoch E document D"), one
          line per source and a verdict.
  explain which documents made step --step N: every row of the global batch with its spans
          (source, document, [begin, end) in the document, source epoch), the rank and row it
          goes to on --world-size W, and each source's tokens in the step and in steps 0 to N;
          a table, or one JSON object with --format json. Plans the steps up to N, reads no
          token (docs/tokens.md, "Which documents made a step").
  index   plans steps 0..--steps N - 1 once and writes the plan's state every --every K steps
          to --out FILE (O(sources x N / K) words): what makes `where` and `takedown` fast
  where   at which steps document --doc S:D (repeatable) was or will be delivered: every
          (step, row, rank:row on --world-size W, offset in the row, tokens, source epoch) of
          each of its pieces in steps 0..--until N - 1; --text FILE finds the documents whose
          text is FILE's bytes (the .dochash that `tokens prepare` writes); with --index FILE a
          short replay between its states, without one a scan of the plan (docs/tokens.md,
          "At which steps a document was seen")
  takedown the steps each document that --docs FILE lists (lines "source document") was seen
          at before --from-step S, and the edit that keeps them out from S on (--skip S:FILE,
          to add to the run's flags; a document begun before S is finished), with what that
          edit still delivers from S on; the report names the sources' fingerprint
  prepare raw text (JSONL, Parquet, text files) to Megatron .bin/.idx shards: runs
          `PY -m distsampler.prepare ARGS...` in this process's place, PY the interpreter that
          DISTSAMPLER_PYTHON names, else python3 on PATH; the distsampler package must be
          importable by it (PYTHONPATH=build/python, or the installed wheel). Its flags are its
          own: `distsampler tokens prepare --help` lists them (docs/tokens.md, "Preparing data").

flags:
  --source PREFIX:WEIGHT  a source and its token weight (> 0; normalized); PREFIX may be
                          several shard prefixes joined by commas (documents numbered across
                          them in that order); repeat the flag per source
  --seq-len L             tokens per sequence, L + 1 stored (inputs and labels), 1 <= L <= 2^30
  --global-batch B        sequences per step, a multiple of the world size
  --seed S                seed, 0 <= S <= 2^64 - 1 (default 0)
  --packing P             concat (Megatron's: documents back to back, consecutive sequences
                          share one token) or best-fit (windows of M pieces packed best-fit
                          decreasing; a document cut only when longer than L + 1) (default concat)
  --window M              best-fit: pieces per window, 1 <= M <= 2^24 (default 1024)
  --append-eod TOKEN      TOKEN ends each non-empty document, appended by the reader (files
                          written without Megatron's --append-eod): lengths count it
  --split T[,V[,E]]       held-out splits (Megatron's --split): each document of each source
                          is in train, valid or test by a hash of (source, document), in these
                          proportions; the stream reads train only (default: no split)
  --locality S:Q:K        source S (numbered from 0) in the locality order for object stores:
                          its documents in blocks of Q contiguous ones, the blocks in a keyed
                          order, the documents shuffled within windows of K blocks (TokenStream's
                          locality=; Q, K >= 1); repeat per source (default: the global shuffle)
edits (docs/tokens.md, "Edits"; each from step STEP on, the steps before it unchanged; repeat
each flag per edit; a resume must give the edits before its checkpoint again):
  --change STEP:W0,W1,... the weights of every source (new ones included) from STEP on
  --ramp A:B:W0,W1,...    the weights move linearly from those in force at step A to these at
                          step B
  --append STEP:S=PREFIX  PREFIX's documents (shard prefixes joined by commas) join source S,
                          numbered after its own, in the unread rest of its source epoch; S equal
                          to the number of sources adds a new source (give its weight with a
                          --change at STEP)
  --skip STEP:FILE        the documents FILE lists (lines "source document"; # comments) are
                          never read from STEP on (one begun before STEP is finished)
plan:
  --world-size W          ranks (default 1)
  --rank R                0 <= R < W (default 0)
  --steps FIRST:LAST      the steps to print, inclusive (default 0:0)
  --save FILE             write the checkpoint after step LAST (TokenStream.state_dict()'s, as
                          JSON) to FILE
  --subset NAME           train (default), or valid or test: one pass over that split's
                          documents (an evaluation), printing the steps up to LAST that hold
                          tokens; the last ones' padding sequences have no spans
explain:
  --step N                the step (required)
  --world-size W          ranks, for each row's rank and row (default 1)
  --format F              table (default) or json
  --index FILE            an index of this run: planned from its last state before the step
  --tokenizer FILE        each span's decoded text too (JSON output), by a tokenizer.json:
                          runs `PY -m distsampler.explain_text` (PY as for prepare)
index:
  --steps N               the steps to index (the run's)
  --every K               a plan state every K steps (default 64)
  --out FILE              the index file to write
where, takedown:
  --index FILE            an index of this run (`tokens index`); refused when built on another
                          configuration or other data
  --until N               the steps to look through, 0..N - 1 (default: the index's)
  --world-size W          ranks, for each piece's rank and row (default 1)
  --format F              table (default) or json
  --doc S:D               where: a document of a source (repeatable)
  --text FILE             where: the documents whose text is FILE's bytes
  --docs FILE             takedown: the documents, lines "source document"
  --from-step S           takedown: the first step they are kept out of
audit:
  --state FILE            a checkpoint (JSON of TokenStream.state_dict()); repeat per file
  --sequences FILE        JSON lines, each with a "sequence" key: what the run read (every rank)

exit status: 0 success (audit: exactly once holds), 1 the audit found a violation, 2 a bad flag,
value or file, 3 the output could not be written.
)";

namespace {

// `what` names the flag and its value in messages, e.g. "--source a:x".
double parse_weight(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) || !(value > 0)) {
    throw UsageError(what + ": weight '" + text + "' is not a finite number > 0");
  }
  return value;
}

std::vector<TokenEdit> parse_edits(Flags& flags) {
  std::vector<TokenEdit> edits;
  for (const char* flag : kTokenEditFlags) {
    for (const std::string& value : flags.take_all(flag)) {
      try {
        edits.push_back(parse_token_edit(flag, value));
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    }
  }
  return edits;
}

}  // namespace

TokenFlags parse_run(Flags& flags) {
  TokenFlags run;
  for (const std::string& source : flags.take_all("--source")) {
    const size_t colon = source.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw UsageError("--source " + source + ": expected PREFIX:WEIGHT");
    }
    try {
      run.prefixes.push_back(parse_shards(source.substr(0, colon), "--source " + source));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    run.options.weights.push_back(parse_weight(source.substr(colon + 1), "--source " + source));
  }
  if (run.prefixes.empty()) throw UsageError("missing required flag --source");
  run.options.seq_len = flags.take_required_u64("--seq-len");
  run.options.global_batch = flags.take_required_u64("--global-batch");
  run.options.seed = flags.take_u64("--seed", 0);
  run.options.packing = parse_packing(flags.take_string("--packing", "concat"), "--packing");
  if (flags.has("--window") && run.options.packing != Packing::kBestFit) {
    throw UsageError("--window applies to --packing best-fit only");
  }
  run.options.window = flags.take_u64("--window", TokenPlanOptions::kDefaultWindow);
  if (flags.has("--split")) {
    const std::string text = flags.take_string("--split", "");
    std::vector<double> fractions;
    for (size_t at = 0; at <= text.size();) {
      const size_t comma = std::min(text.find(',', at), text.size());
      const std::string part = text.substr(at, comma - at);
      char* end = nullptr;
      const double value = std::strtod(part.c_str(), &end);
      if (part.empty() || end != part.c_str() + part.size()) {
        throw UsageError("--split " + text + ": '" + part + "' is not a number; expected " +
                         "TRAIN[,VALID[,TEST]], e.g. 969,30,1");
      }
      fractions.push_back(value);
      at = comma + 1;
    }
    try {
      run.options.split = SplitRule(fractions, "--split " + text).fractions();
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  for (const std::string& text : flags.take_all("--locality")) {
    const std::string what = "--locality " + text;
    const size_t a = text.find(':'), b = a == std::string::npos ? a : text.find(':', a + 1);
    if (b == std::string::npos || text.find(':', b + 1) != std::string::npos) {
      throw UsageError(what + ": expected SOURCE:BLOCK:WINDOW, e.g. 0:1000:32");
    }
    const uint64_t source = parse_u64(text.substr(0, a), what);
    if (source >= run.prefixes.size()) {
      throw UsageError(what + ": source " + std::to_string(source) + " of " +
                       std::to_string(run.prefixes.size()) + "; allowed: 0 to " +
                       std::to_string(run.prefixes.size() - 1));
    }
    const auto count = [&](const std::string& digits) {
      return static_cast<int64_t>(std::min<uint64_t>(parse_u64(digits, what), INT64_MAX));
    };
    SourceOrder order;
    try {
      order = locality_order(count(text.substr(a + 1, b - a - 1)), count(text.substr(b + 1)), what);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    run.options.orders.resize(run.prefixes.size());
    if (run.options.orders[source].block != 0) {
      throw UsageError(what + ": source " + std::to_string(source) + " has a --locality already");
    }
    run.options.orders[source] = order;
  }
  if (flags.has("--append-eod")) {
    try {
      run.eod = parse_eod_token(flags.take_string("--append-eod", ""), true, "--append-eod");
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    run.options.appended_eod = static_cast<uint64_t>(run.eod->id);
  }
  run.edits = parse_edits(flags);
  return run;
}

TokenStreamRuntime make_stream(const TokenFlags& run) {
  try {
    return TokenStreamRuntime(run.prefixes, run.options, run.edits, run.eod);
  } catch (const std::invalid_argument& e) {
    if (run.eod && std::string_view(e.what()).rfind(run.eod->parameter + " = ", 0) == 0) {
      throw UsageError(e.what());  // an id the sources' dtype cannot hold: the flag is wrong
    }
    throw;
  }
}

namespace {

std::pair<uint64_t, uint64_t> parse_steps(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw UsageError("--steps " + text + ": expected FIRST:LAST");
  const uint64_t first = parse_u64(text.substr(0, colon), "--steps");
  const uint64_t last = parse_u64(text.substr(colon + 1), "--steps");
  if (first > last) throw UsageError("--steps " + text + ": FIRST > LAST");
  return {first, last};
}

int run_plan(Flags& flags, std::ostream& out) {
  TokenFlags run = parse_run(flags);
  const uint64_t world = flags.take_u64("--world-size", 1);
  const uint64_t rank = flags.take_u64("--rank", 0);
  const auto [first, last] = parse_steps(flags.take_string("--steps", "0:0"));
  const std::string save = flags.take_string("--save", "");
  run.options.subset = parse_split(flags.take_string("--subset", "train"), "--subset");
  flags.finish();
  rank_sequences(run.options.global_batch, world, rank, 0);  // the checks, before any work
  TokenStreamRuntime stream = make_stream(run);
  for (uint64_t step = 0; step <= last && !stream.exhausted(); ++step) {
    if (step < first) {
      stream.skip_step(world, rank);
      continue;
    }
    const std::vector<PlannedSequence> mine = stream.plan_step(world, rank);
    for (const PlannedSequence& s : mine) {
      out << "{\"step\": " << step << ", \"rank\": " << rank << ", \"sequence\": " << s.index
          << ", \"spans\": [";
      for (size_t i = 0; i < s.spans.size(); ++i) {
        const Span& x = s.spans[i];
        out << (i ? ", " : "") << "[" << x.source << ", " << x.document << ", " << x.begin << ", "
            << x.end << "]";
      }
      out << "]}\n";
    }
    check_output(out);
  }
  if (!save.empty()) {
    std::ofstream file(save);
    file << canonical_json(stream.state_dict(world)) << "\n";
    if (!file.flush()) throw UsageError("--save " + save + ": cannot write");
  }
  return kExitOk;
}

// ---- audit --------------------------------------------------------------------------------------

DictValue to_dict(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return DictValue::none();
    case nlohmann::json::value_t::boolean:
      return DictValue::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_unsigned:
      return DictValue::integer(j.get<uint64_t>());
    case nlohmann::json::value_t::number_integer:
      return DictValue::integer_text(std::to_string(j.get<int64_t>()));
    case nlohmann::json::value_t::number_float:
      return DictValue::real(j.get<double>());
    case nlohmann::json::value_t::string:
      return DictValue::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<DictValue> items;
      for (const auto& item : j) items.push_back(to_dict(item));
      return DictValue::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictValue out = DictValue::dict();
      for (const auto& [key, value] : j.items()) out.set(key, to_dict(value));
      return out;
    }
    default:
      throw std::invalid_argument("a JSON value of an unsupported type");
  }
}

nlohmann::json read_json(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) throw UsageError(flag + " " + path + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(flag + " " + path + ": not JSON (" + e.what() + ")");
  }
}

struct Checkpoint {
  std::string path;
  TokenPlanState state;
};

int run_token_audit(Flags& flags, std::ostream& out) {
  TokenFlags run = parse_run(flags);
  const std::vector<std::string> paths = flags.take_all("--state");
  const std::string sequences_path = flags.take_string("--sequences", "");
  flags.finish();
  if (paths.empty()) throw UsageError("missing required flag --state");
  TokenPlan plan = make_stream(run).plan();  // walked sequence by sequence below
  std::vector<Checkpoint> checkpoints;
  for (const std::string& path : paths) {
    TokenPlan probe = plan;  // checks the checksum and the configuration
    try {
      probe.load_state_dict(to_dict(read_json(path, "--state")));
    } catch (const std::invalid_argument& e) {
      throw UsageError("--state " + path + ": " + e.what());
    }
    checkpoints.push_back({path, probe.state()});
  }
  std::stable_sort(checkpoints.begin(), checkpoints.end(), [](const auto& a, const auto& b) {
    return a.state.sequence < b.state.sequence;
  });
  const uint64_t end = checkpoints.back().state.sequence;
  // ledger: (source, epoch, document) -> the token ranges read
  std::map<std::tuple<uint32_t, uint64_t, uint64_t>, std::vector<std::pair<uint64_t, uint64_t>>>
      read;
  const bool concat = run.options.packing == Packing::kConcat;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> first_seen;  // (source, epoch) -> sequence
  // The first sequence a skip list holding (source, document) was in force at (UINT64_MAX: none).
  auto skip_step = [&](uint32_t source, uint64_t document) {
    uint64_t first = UINT64_MAX;
    for (const MixEdit& e : plan.mixer().edits()) {
      if (e.kind == MixEdit::Kind::kSkip &&
          std::binary_search(e.skip.begin(), e.skip.end(), std::make_pair(source, document))) {
        first = std::min(first, e.step * run.options.global_batch);
      }
    }
    return first;
  };
  size_t next = 0;
  int failures = 0;
  auto fail = [&](const std::string& what) {
    if (failures++ < 10) out << "VIOLATION " << what << "\n";
  };
  for (uint64_t k = 0; k <= end; ++k) {
    for (; next < checkpoints.size() && checkpoints[next].state.sequence == k; ++next) {
      if (!(plan.state() == checkpoints[next].state)) {
        fail("checkpoint " + checkpoints[next].path + " at sequence " + std::to_string(k) +
             " is not the plan's state there");
      }
    }
    if (k == end) break;
    PlannedSequence s = plan.next();
    for (const Span& x : s.spans) first_seen.emplace(std::make_pair(x.source, x.epoch), k);
    uint64_t owned = concat ? run.options.seq_len : s.tokens();  // concat: the last is k + 1's
    for (const Span& x : s.spans) {
      const uint64_t take = std::min<uint64_t>(owned, x.end - x.begin);
      if (take > 0) read[{x.source, x.epoch, x.document}].push_back({x.begin, x.begin + take});
      owned -= take;
    }
  }
  // No token read twice anywhere; every document of every finished source epoch read whole.
  const std::vector<SourceCursor> cursors = plan.state().mix.cursors;  // at the last checkpoint
  for (auto& [key, ranges] : read) {
    const auto& [source, epoch, document] = key;
    std::sort(ranges.begin(), ranges.end());
    uint64_t at = 0;
    for (const auto& [begin, end_token] : ranges) {
      if (begin < at) {
        fail("source " + std::to_string(source) + " epoch " + std::to_string(epoch) +
             " document " + std::to_string(document) + ": tokens from " + std::to_string(begin) +
             " read twice");
      }
      at = std::max(at, end_token);
    }
  }
  // Per source epoch, every document at a position the source has passed is read whole, or
  // unread and on a skip list in force by the time the next epoch began (or the end).
  const Mixer& mixer = plan.mixer();
  for (uint32_t s = 0; s < mixer.sources(); ++s) {
    const DocumentLengths& lengths = mixer.lengths(s);
    uint64_t whole = 0, skips = 0, held = 0;
    for (uint64_t e = 0; e <= cursors[s].epoch; ++e) {
      const bool live = e == cursors[s].epoch;
      const uint64_t limit = live ? cursors[s].position : mixer.epoch_size(s, e);
      auto next_epoch = first_seen.find({s, e + 1});
      const uint64_t ended = live || next_epoch == first_seen.end() ? end : next_epoch->second;
      for (const uint64_t d : mixer.epoch_documents(s, e, limit)) {
        if (lengths.length(d) == 0) continue;
        if (!mixer.reads(s, d)) {  // held out: never read, checked like the rest
          auto it = read.find({s, e, d});
          if (it != read.end()) {
            fail("source " + std::to_string(s) + " epoch " + std::to_string(e) + " document " +
                 std::to_string(d) + " is held out (split '" +
                 std::string(to_string(mixer.holdout().rule.of(s, d))) + "') but was read");
          }
          ++held;
          continue;
        }
        uint64_t covered = 0;
        auto it = read.find({s, e, d});
        if (it != read.end()) {
          for (const auto& r : it->second) covered += r.second - r.first;
        }
        if (covered == lengths.length(d)) {
          ++whole;
        } else if (covered == 0 && skip_step(s, d) <= ended) {
          ++skips;
          out << "skipped source " << s << " epoch " << e << " document " << d << "\n";
        } else {
          fail("source " + std::to_string(s) + " epoch " + std::to_string(e) + " document " +
               std::to_string(d) + ": " + std::to_string(covered) + " of " +
               std::to_string(lengths.length(d)) + " tokens read");
        }
      }
    }
    out << "source " << s << ": " << cursors[s].epoch << " source epochs finished, " << whole
        << " documents read whole, " << skips << " skipped";
    if (!mixer.holdout().rule.empty()) out << ", " << held << " held out";
    out << "; " << cursors[s].consumed << " tokens read in all\n";
  }
  if (!sequences_path.empty()) {
    std::ifstream in(sequences_path);
    if (!in) throw UsageError("--sequences " + sequences_path + ": cannot open");
    std::vector<uint64_t> count(end, 0);
    std::string line;
    for (uint64_t n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        throw UsageError("--sequences " + sequences_path + ": line " + std::to_string(n) +
                         " is not JSON");
      }
      if (!j.is_object() || !j.contains("sequence") || !j["sequence"].is_number_unsigned()) {
        throw UsageError("--sequences " + sequences_path + ": line " + std::to_string(n) +
                         " has no \"sequence\": n");
      }
      const uint64_t k = j["sequence"].get<uint64_t>();
      if (k < end) ++count[k];
    }
    for (uint64_t k = 0; k < end; ++k) {
      if (count[k] != 1) {
        fail("sequence " + std::to_string(k) + " read " + std::to_string(count[k]) + " times");
      }
    }
  }
  out << (failures ? "FAILED: " + std::to_string(failures) + " violations"
                   : "OK: sequences [0, " + std::to_string(end) +
                         ") read each document of each source at most once per source epoch, "
                         "every finished source epoch whole")
      << "\n";
  return failures ? kExitCheckFailed : kExitOk;
}

// Replaces the process with `PY -m distsampler.prepare ARGS...` (args[2...]); returns only by
// throwing, when PY cannot be run. The module takes DISTSAMPLER_PREPARE_PROG as its program name.
[[noreturn]] void run_prepare(const std::vector<std::string>& args) {
  bool from_env = false;
  const std::string python = helper_python(&from_env);
  std::vector<std::string> argv = {python, "-m", "distsampler.prepare"};
  argv.insert(argv.end(), args.begin() + 2, args.end());
  std::vector<char*> c_argv;
  for (std::string& arg : argv) c_argv.push_back(arg.data());
  c_argv.push_back(nullptr);
  if (::setenv("DISTSAMPLER_PREPARE_PROG", "distsampler tokens prepare", 1) != 0) {
    throw UsageError(std::string("prepare: cannot set DISTSAMPLER_PREPARE_PROG: ") +
                     std::strerror(errno));
  }
  ::execvp(c_argv[0], c_argv.data());
  const int error = errno;
  if (from_env) {
    throw UsageError("prepare: cannot run DISTSAMPLER_PYTHON='" + python + "': " +
                     std::strerror(error));
  }
  throw UsageError(std::string("prepare: cannot run 'python3' from PATH: ") +
                   std::strerror(error) +
                   "; set DISTSAMPLER_PYTHON to the Python that runs distsampler.prepare");
}

}  // namespace

int run_tokens(const std::vector<std::string>& args, std::ostream& out) {
  if (args.size() < 2) {
    throw UsageError("tokens: expected a subcommand, plan, audit, explain, index, where, "
                     "takedown or prepare");
  }
  const std::string& what = args[1];
  // prepare's arguments are the Python module's, never this command's flags.
  if (what == "prepare") run_prepare(args);
  Flags flags(args, 2, {}, {"--source", "--state", "--change", "--ramp", "--append", "--skip",
                            "--locality", "--doc"});
  if (what == "plan") return run_plan(flags, out);
  if (what == "audit") return run_token_audit(flags, out);
  if (what == "explain") return run_token_explain(flags, out);
  if (what == "index") return run_token_index(flags, out);
  if (what == "where") return run_token_where(flags, out);
  if (what == "takedown") return run_token_takedown(flags, out);
  throw UsageError("tokens: unknown subcommand '" + what +
                   "'; allowed: plan, audit, explain, index, where, takedown, prepare");
}

}  // namespace distsampler::cli
