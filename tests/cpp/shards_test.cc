#include "distsampler/policies/shards.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <vector>

#include "distsampler/sampler.h"

namespace distsampler {
namespace {

ShardOptions shards(uint64_t window) {
  ShardOptions o;
  for (uint64_t s = 0; s < 37; ++s) o.shard_sizes.push_back(1 + (s * 7919) % 50);
  o.window = window;
  o.seed = 11;
  return o;
}

std::vector<uint64_t> shard_of(const ShardOptions& o) {
  std::vector<uint64_t> owner;
  for (uint64_t s = 0; s < o.shard_sizes.size(); ++s)
    owner.insert(owner.end(), o.shard_sizes[s], s);
  return owner;
}

TEST(ShardOrder, IsAPermutationAndWindowsHoldWholeShards) {
  for (uint64_t window : {1, 2, 4, 37, 100}) {
    const ShardOptions o = shards(window);
    const std::vector<uint64_t> owner = shard_of(o);
    for (uint64_t epoch : {0, 1, 2}) {
      const auto order = make_shard_order(o, epoch);
      ASSERT_EQ(order->size(), owner.size());
      std::set<uint64_t> seen;
      std::set<uint64_t> window_shards;
      uint64_t in_window = 0;
      uint64_t windows = 0;
      for (uint64_t p = 0; p < order->size(); ++p) {
        const uint64_t i = order->at(p);
        ASSERT_LT(i, owner.size());
        ASSERT_TRUE(seen.insert(i).second) << "index " << i << " twice";
        window_shards.insert(owner[i]);
        // A window is complete when its shards' samples are all read: at most `window` shards.
        ++in_window;
        uint64_t window_total = 0;
        for (uint64_t s : window_shards) window_total += o.shard_sizes[s];
        ASSERT_LE(window_shards.size(), window);
        if (window_total == in_window) {
          window_shards.clear(), in_window = 0, ++windows;
        }
      }
      EXPECT_EQ(windows, (37 + window - 1) / window);
    }
  }
}

TEST(ShardOrder, EpochsDifferAndRanksCutTheSameOrder) {
  const ShardOptions o = shards(4);
  const auto e0 = make_shard_order(o, 0);
  const auto e1 = make_shard_order(o, 1);
  uint64_t same = 0;
  for (uint64_t p = 0; p < e0->size(); ++p) same += e0->at(p) == e1->at(p);
  EXPECT_LT(same, e0->size() / 10);
  // Through RankView with W = 1, 3, 8 the ranks' positions interleave back into the one order.
  for (uint64_t w : {1, 3, 8}) {
    std::vector<uint64_t> stream(e0->size());
    for (uint64_t r = 0; r < w; ++r) {
      const RankView v(make_shard_order(o, 0), Partition{e0->size(), w, r, true, 0}, 0);
      for (uint64_t i = 0; i < v.size(); ++i) stream[r + i * w] = v[i];
    }
    for (uint64_t p = 0; p < e0->size() / w * w; ++p) ASSERT_EQ(stream[p], e0->at(p));
  }
}

TEST(ShardOrder, BadOptionsAreClearErrors) {
  ShardOptions o = shards(0);
  EXPECT_THROW(make_shard_order(o, 0), std::invalid_argument);
  o = shards(2);
  o.shard_sizes[3] = 0;
  EXPECT_THROW(make_shard_order(o, 0), std::invalid_argument);
  o.shard_sizes = {};
  EXPECT_EQ(make_shard_order(o, 0)->size(), 0u);
}

}  // namespace
}  // namespace distsampler

namespace distsampler {
namespace {

// BlockShardOrder is make_shard_order's order for blocks of one size (the last holding the rest),
// position for position, one at a time and gathered: the sizes around the block and window
// boundaries, the short block in every window, a window of one block and of all of them.
TEST(BlockShardOrder, EqualsTheShardOrderOfItsBlocks) {
  int checked = 0;
  for (uint64_t block : {1, 3, 7, 16}) {
    for (uint64_t window : {1, 2, 3, 5, 100}) {
      for (uint64_t n = 0; n <= 6 * block * 3 + 2; ++n) {
        for (uint64_t epoch : {0, 3}) {
          for (uint64_t seed : {11, 12}) {
            const BlockShardOrder blocks(n, block, window, Seed(seed), epoch);
            ASSERT_EQ(blocks.size(), n);
            ShardOptions o;
            for (uint64_t left = n; left > 0; left -= std::min(left, block)) {
              o.shard_sizes.push_back(std::min(left, block));
            }
            o.window = window;
            o.seed = Seed(seed);
            const auto shards = make_shard_order(o, epoch);
            std::vector<uint64_t> gathered(n);
            blocks.gather(0, n, gathered.data());
            for (uint64_t p = 0; p < n; ++p) {
              ASSERT_EQ(blocks(p), shards->at(p))
                  << "n " << n << " block " << block << " window " << window << " position " << p;
              ASSERT_EQ(gathered[p], blocks(p)) << "gathered, position " << p;
            }
            if (n > 2) {  // a gather that starts inside a window
              std::vector<uint64_t> part(n - 2);
              blocks.gather(1, n - 2, part.data());
              for (uint64_t p = 1; p + 1 < n; ++p) ASSERT_EQ(part[p - 1], blocks(p));
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// O(1) memory: a source of 10^12 documents in blocks of 1,000, read anywhere.
TEST(BlockShardOrder, LargeSourcesAndBadArguments) {
  const uint64_t n = 1000000000000ull + 17;
  const BlockShardOrder order(n, 1000, 8, Seed(5), 2);
  std::set<uint64_t> seen;
  for (uint64_t p = n - 1; p > n - 3000; --p) {
    const uint64_t d = order.at(p);
    ASSERT_LT(d, n);
    seen.insert(d);
  }
  EXPECT_EQ(seen.size(), 2999u);
  EXPECT_THROW(order.at(n), std::out_of_range);
  EXPECT_THROW(BlockShardOrder(10, 0, 1, Seed(1), 0), std::invalid_argument);
  EXPECT_THROW(BlockShardOrder(10, 1, 0, Seed(1), 0), std::invalid_argument);
  EXPECT_THROW(BlockShardOrder((uint64_t{1} << 63) + 1, 1, 1, Seed(1), 0), std::invalid_argument);
}

}  // namespace
}  // namespace distsampler
