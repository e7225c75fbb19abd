// Duplicate-free evaluation: partition.h's uneven mode and the padding mask, through RankView.
#include <gtest/gtest.h>

#include <vector>

#include "distsampler/partition.h"
#include "distsampler/sampler.h"

namespace distsampler {
namespace {

// Every n up to 120, W up to 12, every rank, both orders, two epochs, start 0 and a resumed
// start: the real (non-padding) samples of all ranks are every index of [start, n) exactly once;
// uneven ranks differ by at most one; masked ranks all have the same number of steps.
TEST(Evaluation, EveryPositionExactlyOnceAcrossRanks) {
  for (OrderKind kind : {OrderKind::kTorch, OrderKind::kFeistel}) {
    for (uint64_t n = 0; n <= 120; ++n) {
      for (uint64_t w = 1; w <= 12; ++w) {
        for (uint64_t start : {uint64_t{0}, n / 3}) {
          for (uint64_t epoch : {0, 1}) {
            std::vector<int> seen_uneven(n, 0);
            std::vector<int> seen_masked(n, 0);
            uint64_t min_size = ~uint64_t{0};
            uint64_t max_size = 0;
            for (uint64_t r = 0; r < w; ++r) {
              SamplerOptions o;
              o.size = n;
              o.world_size = w;
              o.rank = r;
              o.order = kind;
              o.seed = 3;
              const DistributedSampler padded(o);
              o.uneven = true;
              const DistributedSampler uneven(o);
              const RankView u = uneven.epoch(epoch, start);
              const RankView m = padded.epoch(epoch, start);
              const RankView full = padded.epoch(epoch);  // order positions as a reference
              min_size = std::min(min_size, u.size());
              max_size = std::max(max_size, u.size());
              ASSERT_EQ(u.size(), u.num_real());
              for (uint64_t i = 0; i < u.size(); ++i) {
                ASSERT_FALSE(u.is_padding(i));
                ++seen_uneven[u[i]];
                ASSERT_EQ(u[i], m[i]);  // same samples as the padded view, minus the padding
              }
              ASSERT_EQ(m.size(), u.size() + (m.size() > u.num_real() ? 1 : 0));
              for (uint64_t i = 0; i < m.size(); ++i) {
                ASSERT_EQ(m.is_padding(i), i >= m.num_real());
                if (!m.is_padding(i)) ++seen_masked[m[i]];
              }
            }
            if (n > start) {
              ASSERT_LE(max_size - min_size, 1u);
            }
            // Positions [start, n) of the epoch's order, each exactly once.
            SamplerOptions all;
            all.size = n;
            all.order = kind;
            all.seed = 3;
            const RankView order = DistributedSampler(all).epoch(epoch);
            std::vector<int> expected(n, 0);
            for (uint64_t p = start; p < n; ++p) ++expected[order[p]];
            ASSERT_EQ(seen_uneven, expected) << n << " " << w << " " << start;
            ASSERT_EQ(seen_masked, expected) << n << " " << w << " " << start;
          }
        }
      }
    }
  }
}

TEST(Evaluation, UnevenExcludesDropLast) {
  Partition p{10, 3, 0, true, 0, true};
  EXPECT_THROW(p.validate(), std::invalid_argument);
  SamplerOptions o;
  o.size = 10;
  o.world_size = 3;
  o.uneven = true;
  o.drop_last = true;
  EXPECT_THROW(DistributedSampler{o}, std::invalid_argument);
}

TEST(Evaluation, PyTorchExampleSizes) {
  // n = 10, W = 3: PyTorch pads rank 1 and 2 with repeats; uneven gives 4, 3, 3.
  for (uint64_t r = 0; r < 3; ++r) {
    Partition u{10, 3, r, false, 0, true};
    Partition m{10, 3, r, false, 0};
    EXPECT_EQ(u.num_samples(), r == 0 ? 4u : 3u);
    EXPECT_EQ(m.num_samples(), 4u);
    EXPECT_EQ(m.num_real(), u.num_samples());
    EXPECT_EQ(m.is_padding(3), r != 0);
    EXPECT_EQ(u.total_size(), 10u);
  }
}

}  // namespace
}  // namespace distsampler
