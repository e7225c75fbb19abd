// tokens/stream.h's contract: the runtime's rows are the plan's rows read from the sources, bit
// for bit, whether steps are planned here or by a feed and whether the next one is read ahead; a
// copy continues at the same position; DataLoader workers' parts cover each step's rows once; a
// failed read leaves the stream where it was; plan_ahead has one check.
#include "distsampler/tokens/stream.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "distsampler/hash.h"
#include "temp_dir.h"
#include "token_sources.h"

namespace distsampler {
namespace {

struct Sources {
  testing_util::TempDir dir;
  std::vector<std::vector<std::string>> prefixes;
  Sources() {
    for (uint64_t s = 0; s < 3; ++s) {
      std::vector<uint32_t> lengths(300 + 50 * s);
      for (uint64_t d = 0; d < lengths.size(); ++d) {
        lengths[d] = static_cast<uint32_t>(hash_at(s + 7, d) % 70);
      }
      prefixes.push_back({write_source(dir, "s" + std::to_string(s), s, lengths)});
    }
  }
};

TokenPlanOptions options() {
  TokenPlanOptions o;
  o.weights = {3, 2, 1};
  o.seq_len = 31;
  o.global_batch = 8;
  o.seed = 11;
  return o;
}

// Rank `rank` of `world`'s rows of `steps` steps straight from the plan and the sources.
std::vector<TokenRows> reference(const Sources& in, uint64_t world, uint64_t rank, int steps) {
  const auto sources = open_token_sources(in.prefixes);
  TokenPlan plan({sources.begin(), sources.end()}, options());
  std::vector<TokenRows> out;
  for (int s = 0; s < steps; ++s) {
    out.push_back(read_token_rows(sources, plan.next_step(world, rank), 32, -1));
  }
  return out;
}

void expect_rows(const TokenRows& want, const TokenRows& got, int step) {
  EXPECT_EQ(want.tokens, got.tokens) << "step " << step;
  EXPECT_EQ(want.positions, got.positions) << "step " << step;
  EXPECT_EQ(want.segments, got.segments) << "step " << step;
}

TEST(Stream, RowsAreThePlansWithOrWithoutAFeedAndReadAhead) {
  Sources in;
  const std::vector<TokenRows> want = reference(in, 2, 1, 20);
  for (const bool feed : {false, true}) {
    for (const bool ahead : {false, true}) {
      TokenStreamRuntime s(in.prefixes, options(), {}, std::nullopt);
      if (feed) s.start_feed(4, std::nullopt, 2, 1);
      EXPECT_EQ(s.feeding(), feed);
      for (int step = 0; step < 20; ++step) {
        const StreamStep got =
            s.read_step(2, 1, -1, TokenPositions::kSegment, std::nullopt, ahead, std::nullopt);
        EXPECT_EQ(got.step, static_cast<uint64_t>(step));
        ASSERT_EQ(got.sequences.size(), 4u);
        EXPECT_EQ(got.sequences.front(), static_cast<uint64_t>(8 * step + 4));
        expect_rows(want[step], got.rows, step);
      }
      EXPECT_EQ(s.step(), 20u);
    }
  }
}

TEST(Stream, ACopyAndALoadedStateContinueAtTheSamePosition) {
  Sources in;
  const std::vector<TokenRows> want = reference(in, 1, 0, 12);
  TokenStreamRuntime s(in.prefixes, options(), {}, std::nullopt);
  s.start_feed(3, std::nullopt, 1, 0);
  for (int step = 0; step < 5; ++step) {
    s.read_step(1, 0, -1, TokenPositions::kSegment, std::nullopt, true, std::nullopt);
  }
  TokenStreamRuntime copy = s.copy();
  TokenStreamRuntime loaded(in.prefixes, options(), {}, std::nullopt);
  loaded.load_state_dict(s.state_dict(1));
  for (int step = 5; step < 12; ++step) {
    for (TokenStreamRuntime* r : {&s, &copy, &loaded}) {
      expect_rows(want[step],
                  r->read_step(1, 0, -1, TokenPositions::kSegment, std::nullopt, true,
                               std::nullopt)
                      .rows,
                  step);
    }
  }
}

// worker_parts gives each of a step's rows to exactly one worker, the step's batch j since the
// start to the worker it is congruent to.
TEST(Stream, WorkerPartsCoverEachStepsRowsOnce) {
  for (uint64_t per_step : {1, 2, 3, 4}) {
    for (uint64_t workers : {1, 2, 3, 5}) {
      for (uint64_t k = 0; k < 7; ++k) {
        std::vector<int> seen(per_step * 2, 0);
        for (uint64_t w = 0; w < workers; ++w) {
          const RowParts parts = worker_parts(k, per_step, 2, w, workers);
          if (!parts) {
            for (int& n : seen) ++n;
            continue;
          }
          for (const auto& [first, count] : *parts) {
            EXPECT_EQ((k * per_step + first / 2) % workers, w);
            for (uint64_t r = first; r < first + count; ++r) ++seen[r];
          }
        }
        for (int n : seen) EXPECT_EQ(n, 1) << per_step << " " << workers << " " << k;
      }
    }
  }
  EXPECT_THROW(worker_parts(0, 1, 1, 2, 2), std::invalid_argument);
  EXPECT_THROW(worker_parts(0, 0, 1, 0, 1), std::invalid_argument);
  EXPECT_THROW(rows_of(std::vector<PlannedSequence>(2), RowParts{{{1, 2}}}),
               std::invalid_argument);
}

// A document whose pointer in the .idx is bad (odd, for uint16 tokens) is refused when a step
// first reads it (opening reads no pointers): that step fails, whether read here or read ahead on
// the feed's thread (its error reaches the caller, and again on the next try), and the stream
// stays at it.
TEST(Stream, AFailedReadIsThrownAndLeavesTheStreamWhereItWas) {
  Sources in;
  const std::string idx = in.prefixes[0][0] + ".idx";
  std::FILE* f = std::fopen(idx.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  const int64_t odd = 1;  // document 200's pointer: lengths are at 34, then 300 int32s, int64s
  ASSERT_EQ(std::fseek(f, 34 + 300 * 4 + 200 * 8, SEEK_SET), 0);
  ASSERT_EQ(std::fwrite(&odd, sizeof odd, 1, f), 1u);
  std::fclose(f);
  uint64_t bad = 0;  // the first step that reads it
  {
    TokenStreamRuntime s(in.prefixes, options(), {}, std::nullopt);
    for (;; ++bad) {
      ASSERT_LT(bad, 100u);
      try {
        s.read_step(1, 0, -1, TokenPositions::kSegment, std::nullopt, false, std::nullopt);
      } catch (const std::exception&) {
        break;
      }
    }
  }
  ASSERT_GT(bad, 1u);
  for (const bool ahead : {false, true}) {
    TokenStreamRuntime s(in.prefixes, options(), {}, std::nullopt);
    s.start_feed(2, std::nullopt, 1, 0);
    for (uint64_t step = 0; step < bad; ++step) {
      s.read_step(1, 0, -1, TokenPositions::kSegment, std::nullopt, ahead, std::nullopt);
    }
    for (int again = 0; again < 2; ++again) {
      EXPECT_ANY_THROW(
          s.read_step(1, 0, -1, TokenPositions::kSegment, std::nullopt, ahead, std::nullopt));
      EXPECT_EQ(s.step(), bad);
    }
  }
}

TEST(Stream, PlanAheadIsCheckedOnce) {
  Sources in;
  TokenStreamRuntime s(in.prefixes, options(), {}, std::nullopt);
  for (const int64_t bad : {int64_t{0}, int64_t{-1}, int64_t{1025}}) {
    try {
      TokenStreamRuntime::check_plan_ahead(bad);
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "plan_ahead = " + std::to_string(bad) +
                                           ": steps planned ahead, in [1, 1024]");
    }
  }
  EXPECT_THROW(s.start_feed(1025, std::nullopt, 1, 0), std::invalid_argument);
  EXPECT_FALSE(s.feeding());
  EXPECT_NO_THROW(TokenStreamRuntime::check_plan_ahead(1024));
}

}  // namespace
}  // namespace distsampler
