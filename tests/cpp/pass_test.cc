// pass.h's contract: the consumed rule, which epoch and start each pass reads (set_epoch, replay,
// auto_epoch), the checkpoint position while a pass runs and after it, loads of partial and
// complete epochs (eager and lazy loaders), and the clamp of a start past the epoch's end.
#include "distsampler/pass.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "distsampler/sampler.h"

namespace distsampler {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// Starts the planned pass with `total` items on 4 ranks and returns the notice.
PassNotice start(PassCursor& cursor, uint64_t total, bool shuffled = true) {
  return cursor.begin(cursor.plan(shuffled), total, 4);
}

TEST(Pass, ConsumedIsStartPlusTakenTimesWorldSize) {
  const Pass pass{3, 10, 4, 5, 2};
  EXPECT_EQ(pass.consumed(), 10u + 2 * 4);
  EXPECT_EQ(pass.consumed_after(5), 10u + 5 * 4);
  EXPECT_FALSE(pass.finished());
  EXPECT_THROW(pass.consumed_after(6), std::out_of_range);
  EXPECT_TRUE((Pass{0, 0, 1, 0, 0}).finished());
}

TEST(PassCursor, FirstPassReadsEpochZeroThenSetEpochDecides) {
  PassCursor cursor;
  PassPlan plan = cursor.plan(true);
  EXPECT_EQ(plan.epoch, 0u);
  EXPECT_EQ(plan.start, 0u);
  EXPECT_EQ(plan.notice, PassNotice::kNone);
  EXPECT_EQ(cursor.begin(plan, 5, 4), PassNotice::kNone);
  cursor.set_epoch(7);
  plan = cursor.plan(true);
  EXPECT_EQ(plan.epoch, 7u);
  EXPECT_EQ(plan.notice, PassNotice::kNone);
}

TEST(PassCursor, WithoutSetEpochReplaysAndNoticesOnce) {
  PassCursor cursor;
  start(cursor, 5);
  EXPECT_EQ(cursor.plan(true).epoch, 0u);
  EXPECT_EQ(cursor.plan(true).notice, PassNotice::kReplay);
  EXPECT_EQ(cursor.plan(false).notice, PassNotice::kNone);  // an unshuffled replay repeats nothing
  EXPECT_EQ(start(cursor, 5), PassNotice::kReplay);
  EXPECT_EQ(start(cursor, 5), PassNotice::kNone);  // once per cursor
}

TEST(PassCursor, AutoEpochAdvancesUnlessSetEpochCame) {
  PassCursor cursor(/*auto_epoch=*/true);
  start(cursor, 5);
  EXPECT_EQ(start(cursor, 5), PassNotice::kAdvance);
  EXPECT_EQ(cursor.epoch(), 1u);
  EXPECT_EQ(start(cursor, 5), PassNotice::kNone);
  EXPECT_EQ(cursor.epoch(), 2u);
  cursor.set_epoch(0);  // an explicit set_epoch wins
  start(cursor, 5);
  EXPECT_EQ(cursor.epoch(), 0u);
  cursor.set_epoch(kMax);
  start(cursor, 5);
  EXPECT_THROW(cursor.plan(true), std::invalid_argument);
}

TEST(PassCursor, PositionFollowsTheLivePass) {
  PassCursor cursor;
  cursor.set_epoch(2);
  EXPECT_EQ(cursor.position(), (Position{2, 0}));
  start(cursor, 5);
  cursor.set_taken(3);
  EXPECT_EQ(cursor.position(), (Position{2, 12}));
  EXPECT_THROW(cursor.set_taken(6), std::out_of_range);
  EXPECT_EQ(cursor.position(), (Position{2, 12}));  // a refused call changes nothing
  // set_epoch of the pass in progress (a loader started it first) keeps its position and pass.
  cursor.set_epoch(2);
  EXPECT_FALSE(cursor.explicit_epoch());
  EXPECT_EQ(cursor.position(), (Position{2, 12}));
  // Another epoch: the checkpoint says the next pass reads it from its start.
  cursor.set_epoch(3);
  EXPECT_EQ(cursor.position(), (Position{3, 0}));
}

TEST(PassCursor, SetEpochAfterAFinishedPassMeansANewPass) {
  PassCursor cursor;
  cursor.set_epoch(1);
  start(cursor, 5);
  cursor.set_taken(5);
  EXPECT_EQ(cursor.position(), (Position{1, 20}));
  cursor.set_epoch(1);
  EXPECT_TRUE(cursor.explicit_epoch());
  EXPECT_EQ(cursor.position(), (Position{1, 0}));
}

TEST(PassCursor, LoadResumesThePositionAndSetEpochOfItsEpochKeepsIt) {
  PassCursor cursor;
  start(cursor, 5);
  cursor.set_taken(1);
  cursor.load(Position{4, 9}, 3);
  EXPECT_EQ(cursor.position(), (Position{4, 9}));
  EXPECT_FALSE(cursor.live().has_value());
  cursor.set_epoch(4);  // the loop's set_epoch keeps the loaded position
  const PassPlan plan = cursor.plan(true);
  EXPECT_EQ(plan.epoch, 4u);
  EXPECT_EQ(plan.start, 9u);
  EXPECT_EQ(plan.notice, PassNotice::kNone);
  cursor.begin(plan, 3, 4);
  cursor.set_taken(2);
  EXPECT_EQ(cursor.position(), (Position{4, 9 + 2 * 4}));
  cursor.set_epoch(5);
  EXPECT_EQ(cursor.plan(true).start, 0u);
}

TEST(PassCursor, ACompleteEpochLoadsAsAnEmptyPassThenReplays) {
  PassCursor cursor;
  cursor.load(Position{2, 40}, 0);
  EXPECT_FALSE(cursor.skip_finished());  // not set to a later epoch
  const PassPlan rest = cursor.plan(true);
  EXPECT_EQ(rest.epoch, 2u);
  EXPECT_EQ(rest.start, 40u);
  cursor.begin(rest, 0, 4);
  EXPECT_EQ(cursor.position(), (Position{2, 40}));
  EXPECT_EQ(cursor.plan(true).notice, PassNotice::kReplay);
}

TEST(PassCursor, ACompleteEpochLoadedAfterALaterSetEpochSkipsToIt) {
  PassCursor cursor;
  cursor.set_epoch(3);  // the loop's set_epoch(e + 1), before a lazy loader loads epoch e
  cursor.load(Position{2, 40}, 0);
  EXPECT_EQ(cursor.position(), (Position{2, 40}));
  EXPECT_TRUE(cursor.skip_finished());
  EXPECT_FALSE(cursor.skip_finished());
  const PassPlan plan = cursor.plan(true);
  EXPECT_EQ(plan.epoch, 3u);
  EXPECT_EQ(plan.start, 0u);
  EXPECT_EQ(plan.notice, PassNotice::kNone);
  // A partial epoch never skips, and set_epoch cancels a pending skip.
  cursor.set_epoch(3);
  cursor.load(Position{2, 8}, 5);
  EXPECT_FALSE(cursor.skip_finished());
  cursor.set_epoch(3);
  cursor.load(Position{2, 40}, 0);
  cursor.set_epoch(4);
  EXPECT_FALSE(cursor.skip_finished());
}

TEST(PassCursor, LoadFinishedReplaysOrAdvancesAtOnce) {
  PassCursor replaying;
  replaying.load_finished(Position{2, 40}, 4);
  EXPECT_EQ(replaying.position(), (Position{2, 40}));
  EXPECT_EQ(replaying.plan(true).epoch, 2u);
  EXPECT_EQ(replaying.plan(true).start, 0u);
  EXPECT_EQ(replaying.plan(true).notice, PassNotice::kReplay);
  PassCursor advancing(/*auto_epoch=*/true);
  advancing.load_finished(Position{2, 40}, 4);
  EXPECT_EQ(advancing.plan(true).epoch, 3u);
}

TEST(PassNoticeText, NamesTheSamplerTheEpochAndTheFix) {
  const std::string replay =
      pass_notice_text(PassNotice::kReplay, 4, "S", "PyTorch's sampler does", "auto_epoch=True");
  EXPECT_NE(replay.find("S started a pass"), std::string::npos) << replay;
  EXPECT_NE(replay.find("replays epoch 4's order, as PyTorch's sampler does"), std::string::npos);
  EXPECT_NE(replay.find("set_epoch(epoch)"), std::string::npos);
  const std::string advance = pass_notice_text(PassNotice::kAdvance, 5, "S", "", "auto_epoch");
  EXPECT_NE(advance.find("auto_epoch advances to epoch 5"), std::string::npos) << advance;
  EXPECT_EQ(pass_notice_text(PassNotice::kNone, 5, "S", "", ""), "");
}

// The clamp: any start at or past the epoch's end reads nothing, up to 2^64 - 1 (a policy
// sampler's consumed count may exceed the core's size limit).
TEST(ResumedAt, AStartPastTheEndIsAnEmptyPass) {
  SamplerOptions options;
  options.size = 10;
  options.world_size = 4;
  options.rank = 1;
  const DistributedSampler sampler(options);
  EXPECT_EQ(sampler.remaining(0), 3u);
  EXPECT_EQ(sampler.remaining(8), 1u);
  for (uint64_t start : {uint64_t{10}, uint64_t{11}, uint64_t{1} << 63, kMax}) {
    EXPECT_EQ(sampler.remaining(start), 0u) << start;
    EXPECT_EQ(sampler.epoch(0, start).size(), 0u) << start;
    EXPECT_EQ(sampler.partition().resumed_at(start).start, 10u) << start;
  }
}

}  // namespace
}  // namespace distsampler
