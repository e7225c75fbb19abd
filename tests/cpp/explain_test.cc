// explain.h's contract: a step's explanation is every rank's rows of the plan at that step, in
// rank order, each with its rank and row on W, and the ledger sums the plan's spans per source
// in the step and through it; a plan not at its start, and a W that does not divide the batch,
// are refused naming the parameter.
#include "distsampler/tokens/explain.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "distsampler/hash.h"
#include "distsampler/tokens/plan.h"

namespace distsampler {
namespace {

TokenPlan make_plan(Packing packing) {
  std::vector<std::shared_ptr<const DocumentLengths>> sources;
  for (uint64_t s = 0; s < 3; ++s) {
    std::vector<uint32_t> lengths(30 + 20 * s);
    for (uint64_t d = 0; d < lengths.size(); ++d) {
      lengths[d] = static_cast<uint32_t>(1 + hash_at(s, d) % 90);
    }
    sources.push_back(std::make_shared<LengthList>(lengths));
  }
  TokenPlanOptions o;
  o.weights = {0.5, 0.3, 0.2};
  o.seq_len = 31;
  o.global_batch = 12;
  o.seed = 7;
  o.packing = packing;
  o.window = 9;
  return TokenPlan(sources, o);
}

class Explain : public ::testing::TestWithParam<Packing> {};

TEST_P(Explain, IsEveryRanksRowsOfTheStepAndTheLedgerTheirSum) {
  const TokenPlan start = make_plan(GetParam());
  for (const uint64_t step : std::vector<uint64_t>{0, 1, 6, 13}) {
    for (const uint64_t world : std::vector<uint64_t>{1, 2, 3, 4, 12}) {
      const StepExplanation e = explain_step(start, step, world, 3);
      ASSERT_EQ(e.rows.size(), 12u);
      std::vector<uint64_t> through(3, 0), in_step(3, 0);
      TokenPlan walk = start;
      for (uint64_t s = 0; s <= step; ++s) {
        for (const PlannedSequence& seq : walk.next_step(1, 0)) {
          for (const Span& x : seq.spans) {
            through[x.source] += x.end - x.begin;
            if (s == step) in_step[x.source] += x.end - x.begin;
          }
        }
      }
      EXPECT_EQ(e.tokens_through, through) << "step " << step;
      EXPECT_EQ(e.step_tokens, in_step) << "step " << step;
      size_t at = 0;
      for (uint64_t rank = 0; rank < world; ++rank) {
        TokenPlan mine = start;
        for (uint64_t s = 0; s < step; ++s) mine.next_step(world, rank);
        const std::vector<PlannedSequence> rows = mine.next_step(world, rank);
        for (size_t j = 0; j < rows.size(); ++j, ++at) {
          const ExplainedRow& r = e.rows[at];
          EXPECT_EQ(r.sequence, rows[j].index);
          EXPECT_EQ(r.row, rows[j].index - step * 12);
          EXPECT_EQ(r.rank, rank);
          EXPECT_EQ(r.rank_row, j);
          EXPECT_EQ(r.spans, rows[j].spans) << "step " << step << ", W " << world;
          EXPECT_EQ(r.tokens, rows[j].tokens());
        }
      }
    }
  }
}

TEST_P(Explain, RefusesAPlanNotAtItsStartAndAWorldThatDoesNotDivideTheBatch) {
  TokenPlan plan = make_plan(GetParam());
  EXPECT_THROW(explain_step(plan, 1, 5, 3), std::invalid_argument);
  EXPECT_THROW(explain_step(plan, 1, 0, 3), std::invalid_argument);
  plan.next_step(1, 0);
  try {
    explain_step(plan, 1, 1, 3);
    FAIL() << "a plan at sequence 12 explained";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 12; allowed: 0"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Packings, Explain,
                         ::testing::Values(Packing::kConcat, Packing::kBestFit),
                         [](const auto& info) {
                           return info.param == Packing::kConcat ? "concat" : "bestfit";
                         });

}  // namespace
}  // namespace distsampler
