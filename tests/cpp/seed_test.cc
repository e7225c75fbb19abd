#include "distsampler/seed.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace distsampler {
namespace {

TEST(Seed, KeepsTwosComplementAndSign) {
  EXPECT_EQ(Seed(0).bits(), 0u);
  EXPECT_FALSE(Seed(0).negative());
  EXPECT_EQ(Seed(-1).bits(), UINT64_MAX);
  EXPECT_TRUE(Seed(-1).negative());
  EXPECT_EQ(Seed(UINT64_MAX).bits(), UINT64_MAX);
  EXPECT_FALSE(Seed(UINT64_MAX).negative());
  EXPECT_NE(Seed(-1), Seed(UINT64_MAX));
}

TEST(Seed, ParsesTheWholeRangeAndRoundTrips) {
  for (const char* text : {"0", "42", "-1", "-9223372036854775808", "18446744073709551615",
                           "9223372036854775808", "4294967301"}) {
    EXPECT_EQ(Seed::parse(text).to_string(), text);
  }
  EXPECT_EQ(Seed::parse("+7"), Seed(7));
  EXPECT_EQ(Seed::parse("-0"), Seed(0));
  EXPECT_EQ(Seed::parse("-9223372036854775808").bits(), uint64_t{1} << 63);
}

TEST(Seed, RejectsWhatPyTorchRejects) {
  for (const char* text : {"", "-", "+", "1.5", "abc", "12a", " 1", "18446744073709551616",
                           "-9223372036854775809", "99999999999999999999999", "0x10"}) {
    try {
      Seed::parse(text, "--seed");
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("--seed"), std::string::npos) << message;
      EXPECT_NE(message.find(text), std::string::npos) << message;
    }
  }
}

TEST(Seed, PlusEpochFollowsPythonIntegerAddition) {
  EXPECT_EQ(Seed(5).plus_epoch(3), 8u);
  EXPECT_EQ(Seed(-1).plus_epoch(1), 0u);             // -1 + 1 = 0
  EXPECT_EQ(Seed(-10).plus_epoch(3), uint64_t(-7));  // -7 as two's complement
  EXPECT_EQ(Seed(INT64_MIN).plus_epoch(UINT64_MAX), (uint64_t{1} << 63) - 1);  // -2^63 + 2^64 - 1
  EXPECT_EQ(Seed(UINT64_MAX).plus_epoch(0), UINT64_MAX);
  EXPECT_THROW(Seed(UINT64_MAX).plus_epoch(1), std::out_of_range);
  EXPECT_THROW(Seed(uint64_t{1} << 63).plus_epoch(uint64_t{1} << 63), std::out_of_range);
  EXPECT_NO_THROW(Seed(-1).plus_epoch(UINT64_MAX));  // -1 + 2^64 - 1 = 2^64 - 2
}

}  // namespace
}  // namespace distsampler
