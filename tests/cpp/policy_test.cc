// policy.h's contract: the one pass sampler decides passes as pass.h does, counts hand-outs and
// receipts, and its checkpoint resumes on another world size with the rest of the global stream.
#include "distsampler/policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <stdexcept>
#include <vector>

namespace distsampler {
namespace {

std::shared_ptr<PlainPolicy> eval(uint64_t world, uint64_t rank) {
  SamplerOptions o;
  o.size = 23, o.world_size = world, o.rank = rank, o.seed = Seed(uint64_t{5});
  o.order = OrderKind::kFeistel, o.uneven = true;
  return std::make_shared<PlainPolicy>(PlainPolicy::Kind::kEval, o);
}

std::vector<uint64_t> read(const PassItems& items, uint64_t first = 0) {
  std::vector<uint64_t> out(items.size() - first);
  if (!out.empty()) items.fill(first, out.size(), out.data());
  return out;
}

TEST(PolicySampler, ResumesOnAnotherWorldSizeWithTheRestOfTheEpoch) {
  std::set<uint64_t> seen;
  std::vector<PolicySampler> ranks;
  for (uint64_t r = 0; r < 2; ++r) ranks.emplace_back(eval(2, r), false);
  DictValue state;
  for (PolicySampler& s : ranks) {
    s.set_epoch(4);
    const PolicySampler::Started pass = s.start();
    EXPECT_EQ(pass.epoch, 4u);
    const std::vector<uint64_t> items = read(*pass.items);
    seen.insert(items.begin(), items.begin() + 3);
    s.set_handed(pass.serial, 3);
    state = s.state_dict();
  }
  EXPECT_EQ(ranks[0].position().consumed, 6u);
  for (uint64_t r = 0; r < 3; ++r) {
    PolicySampler resumed(eval(3, r), false);
    std::string summary;
    resumed.load(resumed.parse_state(state, &summary));
    EXPECT_FALSE(summary.empty());
    for (uint64_t index : read(*resumed.start().items)) EXPECT_TRUE(seen.insert(index).second);
  }
  EXPECT_EQ(seen.size(), 23u);  // every sample once: uneven evaluation, no padding
}

TEST(PolicySampler, ReceiptsOverrideHandOutsAndStaleReportsAreIgnored) {
  PolicySampler s(eval(1, 0), false);
  const PolicySampler::Started first = s.start();
  s.set_handed(first.serial, 10);
  EXPECT_EQ(s.position().consumed, 10u);
  s.receive(first.serial, 4);  // a loader: the loop received 4 of the 10 fetched
  s.set_handed(first.serial, 12);
  EXPECT_EQ(s.position().consumed, 4u);
  s.set_epoch(1);
  const PolicySampler::Started second = s.start();
  s.receive(first.serial, 9);  // about the previous pass: ignored
  EXPECT_EQ(s.position(), (Position{1, 0}));
  s.receive_all(second.serial);
  EXPECT_EQ(s.position(), (Position{1, 23}));
}

TEST(PolicySampler, ReplaysWithANoticeOrAdvancesWithAutoEpoch) {
  PolicySampler replay(eval(1, 0), false), advance(eval(1, 0), true);
  replay.start();
  advance.start();
  const PolicySampler::Started again = replay.start();
  EXPECT_EQ(again.epoch, 0u);
  EXPECT_EQ(again.notice, PassNotice::kReplay);
  const PolicySampler::Started next = advance.start();
  EXPECT_EQ(next.epoch, 1u);
  EXPECT_EQ(next.notice, PassNotice::kAdvance);
}

TEST(PolicySampler, AFailedLoadChangesNothing) {
  PolicySampler s(eval(2, 0), false);
  s.set_epoch(2);
  const Position before = s.position();
  EXPECT_THROW(s.parse_state(DictValue::dict(), nullptr), std::invalid_argument);
  EXPECT_EQ(s.position(), before);
}

// The iterable adapter's split: worker w of K reads the view's batches w, w + K, ...; together
// the workers read the view once, and a worker resumes from its position.
TEST(WorkerShare, WorkersReadTheViewsBatchesRoundRobin) {
  const DistributedSampler sampler = eval(3, 1)->sampler();  // 23 items, uneven
  const RankView view = sampler.epoch(2, 4);  // 6 items from global position 4
  std::vector<uint64_t> dealt;
  std::vector<WorkerShare> workers;
  for (uint64_t w = 0; w < 2; ++w) workers.emplace_back(sampler, 2, w, 2, WorkerPosition{2, 4, 0});
  for (uint64_t batch = 0; batch < 4; ++batch) {  // torch asks the workers in turn
    for (int item = 0; item < 2; ++item) {
      if (auto index = workers[batch % 2].next()) dealt.push_back(*index);
    }
  }
  EXPECT_EQ(dealt, std::vector<uint64_t>(view.begin(), view.end()));
  EXPECT_FALSE(workers[0].next());
  EXPECT_EQ(workers[0].position().yielded, 4u);
  EXPECT_EQ(workers[1].position().yielded, 2u);
  WorkerShare resumed(sampler, 2, 1, 2, WorkerPosition{2, 4, 0});
  resumed.seek(WorkerPosition{2, 4, 1});  // worker 1 yielded batch 1's first item
  EXPECT_EQ(resumed.next(), view[3]);
  EXPECT_THROW(WorkerShare(sampler, 0, 0, 1, {}), std::invalid_argument);
  EXPECT_THROW(WorkerShare(sampler, 1, 2, 2, {}), std::invalid_argument);
}

}  // namespace
}  // namespace distsampler
