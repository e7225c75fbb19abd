// explain.h: which documents made a step (issue 53, the forward question): every row of the
// global batch with its spans, the rank and row it goes to on W ranks, and each source's tokens
// in the step and through it. A function of the plan alone, like the step itself.
#ifndef DISTSAMPLER_TOKENS_EXPLAIN_H_
#define DISTSAMPLER_TOKENS_EXPLAIN_H_

#include <cstdint>
#include <vector>

#include "distsampler/tokens/plan.h"

namespace distsampler {

struct ExplainedRow {
  uint64_t row = 0;       // in the global batch, 0 to B - 1
  uint64_t sequence = 0;  // k = step B + row
  uint64_t rank = 0;      // the rank that reads it on world_size ranks (rank_sequences)
  uint64_t rank_row = 0;  // its row in that rank's share of the step
  uint64_t tokens = 0;    // L + 1, or fewer (best-fit's padding, a finished single pass)
  std::vector<Span> spans;
};

struct StepExplanation {
  uint64_t step = 0;
  uint64_t world_size = 0;
  std::vector<ExplainedRow> rows;
  // Per source (new ones included): its tokens in the step, and in steps 0 to step.
  std::vector<uint64_t> step_tokens;
  std::vector<uint64_t> tokens_through;
};

// `plan` (at sequence 0) walked to `step` and through it: O((step + 1) B) planning, no token
// read. `sources`: the run's sources, new ones included. Throws std::invalid_argument naming
// the parameter when the plan is not at sequence 0, or world_size does not divide the batch
// (rank_sequences' checks).
StepExplanation explain_step(TokenPlan plan, uint64_t step, uint64_t world_size,
                             uint64_t sources);
// The same from `plan` standing at the boundary of a step s0 <= step, `before` each source's
// tokens in steps [0, s0) (a PlanIndex's state and ledger: tokens/where.h's explain_indexed):
// O((step - s0 + 1) B) planning. Throws std::invalid_argument for a plan past `step`, or inside
// a step.
StepExplanation explain_step_from(TokenPlan plan, std::vector<uint64_t> before, uint64_t step,
                                  uint64_t world_size, uint64_t sources);

}  // namespace distsampler

#endif  // DISTSAMPLER_TOKENS_EXPLAIN_H_
