#include "distsampler/policies/batches.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "distsampler/sampler.h"

namespace distsampler {
namespace {

std::vector<uint64_t> lengths(uint64_t n) {
  std::vector<uint64_t> l(n);
  for (uint64_t i = 0; i < n; ++i) l[i] = 1 + (i * 2654435761u) % 97;
  return l;
}

TEST(BatchView, GlobalBatchesDoNotDependOnTheWorldSize) {
  OrderOptions oo;
  oo.size = 103;
  oo.kind = OrderKind::kFeistel;
  const auto order = make_epoch_order(oo, 2);
  for (bool drop : {false, true}) {
    const BatchView one(order, 8, 1, 0, drop);
    for (uint64_t w : {1, 3, 8}) {
      std::vector<std::vector<uint64_t>> seen(one.num_global_batches());
      uint64_t sizes = ~uint64_t{0};
      for (uint64_t r = 0; r < w; ++r) {
        const BatchView v(order, 8, w, r, drop);
        if (sizes == ~uint64_t{0}) sizes = v.size();
        ASSERT_EQ(v.size(), sizes);  // the same number of steps on every rank
        for (uint64_t j = 0; j < v.size(); ++j) {
          const uint64_t b = v.global_batch(j);
          ASSERT_EQ(v[j], one.global(b));
          ASSERT_EQ(b % w == r && !v.is_padding(j), j * w + r < one.num_global_batches());
          if (drop) {
            ASSERT_EQ(v[j].size(), 8u);
          }
          if (!v.is_padding(j)) seen[b] = v[j];
        }
      }
      // Without drop_last the real batches cover every index once.
      if (!drop) {
        std::vector<uint64_t> all;
        for (const auto& b : seen) all.insert(all.end(), b.begin(), b.end());
        std::sort(all.begin(), all.end());
        ASSERT_EQ(all.size(), 103u);
        for (uint64_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i);
      }
    }
  }
}

TEST(Bucketed, PermutationSortedWindowsAndShuffledBatches) {
  BucketOptions o;
  o.lengths = lengths(1000);
  o.batch_size = 16;
  o.window_batches = 8;
  o.seed = 5;
  const auto order = make_bucketed_order(o, 0);
  std::vector<uint64_t> v(1000);
  order->gather(0, 1, 1000, v.data());
  std::vector<uint64_t> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  // Within every batch lengths are non-decreasing (a sorted window cut into batches).
  for (uint64_t b = 0; b * 16 < 1000; ++b) {
    for (uint64_t j = b * 16 + 1; j < std::min<uint64_t>(1000, (b + 1) * 16); ++j) {
      ASSERT_LE(o.lengths[v[j - 1]], o.lengths[v[j]]);
    }
  }
  // The batches are shuffled: batch max lengths are not sorted overall.
  uint64_t descents = 0;
  for (uint64_t b = 1; b < 62; ++b)
    descents += o.lengths[v[b * 16 - 1]] > o.lengths[v[b * 16 + 15]];
  EXPECT_GT(descents, 10u);
  // Deterministic, and a different epoch gives a different order.
  const auto again = make_bucketed_order(o, 0);
  const auto next = make_bucketed_order(o, 1);
  uint64_t same = 0;
  for (uint64_t p = 0; p < 1000; ++p) {
    ASSERT_EQ(again->at(p), v[p]);
    same += next->at(p) == v[p];
  }
  EXPECT_LT(same, 100u);
}

TEST(Bucketed, BucketingReducesPaddingWaste) {
  BucketOptions o;
  o.lengths = lengths(4096);
  o.batch_size = 32;
  o.window_batches = 32;
  auto waste = [&](const EpochOrder& order) {
    uint64_t padded = 0;
    uint64_t real = 0;
    for (uint64_t b = 0; b < 4096 / 32; ++b) {
      uint64_t longest = 0;
      for (uint64_t j = b * 32; j < (b + 1) * 32; ++j) {
        longest = std::max(longest, o.lengths[order.at(j)]);
        real += o.lengths[order.at(j)];
      }
      padded += longest * 32;
    }
    return 1.0 - static_cast<double>(real) / static_cast<double>(padded);
  };
  OrderOptions random;
  random.size = 4096;
  random.kind = OrderKind::kFeistel;
  EXPECT_LT(waste(*make_bucketed_order(o, 0)), waste(*make_epoch_order(random, 0)) / 4);
}

TEST(BatchView, BadOptionsAreClearErrors) {
  OrderOptions oo;
  oo.size = 10;
  const auto order = make_epoch_order(oo, 0);
  EXPECT_THROW(BatchView(order, 0, 1, 0, false), std::invalid_argument);
  EXPECT_THROW(BatchView(order, 2, 2, 2, false), std::invalid_argument);
  EXPECT_THROW(BatchView(order, 2, 1, 0, false)[5], std::out_of_range);
  BucketOptions b;
  b.batch_size = 0;
  EXPECT_THROW(make_bucketed_order(b, 0), std::invalid_argument);
  b.batch_size = 1;
  b.window_batches = 0;
  EXPECT_THROW(make_bucketed_order(b, 0), std::invalid_argument);
}

}  // namespace
}  // namespace distsampler
