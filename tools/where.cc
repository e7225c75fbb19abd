// where.cc: `distsampler tokens index`, `tokens where` and `tokens takedown` (tokens/where.h): the
// plan's states every K steps in a file, the steps at which a document was delivered (found by
// its number or by its text), and the report and skip list of a takedown.
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "distsampler/blake2b.h"
#include "distsampler/tokens/where.h"
#include "output.h"
#include "tokens_run.h"

namespace distsampler::cli {

namespace {

nlohmann::ordered_json sighting_json(const Sighting& s) {
  return {{"step", s.step},       {"row", s.row},         {"sequence", s.sequence},
          {"offset", s.offset},   {"source", s.source},   {"document", s.document},
          {"begin", s.begin},     {"end", s.end},         {"tokens", s.tokens()},
          {"source_epoch", s.epoch}, {"rank", s.rank},    {"rank_row", s.rank_row}};
}

void sighting_rows(const std::vector<Sighting>& all, std::ostream& out) {
  out << std::left << std::setw(10) << "step" << std::setw(6) << "row" << std::setw(10)
      << "rank:row" << std::setw(8) << "offset" << std::setw(8) << "tokens"
      << "source/document[begin, end) epoch\n";
  for (const Sighting& s : all) {
    std::ostringstream at;
    at << s.rank << ":" << s.rank_row;
    out << std::setw(10) << s.step << std::setw(6) << s.row << std::setw(10) << at.str()
        << std::setw(8) << s.offset << std::setw(8) << s.tokens() << s.source << "/" << s.document
        << "[" << s.begin << ", " << s.end << ") " << s.epoch << "\n";
  }
}

std::string check_format(Flags& flags) {
  const std::string format = flags.take_string("--format", "table");
  if (format != "table" && format != "json") {
    throw UsageError("--format " + format + ": allowed: table, json");
  }
  return format;
}

// "S:D", a document of a source.
DocumentId parse_document(const std::string& text, const std::string& flag) {
  const size_t colon = text.find(':');
  auto number = [&](const std::string& part) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos ||
        part.size() > 19) {
      throw UsageError(flag + " " + text + ": expected SOURCE:DOCUMENT, two numbers >= 0");
    }
    return std::stoull(part);
  };
  if (colon == std::string::npos) {
    throw UsageError(flag + " " + text + ": expected SOURCE:DOCUMENT, two numbers >= 0");
  }
  const uint64_t source = number(text.substr(0, colon));
  if (source > UINT32_MAX) throw UsageError(flag + " " + text + ": the source is out of range");
  return {static_cast<uint32_t>(source), number(text.substr(colon + 1))};
}

// The index of --index FILE for `stream`, or none.
std::optional<PlanIndex> open_index(Flags& flags, const TokenStreamRuntime& stream) {
  const std::string path = flags.take_string("--index", "");
  if (path.empty()) return std::nullopt;
  return PlanIndex::load(path, stream.start());
}

// --until N; without it, the index's steps (it is required without an index).
uint64_t take_until(Flags& flags, const std::optional<PlanIndex>& index) {
  if (!flags.has("--until") && !index) {
    throw UsageError("--until N is required without --index (the steps to look through)");
  }
  return flags.take_u64("--until", index ? index->steps() : 0);
}

nlohmann::ordered_json fingerprint_json(const TokenStreamRuntime& stream, uint64_t steps) {
  return nlohmann::ordered_json::parse(PlanIndex::fingerprint_of(stream.start(), steps));
}

}  // namespace

int run_token_index(Flags& flags, std::ostream& out) {
  TokenFlags run = parse_run(flags);
  const uint64_t steps = flags.take_required_u64("--steps");
  const uint64_t every = flags.take_u64("--every", PlanIndex::kDefaultEvery);
  const std::string path = flags.take_string("--out", "");
  flags.finish();
  if (path.empty()) throw UsageError("--out FILE is required (the index file to write)");
  if (steps == 0) throw UsageError("--steps 0: allowed: >= 1 (the run's steps)");
  if (every == 0) throw UsageError("--every 0: allowed: >= 1 step");
  const TokenStreamRuntime stream = make_stream(run);
  const PlanIndex index(stream.start(), steps, every);
  index.save(path);
  out << "index of steps 0.." << steps - 1 << ": " << index.size() << " plan states, one every "
      << every << " steps, " << index.bytes() << " bytes, in " << path << "\n";
  check_output(out);
  return kExitOk;
}

int run_token_where(Flags& flags, std::ostream& out) {
  TokenFlags run = parse_run(flags);
  std::vector<DocumentId> documents;
  for (const std::string& d : flags.take_all("--doc")) documents.push_back(parse_document(d, "--doc"));
  const std::string text = flags.take_string("--text", "");
  const uint64_t world = flags.take_u64("--world-size", 1);
  const std::string format = check_format(flags);
  const TokenStreamRuntime stream = make_stream(run);
  const std::optional<PlanIndex> index = open_index(flags, stream);
  const uint64_t until = take_until(flags, index);
  flags.finish();
  rank_sequences(run.options.global_batch, world, 0, 0);  // the checks, before any work
  if (documents.empty() && text.empty()) {
    throw UsageError("where: give --doc SOURCE:DOCUMENT (repeatable) or --text FILE");
  }
  nlohmann::ordered_json found = nlohmann::ordered_json::array();
  if (!text.empty()) {
    std::ifstream in(text, std::ios::binary);
    if (!in) throw UsageError("--text " + text + ": cannot be read");
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string digest = blake2b(bytes.data(), bytes.size(), 16);
    for (size_t s = 0; s < stream.shards().size(); ++s) {
      for (uint64_t d : documents_with_digest(stream.shards()[s], digest)) {
        documents.push_back({static_cast<uint32_t>(s), d});
        found.push_back({{"source", s}, {"document", d}});
      }
    }
  }
  nlohmann::ordered_json answers = nlohmann::ordered_json::array();
  std::vector<std::vector<Sighting>> all;
  for (const DocumentId& d : documents) {
    all.push_back(where_document(stream.start(), index ? &*index : nullptr, d.first, d.second,
                                 until, world));
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const Sighting& s : all.back()) rows.push_back(sighting_json(s));
    answers.push_back({{"source", d.first}, {"document", d.second}, {"sightings", rows}});
  }
  if (format == "json") {
    nlohmann::ordered_json result = {{"until", until}, {"world_size", world}};
    if (!text.empty()) result["text_matches"] = found;
    result["documents"] = answers;
    result["fingerprint"] = fingerprint_json(stream, until);
    out << result.dump() << "\n";
  } else {
    if (!text.empty()) {
      out << "--text " << text << ": " << found.size() << " document"
          << (found.size() == 1 ? "" : "s") << " with its BLAKE2b-128 digest\n";
    }
    for (size_t i = 0; i < documents.size(); ++i) {
      out << "source " << documents[i].first << " document " << documents[i].second << ": "
          << all[i].size() << " piece" << (all[i].size() == 1 ? "" : "s") << " in steps 0.."
          << until - 1 << (index ? " (index)" : " (scan)") << "\n";
      if (!all[i].empty()) sighting_rows(all[i], out);
    }
  }
  check_output(out);
  return kExitOk;
}

int run_token_takedown(Flags& flags, std::ostream& out) {
  TokenFlags run = parse_run(flags);
  const std::string list = flags.take_string("--docs", "");
  const uint64_t from = flags.take_required_u64("--from-step");
  const uint64_t world = flags.take_u64("--world-size", 1);
  const std::string format = check_format(flags);
  if (list.empty()) throw UsageError("--docs FILE is required (lines \"source document\")");
  // The edit is --skip FROM:FILE, parsed as the run will parse it.
  const std::string skip_flag = "--skip " + std::to_string(from) + ":" + list;
  TokenFlags edited_run = run;
  TokenEdit edit;
  try {
    edit = parse_token_edit("--skip", std::to_string(from) + ":" + list);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--docs ") + list + ": " + e.what());
  }
  edited_run.edits.push_back(edit);
  const TokenStreamRuntime stream = make_stream(run);
  const std::optional<PlanIndex> index = open_index(flags, stream);
  const uint64_t until = take_until(flags, index);
  flags.finish();
  rank_sequences(run.options.global_batch, world, 0, 0);
  const TokenStreamRuntime edited = make_stream(edited_run);
  const Takedown t = takedown(stream.start(), index ? &*index : nullptr, edited.start(),
                              edit.edit.skip, from, until, world);
  if (format == "json") {
    nlohmann::ordered_json docs = nlohmann::ordered_json::array();
    for (const DocumentId& d : t.documents) {
      nlohmann::ordered_json seen = nlohmann::ordered_json::array();
      nlohmann::ordered_json after = nlohmann::ordered_json::array();
      for (const Sighting& s : t.before) {
        if (s.source == d.first && s.document == d.second) seen.push_back(sighting_json(s));
      }
      for (const Sighting& s : t.after) {
        if (s.source == d.first && s.document == d.second) after.push_back(sighting_json(s));
      }
      nlohmann::ordered_json entry = {{"source", d.first}, {"document", d.second}};
      // A checkpoint after step s holds the document's influence when s >= its first step.
      entry["first_step"] = seen.empty() ? nlohmann::ordered_json() : seen.front()["step"];
      entry["seen"] = seen;
      entry["after_edit"] = after;
      docs.push_back(entry);
    }
    nlohmann::ordered_json result = {
        {"from_step", from},
        {"until", until},
        {"edit", skip_flag},
        {"documents", docs},
        {"fingerprint", fingerprint_json(stream, until)}};
    out << result.dump() << "\n";
  } else {
    out << "takedown of " << t.documents.size() << " document" << (t.documents.size() == 1 ? "" : "s")
        << " from step " << from << " (the edit: " << skip_flag << ")\n";
    out << "seen before step " << from << ": " << t.before.size() << " piece"
        << (t.before.size() == 1 ? "" : "s") << "\n";
    if (!t.before.empty()) sighting_rows(t.before, out);
    out << "still delivered from step " << from << " on under the edit (begun before it): "
        << t.after.size() << " piece" << (t.after.size() == 1 ? "" : "s") << "\n";
    if (!t.after.empty()) sighting_rows(t.after, out);
  }
  check_output(out);
  return kExitOk;
}

}  // namespace distsampler::cli
