// wrap.h: a user's sequence as an epoch order, cut by any Partition.
#include "distsampler/policies/wrap.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "distsampler/sampler.h"

namespace distsampler {
namespace {

TEST(Wrap, DistributesAUserSequenceWithAnyPartition) {
  std::vector<uint64_t> user = {5, 5, 9, 1, 0, 7, 7, 7, 3, 2, 8};  // repeats allowed
  for (uint64_t w : {1, 3, 8}) {
    std::vector<uint64_t> stream(user.size());
    for (uint64_t r = 0; r < w; ++r) {
      const RankView v(make_sequence_order(user), Partition{user.size(), w, r, false, 0, true}, 0);
      for (uint64_t i = 0; i < v.size(); ++i) stream[r + i * w] = v[i];
    }
    EXPECT_EQ(stream, user);
  }
}

TEST(Wrap, AtAndGatherReadTheSequence) {
  const std::vector<uint64_t> user = {4, 0, 4, 2, 9};
  const auto order = make_sequence_order(user);
  ASSERT_EQ(order->size(), user.size());
  for (uint64_t p = 0; p < user.size(); ++p) EXPECT_EQ(order->at(p), user[p]);
  std::vector<uint64_t> odd(2);
  order->gather(1, 2, 2, odd.data());
  EXPECT_EQ(odd, (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(make_sequence_order({})->size(), 0u);
}

}  // namespace
}  // namespace distsampler
