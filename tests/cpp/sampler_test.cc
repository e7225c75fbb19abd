#include "distsampler/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "golden.h"

namespace distsampler {
namespace {

SamplerOptions options_of(uint64_t n, uint64_t w, uint64_t r, OrderKind kind = OrderKind::kTorch) {
  SamplerOptions o;
  o.size = n;
  o.world_size = w;
  o.rank = r;
  o.order = kind;
  return o;
}

std::vector<uint64_t> indices(const RankView& v) {
  return std::vector<uint64_t>(v.begin(), v.end());
}

TEST(Sampler, ReferenceExamplesFromPyTorch) {
  EXPECT_EQ(indices(DistributedSampler(options_of(16, 2, 0)).epoch(0)),
            (std::vector<uint64_t>{12, 9, 11, 13, 2, 15, 4, 7}));
  EXPECT_EQ(indices(DistributedSampler(options_of(16, 2, 0)).epoch(1)),
            (std::vector<uint64_t>{5, 6, 11, 7, 1, 9, 10, 13}));
  EXPECT_EQ(indices(DistributedSampler(options_of(16, 2, 1)).epoch(0)),
            (std::vector<uint64_t>{10, 6, 8, 5, 14, 0, 3, 1}));
  EXPECT_EQ(indices(DistributedSampler(options_of(10, 3, 0)).epoch(0)),
            (std::vector<uint64_t>{4, 5, 0, 2}));
  EXPECT_EQ(indices(DistributedSampler(options_of(10, 3, 1)).epoch(0)),
            (std::vector<uint64_t>{1, 3, 8, 4}));
  EXPECT_EQ(indices(DistributedSampler(options_of(10, 3, 2)).epoch(0)),
            (std::vector<uint64_t>{7, 9, 6, 1}));
  EXPECT_EQ(indices(DistributedSampler(options_of(10, 3, 0)).epoch(1)),
            (std::vector<uint64_t>{5, 2, 9, 4}));
  auto dropped = options_of(10, 3, 0);
  dropped.drop_last = true;
  EXPECT_EQ(indices(DistributedSampler(dropped).epoch(0)), (std::vector<uint64_t>{4, 5, 0}));
  const uint64_t expected[] = {2, 0, 1, 2, 0, 1, 2, 0};
  for (uint64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(indices(DistributedSampler(options_of(3, 8, r)).epoch(0)),
              std::vector<uint64_t>{expected[r]});
  }
}

TEST(Sampler, MatchesTheGoldenFileFromPyTorch) {
  for (const auto& c : testing::read_golden("torch_sampler.txt")) {
    SamplerOptions o;
    o.size = std::stoull(c.fields.at(0));
    o.world_size = std::stoull(c.fields.at(1));
    o.rank = std::stoull(c.fields.at(2));
    const uint64_t epoch = std::stoull(c.fields.at(3));
    o.seed = Seed::parse(c.fields.at(4));
    o.shuffle = c.fields.at(5) == "1";
    o.drop_last = c.fields.at(6) == "1";
    ASSERT_EQ(indices(DistributedSampler(o).epoch(epoch)), c.values) << c.line;
  }
}

// The grid: every n in [0, 200], W in [1, 17], every rank, both drop_last, several epochs, both
// orders. All ranks together read every index exactly once, plus the defined padding (the
// order's first total_size - n positions again) or minus the dropped tail.
TEST(Sampler, EveryRankTogetherCoversExactlyOncePlusPadding) {
  for (OrderKind kind : {OrderKind::kTorch, OrderKind::kFeistel}) {
    for (uint64_t n = 0; n <= 200; ++n) {
      for (uint64_t w = 1; w <= 17; ++w) {
        for (bool drop : {false, true}) {
          for (uint64_t epoch : {0, 1, 7}) {
            auto o = options_of(n, w, 0, kind);
            o.drop_last = drop;
            o.seed = 1000 + n;
            const auto order = make_epoch_order(o.order_options(), epoch);
            std::vector<uint64_t> count(n, 0);
            uint64_t total = 0;
            for (uint64_t r = 0; r < w; ++r) {
              o.rank = r;
              const DistributedSampler s(o);
              const RankView v = s.epoch(epoch);
              ASSERT_EQ(v.size(), s.num_samples());
              for (uint64_t index : v) {
                ASSERT_LT(index, n);
                ++count[index];
                ++total;
              }
            }
            const uint64_t expected_total = drop ? n / w * w : (n + w - 1) / w * w;
            ASSERT_EQ(total, expected_total) << n << " " << w;
            // Padding repeats the order's first (total - n) positions; the drop removes its
            // last (n - total).
            std::vector<uint64_t> expected(n, 0);
            for (uint64_t p = 0; p < total; ++p) ++expected[order->at(p % n)];
            ASSERT_EQ(count, expected) << "n=" << n << " W=" << w << " drop=" << drop;
          }
        }
      }
    }
  }
}

TEST(Sampler, ForgettingTheEpochRepeatsTheOrderAndAdvancingItChangesIt) {
  for (OrderKind kind : {OrderKind::kTorch, OrderKind::kFeistel}) {
    const DistributedSampler s(options_of(1000, 4, 1, kind));
    EXPECT_EQ(indices(s.epoch(0)), indices(s.epoch(0)));
    EXPECT_NE(indices(s.epoch(0)), indices(s.epoch(1)));
  }
}

TEST(Sampler, FillAtAndIterationAgree) {
  for (OrderKind kind : {OrderKind::kTorch, OrderKind::kFeistel}) {
    // 5000 with W = 16, 17, 64: windows longer than the torch gather's prefetch distance.
    for (uint64_t n : {0, 1, 5, 97, 1000, 5000}) {
      for (uint64_t w : {1, 3, 8, 16, 17, 64, 250}) {
        for (uint64_t r : {uint64_t{0}, w - 1}) {
          const RankView v = DistributedSampler(options_of(n, w, r, kind)).epoch(3);
          const std::vector<uint64_t> all = indices(v);
          for (uint64_t first = 0; first <= v.size(); first += 1 + v.size() / 7) {
            std::vector<uint64_t> window(v.size() - first);
            v.fill(first, window.size(), window.data());
            ASSERT_TRUE(std::equal(window.begin(), window.end(), all.begin() + first));
          }
          for (uint64_t i = 0; i < v.size(); ++i) ASSERT_EQ(v.at(i), all[i]);
          EXPECT_THROW(v.at(v.size()), std::out_of_range);
          std::vector<uint64_t> sink(2);
          EXPECT_THROW(v.fill(v.size(), 1, sink.data()), std::out_of_range);
          EXPECT_THROW(v.fill(v.size() + 1, 0, sink.data()), std::out_of_range);
          EXPECT_THROW(v.fill(1, UINT64_MAX, sink.data()), std::out_of_range);
        }
      }
    }
  }
}

TEST(Sampler, FeistelViewOfAHugeDatasetIsRandomAccess) {
  const DistributedSampler s(options_of(1000000000000000ull, 8, 3, OrderKind::kFeistel));
  const RankView v = s.epoch(0);
  EXPECT_EQ(v.size(), 125000000000000ull);
  std::vector<uint64_t> window(5);
  v.fill(100000000000ull, 5, window.data());
  for (uint64_t j = 0; j < 5; ++j) {
    EXPECT_LT(window[j], 1000000000000000ull);
    EXPECT_EQ(window[j], v[100000000000ull + j]);
  }
}

TEST(Sampler, ResumingAtAStartContinuesTheSameWorldSizeExactly) {
  for (OrderKind kind : {OrderKind::kTorch, OrderKind::kFeistel}) {
    for (bool drop : {false, true}) {
      for (uint64_t w : {1, 3, 4}) {
        for (uint64_t r = 0; r < w; ++r) {
          auto o = options_of(103, w, r, kind);
          o.drop_last = drop;
          const DistributedSampler s(o);
          const std::vector<uint64_t> whole = indices(s.epoch(2));
          for (uint64_t k = 0; k <= whole.size(); ++k) {
            const std::vector<uint64_t> rest = indices(s.epoch(2, k * w));
            ASSERT_EQ(rest, std::vector<uint64_t>(whole.begin() + k, whole.end()));
          }
        }
      }
    }
  }
  EXPECT_EQ(DistributedSampler(options_of(10, 2, 0)).epoch(0, 11).size(), 0u);
  // Any start past the end is a complete epoch (Partition::resumed_at), up to 2^64 - 1.
  EXPECT_EQ(DistributedSampler(options_of(10, 2, 0)).epoch(0, UINT64_MAX).size(), 0u);
}

void expect_invalid(const SamplerOptions& o, const std::string& field) {
  try {
    DistributedSampler s(o);
    ADD_FAILURE() << "accepted invalid " << field;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(field + " = ", 0), 0u) << e.what();
  }
}

TEST(Sampler, ConstructorRejectsBadOptions) {
  expect_invalid(options_of(10, 0, 0), "world_size");
  expect_invalid(options_of(10, 2, 2), "rank");
  expect_invalid(options_of((uint64_t{1} << 63) + 1, 2, 0), "size");
  auto o = options_of(10, 2, 0, OrderKind::kFeistel);
  o.feistel_rounds = -1;
  expect_invalid(o, "feistel_rounds");
  o.feistel_rounds = 33;
  expect_invalid(o, "feistel_rounds");
  o = options_of(10, 2, 0);
  o.order = static_cast<OrderKind>(9);
  expect_invalid(o, "order");
}

TEST(Sampler, TorchSeedPlusEpochOverflowIsAnError) {
  auto o = options_of(10, 2, 0);
  o.seed = UINT64_MAX;
  const DistributedSampler s(o);
  EXPECT_NO_THROW(s.epoch(0));
  EXPECT_THROW(s.epoch(1), std::out_of_range);
  o.shuffle = false;  // PyTorch seeds nothing without shuffle
  EXPECT_NO_THROW(DistributedSampler(o).epoch(1));
}

TEST(Sampler, TorchOrderTooLargeForMemoryIsAClearError) {
  const DistributedSampler s(options_of(uint64_t{1} << 62, 8, 0));
  try {
    s.epoch(0);
    ADD_FAILURE() << "materialized 2^62 elements";
  } catch (const std::length_error& e) {
    EXPECT_NE(std::string(e.what()).find("feistel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace distsampler
