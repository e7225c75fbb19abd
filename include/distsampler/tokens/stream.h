// stream.h: a token stream's runtime, the one Python's distsampler.tokens.TokenStream drives (the
// binding converts types and releases the GIL, nothing more): the plan over Megatron indexed
// sources (tokens/plan.h) read a rank's rows a step at a time (loader/tokens.h), planned ahead of
// the loop by a feed (node/plan_feed.h), the loop's next step read on a thread meanwhile, and the
// object-store block cache told which blocks the coming steps read (BlockUses).
//
// What a rank reads at step s stays a pure function of (configuration, s, rank): the feed, the
// read-ahead and the scouting only move work earlier, never change a row.
#ifndef DISTSAMPLER_TOKENS_STREAM_H_
#define DISTSAMPLER_TOKENS_STREAM_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/loader/tokens.h"
#include "distsampler/node/node_order.h"
#include "distsampler/node/plan_feed.h"
#include "distsampler/state_dict.h"
#include "distsampler/tokens/explain.h"
#include "distsampler/tokens/where.h"
#include "distsampler/tokens/plan.h"

namespace distsampler {

// Rows of a rank's share of a step, as (first, count) pairs in order; nullopt: every row.
using RowParts = std::optional<std::vector<std::pair<uint64_t, uint64_t>>>;

// The rows DataLoader worker `worker` of `workers` reads at the k-th step since it began, of a
// rank that reads `per_step` batches of `micro` rows a step: the step's batch j is the
// (k * per_step + j)-th batch since the start, read by the worker that number is congruent to
// modulo `workers` (the DataLoader returns them in order). nullopt: every row (one worker); an
// empty list: none (the worker skips the step). Throws std::invalid_argument unless
// worker < workers and per_step >= 1.
RowParts worker_parts(uint64_t k, uint64_t per_step, uint64_t micro, uint64_t worker,
                      uint64_t workers);

// `mine` cut to the rows `parts`. Throws std::invalid_argument for a part outside it.
std::vector<PlannedSequence> rows_of(std::vector<PlannedSequence> mine, const RowParts& parts);

// Who reads a stream's steps, for plan-aware eviction: the step it began at, and worker_parts'
// arguments.
struct StreamReader {
  uint64_t start = 0, per_step = 1, micro = 1, worker = 0, workers = 1;
  bool operator==(const StreamReader& o) const {
    return start == o.start && per_step == o.per_step && micro == o.micro &&
           worker == o.worker && workers == o.workers;
  }
};

// One step of a rank's rows: its number, the global sequence of each row, and the rows.
struct StreamStep {
  uint64_t step = 0;
  std::vector<uint64_t> sequences;
  TokenRows rows;
};

// The plan and the sources it reads, with what made them (to make it again in another process).
// With a feed, steps are read from it, and the plan itself is brought to the fed position only
// when something needs it (a checkpoint, a copy). Not thread-safe: one caller at a time (the
// read-ahead runs on its own thread, which only the stream's calls wait for).
class TokenStreamRuntime {
 public:
  // Opens `prefixes` (per source, its shards) with `edits` and `eod` (open_token_run's checks
  // and errors) and plans them with `options` (TokenPlan's). options.appended_eod is eod's
  // when eod is appended, else none.
  TokenStreamRuntime(std::vector<std::vector<std::string>> prefixes, TokenPlanOptions options,
                     std::vector<TokenEdit> edits, const std::optional<EodToken>& eod);
  ~TokenStreamRuntime();
  TokenStreamRuntime(TokenStreamRuntime&&) = default;
  TokenStreamRuntime& operator=(TokenStreamRuntime&&) = default;

  // A stream at this one's position, with its own plan, reading from the same feed (a
  // DataLoader worker's, or an evaluation pass's).
  TokenStreamRuntime copy();

  // This rank's share of the next step (or its rows `parts`), rows of seq_len + 1 tokens with
  // positions counted as `positions` says and `pad` after the last span. With `read_ahead` and a
  // feed, the step after is read on a thread meanwhile (for the same arguments, the next call
  // takes it; an error it met is thrown there). `reader` (a DataLoader worker's worker_parts
  // arguments) tells the block cache which blocks the coming steps read, when some source is an
  // object store's read in blocks. A failed read leaves the stream where it was. Throws
  // std::invalid_argument for a reader that starts after the step, and what reading throws.
  StreamStep read_step(uint64_t world_size, uint64_t rank, int64_t pad, TokenPositions positions,
                       const RowParts& parts, bool read_ahead,
                       const std::optional<StreamReader>& reader);
  // The next step planned and not read.
  void skip_step(uint64_t world_size, uint64_t rank);
  // This rank's share of the next step, its spans (without reading tokens).
  std::vector<PlannedSequence> plan_step(uint64_t world_size, uint64_t rank);

  uint64_t step() const;
  uint64_t sequence() const;
  // A single pass (subset valid or test): every token of the subset has been planned.
  bool exhausted();
  // TokenPlan's state_dict and load_state_dict; a load drops the feed (start_feed starts one at
  // the loaded step).
  DictValue state_dict(uint64_t world_size);
  void load_state_dict(const DictValue& state);

  // Plans the next steps `ahead` (1 to PlanFeedOptions::kMaxAhead) ahead on a thread: this
  // process's, for rank `rank` of `world_size` (its share's spans only), or with `group` local
  // rank 0's for the whole node (PlanFeed::for_node). Throws std::invalid_argument naming
  // `plan_ahead` when `ahead` is out of range.
  void start_feed(uint64_t ahead, const std::optional<NodeGroup>& group, uint64_t world_size,
                  uint64_t rank);
  bool feeding() const { return bool(fed_); }
  // The feed's memory file (its process and descriptor) for a spawned worker's attach_feed;
  // nullopt without a feed.
  std::optional<std::pair<pid_t, int>> feed_handle() const;
  // Reads from the feed of `pid`'s descriptor `fd` (PlanFeed::attach); false, with the reason
  // in `why`, when it cannot (the stream then plans its own steps).
  bool attach_feed(pid_t pid, int fd, std::string* why);

  // What made it: per source its shard prefixes as given, the options, the edits as given.
  const std::vector<std::vector<std::string>>& prefixes() const { return prefixes_; }
  const TokenPlanOptions& options() const { return options_; }
  const std::vector<TokenEdit>& edits() const { return edits_; }
  // Per source (new ones included), its shards followed by those its appends add, numbered as
  // the plan numbers them.
  const std::vector<std::vector<std::string>>& shards() const { return shards_; }
  // Per source (new ones included), its weight once every edit is in force (Mixer::weights_at):
  // what an evaluation stream of this one mixes by.
  std::vector<double> latest_weights() const;

  // Which documents made `step` (tokens/explain.h): the plan from its start, whatever this
  // stream's position. Throws std::invalid_argument naming world_size (rank_sequences').
  // With `index` (tokens/where.h's, of this run): from its last state at or before the step.
  StepExplanation explain(uint64_t step, uint64_t world_size,
                          const PlanIndex* index = nullptr) const;
  // The plan at sequence 0 (what explain walks, and where.h's queries start from).
  const TokenPlan& start() const { return *start_; }

  // The plan at the stream's position (brought there from the feed first): for an inspector
  // that walks it sequence by sequence (the CLI's `tokens audit`), never a second stream.
  const TokenPlan& plan() { return synced(); }

  // Checks `ahead` for start_feed (the one owner of the plan_ahead rule): throws
  // std::invalid_argument naming `plan_ahead`, the value and the range.
  static void check_plan_ahead(int64_t ahead);

 private:
  struct Ahead;  // the next step's rows, read on a thread
  struct Scout;  // a copy of the plan ahead of a reader, telling the block cache its blocks
  TokenStreamRuntime() = default;
  TokenPlan& synced();
  std::vector<PlannedSequence> next_step(uint64_t world_size, uint64_t rank);
  TokenPlanState state() const;
  void load(const TokenPlanState& state);
  void feed_from(std::shared_ptr<PlanFeed> feed);
  void drop_ahead();
  void start_ahead(uint64_t step, uint64_t world_size, uint64_t rank, int64_t pad,
                   TokenPositions positions, const RowParts& parts);
  void scout_uses(uint64_t step, uint64_t world_size, uint64_t rank, const StreamReader& reader);
  uint64_t feed_spans_per_sequence() const;

  std::vector<std::vector<std::string>> prefixes_;
  std::vector<TokenEdit> edits_;
  std::vector<std::shared_ptr<const IndexedLengths>> sources_;  // per source: every shard
  std::vector<std::vector<std::string>> shards_;
  TokenPlanOptions options_;
  std::shared_ptr<TokenPlan> plan_;
  std::shared_ptr<const TokenPlan> start_;  // the plan at sequence 0, for explain
  std::shared_ptr<FedTokenPlan> fed_;
  std::shared_ptr<Ahead> ahead_;
  std::shared_ptr<Scout> scout_;
  bool blocks_ = false;  // some source is an object store's, read in blocks
};

}  // namespace distsampler

#endif  // DISTSAMPLER_TOKENS_STREAM_H_
