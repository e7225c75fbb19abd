#include "distsampler/prefetch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace distsampler {
namespace {

SamplerOptions torch_options(uint64_t size, uint64_t world_size, uint64_t rank) {
  SamplerOptions o;
  o.size = size;
  o.world_size = world_size;
  o.rank = rank;
  o.seed = 7;
  return o;
}

std::vector<uint64_t> all(const RankView& view) { return {view.begin(), view.end()}; }

// Waits (up to 20 s) until `sampler` has `count` orders alive: a background build finished.
bool wait_for_live(const PrefetchingSampler& sampler, uint64_t count) {
  for (int i = 0; i < 2000; ++i) {
    if (sampler.live_orders() == count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Prefetch, ViewsAreTheSamplersBitForBitAndConsecutiveEpochsAreBuiltAhead) {
  const SamplerOptions options = torch_options(10007, 3, 1);
  const DistributedSampler plain(options);
  PrefetchingSampler sampler(options);
  ASSERT_TRUE(sampler.prefetching());
  for (uint64_t epoch = 0; epoch < 6; ++epoch) {
    const uint64_t start = epoch % 2 == 0 ? 0 : 1234;
    {
      const RankView view = sampler.epoch(epoch, start);
      EXPECT_EQ(all(view), all(plain.epoch(epoch, start))) << epoch;
      // The view being read and, once built, the next epoch's order: never more.
      ASSERT_TRUE(wait_for_live(sampler, 2)) << epoch;
    }
    EXPECT_EQ(sampler.live_orders(), 1u);  // the view released: the prefetched order alone
  }
  EXPECT_EQ(sampler.hits(), 5u);  // every epoch after the first came from the background
}

TEST(Prefetch, TheBackgroundBuildWaitsWhileTwoOrdersAreAlive) {
  PrefetchingSampler sampler(torch_options(5000, 2, 0));
  auto first = std::make_unique<RankView>(sampler.epoch(0));
  ASSERT_TRUE(wait_for_live(sampler, 2));
  const RankView second = sampler.epoch(1);  // epoch 0's view still held by the reader
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(sampler.live_orders(), 2u);  // epoch 2 is not built while 0 and 1 are alive
  first.reset();
  EXPECT_TRUE(wait_for_live(sampler, 2));  // 0 gone: 1 and the prefetched 2
  EXPECT_EQ(all(sampler.epoch(2)), all(DistributedSampler(torch_options(5000, 2, 0)).epoch(2)));
}

TEST(Prefetch, AnotherEpochThanTheGuessIsBuiltOnDemand) {
  const SamplerOptions options = torch_options(3001, 4, 3);
  PrefetchingSampler sampler(options);
  sampler.epoch(0);
  ASSERT_TRUE(wait_for_live(sampler, 1));  // the view of 0 is gone; 1 is built
  EXPECT_EQ(all(sampler.epoch(5)), all(DistributedSampler(options).epoch(5)));
  EXPECT_EQ(sampler.hits(), 0u);
  // Asking for an epoch while its build still waits for a release: built here, no deadlock.
  const RankView nine = sampler.epoch(9);
  ASSERT_TRUE(wait_for_live(sampler, 2));
  const RankView ten = sampler.epoch(10);  // 9 and 10 alive: the build of 11 waits
  EXPECT_EQ(all(sampler.epoch(11)), all(DistributedSampler(options).epoch(11)));
  EXPECT_EQ(sampler.hits(), 1u);  // 10 only
}

TEST(Prefetch, ErrorsComeFromTheCallThatAsksForTheEpoch) {
  SamplerOptions options = torch_options(100, 1, 0);
  options.seed = Seed::parse("18446744073709551613");  // 2^64 - 3: epoch 3 overflows
  PrefetchingSampler sampler(options);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) sampler.epoch(epoch);
  ASSERT_TRUE(wait_for_live(sampler, 0));  // the failed build of 3 holds nothing
  EXPECT_THROW(sampler.epoch(3), std::out_of_range);
  EXPECT_EQ(all(sampler.epoch(0)), all(DistributedSampler(options).epoch(0)));
  EXPECT_THROW(sampler.epoch(0, (uint64_t{1} << 63) + 1), std::invalid_argument);
}

TEST(Prefetch, OtherOrdersAndDisabledPrefetchPassThrough) {
  SamplerOptions feistel = torch_options(1000, 2, 1);
  feistel.order = OrderKind::kFeistel;
  SamplerOptions unshuffled = torch_options(1000, 2, 1);
  unshuffled.shuffle = false;
  for (const auto& [options, prefetch] : std::vector<std::pair<SamplerOptions, bool>>{
           {feistel, true}, {unshuffled, true}, {torch_options(1000, 2, 1), false}}) {
    PrefetchingSampler sampler(options, prefetch);
    EXPECT_FALSE(sampler.prefetching());
    EXPECT_EQ(all(sampler.epoch(4)), all(DistributedSampler(options).epoch(4)));
    EXPECT_EQ(sampler.live_orders(), 0u);
  }
}

TEST(Prefetch, ViewsOutliveTheSamplerAndDestructionDoesNotHang) {
  std::vector<uint64_t> expected = all(DistributedSampler(torch_options(2000, 1, 0)).epoch(1));
  RankView kept = DistributedSampler(torch_options(1, 1, 0)).epoch(0);
  {
    PrefetchingSampler sampler(torch_options(2000, 1, 0));
    const RankView a = sampler.epoch(0);
    kept = sampler.epoch(1);  // 0 still alive: the build of 2 waits, and is cancelled below
  }
  EXPECT_EQ(all(kept), expected);
}

}  // namespace
}  // namespace distsampler
