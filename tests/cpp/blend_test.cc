#include "distsampler/policies/blend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <vector>

namespace distsampler {
namespace {

// Walks the stream from 0 and checks, at every prefix, that each dataset's count is within the
// bound (and 1) of i * w_k, that at(i) numbers each dataset's samples 0, 1, 2, ... and that
// count() agrees. Returns the largest error seen.
double check_prefixes(const QuotaSchedule& q, uint64_t length, uint64_t count_every) {
  const uint64_t k = q.num_datasets();
  std::vector<uint64_t> counts(k, 0);
  double worst = 0;
  for (uint64_t i = 0; i < length; ++i) {
    const BlendedSample s = q.at(i);
    EXPECT_LT(s.dataset, k);
    if (s.index != counts[s.dataset]) {
      ADD_FAILURE() << "position " << i << " dataset " << s.dataset << " index " << s.index
                    << " expected " << counts[s.dataset];
      return worst;
    }
    ++counts[s.dataset];
    const double n = static_cast<double>(i + 1);
    for (uint64_t d = 0; d < k; ++d) {
      const double e = std::fabs(static_cast<double>(counts[d]) - n * q.weights()[d]);
      if (e > worst) worst = e;
    }
    if (worst > 1.0) {
      ADD_FAILURE() << "quota error " << worst << " after " << i + 1 << " samples";
      return worst;
    }
    if (i % count_every == 0) {
      for (uint64_t d = 0; d < k; ++d) EXPECT_EQ(q.count(d, i + 1), counts[d]);
    }
  }
  return worst;
}

TEST(QuotaSchedule, TenMillionPrefixesOfFiveSkewedDatasetsStayWithinOne) {
  const QuotaSchedule q({0.5, 0.25, 0.15, 0.07, 0.03});
  EXPECT_LE(q.error_bound(), 1.0);
  const double worst = check_prefixes(q, 10'000'000, 9973);
  EXPECT_LE(worst, q.error_bound() + 1e-6);
  RecordProperty("worst_quota_error", std::to_string(worst));
}

TEST(QuotaSchedule, MoreSkewedWeightsStayWithinTheirBound) {
  for (const std::vector<double>& w :
       std::vector<std::vector<double>>{{1000, 100, 10, 1, 0.1},
                                        {0.9, 0.05, 0.03, 0.015, 0.005},
                                        {1, 1, 1, 1, 1},
                                        {3, 1},
                                        {1, 2, 3, 4},
                                        {0.3, 0.3, 0.2, 0.1, 0.05, 0.05},
                                        {5, 0, 1, 0, 2}}) {
    const QuotaSchedule q(w);
    EXPECT_LE(q.error_bound(), 1.0) << w.size();
    const double worst = check_prefixes(q, 200'000, 101);
    EXPECT_LE(worst, q.error_bound() + 1e-9);
  }
}

TEST(QuotaSchedule, UpToFourDatasetsAreAlwaysWithinOne) {
  // Any weights: leaves sit at depth <= 2, whose bound is (1 + s) / 2 < 1.
  for (uint64_t t = 1; t < 200; ++t) {
    std::vector<double> w;
    for (uint64_t k = 0; k < 1 + t % 4; ++k) w.push_back(std::pow(1.7, (t * 7 + k * 13) % 29));
    EXPECT_LT(QuotaSchedule(w).error_bound(), 1.0);
  }
}

TEST(QuotaSchedule, RandomAccessFarIntoTheStream) {
  const QuotaSchedule q({0.5, 0.25, 0.15, 0.07, 0.03});
  for (uint64_t i : {uint64_t{1} << 40, (uint64_t{1} << 52) + 12345}) {
    uint64_t total = 0;
    for (uint64_t d = 0; d < 5; ++d) {
      const uint64_t c = q.count(d, i);
      total += c;
      EXPECT_LE(std::fabs(static_cast<double>(c) - static_cast<double>(i) * q.weights()[d]),
                1.0 + 1e-3);
    }
    EXPECT_EQ(total, i);
    const BlendedSample s = q.at(i);
    EXPECT_EQ(s.index, q.count(s.dataset, i));
    EXPECT_EQ(q.count(s.dataset, i + 1), s.index + 1);
  }
}

TEST(QuotaSchedule, ZeroWeightNeverTaken) {
  const QuotaSchedule q({0, 1, 0, 3});
  for (uint64_t i = 0; i < 10000; ++i) {
    const uint64_t d = q.at(i).dataset;
    ASSERT_TRUE(d == 1 || d == 3);
  }
}

TEST(QuotaSchedule, BadWeightsAreClearErrors) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const std::vector<double>& w :
       std::vector<std::vector<double>>{{}, {0, 0}, {1, -1}, {1, nan}, {inf, 1}}) {
    EXPECT_THROW(QuotaSchedule{w}, std::invalid_argument);
  }
  try {
    QuotaSchedule({1, -2});
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("weights[1]"), std::string::npos) << e.what();
  }
}

BlendOptions blend_options() {
  BlendOptions o;
  o.sizes = {7, 100, 33, 5, 1000};
  o.weights = {0.5, 0.25, 0.15, 0.07, 0.03};
  o.samples_per_epoch = 1001;
  o.seed = 17;
  return o;
}

TEST(BlendedSampler, SameGlobalStreamForEveryWorldSize) {
  BlendOptions o = blend_options();
  const BlendedSampler one(o);
  for (uint64_t w : {1, 3, 8}) {
    for (uint64_t epoch : {0, 1, 5}) {
      std::vector<BlendedSample> stream(o.samples_per_epoch);
      for (uint64_t r = 0; r < w; ++r) {
        o.world_size = w;
        o.rank = r;
        const BlendedSampler s(o);
        for (uint64_t i = 0; i < s.num_samples(); ++i) {
          const uint64_t p = r + i * w;
          if (p < o.samples_per_epoch) stream[p] = s(epoch, i);
        }
      }
      for (uint64_t p = 0; p < o.samples_per_epoch; ++p) {
        ASSERT_EQ(stream[p], one.global(epoch * o.samples_per_epoch + p)) << w << " " << p;
      }
    }
  }
}

TEST(BlendedSampler, EachDatasetIsAPermutationPerItsOwnEpoch) {
  const BlendedSampler s(blend_options());
  const std::vector<uint64_t> sizes = blend_options().sizes;
  // Each dataset's j-th draw: within each of its epochs every sample exactly once, and two
  // consecutive epochs of a dataset are shuffled differently.
  std::vector<std::vector<uint64_t>> drawn(sizes.size());
  for (uint64_t g = 0; g < 40000; ++g) {
    const BlendedSample b = s.global(g);
    ASSERT_LT(b.index, sizes[b.dataset]);
    drawn[b.dataset].push_back(b.index);
  }
  for (uint64_t k = 0; k < sizes.size(); ++k) {
    const uint64_t n = sizes[k];
    for (uint64_t e = 0; (e + 1) * n <= drawn[k].size(); ++e) {
      std::set<uint64_t> seen(drawn[k].begin() + e * n, drawn[k].begin() + (e + 1) * n);
      ASSERT_EQ(seen.size(), n) << "dataset " << k << " epoch " << e;
    }
    if (n >= 5 && drawn[k].size() >= 2 * n) {
      EXPECT_FALSE(std::equal(drawn[k].begin(), drawn[k].begin() + n, drawn[k].begin() + n))
          << "dataset " << k << " repeats its order";
    }
  }
}

TEST(BlendedSampler, SeedChangesTheOrdersButNotTheQuotas) {
  BlendOptions o = blend_options();
  const BlendedSampler a(o);
  o.seed = 18;
  const BlendedSampler b(o);
  uint64_t differ = 0;
  for (uint64_t g = 0; g < 1000; ++g) {
    ASSERT_EQ(a.global(g).dataset, b.global(g).dataset);
    differ += a.global(g).index != b.global(g).index;
  }
  EXPECT_GT(differ, 500u);
  EXPECT_EQ(a.flat({2, 3}), 7u + 100u + 3u);
}

TEST(BlendedSampler, BadOptionsAreClearErrors) {
  BlendOptions o = blend_options();
  o.sizes.pop_back();
  EXPECT_THROW(BlendedSampler{o}, std::invalid_argument);
  o = blend_options();
  o.sizes[1] = 0;
  EXPECT_THROW(BlendedSampler{o}, std::invalid_argument);
  o.weights[1] = 0;  // an empty dataset of weight zero is fine
  EXPECT_NO_THROW(BlendedSampler{o});
  o = blend_options();
  o.rank = 3;
  EXPECT_THROW(BlendedSampler{o}, std::invalid_argument);
}

TEST(BlendedSampler, FillIsTheRankSamplesAndChecksTheWindow) {
  BlendOptions o = blend_options();
  o.world_size = 3;
  o.rank = 2;
  const BlendedSampler s(o);
  std::vector<BlendedSample> out(s.num_samples());
  s.fill(4, 0, out.size(), out.data());
  for (uint64_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], s(4, i)) << i;
  EXPECT_THROW(s.fill(4, 1, out.size(), out.data()), std::out_of_range);
  EXPECT_THROW(s.fill(4, out.size() + 1, 0, out.data()), std::out_of_range);
  EXPECT_NO_THROW(s.fill(4, out.size(), 0, out.data()));
}

}  // namespace
}  // namespace distsampler
