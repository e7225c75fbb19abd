#include "distsampler/policies/weighted.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace distsampler {
namespace {

WeightedOptions options(uint64_t size, uint64_t num_samples, uint64_t w = 1, uint64_t r = 0) {
  WeightedOptions o;
  o.size = size;
  o.num_samples = num_samples;
  o.world_size = w;
  o.rank = r;
  o.seed = 7;
  return o;
}

TEST(AliasTable, ProbabilitiesEqualTheNormalizedWeights) {
  const std::vector<double> w = {1, 0, 3, 0.5, 10, 2, 2, 0.001};
  double sum = 0;
  for (double x : w) sum += x;
  const AliasTable t(w);
  for (uint64_t i = 0; i < w.size(); ++i) EXPECT_NEAR(t.probability(i), w[i] / sum, 1e-12) << i;
}

TEST(WeightedSampler, DrawFrequenciesMatchTheWeights) {
  const std::vector<double> w = {1, 0, 3, 0.5, 10, 2, 2, 0.5};
  double sum = 0;
  for (double x : w) sum += x;
  const uint64_t draws = 2'000'000;
  const WeightedSampler s(w, options(w.size(), draws));
  std::vector<uint64_t> hist(w.size());
  for (uint64_t i = 0; i < draws; ++i) ++hist[s(0, i)];
  EXPECT_EQ(hist[1], 0u);  // zero weight, never drawn
  // Chi-square over the 7 non-zero cells (6 degrees of freedom): 99.99% quantile ~ 27.9.
  double chi = 0;
  for (uint64_t i = 0; i < w.size(); ++i) {
    if (w[i] == 0) continue;
    const double expected = draws * w[i] / sum;
    chi += (hist[i] - expected) * (hist[i] - expected) / expected;
  }
  EXPECT_LT(chi, 27.9);
}

TEST(WeightedSampler, SameGlobalStreamForEveryWorldSize) {
  std::vector<double> w(1000);
  for (uint64_t i = 0; i < w.size(); ++i) w[i] = 1.0 + static_cast<double>(i % 17);
  const uint64_t draws = 1001;  // not divisible by 3 or 8
  const WeightedSampler one(w, options(w.size(), draws));
  for (uint64_t epoch : {0, 1, 9}) {
    std::vector<uint64_t> reference(draws);
    one.fill(epoch, 0, draws, reference.data());
    for (uint64_t world : {1, 3, 8}) {
      std::vector<uint64_t> stream(draws, ~uint64_t{0});
      for (uint64_t r = 0; r < world; ++r) {
        const WeightedSampler s(w, options(w.size(), draws, world, r));
        std::vector<uint64_t> mine(s.num_samples());
        s.fill(epoch, 0, mine.size(), mine.data());
        for (uint64_t i = 0; i < mine.size(); ++i) {
          EXPECT_EQ(mine[i], s(epoch, i));
          if (r + i * world < draws) stream[r + i * world] = mine[i];
        }
      }
      EXPECT_EQ(stream, reference) << "world size " << world << " epoch " << epoch;
    }
  }
}

TEST(WeightedSampler, FillGlobalReadsAnyStridedPositions) {
  const std::vector<double> w = {1, 0, 3, 2};
  const WeightedSampler s(w, options(w.size(), 100));
  std::vector<uint64_t> out(40);
  s.fill_global(5, 17, 3, out.size(), out.data());
  for (uint64_t j = 0; j < out.size(); ++j) EXPECT_EQ(out[j], s.global(5, 17 + j * 3)) << j;
  s.fill_global(5, ~uint64_t{0} - 4, 1, 5, out.data());  // past the epoch: the stream goes on
  for (uint64_t j = 0; j < 5; ++j) EXPECT_EQ(out[j], s.global(5, ~uint64_t{0} - 4 + j)) << j;
}

TEST(WeightedSampler, EpochsAndSeedsGiveDifferentStreams) {
  const std::vector<double> w(100, 1.0);
  const WeightedSampler a(w, options(100, 100));
  WeightedOptions o = options(100, 100);
  o.seed = 8;
  const WeightedSampler b(w, o);
  uint64_t same_epoch = 0;
  uint64_t same_seed = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    same_epoch += a(0, i) == a(1, i);
    same_seed += a(0, i) == b(0, i);
  }
  EXPECT_LT(same_epoch, 10u);
  EXPECT_LT(same_seed, 10u);
}

TEST(WeightedSampler, ClassBalancedWeightsEqualizeClasses) {
  std::vector<int64_t> labels;
  for (int i = 0; i < 900; ++i) labels.push_back(0);
  for (int i = 0; i < 90; ++i) labels.push_back(-5);
  for (int i = 0; i < 10; ++i) labels.push_back(42);
  const std::vector<double> w = class_balanced_weights(labels);
  EXPECT_DOUBLE_EQ(w[0], 1.0 / 900);
  EXPECT_DOUBLE_EQ(w[950], 1.0 / 90);
  EXPECT_DOUBLE_EQ(w[999], 1.0 / 10);
  const uint64_t draws = 300'000;
  const WeightedSampler s(w, options(labels.size(), draws));
  uint64_t per_class[3] = {0, 0, 0};
  for (uint64_t i = 0; i < draws; ++i) {
    const int64_t l = labels[s(3, i)];
    ++per_class[l == 0 ? 0 : l == -5 ? 1 : 2];
  }
  for (uint64_t c : per_class) EXPECT_NEAR(static_cast<double>(c), draws / 3.0, 1500.0);
  EXPECT_THROW(class_balanced_weights({}), std::invalid_argument);
}

void expect_error(const std::vector<double>& w, uint64_t size, const std::string& needle) {
  try {
    WeightedSampler s(w, options(size, 10));
    ADD_FAILURE() << "accepted " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(WeightedSampler, BadWeightsAreClearErrors) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_error({1, -0.5, 2}, 3, "weights[1]");
  expect_error({1, nan}, 2, "weights[1]");
  expect_error({inf, 1}, 2, "weights[0]");
  expect_error({0, 0, 0}, 3, "all zero");
  expect_error({1, 2}, 3, "length 2");
  expect_error({}, 0, "empty");
  expect_error({1e308, 1e308}, 2, "infinity");
  WeightedOptions o = options(2, 10, 2, 2);
  EXPECT_THROW(WeightedSampler({1, 1}, o), std::invalid_argument);
  const WeightedSampler s({1, 1}, options(2, 10));
  uint64_t out[2];
  EXPECT_THROW(s.fill(0, 9, 2, out), std::out_of_range);
}

}  // namespace
}  // namespace distsampler
