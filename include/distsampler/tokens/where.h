// where.h: at which steps a document was, or will be, delivered (issue 53, the reverse question),
// the index that answers it in one short replay, and a takedown: the steps a document was seen
// at, and the skip edit that keeps it out from a step on.
//
// Each source's cursor (mix.h's SourceCursor: epoch, position, offset) only moves forward, and a
// document of source s sits at one position of each source epoch's order (Mixer::position_of,
// the inverse of the order). So the plan's states every K steps (PlanIndex) bracket every piece
// of the document: the last state whose cursor has not reached it, and the first past it. The
// answer is the replay of the plan between them, the same function the run computed, so it is
// exact across edits, appends, skips, splits and locality orders; a query costs O(log(steps / K))
// states read and a replay of about K steps per source epoch the document is read in.
#ifndef DISTSAMPLER_TOKENS_WHERE_H_
#define DISTSAMPLER_TOKENS_WHERE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/tokens/explain.h"
#include "distsampler/tokens/plan.h"

namespace distsampler {

// Tokens [begin, end) of `document` of `source` (source epoch `epoch`, the source's pass) in
// row `row` of step `step` (sequence step B + row), `offset` tokens into the row; the row is row
// `rank_row` of rank `rank` on the world size asked for.
struct Sighting {
  uint64_t step = 0;
  uint64_t row = 0;
  uint64_t sequence = 0;
  uint64_t offset = 0;
  uint32_t source = 0;
  uint64_t document = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t epoch = 0;
  uint64_t rank = 0;
  uint64_t rank_row = 0;
  uint64_t tokens() const { return end - begin; }
  bool operator==(const Sighting& o) const {
    return step == o.step && row == o.row && sequence == o.sequence && offset == o.offset &&
           source == o.source && document == o.document && begin == o.begin && end == o.end &&
           epoch == o.epoch && rank == o.rank && rank_row == o.rank_row;
  }
};

using DocumentId = std::pair<uint32_t, uint64_t>;  // (source, document)

// The plan's state at steps 0, K, 2K, ... and at its last step `steps`, with each source's tokens
// before it: O(sources x steps / K) words (each state TokenPlanState's words, token_state_words,
// and the ledger). Built by planning the run once (the sequences without their spans); the
// states cost O(sources) each beside K B sequences.
class PlanIndex {
 public:
  static constexpr uint64_t kVersion = 1;
  static constexpr uint64_t kDefaultEvery = 64;
  // `start` (a plan at sequence 0) planned through steps [0, steps). Throws
  // std::invalid_argument naming the parameter for steps or every of 0, or a plan not at 0.
  PlanIndex(TokenPlan start, uint64_t steps, uint64_t every = kDefaultEvery);

  uint64_t steps() const { return steps_; }
  uint64_t every() const { return every_; }
  size_t size() const { return states_.size(); }
  uint64_t step_of(size_t i) const { return std::min<uint64_t>(i * every_, steps_); }
  TokenPlanState state(size_t i) const;
  // Source `source`'s cursor in state i ((0, 0, 0) before a new source joins).
  SourceCursor cursor(size_t i, uint32_t source) const;
  // Per source, its tokens in steps [0, step_of(i)) (TokenPlan's ledger: the spans' sum).
  const std::vector<uint64_t>& tokens_before(size_t i) const { return ledgers_.at(i); }
  // The words the states hold, in bytes (the size in memory and, within a header, on disk).
  uint64_t bytes() const;
  // What the index was built on: the plan's configuration through `steps` (TokenPlan::config,
  // the sources' documents and tokens included: what a checkpoint of the run records) and a
  // digest of sampled document lengths per source, as canonical JSON.
  const std::string& fingerprint() const { return fingerprint_; }
  // The fingerprint of `start` through `steps` (what fingerprint() is for that plan).
  static std::string fingerprint_of(const TokenPlan& start, uint64_t steps);

  // A file: "distsampler-plan-index 1\n", one JSON line {"steps", "every", "states",
  // "fingerprint"}, then per state its word count and words, and its ledger's count and words,
  // little-endian uint64.
  void save(const std::string& path) const;
  // The index in `path`, checked against `start` (the run it answers for): throws
  // std::invalid_argument naming the file for anything that is not such an index, and naming
  // every entry of the fingerprint that differs (another configuration, changed sources).
  static PlanIndex load(const std::string& path, const TokenPlan& start);

 private:
  PlanIndex() = default;
  uint64_t steps_ = 0, every_ = 0;
  std::vector<std::vector<uint64_t>> states_;
  std::vector<std::vector<uint64_t>> ledgers_;
  std::string fingerprint_;
};

// explain_step (tokens/explain.h) from the index's last state at or before `step`, with its
// ledger: O(every) steps planned, whatever the step.
StepExplanation explain_indexed(const TokenPlan& start, const PlanIndex& index, uint64_t step,
                                uint64_t world_size, uint64_t sources);

// Every piece of `document` of `source` delivered in steps [0, until), in delivery order, on
// `world_size` ranks (each sighting's rank and row). With `index` (built on `start`, until <=
// its steps): a replay of the plan between the index's states that bracket each source epoch's
// position of the document; without: where_scan. Throws std::invalid_argument naming the
// parameter: a source or document that does not exist in the run, until past the index, a
// world size rank_sequences refuses.
std::vector<Sighting> where_document(const TokenPlan& start, const PlanIndex* index,
                                     uint32_t source, uint64_t document, uint64_t until,
                                     uint64_t world_size = 1);

// The brute force: every sequence of steps [from, until) of `plan` (at step `from`'s boundary)
// scanned for pieces of `documents`; `plan` is left at `until` (whose mixer knows the run's
// documents then).
std::vector<Sighting> where_scan(TokenPlan& plan, const std::vector<DocumentId>& documents,
                                 uint64_t until, uint64_t world_size = 1);

// A takedown of `documents` from step `from_step` on: where each was seen before it (which
// checkpoints hold its influence: those after the step of its last sighting), and, with the skip
// edit of them at from_step applied (`edited`: the run's plan at sequence 0 with that edit, the
// caller's to build, as the run will be built), the pieces still delivered at or after
// from_step: only documents begun before the edit took effect, which a skip list finishes
// (docs/tokens.md, "Skip lists").
struct Takedown {
  uint64_t from_step = 0;
  std::vector<DocumentId> documents;  // sorted, each once
  std::vector<Sighting> before;       // steps [0, from_step), by document then delivery
  std::vector<Sighting> after;        // steps >= from_step under the edit, likewise
};
// `until`: the steps the report covers (the run's; with an index, at most its steps). Throws
// std::invalid_argument naming the parameter (where_document's; from_step past until; an empty
// list).
Takedown takedown(const TokenPlan& start, const PlanIndex* index, const TokenPlan& edited,
                  std::vector<DocumentId> documents, uint64_t from_step, uint64_t until,
                  uint64_t world_size = 1);

// The documents of a source whose text hashes to `digest` (BLAKE2b-128 of the UTF-8 text, 16
// bytes: blake2b.h), from the `.dochash` sidecar `tokens prepare` writes beside each shard (16
// bytes a document, in the reader's order). `shards`: the source's shard prefixes, in the order
// it numbers their documents. Throws std::invalid_argument naming the file: a shard without a
// .dochash (not written by `tokens prepare`), or one whose size is not 16 bytes a document of
// its .idx; a digest not of 16 bytes.
std::vector<uint64_t> documents_with_digest(const std::vector<std::string>& shards,
                                            const std::string& digest);

}  // namespace distsampler

#endif  // DISTSAMPLER_TOKENS_WHERE_H_
