// Adversarial: deterministic mutations of valid encoded states (state.h), binary and JSON. Every
// mutant either is refused with std::invalid_argument and a one-line "state: ..." message, or
// decodes to a state that encodes back to the same bytes (binary) or to the original state (JSON,
// whose checksum pins every field). The CRC is also checked against zlib's crc32 on every mutant.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/state.h"
#include "mutate.h"

namespace distsampler {
namespace {

using adversarial::Rng;

constexpr int kBinaryMutantsPerState = 3000;
constexpr int kJsonMutantsPerState = 3000;

std::vector<SamplerState> base_states() {
  std::vector<SamplerState> out;
  const std::vector<uint64_t> sizes = {0, 1, 10, 214748364, (uint64_t{1} << 63)};
  const std::vector<Seed> seeds = {Seed(uint64_t{0}), Seed(int64_t{-1}), Seed(~uint64_t{0}),
                                   Seed(int64_t{INT64_MIN})};
  uint64_t k = 0;
  for (uint64_t size : sizes) {
    for (const Seed& seed : seeds) {
      SamplerState s;
      Fingerprint& f = s.config;
      f.size = size;
      f.seed = seed;
      f.shuffle = k % 3 != 0;
      f.drop_last = k % 4 == 1;
      f.uneven = k % 4 == 2;
      if (k % 2 == 0) {
        f.order = OrderKind::kTorch;
        f.randperm = k % 5 == 0 ? RandpermVariant::kClassic : RandpermVariant::kCurrent;
      } else {
        f.order = OrderKind::kFeistel;
        f.feistel_rounds = static_cast<int>(1 + k % 32);
      }
      s.epoch = k % 3 == 0 ? ~uint64_t{0} : k;
      s.consumed = k % 2 == 0 ? size : k * 7;
      out.push_back(s);
      ++k;
    }
  }
  return out;
}

uint32_t zlib_crc(const std::string& bytes) {
  return static_cast<uint32_t>(
      ::crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

// Recomputes the CRC of bytes 0..55 into 56..59 when the mutant is long enough.
void fix_crc(std::string& s) {
  if (s.size() >= kStateBytes)
    adversarial::put_le(s, 56, crc32(std::string_view(s).substr(0, 56)), 4);
}

// Runs `decode` on `input`: true when accepted (state in *out), false when refused as documented.
// Any other exception, or a message that is not one "state: " line, fails the test.
template <class Decode>
bool decode_or_refuse(Decode decode, const std::string& input, SamplerState* out,
                      const std::string& what) {
  try {
    *out = decode(input);
    return true;
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("state: ", 0), 0u) << what << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << what << ": " << message;
    EXPECT_GT(message.size(), 10u) << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": unexpected exception " << e.what();
  }
  return false;
}

TEST(StateMutation, BinaryMutantsAreRefusedOrReencodeIdentically) {
  Rng rng(20260101);
  // Field offsets and widths of the byte format (state.cc).
  const std::vector<std::pair<size_t, int>> fields = {{8, 2},  {10, 2}, {12, 4}, {16, 1},
                                                      {17, 1}, {18, 1}, {19, 1}, {20, 4},
                                                      {24, 8}, {32, 8}, {40, 8}, {48, 8}};
  uint64_t accepted = 0, refused = 0;
  for (const SamplerState& base : base_states()) {
    const std::string original = encode_state(base);
    ASSERT_EQ(decode_state(original), base);
    for (int m = 0; m < kBinaryMutantsPerState; ++m) {
      std::string s = original;
      bool crc_fixed = true;
      switch (rng.below(9)) {
        case 0:
          adversarial::flip_bits(s, rng);
          crc_fixed = false;
          break;
        case 1:
          adversarial::flip_bits(s, rng, 0, 56);
          break;
        case 2: {
          const auto& [offset, width] = rng.pick(fields);
          adversarial::put_le(s, offset, adversarial::edge_value(rng), width);
          break;
        }
        case 3: {  // swap two u64 fields (size, seed, epoch, consumed)
          const size_t a = 24 + 8 * rng.below(4), b = 24 + 8 * rng.below(4);
          for (size_t i = 0; i < 8; ++i) std::swap(s[a + i], s[b + i]);
          break;
        }
        case 4:
          adversarial::truncate(s, rng);
          crc_fixed = false;
          break;
        case 5:
          adversarial::insert_bytes(s, rng);
          crc_fixed = false;
          break;
        case 6:
          adversarial::erase_bytes(s, rng);
          crc_fixed = false;
          break;
        case 7:
          adversarial::set_byte(s, rng);
          break;
        default:  // flags byte: every combination of the 8 bits
          s[18] = static_cast<char>(rng.below(256));
          break;
      }
      if (crc_fixed) fix_crc(s);
      ASSERT_EQ(crc32(s), zlib_crc(s));
      SamplerState decoded;
      const std::string what = "binary mutant " + std::to_string(m);
      if (decode_or_refuse(decode_state, s, &decoded, what)) {
        ++accepted;
        ASSERT_EQ(encode_state(decoded), s) << what;
        if (!crc_fixed) {
          ASSERT_EQ(s, original) << what;
        }
      } else {
        ++refused;
      }
      if (HasFailure()) return;
    }
  }
  // Both outcomes are reached: the mutations are neither all trivial nor all fatal.
  EXPECT_GT(accepted, 100u);
  EXPECT_GT(refused, 10000u);
  RecordProperty("accepted", std::to_string(accepted));
  RecordProperty("refused", std::to_string(refused));
}

// The canonical JSON of state_to_json split into its "key": value pairs.
std::vector<std::pair<std::string, std::string>> pairs_of(const std::string& json) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string body = json.substr(1, json.size() - 2);
  size_t from = 0;
  while (from < body.size()) {
    size_t end = body.find(", ", from);
    if (end == std::string::npos) end = body.size();
    const std::string pair = body.substr(from, end - from);
    const size_t colon = pair.find(": ");
    out.emplace_back(pair.substr(0, colon), pair.substr(colon + 2));
    from = end + 2;
  }
  return out;
}

std::string join(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string j = "{";
  for (size_t i = 0; i < pairs.size(); ++i) {
    j += (i == 0 ? "" : ", ") + pairs[i].first + ": " + pairs[i].second;
  }
  return j + "}";
}

TEST(StateMutation, JsonMutantsAreRefusedOrDecodeToTheOriginal) {
  Rng rng(20260102);
  const std::vector<std::string> tokens = {"0",
                                           "1",
                                           "-0",
                                           "-1",
                                           "007",
                                           "1.0",
                                           "1e3",
                                           "1E+2",
                                           "0.5",
                                           "-1.5e-3",
                                           "255",
                                           "256",
                                           "32",
                                           "33",
                                           "4294967295",
                                           "4294967296",
                                           "9223372036854775807",
                                           "9223372036854775808",
                                           "-9223372036854775808",
                                           "-9223372036854775809",
                                           "18446744073709551615",
                                           "18446744073709551616",
                                           "99999999999999999999999999",
                                           "true",
                                           "false",
                                           "null",
                                           "True",
                                           "tru",
                                           "\"torch\"",
                                           "\"feistel\"",
                                           "\"current\"",
                                           "\"classic\"",
                                           "\"\"",
                                           "\"distsampler-state\"",
                                           "\"\\u0074orch\"",
                                           "\"to\\\"rch\"",
                                           "\"\\n\"",
                                           "\"\xff\xfe\"",
                                           "[]",
                                           "{}",
                                           "[1]",
                                           "{\"a\": 1}",
                                           " 1 ",
                                           "\"x",
                                           "1,",
                                           "NaN",
                                           "Infinity",
                                           "-",
                                           "+1",
                                           "0x10",
                                           "\"1\""};
  const std::vector<std::string> keys = {
      "\"format\"",   "\"version\"",  "\"algorithm_version\"", "\"size\"",
      "\"seed\"",     "\"shuffle\"",  "\"drop_last\"",         "\"uneven\"",
      "\"order\"",    "\"randperm\"", "\"feistel_rounds\"",    "\"epoch\"",
      "\"consumed\"", "\"crc32\"",    "\"unknown\"",           "\"\"",
      "\"Size\"",     "\"size \""};
  const std::string alphabet = "{}[]\",:0123456789-+.eE truefalsn\\u\t\n\r";
  uint64_t accepted = 0, refused = 0;
  for (const SamplerState& base : base_states()) {
    const std::string original = state_to_json(base);
    const std::string original_bytes = encode_state(base);
    for (int m = 0; m < kJsonMutantsPerState; ++m) {
      std::string s = original;
      auto pairs = pairs_of(original);
      switch (rng.below(12)) {
        case 0:
          adversarial::flip_bits(s, rng);
          break;
        case 1:
          adversarial::set_byte(s, rng);
          break;
        case 2:
          adversarial::truncate(s, rng);
          break;
        case 3:
          adversarial::insert_bytes(s, rng, alphabet);
          break;
        case 4:
          adversarial::insert_bytes(s, rng);
          break;
        case 5:
          adversarial::erase_bytes(s, rng);
          break;
        case 6:  // a value replaced by a token at or past a limit, or of another type
          pairs[rng.below(pairs.size())].second = rng.pick(tokens);
          s = join(pairs);
          break;
        case 7:  // a pair repeated (with its value or another)
          pairs.insert(pairs.begin() + static_cast<long>(rng.below(pairs.size() + 1)),
                       {pairs[rng.below(pairs.size())].first,
                        rng.below(2) ? pairs[rng.below(pairs.size())].second : rng.pick(tokens)});
          s = join(pairs);
          break;
        case 8:  // a pair dropped
          pairs.erase(pairs.begin() + static_cast<long>(rng.below(pairs.size())));
          s = join(pairs);
          break;
        case 9: {  // two values swapped
          const size_t a = rng.below(pairs.size()), b = rng.below(pairs.size());
          std::swap(pairs[a].second, pairs[b].second);
          s = join(pairs);
          break;
        }
        case 10:  // a key renamed
          pairs[rng.below(pairs.size())].first = rng.pick(keys);
          s = join(pairs);
          break;
        default: {  // nested in an array or object, or followed by a second document
          const uint64_t how = rng.below(3);
          s = how == 0 ? "[" + s + "]" : how == 1 ? "{\"state\": " + s + "}" : s + " " + s;
          break;
        }
      }
      SamplerState decoded;
      const std::string what = "JSON mutant " + std::to_string(m) + " '" + s + "'";
      if (decode_or_refuse(state_from_json, s, &decoded, what)) {
        ++accepted;
        // The checksum covers every field: an accepted mutant is the same state.
        ASSERT_EQ(encode_state(decoded), original_bytes) << what;
        ASSERT_EQ(state_from_json(state_to_json(decoded)), decoded) << what;
      } else {
        ++refused;
      }
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(accepted, 100u);
  EXPECT_GT(refused, 10000u);
  RecordProperty("accepted", std::to_string(accepted));
  RecordProperty("refused", std::to_string(refused));
}

}  // namespace
}  // namespace distsampler
