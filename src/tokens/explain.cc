// explain.cc: which documents made a step (tokens/explain.h).
#include "distsampler/tokens/explain.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace distsampler {

namespace {

void count(const PlannedSequence& s, std::vector<uint64_t>& tokens) {
  for (const Span& x : s.spans) {
    if (x.source >= tokens.size()) tokens.resize(x.source + 1, 0);
    tokens[x.source] += x.end - x.begin;
  }
}

}  // namespace

StepExplanation explain_step(TokenPlan plan, uint64_t step, uint64_t world_size,
                             uint64_t sources) {
  if (plan.sequence() != 0) {
    throw std::invalid_argument("explain_step: a plan at sequence " +
                                std::to_string(plan.sequence()) + "; allowed: 0 (its start)");
  }
  return explain_step_from(std::move(plan), {}, step, world_size, sources);
}

StepExplanation explain_step_from(TokenPlan plan, std::vector<uint64_t> before, uint64_t step,
                                  uint64_t world_size, uint64_t sources) {
  const uint64_t batch = plan.options().global_batch;
  rank_sequences(batch, world_size, 0, step);  // the checks, before any work
  if (plan.sequence() % batch != 0 || plan.step() > step) {
    throw std::invalid_argument("explain_step_from: a plan at sequence " +
                                std::to_string(plan.sequence()) + "; allowed: a step boundary "
                                "at or before step " + std::to_string(step));
  }
  StepExplanation out;
  out.step = step;
  out.world_size = world_size;
  // The steps before, planned without their spans, the plan's ledger counting their tokens.
  plan.count_tokens(std::move(before));
  while (plan.step() < step) plan.next_step_rows(0, 0);
  out.tokens_through = *plan.tokens_counted();
  out.tokens_through.resize(std::max<size_t>(out.tokens_through.size(), sources), 0);
  std::vector<PlannedSequence> rows = plan.next_step(1, 0);
  out.step_tokens.assign(out.tokens_through.size(), 0);
  for (uint64_t rank = 0; rank < world_size; ++rank) {
    const RankSequences share = rank_sequences(batch, world_size, rank, step);
    for (uint64_t j = 0; j < share.count; ++j) {
      PlannedSequence& seq = rows[share.first - step * batch + j];
      count(seq, out.step_tokens);
      out.rows.push_back({seq.index - step * batch, seq.index, rank, j, seq.tokens(),
                          std::move(seq.spans)});
    }
  }
  out.step_tokens.resize(std::max(out.step_tokens.size(), out.tokens_through.size()), 0);
  out.tokens_through.resize(out.step_tokens.size(), 0);
  for (size_t s = 0; s < out.step_tokens.size(); ++s) out.tokens_through[s] += out.step_tokens[s];
  return out;
}

}  // namespace distsampler
