// plan_feed_test.cc: node/plan_feed.h. A plan read from a feed gives the plan's own sequences and
// states, bit for bit, whether the feed holds each step (read from it) or not (a reader a ring
// behind, a step too large for a slot, a planner killed mid-run: planned by the reader); the node's
// second local rank receives local rank 0's feed; bad options are refused.
#include "distsampler/node/plan_feed.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distsampler/hash.h"
#include "mix_edits.h"

namespace distsampler {
namespace {

using Sources = std::vector<std::shared_ptr<const DocumentLengths>>;

Sources make_sources(uint64_t key, uint64_t sources, uint64_t documents) {
  Sources out;
  for (uint64_t s = 0; s < sources; ++s) {
    std::vector<uint32_t> lengths(documents + s * 7);
    for (uint64_t d = 0; d < lengths.size(); ++d) {
      const uint64_t h = hash_at(key + s, d);
      lengths[d] = static_cast<uint32_t>(h % ((h >> 61) == 0 ? 300 : 40));
    }
    lengths[0] = 5;
    out.push_back(std::make_shared<LengthList>(lengths));
  }
  return out;
}

TokenPlanOptions options(Packing packing, uint64_t sources) {
  TokenPlanOptions o;
  for (uint64_t s = 0; s < sources; ++s) o.weights.push_back(1.0 + static_cast<double>(s % 3));
  o.seq_len = 63;
  o.global_batch = 12;
  o.seed = 77;
  o.packing = packing;
  o.window = 29;
  return o;
}

void expect_same(const std::vector<PlannedSequence>& a, const std::vector<PlannedSequence>& b,
                 const std::string& where) {
  ASSERT_EQ(a.size(), b.size()) << where;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].index, b[i].index) << where;
    ASSERT_EQ(a[i].spans, b[i].spans) << where << ", sequence " << a[i].index;
  }
}

class PlanFeedTest : public ::testing::TestWithParam<Packing> {};

// Each rank of W in {1, 3, 4} reads the steps from one feed, in step as a job's ranks are; its
// sequences and states are its own plan's, with edits (a weight change, an append, a skip) inside
// the fed steps, and every step comes from the feed.
TEST_P(PlanFeedTest, FedStepsAreThePlansOwn) {
  const Sources sources = make_sources(5, 4, 300);
  TokenPlanOptions o = options(GetParam(), 4);
  o.edits = {testing_edits::change(7, {1, 1, 5, 1}),
             testing_edits::append(11, 2, make_sources(9, 1, 50)[0]),
             testing_edits::skip(13, {{0, 3}, {1, 4}})};
  const PlanFeedCounts before = plan_feed_counts();
  PlanFeedOptions fo;
  fo.ahead = 4;
  std::shared_ptr<PlanFeed> feed = PlanFeed::start(TokenPlan(sources, o), fo);
  EXPECT_TRUE(feed->plans_here());
  struct Reader {
    uint64_t world, rank;
    TokenPlan own;
    FedTokenPlan fed;
  };
  std::vector<Reader> readers;
  for (uint64_t world : {1, 3, 4}) {
    for (uint64_t rank = 0; rank < world; ++rank) {
      readers.push_back({world, rank, TokenPlan(sources, o),
                         FedTokenPlan(std::make_shared<TokenPlan>(sources, o), feed)});
    }
  }
  for (uint64_t step = 0; step < 30; ++step) {
    for (Reader& r : readers) {
      const std::string where = "W " + std::to_string(r.world) + " rank " +
                                std::to_string(r.rank) + " step " + std::to_string(step);
      expect_same(r.fed.next_step(r.world, r.rank), r.own.next_step(r.world, r.rank), where);
      ASSERT_EQ(r.fed.state(), r.own.state()) << where;
      ASSERT_EQ(r.fed.step(), step + 1);
    }
  }
  for (Reader& r : readers) EXPECT_EQ(r.fed.plan().state(), r.own.state());  // loaded
  const PlanFeedCounts after = plan_feed_counts();
  EXPECT_EQ(after.read - before.read, readers.size() * 30);
  EXPECT_EQ(after.fallback - before.fallback, 0u);
  EXPECT_GE(after.planned - before.planned, 30u);
}

// A reader more than a ring behind the furthest one, and steps too large for a slot, are planned
// by the reader: the same sequences.
TEST_P(PlanFeedTest, StepsTheFeedDoesNotHoldArePlannedByTheReader) {
  const Sources sources = make_sources(6, 3, 200);
  const TokenPlanOptions o = options(GetParam(), 3);
  for (uint64_t room : {uint64_t{1}, uint64_t{64}}) {
    PlanFeedOptions fo;
    fo.ahead = 2;
    fo.spans_per_sequence = room;  // 1: almost no step fits its slot
    std::shared_ptr<PlanFeed> feed = PlanFeed::start(TokenPlan(sources, o), fo);
    FedTokenPlan ahead(std::make_shared<TokenPlan>(sources, o), feed);
    FedTokenPlan behind(std::make_shared<TokenPlan>(sources, o), feed);
    TokenPlan own(sources, o);
    for (int i = 0; i < 20; ++i) ahead.skip_step();  // the ring moves past `behind`
    const PlanFeedCounts before = plan_feed_counts();
    for (uint64_t step = 0; step < 25; ++step) {
      expect_same(behind.next_step(2, 1), own.next_step(2, 1),
                  "room " + std::to_string(room) + " step " + std::to_string(step));
      ASSERT_EQ(behind.state(), own.state());
    }
    EXPECT_GT(plan_feed_counts().fallback - before.fallback, 0u) << "room " << room;
  }
}

// A rank's own feed holds its share's spans only: its reader reads every step from it, another
// rank's reader plans each step itself; both are their plans' own.
TEST_P(PlanFeedTest, ARanksFeedHoldsItsShare) {
  const Sources sources = make_sources(11, 3, 200);
  const TokenPlanOptions o = options(GetParam(), 3);
  PlanFeedOptions fo;
  fo.rows_first = 4;  // rank 1 of 3: sequences [4, 8) of each step of 12
  fo.rows = 4;
  std::shared_ptr<PlanFeed> feed = PlanFeed::start(TokenPlan(sources, o), fo);
  for (uint64_t rank : {1, 2}) {
    TokenPlan own(sources, o);
    FedTokenPlan fed(std::make_shared<TokenPlan>(sources, o), feed);
    const PlanFeedCounts before = plan_feed_counts();
    for (uint64_t step = 0; step < 12; ++step) {
      expect_same(fed.next_step(3, rank), own.next_step(3, rank),
                  "rank " + std::to_string(rank) + " step " + std::to_string(step));
      ASSERT_EQ(fed.state(), own.state());
    }
    const PlanFeedCounts after = plan_feed_counts();
    EXPECT_EQ(after.fallback - before.fallback, rank == 1 ? 0u : 12u) << "rank " << rank;
  }
  fo.rows = 9;  // past the step
  EXPECT_THROW(PlanFeed::start(TokenPlan(sources, o), fo), std::invalid_argument);
}

TEST_P(PlanFeedTest, ALoadedStateContinuesFromTheFeed) {
  const Sources sources = make_sources(7, 3, 200);
  const TokenPlanOptions o = options(GetParam(), 3);
  std::shared_ptr<PlanFeed> feed = PlanFeed::start(TokenPlan(sources, o), PlanFeedOptions{});
  TokenPlan own(sources, o);
  for (int i = 0; i < 9; ++i) own.next_step(1, 0);
  FedTokenPlan fed(std::make_shared<TokenPlan>(sources, o), feed);
  fed.load(own.state());
  EXPECT_EQ(fed.step(), 9u);
  TokenPlanState inside = own.state();
  inside.sequence += 1;
  EXPECT_THROW(fed.load(inside), std::invalid_argument);
  EXPECT_EQ(fed.step(), 9u);  // unchanged
  for (int i = 0; i < 5; ++i) expect_same(fed.next_step(3, 2), own.next_step(3, 2), "loaded");
}

INSTANTIATE_TEST_SUITE_P(Packings, PlanFeedTest,
                         ::testing::Values(Packing::kConcat, Packing::kBestFit),
                         [](const auto& info) {
                           return info.param == Packing::kConcat ? "concat" : "best_fit";
                         });

TEST(PlanFeed, BadOptionsAndPlansAreRefused) {
  const Sources sources = make_sources(8, 2, 100);
  TokenPlan plan(sources, options(Packing::kConcat, 2));
  PlanFeedOptions fo;
  fo.ahead = 0;
  EXPECT_THROW(PlanFeed::start(plan, fo), std::invalid_argument);
  fo.ahead = PlanFeedOptions::kMaxAhead + 1;
  EXPECT_THROW(PlanFeed::start(plan, fo), std::invalid_argument);
  fo.ahead = 4;
  fo.spans_per_sequence = 0;
  EXPECT_THROW(PlanFeed::start(plan, fo), std::invalid_argument);
  fo.spans_per_sequence = 8;
  plan.next();  // inside step 0
  try {
    PlanFeed::start(plan, fo);
    FAIL() << "a plan inside a step was fed";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("inside a step"), std::string::npos) << e.what();
  }
  TokenPlanOptions eval = options(Packing::kConcat, 2);
  eval.split = {0.8, 0.2, 0};
  eval.subset = Split::kValidation;
  EXPECT_THROW(PlanFeed::start(TokenPlan(sources, eval), fo), std::invalid_argument);
}

// A feed of another configuration is not attached.
TEST(PlanFeed, AnotherConfigurationIsNotAttached) {
  const Sources sources = make_sources(8, 2, 100);
  TokenPlan plan(sources, options(Packing::kConcat, 2));
  std::shared_ptr<PlanFeed> feed = PlanFeed::start(plan, PlanFeedOptions{});
  TokenPlanOptions other = options(Packing::kConcat, 2);
  other.seed += 1;
  std::string why;
  EXPECT_EQ(PlanFeed::attach(::getpid(), feed->fd(), TokenPlan(sources, other), {}, &why),
            nullptr);
  EXPECT_NE(why.find("another configuration"), std::string::npos) << why;
  EXPECT_NE(PlanFeed::attach(::getpid(), feed->fd(), plan, {}, &why), nullptr) << why;
}

// Local rank 1 receives local rank 0's feed (a forked process), reads from it, and, once local
// rank 0 is killed with SIGKILL, plans the rest itself: the same sequences throughout.
TEST(PlanFeed, TheNodesSecondRankReadsRankZerosFeedAndOutlivesIt) {
  const Sources sources = make_sources(10, 5, 400);
  const TokenPlanOptions o = options(Packing::kConcat, 5);
  NodeGroup group;
  group.job = "plan-feed-test-" + std::to_string(::getpid());
  group.node = "0";
  group.local_world_size = 2;
  group.timeout_seconds = 30;
  PlanFeedOptions fo;
  fo.ahead = 3;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // local rank 0: plans and serves until killed
    group.local_rank = 0;
    std::shared_ptr<PlanFeed> feed = PlanFeed::for_node(TokenPlan(sources, o), group, fo);
    for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::_exit(0);
  }
  group.local_rank = 1;
  const PlanFeedCounts before = plan_feed_counts();
  std::shared_ptr<PlanFeed> feed = PlanFeed::for_node(TokenPlan(sources, o), group, fo);
  EXPECT_EQ(plan_feed_counts().attached - before.attached, 1u);
  EXPECT_FALSE(feed->plans_here());
  FedTokenPlan fed(std::make_shared<TokenPlan>(sources, o), feed);
  TokenPlan own(sources, o);
  for (uint64_t step = 0; step < 40; ++step) {
    if (step == 10) {
      ::kill(child, SIGKILL);
      int status = 0;
      ::waitpid(child, &status, 0);
    }
    expect_same(fed.next_step(4, 1), own.next_step(4, 1), "step " + std::to_string(step));
    ASSERT_EQ(fed.state(), own.state());
  }
  const PlanFeedCounts after = plan_feed_counts();
  EXPECT_GE(after.read - before.read, 10u);      // before the kill: from rank 0's feed
  EXPECT_GE(after.fallback - before.fallback, 20u);  // after it: planned here
  EXPECT_EQ(after.planned - before.planned, 0u);  // no thread of this process planned
}

}  // namespace
}  // namespace distsampler
