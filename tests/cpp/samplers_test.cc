// samplers.h's contract: each policy's stream does not depend on the world size (the ranks'
// items interleave into the one-rank stream), a resumed pass reads the rest of it, and bad options
// are refused naming the field.
#include "distsampler/policies/samplers.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

namespace distsampler {
namespace {

using Factory = std::function<std::shared_ptr<Policy>(const RankCut&)>;

// Item j of a pass as a list of values (an index, a pair, or a batch).
std::vector<std::vector<uint64_t>> items(Policy& policy, uint64_t epoch, uint64_t start) {
  const auto pass = policy.items(epoch, start);
  std::vector<std::vector<uint64_t>> out;
  for (uint64_t j = 0; j < pass->size(); ++j) {
    if (policy.shape() == ItemShape::kBatch) {
      out.push_back(pass->batch(j));
      continue;
    }
    const uint64_t width = policy.shape() == ItemShape::kIndex ? 1 : 2;
    std::vector<uint64_t> item(width);
    pass->fill(j, 1, item.data());
    out.push_back(item);
  }
  return out;
}

// The W-rank job's items in global order (rank r's j-th item is position start + r + jW).
std::vector<std::vector<uint64_t>> interleaved(const Factory& make, uint64_t world,
                                               uint64_t start) {
  std::vector<std::vector<std::vector<uint64_t>>> ranks;
  for (uint64_t r = 0; r < world; ++r) {
    auto policy = make(RankCut{world, r, true});
    ranks.push_back(items(*policy, 2, start));
  }
  std::vector<std::vector<uint64_t>> out;
  for (size_t j = 0; j < ranks[0].size(); ++j) {
    for (const auto& rank : ranks) out.push_back(rank[j]);
  }
  return out;
}

void expect_world_size_independent(const Factory& make) {
  const auto whole = interleaved(make, 1, 0);
  ASSERT_FALSE(whole.empty());
  for (uint64_t world : {2, 3}) {
    for (uint64_t start : {0, 5}) {
      const auto cut = interleaved(make, world, start);
      ASSERT_LE(cut.size() + start, whole.size());
      for (size_t g = 0; g < cut.size(); ++g) EXPECT_EQ(cut[g], whole[start + g]) << g;
      EXPECT_EQ(make(RankCut{world, 0, true})->remaining(start), cut.size() / world);
    }
  }
}

TEST(Samplers, EveryPolicysStreamIsTheSameForEveryWorldSize) {
  expect_world_size_independent([](const RankCut& c) {
    WeightedOptions o;
    o.size = 5, o.num_samples = 40, o.world_size = c.world_size, o.rank = c.rank;
    o.drop_last = c.drop_last;
    return weighted_policy({1, 2, 0, 4, 0.5}, o);
  });
  for (bool flat : {true, false}) {
    expect_world_size_independent([flat](const RankCut& c) {
      BlendOptions o;
      o.sizes = {7, 20}, o.weights = {0.3, 0.7}, o.samples_per_epoch = 41;
      o.world_size = c.world_size, o.rank = c.rank, o.drop_last = c.drop_last;
      return blended_policy(o, flat);
    });
  }
  expect_world_size_independent([](const RankCut& c) {
    return sharded_policy(ShardOptions{{4, 9, 1, 12}, 2, Seed(uint64_t{3})}, c);
  });
  expect_world_size_independent([](const RankCut& c) {
    SequenceSource source{"list", [] { return uint64_t{30}; },
                          [](uint64_t e) {
                            std::vector<uint64_t> v(30);
                            for (uint64_t i = 0; i < 30; ++i) v[i] = (i * 7 + e) % 30;
                            return v;
                          }};
    return wrapper_policy(source, c);
  });
  expect_world_size_independent([](const RankCut& c) {
    OrderOptions o;
    o.size = 45, o.seed = Seed(uint64_t{9}), o.kind = OrderKind::kFeistel;
    return batch_policy(o, 4, c);
  });
  expect_world_size_independent([](const RankCut& c) {
    std::vector<uint64_t> lengths(45);
    for (uint64_t i = 0; i < 45; ++i) lengths[i] = (i * 13) % 17;
    return bucketed_policy(BucketOptions{lengths, 3, 2, Seed(uint64_t{2})}, c);
  });
}

TEST(Samplers, ConfigurationsNameWhatACheckpointMatches) {
  OrderOptions o;
  o.size = 45, o.kind = OrderKind::kFeistel;
  const DictValue config = batch_policy(o, 4, RankCut{})->config();
  EXPECT_EQ(canonical_json(config),
            "{\"batch_size\":4,\"drop_last\":false,\"feistel_version\":2,\"order\":\"feistel\","
            "\"randperm\":\"current\",\"seed\":0,\"shuffle\":true,\"size\":45}");
  o.feistel_version = 1;  // absent where it is 1: states written before version 2 lack it
  EXPECT_EQ(batch_policy(o, 4, RankCut{})->config().find("feistel_version"), nullptr);
}

TEST(Samplers, BadOptionsAreRefusedNamingTheField) {
  EXPECT_THROW(batch_policy(OrderOptions{}, 0, RankCut{}), std::invalid_argument);
  EXPECT_THROW(sharded_policy(ShardOptions{{3, 0}, 1, Seed()}, RankCut{}), std::invalid_argument);
  EXPECT_THROW(bucketed_policy(BucketOptions{{1, 2}, 1, 0, Seed()}, RankCut{}),
               std::invalid_argument);
  EXPECT_THROW(sharded_policy(ShardOptions{{3}, 1, Seed()}, RankCut{2, 2, false}),
               std::invalid_argument);
}

}  // namespace
}  // namespace distsampler
