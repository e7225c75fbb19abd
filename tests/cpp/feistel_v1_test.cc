// feistel_v1.h's contract, on the type itself: a bijection of [0, n) for sizes around the
// boundaries its constants name, inverse() undoing operator(), gather() equal to operator() at
// every instruction set (skipped and logged where this CPU lacks it), the rounds floor below
// FeistelV1::kSmallSize, and FeistelPermutation's version 1 reading exactly this type.
#include "distsampler/feistel_v1.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "feistel_version_checks.h"

namespace distsampler {
namespace {

using detail::FeistelV1;

TEST(FeistelV1, IsABijectionWithItsInverseAroundItsBoundaries) {
  expect_bijection_with_inverse<FeistelV1>();
}

// One test per instruction set; a level this CPU lacks is skipped, visibly and logged.
class FeistelV1Kernel : public ::testing::TestWithParam<detail::SimdLevel> {};

TEST_P(FeistelV1Kernel, GatherEqualsOperator) {
  DISTSAMPLER_SKIP_UNLESS_SUPPORTED(GetParam());
  expect_gather_equals_operator<FeistelV1>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(EveryLevel, FeistelV1Kernel, ::testing::ValuesIn(detail::kSimdLevels),
                         SimdLevelParamName());

TEST(FeistelV1, SmallSizesRunAtLeastTheFloorOfRounds) {
  EXPECT_GE(FeistelV1(FeistelV1::kSmallSize, 1, 0, 4).rounds(), FeistelV1::kSmallSizeRounds);
  EXPECT_EQ(FeistelV1(FeistelV1::kSmallSize + 1, 1, 0, 4).rounds(), 4);
}

TEST(FeistelV1, IsWhatFeistelPermutationsVersion1Reads) {
  expect_feistel_permutation_reads_it<FeistelV1>(1);
}

}  // namespace
}  // namespace distsampler
