#include "distsampler/torch_random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "distsampler/seed.h"
#include "golden.h"

namespace distsampler {
namespace {

// The textbook algorithms, written as plainly as the reference describes them, with the
// standard library's MT19937 (whose output the C++ standard fixes) as the generator.
std::vector<uint64_t> naive_classic(uint64_t n, uint64_t seed) {
  std::mt19937 g(static_cast<uint32_t>(seed));
  std::vector<uint64_t> a(n);
  std::iota(a.begin(), a.end(), 0);
  for (uint64_t i = 0; i + 1 < n; ++i) {
    const uint64_t z = static_cast<uint64_t>(g()) % (n - i);
    std::swap(a[i], a[i + z]);
  }
  return a;
}

std::vector<uint64_t> naive_inside_out(uint64_t n, uint64_t seed) {
  std::mt19937 g(static_cast<uint32_t>(seed));
  std::vector<uint64_t> a(n, 0);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t hi = g();
    const uint64_t r = (hi << 32) | g();
    const uint64_t z = r % (i + 1);
    a[i] = a[z];
    a[z] = i;
  }
  return a;
}

TEST(TorchGenerator, MatchesPyTorchsFirstDraws) {
  TorchGenerator g(0);
  EXPECT_EQ(g.random(), 2357136044u);
  EXPECT_EQ(g.random(), 2546248239u);
  EXPECT_EQ(g.random(), 3071714933u);
}

TEST(TorchGenerator, EqualsStdMt19937OnTheLow32Bits) {
  for (uint64_t seed :
       {uint64_t{0}, uint64_t{5}, (uint64_t{1} << 32) + 5, UINT64_MAX, uint64_t{123456789}}) {
    TorchGenerator ours(seed);
    std::mt19937 reference(static_cast<uint32_t>(seed));
    for (int i = 0; i < 5000; ++i) ASSERT_EQ(ours.random(), reference()) << seed << " draw " << i;
  }
}

TEST(TorchGenerator, Random64TakesTheHighWordFirst) {
  TorchGenerator a(7), b(7);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t hi = a.random();
    const uint64_t lo = a.random();
    ASSERT_EQ(b.random64(), (hi << 32) | lo);
  }
}

TEST(TorchGenerator, FillEqualsRepeatedDraws) {
  TorchGenerator a(99), b(99);
  std::vector<uint32_t> block(3001);
  a.random();  // start off a twist boundary
  b.random();
  a.fill(block.data(), block.size());
  for (uint32_t v : block) ASSERT_EQ(v, b.random());
  EXPECT_EQ(a.random(), b.random());
}

// Python's randperm="auto": the variant of the installed torch (PR 143875 came in 2.6).
TEST(TorchRandperm, VariantOfATorchRelease) {
  EXPECT_EQ(randperm_variant_of_torch("1.13.1"), RandpermVariant::kClassic);
  EXPECT_EQ(randperm_variant_of_torch("2.5.1+cpu"), RandpermVariant::kClassic);
  EXPECT_EQ(randperm_variant_of_torch("2.6.0"), RandpermVariant::kCurrent);
  EXPECT_EQ(randperm_variant_of_torch("2.13.0+cpu"), RandpermVariant::kCurrent);
  EXPECT_EQ(randperm_variant_of_torch("3.0"), RandpermVariant::kCurrent);
  for (const char* bad : {"", "2", "x.1", "2.", "2.x"}) {
    EXPECT_THROW(randperm_variant_of_torch(bad), std::invalid_argument) << bad;
  }
}

TEST(TorchRandperm, MatchesPyTorchGoldenValues) {
  EXPECT_EQ(torch_randperm(10, 0), (std::vector<uint64_t>{4, 1, 7, 5, 3, 9, 0, 8, 6, 2}));
  EXPECT_EQ(torch_randperm(10, 42), (std::vector<uint64_t>{2, 6, 1, 8, 4, 5, 0, 9, 3, 7}));
  EXPECT_EQ(torch_randperm(10, (uint64_t{1} << 40) + 5),
            (std::vector<uint64_t>{1, 4, 9, 6, 3, 5, 0, 2, 8, 7}));
  EXPECT_EQ(torch_randperm(16, 0),
            (std::vector<uint64_t>{12, 10, 9, 6, 11, 8, 13, 5, 2, 14, 15, 0, 4, 3, 7, 1}));
}

TEST(TorchRandperm, MatchesTheGoldenFile) {
  for (const auto& c : testing::read_golden("torch_randperm.txt")) {
    const uint64_t n = std::stoull(c.fields.at(0));
    const uint64_t seed = Seed::parse(c.fields.at(1)).bits();
    for (auto variant : {RandpermVariant::kCurrent, RandpermVariant::kClassic}) {
      ASSERT_EQ(torch_randperm(n, seed, variant), c.values) << c.line;
    }
  }
}

TEST(TorchRandperm, MatchesTheGoldenDigestsAtLargerSizes) {
  for (const auto& c : testing::read_golden("torch_randperm_digest.txt")) {
    const uint64_t n = std::stoull(c.fields.at(0));
    const uint64_t seed = Seed::parse(c.fields.at(1)).bits();
    const uint64_t expected = std::stoull(c.fields.at(2));
    std::vector<uint32_t> perm(n);
    torch_randperm(n, seed, RandpermVariant::kCurrent, perm.data());
    uint64_t digest = 0;
    for (uint64_t i = 0; i < n; ++i) digest += (i + 1) * perm[i];
    EXPECT_EQ(digest, expected) << c.line;
  }
}

TEST(TorchRandperm, ClassicEqualsTheTextbookAlgorithm) {
  // 1023 to 1025, 2047 to 2049, 1280 and 2304: the edges of the blocks of targets and of
  // the prefetch distance (256).
  for (uint64_t n : {0, 1, 2, 3, 7, 100, 256, 257, 511, 512, 513, 1023, 1024, 1025, 1280, 2047,
                     2048, 2049, 2304, 100000}) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{77}, UINT64_MAX}) {
      const std::vector<uint64_t> naive = naive_classic(n, seed);
      // With the CPU's remainders (AVX2 where it has it) and with the scalar ones.
      for (bool vector_remainders : {true, false}) {
        std::vector<uint64_t> ours(n);
        detail::randperm_classic(n, seed, ours.data(), vector_remainders);
        ASSERT_EQ(ours, naive) << "n=" << n << " seed=" << seed << " vector " << vector_remainders;
      }
    }
  }
}

TEST(TorchRandperm, InsideOutEqualsTheTextbookAlgorithm) {
  for (uint64_t n : {0, 1, 2, 3, 7, 100, 256, 257, 511, 512, 513, 1023, 1024, 1025, 1280, 2047,
                     2048, 2049, 2304, 100000}) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{77}, UINT64_MAX}) {
      std::vector<uint64_t> ours(n);
      detail::randperm_inside_out(n, seed, ours.data());
      ASSERT_EQ(ours, naive_inside_out(n, seed)) << "n=" << n << " seed=" << seed;
      std::vector<bool> seen(n);
      for (uint64_t v : ours) seen.at(v) = true;
      ASSERT_EQ(std::count(seen.begin(), seen.end(), true), static_cast<long>(n));
    }
  }
}

TEST(TorchRandperm, VariantsSwitchAtPyTorchsThreshold) {
  EXPECT_EQ(kRandpermInsideOutThreshold, 0xffffffffull / 20);
  EXPECT_FALSE(
      randperm_uses_inside_out(kRandpermInsideOutThreshold - 1, RandpermVariant::kCurrent));
  EXPECT_TRUE(randperm_uses_inside_out(kRandpermInsideOutThreshold, RandpermVariant::kCurrent));
  EXPECT_FALSE(randperm_uses_inside_out(kRandpermInsideOutThreshold, RandpermVariant::kClassic));
  EXPECT_FALSE(randperm_uses_inside_out(UINT64_MAX, RandpermVariant::kClassic));
}

TEST(TorchRandperm, NarrowAndWideOutputsAgree) {
  const uint64_t n = 70000;
  std::vector<uint32_t> narrow(n);
  std::vector<uint64_t> wide(n);
  torch_randperm(n, 3, RandpermVariant::kCurrent, narrow.data());
  torch_randperm(n, 3, RandpermVariant::kCurrent, wide.data());
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(narrow[i], wide[i]);
}

}  // namespace
}  // namespace distsampler
