// order.h's contract: each kind is a permutation of [0, n) fixed by (options, epoch), the torch
// kind is torch.randperm seeded with seed + epoch, gather() is at() at a stride, bad options are
// refused naming the field, and the torch order built into outside memory reads the same.
#include "distsampler/order.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace distsampler {
namespace {

std::vector<uint64_t> all_of(const EpochOrder& order) {
  std::vector<uint64_t> out(order.size());
  for (uint64_t p = 0; p < order.size(); ++p) out[p] = order.at(p);
  return out;
}

OrderOptions options_of(uint64_t size, OrderKind kind, bool shuffle = true, uint64_t seed = 7) {
  OrderOptions o;
  o.size = size;
  o.seed = seed;
  o.kind = kind;
  o.shuffle = shuffle;
  return o;
}

std::string error_of(const OrderOptions& options) {
  try {
    validate(options);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(Order, KindNamesRoundTripAndBadNamesNameTheParameter) {
  for (OrderKind kind : {OrderKind::kTorch, OrderKind::kFeistel}) {
    EXPECT_EQ(parse_order_kind(to_string(kind)), kind);
  }
  try {
    parse_order_kind("Torch", "--order");
    FAIL() << "accepted 'Torch'";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--order = 'Torch' is not an order; allowed: torch, feistel");
  }
}

TEST(Order, EveryKindIsAPermutationFixedByOptionsAndEpoch) {
  for (OrderKind kind : {OrderKind::kTorch, OrderKind::kFeistel}) {
    for (uint64_t n : {0, 1, 2, 3, 17, 64, 65, 1000, 4097}) {
      const auto a = make_epoch_order(options_of(n, kind), 3);
      ASSERT_EQ(a->size(), n);
      std::vector<uint64_t> seen(n, 0);
      for (uint64_t v : all_of(*a)) {
        ASSERT_LT(v, n);
        ++seen[v];
      }
      for (uint64_t count : seen) ASSERT_EQ(count, 1u) << to_string(kind) << " n " << n;
      EXPECT_EQ(all_of(*make_epoch_order(options_of(n, kind), 3)), all_of(*a));
      if (n >= 17) {
        EXPECT_NE(all_of(*make_epoch_order(options_of(n, kind), 4)), all_of(*a)) << n;
        EXPECT_NE(all_of(*make_epoch_order(options_of(n, kind, true, 8), 3)), all_of(*a)) << n;
      }
      // Unshuffled: the identity, whatever the seed and epoch.
      const auto id = make_epoch_order(options_of(n, kind, false), 9);
      for (uint64_t p = 0; p < n; ++p) ASSERT_EQ(id->at(p), p);
    }
  }
}

TEST(Order, TheTorchKindIsRandpermSeededWithSeedPlusEpoch) {
  for (RandpermVariant variant : {RandpermVariant::kCurrent, RandpermVariant::kClassic}) {
    OrderOptions o = options_of(1000, OrderKind::kTorch, true, 40);
    o.randperm = variant;
    EXPECT_EQ(all_of(*make_epoch_order(o, 2)), torch_randperm(1000, 42, variant));
  }
  // seed + epoch past 2^64 - 1 leaves PyTorch's seed range.
  OrderOptions top = options_of(10, OrderKind::kTorch, true, UINT64_MAX);
  EXPECT_THROW(make_epoch_order(top, 1), std::out_of_range);
  EXPECT_NO_THROW(make_epoch_order(top, 0));
  // check_epoch says the same without building the order; other kinds take any epoch.
  EXPECT_THROW(check_epoch(top, 1), std::out_of_range);
  EXPECT_NO_THROW(check_epoch(top, 0));
  top.shuffle = false;
  EXPECT_NO_THROW(check_epoch(top, 1));
  EXPECT_NO_THROW(check_epoch(options_of(10, OrderKind::kFeistel, true, UINT64_MAX), 1));
}

TEST(Order, GatherIsAtAtAStride) {
  for (OrderKind kind : {OrderKind::kTorch, OrderKind::kFeistel}) {
    for (bool shuffle : {true, false}) {
      const auto order = make_epoch_order(options_of(1001, kind, shuffle), 5);
      for (uint64_t first : {0, 1, 7}) {
        for (uint64_t stride : {1, 3, 8}) {
          const uint64_t count = (1001 - first + stride - 1) / stride;
          std::vector<uint64_t> got(count);
          order->gather(first, stride, count, got.data());
          for (uint64_t j = 0; j < count; ++j) {
            ASSERT_EQ(got[j], order->at(first + j * stride)) << first << " " << stride << " " << j;
          }
        }
      }
    }
  }
}

TEST(Order, BadOptionsNameTheField) {
  OrderOptions o = options_of(10, OrderKind::kFeistel);
  o.size = (uint64_t{1} << 63) + 1;
  EXPECT_EQ(error_of(o), "size = 9223372036854775809 is too large; allowed: size <= 2^63 = "
                         "9223372036854775808");
  o = options_of(10, OrderKind::kFeistel);
  o.feistel_rounds = 33;
  EXPECT_EQ(error_of(o), "feistel_rounds = 33 is out of range; allowed: 1 <= feistel_rounds <= "
                         "32, or 0 for the version's default");
  o.feistel_rounds = -1;
  EXPECT_NE(error_of(o).find("feistel_rounds = -1"), std::string::npos);
  o = options_of(10, OrderKind::kFeistel);
  o.feistel_version = 3;
  EXPECT_EQ(error_of(o), "feistel_version = 3 is not a version; allowed: 1, 2");
  EXPECT_THROW(make_epoch_order(o, 0), std::invalid_argument);
  EXPECT_EQ(error_of(options_of(10, OrderKind::kTorch)), "no error");
}

TEST(Order, TheTorchOrderBuiltElsewhereReadsTheSame) {
  EXPECT_EQ(torch_order_element_bytes(0), 4u);
  EXPECT_EQ(torch_order_element_bytes(uint64_t{1} << 32), 4u);
  EXPECT_EQ(torch_order_element_bytes((uint64_t{1} << 32) + 1), 8u);
  const OrderOptions o = options_of(777, OrderKind::kTorch);
  auto storage = std::make_shared<std::vector<uint64_t>>(777);  // 8-byte aligned, room for 4s
  build_torch_order(o, 6, storage->data());
  const auto over = torch_order_over(777, storage->data(), storage);
  EXPECT_EQ(all_of(*over), all_of(*make_epoch_order(o, 6)));
  EXPECT_THROW(build_torch_order(options_of(777, OrderKind::kFeistel), 6, storage->data()),
               std::invalid_argument);
  EXPECT_THROW(build_torch_order(options_of(777, OrderKind::kTorch, false), 6, storage->data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace distsampler
