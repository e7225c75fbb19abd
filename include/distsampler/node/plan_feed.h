// node/plan_feed.h: a token plan (tokens/plan.h) planned ahead of the training loop by one thread
// per node, into shared memory that the node's ranks and their DataLoader workers read.
//
// Every rank plans the whole global stream (the stream does not depend on W), so planning costs
// each process the job's global token rate. A feed plans it once: a thread of one process (local
// rank 0's, or the rank's own) runs the plan up to `ahead` steps past the furthest step any reader
// has asked for, and writes each step (every sequence's spans, and the plan's state after it) into
// a ring of slots in an anonymous memory file (memfd). Readers map the file: DataLoader workers
// inherit the mapping (fork) or open it through /proc/PID/fd (spawn); the node's other local ranks
// receive the descriptor over a Unix socket in the abstract namespace, as node_order.h's orders.
//
// Nothing waits for a reader, and no reader depends on the feed for its answer: a slot is written
// under a sequence lock, and a reader that finds its step overwritten (it fell more than a ring
// behind), too large for a slot, or the planner gone (its process killed, its thread failed) or
// silent past the timeout plans that step itself from the state it holds: the same sequences, bit
// for bit, at the cost of planning (FedTokenPlan). So a slow or killed rank never stalls or
// corrupts the others, and a killed planner costs the others speed, not their stream.
#ifndef DISTSAMPLER_NODE_PLAN_FEED_H_
#define DISTSAMPLER_NODE_PLAN_FEED_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distsampler/node/node_order.h"
#include "distsampler/tokens/plan.h"

namespace distsampler {

struct PlanFeedOptions {
  // Steps planned past the furthest step a reader has asked for. The ring holds 2 ahead + 2
  // steps, so a reader may trail the furthest one (a DataLoader worker reading ahead of the loop)
  // by ahead + 1 steps and still read from it.
  uint64_t ahead = 16;
  // A slot's room for spans, per sequence: a step holding more is planned by each reader.
  uint64_t spans_per_sequence = 16;
  // How long a reader waits for a step before it plans the step itself.
  double timeout_seconds = 60;
  // The sequences of each step whose spans the feed holds: [rows_first, rows_first + rows)
  // of the step (rows 0: all B). A rank's own feed holds its share (the others' spans are not
  // built); a node's holds all, whatever ranks the node has. A reader asking for others plans
  // the step itself.
  uint64_t rows_first = 0;
  uint64_t rows = 0;
  static constexpr uint64_t kMaxAhead = 1024;
  static constexpr uint64_t kMaxSlotBytes = uint64_t{64} << 20;
};

// Counts of this process (tests and benchmarks).
struct PlanFeedCounts {
  uint64_t planned = 0;   // steps this process's feed threads planned
  uint64_t read = 0;      // steps (or states) read from a feed
  uint64_t fallback = 0;  // steps a reader planned itself because the feed did not hold them
  uint64_t served = 0;    // descriptors sent to other local ranks
  uint64_t attached = 0;  // feeds mapped from another process
};
PlanFeedCounts plan_feed_counts();

class PlanFeed {
 public:
  // A step as the feed holds it: the sequences asked for and the plan's state after the step.
  struct Step {
    std::vector<PlannedSequence> sequences;
    TokenPlanState after;
  };

  // Starts planning `plan` from its state (a training stream, at a step boundary) on a thread of
  // this process. Throws std::invalid_argument naming the option (ahead 0 or over kMaxAhead,
  // spans_per_sequence 0) or the plan (not at a step boundary, an evaluation stream), and
  // std::runtime_error when the memory file cannot be made.
  static std::shared_ptr<PlanFeed> start(const TokenPlan& plan, const PlanFeedOptions& options);
  // The feed in memory file `fd` of process `pid` (this process's, or another's through
  // /proc/PID/fd), checked against `plan`'s configuration; nullptr with the reason in `why`.
  static std::shared_ptr<PlanFeed> attach(pid_t pid, int fd, const TokenPlan& plan,
                                          const PlanFeedOptions& options, std::string* why);
  // One feed for the node's local ranks: local rank 0 starts it and serves its descriptor; the
  // others receive it, waiting up to the group's timeout for local rank 0. The k-th node feed
  // made in each process is paired with the k-th of the node's other ranks; a rank whose pair
  // is of another configuration or start step, or that cannot be reached, starts its own feed
  // and says why in one line on stderr.
  static std::shared_ptr<PlanFeed> for_node(const TokenPlan& plan, const NodeGroup& group,
                                            const PlanFeedOptions& options);

  ~PlanFeed();
  PlanFeed(const PlanFeed&) = delete;
  PlanFeed& operator=(const PlanFeed&) = delete;

  // Step `step`'s sequences [first, first + count) (with their spans when `spans`, else empty),
  // waiting while the planner is behind; false when the feed does not hold it (before the feed's
  // first step, overwritten, too large for a slot, the planner gone, failed or past the timeout).
  bool read(uint64_t step, uint64_t first, uint64_t count, bool spans, Step* out);
  // The process holding the memory file, and the descriptor there (for attach in a child).
  pid_t pid() const { return pid_; }
  int fd() const { return fd_; }
  uint64_t first_step() const;
  const PlanFeedOptions& options() const { return options_; }
  // Whether this process's thread plans into it.
  bool plans_here() const;

  struct Ring;  // the mapping (plan_feed.cc)
  struct Planner;
  PlanFeed(pid_t pid, int fd, std::shared_ptr<Ring> ring, PlanFeedOptions options);

 private:
  pid_t pid_;
  int fd_;
  std::shared_ptr<Ring> ring_;
  PlanFeedOptions options_;
  Planner* planner_ = nullptr;  // this process's thread, when it plans; left alone in a fork
  pid_t planner_pid_ = 0;
  friend struct PlanFeedAccess;
};

// A token plan read from a feed where the feed holds the step, and planned here where it does
// not: next_step and state are those of the plan alone, bit for bit.
class FedTokenPlan {
 public:
  // `plan` at a step boundary; `feed` may be null (every step planned here).
  FedTokenPlan(std::shared_ptr<TokenPlan> plan, std::shared_ptr<PlanFeed> feed);
  std::vector<PlannedSequence> next_step(uint64_t world_size, uint64_t rank);
  // The step without its sequences (their state only).
  void skip_step();
  // Past the step whose sequences were read elsewhere (PlanFeed::read of step()), given the
  // state after it. Throws std::invalid_argument when `after` is not the next step's state.
  void advance(const TokenPlanState& after);
  uint64_t step() const { return step_; }
  const TokenPlanState& state() const { return state_; }
  // The plan itself at state(): loaded when the feed moved past it.
  TokenPlan& plan();
  // Moves to `state` (TokenPlan::load's checks; a failed load changes nothing). The feed is kept:
  // its steps are the same stream's. A state far past the feed's steps makes its planner plan
  // every step up to it (the reader plans its own meanwhile): start a new feed there instead, as
  // TokenStream.load_state_dict does.
  void load(const TokenPlanState& state);
  const std::shared_ptr<PlanFeed>& feed() const { return feed_; }

 private:
  bool from_feed(uint64_t first, uint64_t count, bool spans, std::vector<PlannedSequence>* out);
  std::shared_ptr<TokenPlan> plan_;
  std::shared_ptr<PlanFeed> feed_;
  uint64_t step_ = 0;
  TokenPlanState state_;
  bool plan_at_state_ = true;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_NODE_PLAN_FEED_H_
