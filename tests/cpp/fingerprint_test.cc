// fingerprint.h: the table of fields is complete, consistent with Fingerprint's defaults, and
// lays the fields out in the byte format without overlap (state_test.cc checks the codecs).
#include "distsampler/fingerprint.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "distsampler/state.h"

namespace distsampler {
namespace {

// Every field differs from the default fingerprint (the table's order is declaration order).
Fingerprint every_field_changed() {
  Fingerprint f;
  f.algorithm_version = 7;
  f.size = 10;
  f.seed = Seed(int64_t{-3});
  f.shuffle = false;
  f.drop_last = true;
  f.uneven = true;
  f.order = OrderKind::kFeistel;
  f.randperm = RandpermVariant::kClassic;
  f.feistel_rounds = 6;
  f.feistel_version = 2;
  return f;
}

TEST(Fingerprint, TheTableNamesEveryFieldOnceInDeclarationOrder) {
  std::vector<std::string> names;
  for (const FingerprintField& row : fingerprint_fields()) names.emplace_back(row.name);
  EXPECT_EQ(names, (std::vector<std::string>{"algorithm_version", "size", "seed", "shuffle",
                                             "drop_last", "uneven", "order", "randperm",
                                             "feistel_rounds", "feistel_version"}));
  // randperm applies to neither fingerprint (the feistel order), so all but it differ.
  const Fingerprint a, b = every_field_changed();
  std::vector<std::string> differing = names;
  differing.erase(differing.begin() + 7);
  EXPECT_EQ(differing_fields(a, b), differing);
  for (const FingerprintField& row : fingerprint_fields()) {
    EXPECT_EQ(field_value(b, row.name), row.value(b)) << row.name;
  }
  EXPECT_THROW(field_value(a, "world_size"), std::invalid_argument);
}

// A field's value when absent is what a default Fingerprint holds, so a state that lacks it and
// one written with it at that value are the same state.
TEST(Fingerprint, ValueWhenAbsentIsTheDefault) {
  int absent = 0;
  for (const FingerprintField& row : fingerprint_fields()) {
    if (row.absent == nullptr) continue;
    ++absent;
    EXPECT_EQ(row.value(Fingerprint{}), row.absent) << row.name;
    Fingerprint f = every_field_changed();
    row.read(row.absent, false, f);
    EXPECT_EQ(row.value(f), row.absent) << row.name;
  }
  EXPECT_EQ(absent, 2);  // uneven, feistel_version
}

// Each byte of the fingerprint's part of the format (12..39, bar the reserved 21..23) belongs to
// one field, and each flags bit to one field.
TEST(Fingerprint, FieldsTileTheByteLayout) {
  std::set<int> bytes, bits;
  for (const FingerprintField& row : fingerprint_fields()) {
    for (int b = row.offset; b < row.offset + row.width; ++b) {
      EXPECT_TRUE(bytes.insert(b).second) << row.name << " byte " << b;
    }
    if (row.bit >= 0) {
      if (row.width == 0) {
        EXPECT_EQ(row.offset, 18) << row.name;  // a flag only: the flags byte
      }
      EXPECT_TRUE(bits.insert(row.bit).second) << row.name << " bit " << row.bit;
    }
  }
  bytes.insert(18);
  for (int b = 21; b < 24; ++b) bytes.insert(b);
  std::set<int> expected;
  for (int b = 12; b < 40; ++b) expected.insert(b);
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(bits, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(kStateBytes, 60u);
}

}  // namespace
}  // namespace distsampler
