// feistel_v2.h's contract, on the type itself: a bijection of [0, n) for sizes around the
// boundaries its constants name, inverse() undoing operator(), gather() equal to operator() at
// every instruction set (skipped and logged where this CPU lacks it), the rounds floors up to
// FeistelV2::kNarrowDomain, and FeistelPermutation's version 2 reading exactly this type.
#include "distsampler/feistel_v2.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "feistel_version_checks.h"

namespace distsampler {
namespace {

using detail::FeistelV2;

TEST(FeistelV2, IsABijectionWithItsInverseAroundItsBoundaries) {
  expect_bijection_with_inverse<FeistelV2>();
}

// One test per instruction set; a level this CPU lacks is skipped, visibly and logged.
class FeistelV2Kernel : public ::testing::TestWithParam<detail::SimdLevel> {};

TEST_P(FeistelV2Kernel, GatherEqualsOperator) {
  DISTSAMPLER_SKIP_UNLESS_SUPPORTED(GetParam());
  expect_gather_equals_operator<FeistelV2>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(EveryLevel, FeistelV2Kernel, ::testing::ValuesIn(detail::kSimdLevels),
                         SimdLevelParamName());

TEST(FeistelV2, SmallSizesRunAtLeastTheFloorOfRounds) {
  EXPECT_GE(FeistelV2(FeistelV2::kSmallDomain, 1, 0, 4).rounds(), FeistelV2::kSmallDomainRounds);
  EXPECT_GE(FeistelV2(FeistelV2::kNarrowDomain, 1, 0, 4).rounds(),
            FeistelV2::kNarrowDomainRounds);
  EXPECT_EQ(FeistelV2(FeistelV2::kNarrowDomain + 1, 1, 0, 4).rounds(), 4);
}

TEST(FeistelV2, IsWhatFeistelPermutationsVersion2Reads) {
  expect_feistel_permutation_reads_it<FeistelV2>(2);
}

}  // namespace
}  // namespace distsampler
