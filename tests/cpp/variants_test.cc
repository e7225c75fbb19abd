// variants.h's tables (order.h's kOrderKinds, torch_random.h's kRandpermVariants, feistel.h's
// kFeistelVersions): each row round-trips through its name, its check and both checkpoint codecs,
// unknown names and values are refused with a message listing the allowed ones, and values, names
// and byte codes are unique within a table, so that a new variant is one row (and its code).
#include "distsampler/variants.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>

#include "distsampler/feistel.h"
#include "distsampler/order.h"
#include "distsampler/state.h"
#include "distsampler/tokens/plan.h"
#include "distsampler/torch_random.h"

namespace distsampler {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no std::invalid_argument)";
}

// Values, names and byte codes unique; names non-empty and printable without quoting.
template <class Row, size_t N>
void expect_unique(const Row (&table)[N], const char* what) {
  std::set<long long> values;
  std::set<std::string> names;
  std::set<int> codes;
  for (const Row& row : table) {
    const std::string name = row.name;
    EXPECT_TRUE(values.insert(static_cast<long long>(row.value)).second)
        << what << ": value " << static_cast<long long>(row.value) << " is in two rows";
    EXPECT_TRUE(names.insert(name).second) << what << ": name '" << name << "' is in two rows";
    EXPECT_TRUE(codes.insert(row.code).second)
        << what << ": byte code " << int{row.code} << " is in two rows";
    EXPECT_FALSE(name.empty()) << what;
    EXPECT_EQ(name.find_first_of(" ,'\"\\"), std::string::npos) << what << ": " << name;
  }
}

// Every row's name appears in `message` (the generated "allowed:" list).
template <class Row, size_t N>
void expect_lists_every_name(const std::string& message, const Row (&table)[N]) {
  for (const Row& row : table) {
    EXPECT_NE(message.find(row.name), std::string::npos) << row.name << " in " << message;
  }
}

// A state of `options` (one rank, epoch 3, consumed 5) through both codecs.
SamplerState through_bytes(const SamplerOptions& options) {
  return decode_state(encode_state({fingerprint(options), 3, 5}));
}
SamplerState through_json(const SamplerOptions& options) {
  return state_from_json(state_to_json({fingerprint(options), 3, 5}));
}
uint8_t state_byte(const SamplerOptions& options, int offset) {
  return static_cast<uint8_t>(encode_state({fingerprint(options), 3, 5})[offset]);
}

SamplerOptions options_of(OrderKind order) {
  SamplerOptions o;
  o.size = 1000;
  o.seed = Seed(42);
  o.order = order;
  return o;
}

TEST(Variants, TablesHaveUniqueValuesNamesAndCodes) {
  expect_unique(kOrderKinds, "kOrderKinds");
  expect_unique(kRandpermVariants, "kRandpermVariants");
  expect_unique(kFeistelVersions, "kFeistelVersions");
  expect_unique(kPackings, "kPackings");
  expect_unique(kSplits, "kSplits");
}

TEST(Variants, EveryPackingAndSubsetRoundTripsAndOthersAreRefused) {
  for (const VariantRow<Packing>& row : kPackings) {
    EXPECT_EQ(to_string(row.value), row.name);
    EXPECT_EQ(parse_packing(row.name), row.value);
  }
  for (const VariantRow<Split>& row : kSplits) {
    EXPECT_EQ(to_string(row.value), row.name);
    EXPECT_EQ(parse_split(row.name), row.value);
  }
  EXPECT_THROW(parse_packing("bestfit"), std::invalid_argument);
  EXPECT_THROW(parse_split("validation"), std::invalid_argument);
}

TEST(Variants, EveryOrderKindRoundTrips) {
  for (const VariantRow<OrderKind>& row : kOrderKinds) {
    EXPECT_EQ(to_string(row.value), row.name);
    EXPECT_EQ(parse_order_kind(row.name), row.value);
    EXPECT_NO_THROW(check_order_kind(row.value));
    const SamplerOptions o = options_of(row.value);
    EXPECT_EQ(state_byte(o, 16), row.code) << row.name;
    EXPECT_EQ(through_bytes(o).config.order, row.value) << row.name;
    EXPECT_EQ(through_json(o).config.order, row.value) << row.name;
    EXPECT_NE(state_to_json({fingerprint(o), 3, 5}).find("\"order\": \"" + std::string(row.name)),
              std::string::npos);
  }
}

TEST(Variants, EveryRandpermVariantRoundTrips) {
  for (const VariantRow<RandpermVariant>& row : kRandpermVariants) {
    EXPECT_EQ(to_string(row.value), row.name);
    EXPECT_EQ(parse_randperm_variant(row.name), row.value);
    EXPECT_NO_THROW(check_randperm_variant(row.value));
    SamplerOptions o = options_of(OrderKind::kTorch);
    o.randperm = row.value;
    EXPECT_EQ(state_byte(o, 17), row.code) << row.name;
    EXPECT_EQ(through_bytes(o).config.randperm, row.value) << row.name;
    EXPECT_EQ(through_json(o).config.randperm, row.value) << row.name;
  }
}

TEST(Variants, EveryFeistelVersionRoundTripsAndBuildsItsConstruction) {
  int absent_rows = 0;
  for (const FeistelVersionRow& row : kFeistelVersions) {
    EXPECT_EQ(row.name, std::to_string(row.value));  // JSON writes the number
    EXPECT_EQ(parse_feistel_version(row.name), row.value);
    EXPECT_EQ(&check_feistel_version(row.value), &row);
    EXPECT_EQ(FeistelPermutation::default_rounds(row.value), row.default_rounds);
    const FeistelPermutation p(uint64_t{1} << 40, 1, 2, FeistelPermutation::kVersionDefaultRounds,
                               row.value);
    EXPECT_EQ(p.version(), row.value);
    EXPECT_EQ(p.rounds(), row.default_rounds);
    SamplerOptions o = options_of(OrderKind::kFeistel);
    o.feistel_version = row.value;
    EXPECT_EQ(state_byte(o, 20), row.code) << row.name;
    EXPECT_EQ(through_bytes(o).config.feistel_version, row.value) << row.name;
    EXPECT_EQ(through_json(o).config.feistel_version, row.value) << row.name;
    // Code 0: the version a state without the field means, written without a JSON key.
    const bool keyed = state_to_json({fingerprint(o), 3, 5}).find("feistel_version") !=
                       std::string::npos;
    EXPECT_EQ(keyed, row.code != 0) << row.name;
    if (row.code == 0) {
      ++absent_rows;
      EXPECT_EQ(row.value, Fingerprint{}.feistel_version);  // the torch order's normalized value
    }
  }
  EXPECT_EQ(absent_rows, 1);
  EXPECT_NE(detail::find_variant(kFeistelVersions, FeistelPermutation::kDefaultVersion), nullptr);
}

TEST(Variants, UnknownNamesAndValuesAreRefusedListingTheAllowedOnes) {
  std::string m = message_of([] { parse_order_kind("Torch", "--order"); });
  EXPECT_EQ(m, "--order = 'Torch' is not an order; allowed: torch, feistel");
  expect_lists_every_name(m, kOrderKinds);
  m = message_of([] { check_order_kind(static_cast<OrderKind>(7)); });
  EXPECT_EQ(m, "order = 7 is not an order; allowed: torch, feistel");
  expect_lists_every_name(m, kOrderKinds);
  EXPECT_EQ(to_string(static_cast<OrderKind>(7)), "unknown");

  m = message_of([] { parse_randperm_variant("new", "--randperm"); });
  EXPECT_EQ(m, "--randperm = 'new' is not a variant; allowed: current, classic");
  expect_lists_every_name(m, kRandpermVariants);
  m = message_of([] { check_randperm_variant(static_cast<RandpermVariant>(5)); });
  EXPECT_EQ(m, "randperm = 5 is not a variant; allowed: current, classic");
  expect_lists_every_name(m, kRandpermVariants);
  EXPECT_EQ(to_string(static_cast<RandpermVariant>(5)), "unknown");

  m = message_of([] { parse_feistel_version("3", "--feistel-version"); });
  EXPECT_EQ(m, "--feistel-version = '3' is not a version; allowed: 1, 2");
  expect_lists_every_name(m, kFeistelVersions);
  m = message_of([] { check_feistel_version(0); });
  EXPECT_EQ(m, "feistel_version = 0 is not a version; allowed: 1, 2");
  m = message_of([] { FeistelPermutation(10, 0, 0, 0, 3); });
  EXPECT_EQ(m, "version = 3 is not a version; allowed: 1, 2");
  EXPECT_EQ(FeistelPermutation::default_rounds(3), 0);

  // The checkpoint codecs: a code or name no row holds, with the codes or names that are.
  std::string bytes = encode_state({fingerprint(options_of(OrderKind::kTorch)), 3, 5});
  bytes[16] = 2;
  const uint32_t crc = crc32(bytes.substr(0, 56));
  for (int k = 0; k < 4; ++k) bytes[56 + k] = static_cast<char>((crc >> (8 * k)) & 0xff);
  EXPECT_EQ(message_of([&] { decode_state(bytes); }),
            "state: order = 2; allowed: 0 (torch), 1 (feistel)");
  std::string json = state_to_json({fingerprint(options_of(OrderKind::kTorch)), 3, 5});
  json.replace(json.find("\"current\""), 9, "\"newest\"");
  EXPECT_EQ(message_of([&] { state_from_json(json); }),
            "state: JSON randperm = 'newest'; allowed: current, classic");
}

// The generic lookups on a table of the test's own.
TEST(Variants, LookupsByValueNameAndCode) {
  enum class Colour { kRed, kBlue };
  static constexpr VariantRow<Colour> kColours[] = {{Colour::kRed, "red", 0},
                                                   {Colour::kBlue, "blue", 3}};
  static_assert(detail::find_variant(kColours, Colour::kBlue) == &kColours[1]);
  static_assert(detail::find_variant_name(kColours, "red") == &kColours[0]);
  static_assert(detail::find_variant_code(kColours, 3) == &kColours[1]);
  static_assert(detail::find_variant_code(kColours, 1) == nullptr);
  EXPECT_EQ(detail::variant_names(kColours), "red, blue");
  EXPECT_EQ(detail::variant_codes(kColours), "0 (red), 3 (blue)");
  EXPECT_EQ(detail::parse_variant(kColours, "blue", "colour", "a colour").value, Colour::kBlue);
  EXPECT_EQ(message_of([] { detail::parse_variant(kColours, "green", "colour", "a colour"); }),
            "colour = 'green' is not a colour; allowed: red, blue");
  EXPECT_EQ(message_of([] { detail::check_variant(kColours, Colour{9}, "colour", "a colour"); }),
            "colour = 9 is not a colour; allowed: red, blue");
}

}  // namespace
}  // namespace distsampler
