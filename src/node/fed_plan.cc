// fed_plan.cc: FedTokenPlan (node/plan_feed.h), a rank's token plan that takes its steps from
// the node's plan feed when the feed holds them and plans them itself otherwise.
#include <memory>
#include <utility>
#include <vector>

#include "distsampler/node/plan_feed.h"
#include "plan_feed_internal.h"

namespace distsampler {

FedTokenPlan::FedTokenPlan(std::shared_ptr<TokenPlan> plan, std::shared_ptr<PlanFeed> feed)
    : plan_(std::move(plan)), feed_(std::move(feed)) {
  if (!plan_) throw std::invalid_argument("FedTokenPlan: no plan");
  if (plan_->sequence() % plan_->options().global_batch != 0) {
    throw std::invalid_argument("FedTokenPlan: the plan stands inside a step");
  }
  step_ = plan_->step();
  state_ = plan_->state();
}

bool FedTokenPlan::from_feed(uint64_t first, uint64_t count, bool spans,
                             std::vector<PlannedSequence>* out) {
  if (!feed_) return false;
  PlanFeed::Step got;
  if (!feed_->read(step_, first, count, spans, &got)) {
    detail::count_feed_fallback();
    return false;
  }
  *out = std::move(got.sequences);
  state_ = std::move(got.after);
  ++step_;
  plan_at_state_ = false;
  return true;
}

TokenPlan& FedTokenPlan::plan() {
  if (!plan_at_state_) {
    plan_->load(state_);
    plan_at_state_ = true;
  }
  return *plan_;
}

void FedTokenPlan::load(const TokenPlanState& state) {
  if (state.sequence % plan_->options().global_batch != 0) {
    throw std::invalid_argument("state sequence = " + std::to_string(state.sequence) +
                                ": inside a step of " +
                                std::to_string(plan_->options().global_batch));
  }
  plan_->load(state);
  state_ = state;
  step_ = plan_->step();
  plan_at_state_ = true;
}

std::vector<PlannedSequence> FedTokenPlan::next_step(uint64_t world_size, uint64_t rank) {
  const RankSequences mine =
      rank_sequences(plan_->options().global_batch, world_size, rank, step_);
  std::vector<PlannedSequence> out;
  if (from_feed(mine.first - step_ * plan_->options().global_batch, mine.count, true, &out)) {
    return out;
  }
  out = plan().next_step(world_size, rank);
  state_ = plan_->state();
  ++step_;
  return out;
}

void FedTokenPlan::advance(const TokenPlanState& after) {
  if (after.sequence != (step_ + 1) * plan_->options().global_batch) {
    throw std::invalid_argument("advance: a state at sequence " +
                                std::to_string(after.sequence) + ", not after step " +
                                std::to_string(step_));
  }
  state_ = after;
  ++step_;
  plan_at_state_ = false;
}

void FedTokenPlan::skip_step() {
  std::vector<PlannedSequence> none;
  if (from_feed(0, 0, false, &none)) return;
  plan().next_step(1, 0);
  state_ = plan_->state();
  ++step_;
}

}  // namespace distsampler
