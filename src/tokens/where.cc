// where.cc: at which steps a document was delivered, its index and takedowns (tokens/where.h).
#include "distsampler/tokens/where.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "distsampler/hash.h"
#include "distsampler/state_dict.h"

namespace distsampler {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw std::invalid_argument(message); }

constexpr const char* kMagic = "distsampler-plan-index";
// Lengths per source the fingerprint samples (at keyed positions, and the last document).
constexpr uint64_t kSampledLengths = 256;

using Key = std::tuple<uint64_t, uint64_t, uint64_t>;  // (epoch, position, offset)
Key key_of(const SourceCursor& c) { return {c.epoch, c.position, c.offset}; }

SourceCursor cursor_in(const TokenPlanState& s, uint32_t source) {
  return source < s.mix.cursors.size() ? s.mix.cursors[source] : SourceCursor{};
}

// Best-fit: the first sequence a piece drawn after `state`'s anchor can be in, its window's
// first bin (plan.h's TokenPlanState).
uint64_t first_reachable(const TokenPlanState& state) { return state.sequence - state.skip; }

void collect(const std::vector<PlannedSequence>& rows, uint64_t batch, uint64_t world,
             const std::set<std::tuple<uint32_t, uint64_t>>& documents,
             std::optional<uint64_t> epoch, std::vector<Sighting>& out) {
  const uint64_t share = batch / world;
  for (const PlannedSequence& seq : rows) {
    uint64_t offset = 0;
    for (const Span& x : seq.spans) {
      if (documents.count({x.source, x.document}) != 0 && (!epoch || *epoch == x.epoch)) {
        Sighting s;
        s.step = seq.index / batch;
        s.row = seq.index % batch;
        s.sequence = seq.index;
        s.offset = offset;
        s.source = x.source;
        s.document = x.document;
        s.begin = x.begin;
        s.end = x.end;
        s.epoch = x.epoch;
        s.rank = s.row / share;
        s.rank_row = s.row % share;
        out.push_back(s);
      }
      offset += x.end - x.begin;
    }
  }
}

void check_world(uint64_t batch, uint64_t world) { rank_sequences(batch, world, 0, 0); }

// A keyed sample of a source's lengths: their digest, with its document and token counts.
uint64_t lengths_digest(const DocumentLengths& lengths, uint64_t source) {
  const uint64_t n = lengths.documents();
  std::vector<uint64_t> at;
  for (uint64_t i = 0; i < kSampledLengths && n > 0; ++i) at.push_back(hash_at(source, i) % n);
  if (n > 0) at.push_back(n - 1);
  std::sort(at.begin(), at.end());  // the reads in file order
  std::vector<uint32_t> got(at.size());
  lengths.lengths(at.data(), at.size(), got.data());
  uint64_t h = mix64(n ^ mix64(lengths.total_tokens()));
  for (size_t i = 0; i < at.size(); ++i) {
    const uint32_t length = got[i] == DocumentLengths::kAskAlone ? lengths.length(at[i]) : got[i];
    h = mix64(h ^ (at[i] * 0x9E3779B97F4A7C15ULL) ^ length);
  }
  return h;
}

}  // namespace

// ---- the index ----------------------------------------------------------------------------------

std::string PlanIndex::fingerprint_of(const TokenPlan& start, uint64_t steps) {
  nlohmann::ordered_json out;
  out["config"] = nlohmann::json::parse(canonical_json(start.config(steps * start.options().global_batch)));
  nlohmann::ordered_json sampled = nlohmann::ordered_json::array();
  const Mixer& mixer = start.mixer();
  for (size_t s = 0; s < mixer.sources(); ++s) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(lengths_digest(mixer.lengths(s), s)));
    sampled.push_back(hex);
  }
  out["sampled_lengths"] = sampled;
  nlohmann::ordered_json appended = nlohmann::ordered_json::array();
  for (size_t i = 0; i < start.options().edits.size(); ++i) {
    const MixEdit& e = start.options().edits[i];
    if (e.kind != MixEdit::Kind::kAppend || !e.documents) continue;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(lengths_digest(*e.documents, 1000003 + i)));
    appended.push_back(hex);
  }
  out["sampled_appended_lengths"] = appended;
  return out.dump();
}

PlanIndex::PlanIndex(TokenPlan start, uint64_t steps, uint64_t every) {
  if (start.sequence() != 0) {
    invalid("PlanIndex: a plan at sequence " + std::to_string(start.sequence()) +
            "; allowed: 0 (its start)");
  }
  if (steps == 0) invalid("steps = 0; allowed: steps >= 1");
  if (every == 0) invalid("every = 0; allowed: every >= 1 step");
  steps_ = steps;
  every_ = every;
  fingerprint_ = fingerprint_of(start, steps);
  start.count_tokens(std::vector<uint64_t>(start.mixer().sources(), 0));
  for (uint64_t step = 0;; ++step) {
    if (step % every == 0 || step == steps) {
      states_.push_back(token_state_words(start.state()));
      ledgers_.push_back(*start.tokens_counted());
    }
    if (step == steps) break;
    start.next_step_rows(0, 0);  // planned, spans not kept: no rank reads them here
  }
}

TokenPlanState PlanIndex::state(size_t i) const {
  std::optional<TokenPlanState> s = token_state_from_words(states_.at(i));
  if (!s) invalid("plan index: state " + std::to_string(i) + " is not a plan state");
  return *s;
}

SourceCursor PlanIndex::cursor(size_t i, uint32_t source) const { return cursor_in(state(i), source); }

uint64_t PlanIndex::bytes() const {
  uint64_t words = 0;
  for (const auto& w : states_) words += w.size() + 1;
  for (const auto& w : ledgers_) words += w.size() + 1;
  return words * 8;
}

void PlanIndex::save(const std::string& path) const {
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) invalid("index file = '" + path + "' cannot be written");
    nlohmann::ordered_json header;
    header["steps"] = steps_;
    header["every"] = every_;
    header["states"] = states_.size();
    header["fingerprint"] = nlohmann::json::parse(fingerprint_);
    out << kMagic << " " << kVersion << "\n" << header.dump() << "\n";
    auto word = [&out](uint64_t v) {
      unsigned char b[8];
      for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
      out.write(reinterpret_cast<const char*>(b), 8);
    };
    for (size_t i = 0; i < states_.size(); ++i) {
      for (const auto* w : {&states_[i], &ledgers_[i]}) {
        word(w->size());
        for (uint64_t v : *w) word(v);
      }
    }
    out.flush();
    if (!out) invalid("index file = '" + path + "' could not be written whole");
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    std::remove(partial.c_str());
    invalid("index file = '" + path + "' could not be put in place");
  }
}

PlanIndex PlanIndex::load(const std::string& path, const TokenPlan& start) {
  const std::string what = "index file = '" + path + "'";
  std::ifstream in(path, std::ios::binary);
  if (!in) invalid(what + " cannot be read");
  std::string magic, header_line;
  std::getline(in, magic);
  if (magic != std::string(kMagic) + " " + std::to_string(kVersion)) {
    invalid(what + " is not a plan index (version " + std::to_string(kVersion) +
            "): its first line is not '" + kMagic + " " + std::to_string(kVersion) + "'");
  }
  std::getline(in, header_line);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_line);
  } catch (const nlohmann::json::exception&) {
    invalid(what + ": its header is not JSON");
  }
  PlanIndex out;
  uint64_t count = 0;
  try {
    out.steps_ = header.at("steps").get<uint64_t>();
    out.every_ = header.at("every").get<uint64_t>();
    count = header.at("states").get<uint64_t>();
    out.fingerprint_ = header.at("fingerprint").dump();
  } catch (const nlohmann::json::exception&) {
    invalid(what + ": its header lacks steps, every, states or fingerprint");
  }
  // States at the multiples of every in [0, steps], and at steps.
  if (out.steps_ == 0 || out.every_ == 0 ||
      count != out.steps_ / out.every_ + 1 + (out.steps_ % out.every_ != 0 ? 1 : 0)) {
    invalid(what + ": steps, every and states do not agree");
  }
  // The run it answers for: every entry of the fingerprint compared, the differences named.
  const nlohmann::json mine = nlohmann::json::parse(fingerprint_of(start, out.steps_));
  const nlohmann::json theirs = header.at("fingerprint");
  if (mine != theirs) {
    std::string differences;
    auto compare = [&](const nlohmann::json& a, const nlohmann::json& b, const std::string& at) {
      std::set<std::string> keys;
      for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
      for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
      for (const std::string& k : keys) {
        const std::string x = a.contains(k) ? a[k].dump() : "missing";
        const std::string y = b.contains(k) ? b[k].dump() : "missing";
        if (x == y || k == "config") continue;
        differences += (differences.empty() ? "" : "; ") + at + k + " = " + x +
                       " in the index but " + y + " in this run";
      }
    };
    if (theirs.is_object() && theirs.contains("config") && theirs["config"].is_object()) {
      compare(theirs["config"], mine["config"], "");
    }
    compare(theirs, mine, "");
    invalid(what + " was built on another run or other data: " +
            (differences.empty() ? std::string("its fingerprint differs") : differences));
  }
  std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  auto word = [&](uint64_t* v) {
    if (rest.size() - at < 8) return false;
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x |= uint64_t{static_cast<unsigned char>(rest[at + i])} << (8 * i);
    at += 8;
    *v = x;
    return true;
  };
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t n = 0;
    if (!word(&n) || n > (rest.size() - at) / 8) invalid(what + " is cut short at state " + std::to_string(i));
    std::vector<uint64_t> w(n);
    for (uint64_t& v : w) word(&v);
    const std::optional<TokenPlanState> s = token_state_from_words(w);
    if (!s || s->sequence != out.step_of(i) * start.options().global_batch) {
      invalid(what + ": state " + std::to_string(i) + " is not the plan's state at step " +
              std::to_string(out.step_of(i)));
    }
    out.states_.push_back(std::move(w));
    if (!word(&n) || n > (rest.size() - at) / 8 || n > Mixer::kMaxSources) {
      invalid(what + " is cut short at the ledger of state " + std::to_string(i));
    }
    std::vector<uint64_t> ledger(n);
    for (uint64_t& v : ledger) word(&v);
    out.ledgers_.push_back(std::move(ledger));
  }
  if (at != rest.size()) invalid(what + " has bytes after its last state");
  return out;
}

StepExplanation explain_indexed(const TokenPlan& start, const PlanIndex& index, uint64_t step,
                                uint64_t world_size, uint64_t sources) {
  if (start.sequence() != 0) {
    invalid("explain: a plan at sequence " + std::to_string(start.sequence()) +
            "; allowed: 0 (its start)");
  }
  rank_sequences(start.options().global_batch, world_size, 0, step);  // the checks first
  const size_t i = static_cast<size_t>(std::min<uint64_t>(step / index.every(), index.size() - 1));
  TokenPlan plan = start;
  plan.load(index.state(i));
  return explain_step_from(std::move(plan), index.tokens_before(i), step, world_size, sources);
}

// ---- where ----------------------------------------------------------------------------------

namespace {

// Replays `plan` (at a step boundary) up to step `until`, collecting the pieces of `document`
// read in source epoch `epoch`, and stops after the first step whose anchor cursor is past
// position `position` of that epoch (every piece of it then given).
// `reach_back` (concat, a state past sequence 0), with the state's `skip`: the sequence before
// the state's ends with the anchor piece's first skip + 1 tokens, the first tokens of the
// state's first span, which is how a piece drawn after the anchor reaches back (one sequence,
// two when skip = L): found here from the replay's first span, so the replay needs no state
// before this one.
void replay(TokenPlan plan, uint64_t until, uint32_t source, uint64_t document, uint64_t epoch,
            uint64_t position, uint64_t world, bool reach_back, uint64_t skip,
            std::vector<Sighting>& out) {
  const uint64_t batch = plan.options().global_batch;
  const std::set<std::tuple<uint32_t, uint64_t>> wanted = {{source, document}};
  const Key past{epoch, position + 1, 0};
  while (plan.step() < until || reach_back) {
    const uint64_t step = plan.step();
    std::vector<PlannedSequence> rows = plan.next_step(1, 0);
    if (reach_back && !rows.empty() && !rows.front().spans.empty()) {
      const Span& x = rows.front().spans.front();
      const uint64_t length = plan.options().seq_len, k = rows.front().index;
      if (x.source == source && x.document == document && x.epoch == epoch) {
        // The anchor piece starts skip tokens before sequence k's first token: sequence k - 1
        // ends with [begin - skip, begin] of it, and when skip = L its first token is also
        // sequence k - 2's last.
        for (uint64_t back = (skip == length && k >= 2) ? 2 : 1; back > 0; --back) {
          const uint64_t first = x.begin - skip;
          PlannedSequence before;
          before.index = k - back;
          before.spans.assign(1, back == 2 ? Span{x.source, x.document, first, first + 1, x.epoch}
                                           : Span{x.source, x.document, first, x.begin + 1,
                                                  x.epoch});
          if (before.index / batch >= until) continue;
          const size_t at = out.size();
          collect({before}, batch, world, wanted, epoch, out);
          out[at].offset = back == 2 ? length : length - skip;
        }
      }
    }
    reach_back = false;
    if (step >= until) break;  // planned for the reach-back alone
    collect(rows, batch, world, wanted, epoch, out);
    if (key_of(cursor_in(plan.state(), source)) >= past) break;
  }
}

void check_document(const TokenPlan& end, uint32_t source, uint64_t document) {
  const Mixer& m = end.mixer();
  if (source >= m.sources()) {
    invalid("source = " + std::to_string(source) + " is out of range; allowed: 0 <= source < " +
            std::to_string(m.sources()) + " (the run's sources)");
  }
  if (document >= m.lengths(source).documents()) {
    invalid("document = " + std::to_string(document) + " is out of range; allowed: 0 <= document < " +
            std::to_string(m.lengths(source).documents()) + " (source " + std::to_string(source) +
            "'s documents)");
  }
}

}  // namespace

std::vector<Sighting> where_scan(TokenPlan& plan, const std::vector<DocumentId>& documents,
                                 uint64_t until, uint64_t world_size) {
  const uint64_t batch = plan.options().global_batch;
  check_world(batch, world_size);
  std::set<std::tuple<uint32_t, uint64_t>> wanted;
  for (const DocumentId& d : documents) wanted.insert({d.first, d.second});
  std::vector<Sighting> out;
  while (plan.step() < until) collect(plan.next_step(1, 0), batch, world_size, wanted, {}, out);
  return out;
}

std::vector<Sighting> where_document(const TokenPlan& start, const PlanIndex* index,
                                     uint32_t source, uint64_t document, uint64_t until,
                                     uint64_t world_size) {
  const uint64_t batch = start.options().global_batch;
  check_world(batch, world_size);
  if (start.sequence() != 0) {
    invalid("where: a plan at sequence " + std::to_string(start.sequence()) +
            "; allowed: 0 (its start)");
  }
  if (index == nullptr) {
    // Without an index: one scan to `until`, whose end knows the documents that exist.
    TokenPlan plan = start;
    std::vector<Sighting> out = where_scan(plan, {{source, document}}, until, world_size);
    check_document(plan, source, document);
    return out;
  }
  if (until > index->steps()) {
    invalid("until = " + std::to_string(until) + " is past the index; allowed: until <= " +
            std::to_string(index->steps()) + " (the steps it was built for)");
  }
  // The run's end knows every landing of an append, so every epoch's order.
  TokenPlan end = start;
  end.load(index->state(index->size() - 1));
  check_document(end, source, document);
  std::vector<Sighting> out;
  if (!end.mixer().reads(source, document)) return out;  // held out: never read
  const uint64_t last_epoch = end.mixer().cursors()[source].epoch;
  for (uint64_t epoch = 0; epoch <= last_epoch; ++epoch) {
    const std::optional<uint64_t> position = end.mixer().position_of(source, epoch, document);
    if (!position) continue;
    const Key begun{epoch, *position, 0};
    // The last state whose cursor has not begun the document (state 0's has begun nothing).
    size_t lo = 0, hi = index->size();
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      if (key_of(index->cursor(mid, source)) <= begun) lo = mid; else hi = mid;
    }
    // Its pieces are in sequences from the first one a piece drawn after that state reaches:
    // the replay starts at the last state at or before it.
    // Concat reaches back one sequence at most, found from the replay's first span; best-fit
    // reaches back to its window's first bin: the replay starts at the last state at or before.
    const TokenPlanState bracket = index->state(lo);
    size_t from = lo;
    const bool reach_back = start.options().packing == Packing::kConcat && bracket.sequence > 0;
    if (start.options().packing != Packing::kConcat) {
      const uint64_t first = first_reachable(bracket);
      while (from > 0 && index->state(from).sequence > first) --from;
    }
    // Past `until` nothing is looked at, but the reach-back into the step before it.
    if (index->step_of(from) > until || (index->step_of(from) == until && !reach_back)) continue;
    TokenPlan plan = start;
    plan.load(index->state(from));
    replay(std::move(plan), until, source, document, epoch, *position, world_size, reach_back,
           bracket.skip, out);
  }
  std::sort(out.begin(), out.end(), [](const Sighting& a, const Sighting& b) {
    return std::tie(a.sequence, a.offset) < std::tie(b.sequence, b.offset);
  });
  return out;
}

// ---- takedown -------------------------------------------------------------------------------

Takedown takedown(const TokenPlan& start, const PlanIndex* index, const TokenPlan& edited,
                  std::vector<DocumentId> documents, uint64_t from_step, uint64_t until,
                  uint64_t world_size) {
  if (documents.empty()) invalid("documents = []; allowed: at least one (source, document)");
  if (from_step > until) {
    invalid("from_step = " + std::to_string(from_step) + " is past the steps covered; allowed: "
            "from_step <= " + std::to_string(until));
  }
  std::sort(documents.begin(), documents.end());
  documents.erase(std::unique(documents.begin(), documents.end()), documents.end());
  Takedown out;
  out.from_step = from_step;
  out.documents = documents;
  for (const DocumentId& d : documents) {
    std::vector<Sighting> seen = where_document(start, index, d.first, d.second, from_step,
                                                world_size);
    out.before.insert(out.before.end(), seen.begin(), seen.end());
  }
  // The edited run is the run before from_step: its state there from the index's nearest one.
  TokenPlan plan = edited;
  if (from_step > 0) {
    if (index != nullptr) {
      const size_t i = static_cast<size_t>(std::min<uint64_t>(from_step / index->every(),
                                                              index->size() - 1));
      if (index->step_of(i) > 0) plan.load(index->state(i));
    }
    while (plan.step() < from_step) plan.next_step_rows(0, 0);
  }
  // From the first step whose anchor has the edit in force, only a listed document under way
  // there (begun before the edit, a skip list finishes it) can still be delivered.
  const uint64_t batch = plan.options().global_batch;
  std::set<std::tuple<uint32_t, uint64_t>> wanted;
  for (const DocumentId& d : documents) wanted.insert({d.first, d.second});
  auto under_way = [&](const TokenPlanState& s) {
    if (from_step > 0 && s.mix.step < from_step) return true;  // the edit not yet in force
    for (size_t source = 0; source < s.mix.cursors.size(); ++source) {
      const SourceCursor& c = s.mix.cursors[source];
      if (c.offset == 0) continue;
      const uint64_t d = plan.mixer().document_at(static_cast<uint32_t>(source), c.epoch,
                                                  c.position);
      if (wanted.count({static_cast<uint32_t>(source), d}) != 0) return true;
    }
    return false;
  };
  while (plan.step() < until && under_way(plan.state())) {
    collect(plan.next_step(1, 0), batch, world_size, wanted, {}, out.after);
  }
  std::stable_sort(out.after.begin(), out.after.end(), [](const Sighting& a, const Sighting& b) {
    return std::tie(a.source, a.document) < std::tie(b.source, b.document);
  });
  return out;
}

// ---- documents by their text ------------------------------------------------------------------

std::vector<uint64_t> documents_with_digest(const std::vector<std::string>& shards,
                                            const std::string& digest) {
  constexpr size_t kDigest = 16;
  if (digest.size() != kDigest) {
    invalid("digest of " + std::to_string(digest.size()) + " bytes; allowed: 16 (BLAKE2b-128)");
  }
  std::vector<uint64_t> out;
  uint64_t first = 0;
  for (const std::string& prefix : shards) {
    // The shard's documents: the sequence count in its .idx header (Megatron's layout: 9 bytes
    // of magic, the version, the dtype code, then the count).
    std::ifstream idx(prefix + ".idx", std::ios::binary);
    unsigned char header[26];
    if (!idx.read(reinterpret_cast<char*>(header), sizeof header)) {
      invalid("shard = '" + prefix + "': its .idx cannot be read (a text is looked up in local "
              "shards only)");
    }
    uint64_t documents = 0;
    for (int i = 0; i < 8; ++i) documents |= uint64_t{header[18 + i]} << (8 * i);
    const std::string path = prefix + ".dochash";
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      invalid("dochash = '" + path + "' cannot be read: a text is found through the .dochash "
              "that `distsampler tokens prepare` writes beside each shard");
    }
    in.seekg(0, std::ios::end);
    const uint64_t size = static_cast<uint64_t>(in.tellg());
    if (size != documents * kDigest) {
      invalid("dochash = '" + path + "' holds " + std::to_string(size) + " bytes but its shard " +
              std::to_string(documents) + " documents; allowed: 16 bytes a document");
    }
    in.seekg(0);
    std::vector<char> block(kDigest * 65536);
    for (uint64_t d = 0; d < documents;) {
      const uint64_t n = std::min<uint64_t>(65536, documents - d);
      in.read(block.data(), static_cast<std::streamsize>(n * kDigest));
      if (!in) invalid("dochash = '" + path + "' could not be read whole");
      for (uint64_t i = 0; i < n; ++i) {
        if (std::memcmp(block.data() + i * kDigest, digest.data(), kDigest) == 0) {
          out.push_back(first + d + i);
        }
      }
      d += n;
    }
    first += documents;
  }
  return out;
}

}  // namespace distsampler
