#include "distsampler/state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "distsampler/hash.h"
#include "distsampler/torch_random.h"

namespace distsampler {
namespace {

SamplerOptions options_of(uint64_t n, uint64_t w, uint64_t r, OrderKind kind, bool drop_last) {
  SamplerOptions o;
  o.size = n;
  o.world_size = w;
  o.rank = r;
  o.order = kind;
  o.drop_last = drop_last;
  return o;
}

// A few configurations that exercise every field of the format.
std::vector<SamplerState> sample_states() {
  std::vector<SamplerState> out;
  SamplerOptions o = options_of(1000, 4, 0, OrderKind::kTorch, false);
  out.push_back({fingerprint(o), 0, 0});
  o.seed = Seed(int64_t{-3});
  o.randperm = RandpermVariant::kClassic;
  out.push_back({fingerprint(o), 7, 996});
  o.order = OrderKind::kFeistel;
  o.feistel_rounds = 12;
  o.drop_last = true;
  o.shuffle = false;
  o.seed = Seed(UINT64_MAX);
  o.size = uint64_t{1} << 63;
  out.push_back({fingerprint(o), UINT64_MAX, (uint64_t{1} << 63) - 5});
  o.seed = Seed(INT64_MIN);
  out.push_back({fingerprint(o), 1, 1});
  o.feistel_version = FeistelPermutation::kVersion1;
  out.push_back({fingerprint(o), 2, 3});
  SamplerOptions uneven = options_of(1001, 3, 0, OrderKind::kTorch, false);
  uneven.uneven = true;
  uneven.seed = 5;
  out.push_back({fingerprint(uneven), 2, 500});
  return out;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(State, Crc32KnownAnswers) {
  EXPECT_EQ(crc32(""), 0u);
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(crc32("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The fuzz seeds were written by an independent implementation of the format (Python's struct
// and zlib.crc32, in the commit that added them): the C++ decoder must read them, and re-encode
// them bit for bit.
TEST(State, ReadsStatesWrittenFromTheFormatDescription) {
  const std::string dir = std::string(DISTSAMPLER_GOLDEN_DIR) + "/../fuzz/corpus/";
  const SamplerState torch = decode_state(read_file(dir + "torch.bin"));
  EXPECT_EQ(torch.config.size, 1000u);
  EXPECT_EQ(encode_state(torch), read_file(dir + "torch.bin"));
  EXPECT_EQ(state_from_json(read_file(dir + "torch.json")), torch);
  const SamplerState classic = decode_state(read_file(dir + "classic_negative_seed.bin"));
  EXPECT_EQ(classic.config.seed, Seed(int64_t{-3}));
  EXPECT_EQ(classic.config.randperm, RandpermVariant::kClassic);
  EXPECT_EQ(classic.epoch, 7u);
  EXPECT_EQ(classic.consumed, 996u);
  const SamplerState feistel = decode_state(read_file(dir + "feistel_drop_last.bin"));
  EXPECT_EQ(feistel.config.order, OrderKind::kFeistel);
  EXPECT_EQ(feistel.config.feistel_rounds, 8);
  EXPECT_TRUE(feistel.config.drop_last);
  EXPECT_EQ(feistel.config.seed, Seed(UINT64_MAX));
  for (const SamplerState& s : {torch, classic, feistel}) EXPECT_FALSE(s.config.uneven);
  // Written after the uneven flag (flags bit 3) was added, by the same independent encoder.
  const SamplerState uneven = decode_state(read_file(dir + "uneven.bin"));
  EXPECT_TRUE(uneven.config.uneven);
  EXPECT_FALSE(uneven.config.drop_last);
  EXPECT_EQ(uneven.config.size, 1001u);
  EXPECT_EQ(uneven.consumed, 500u);
  EXPECT_EQ(uneven, sample_states().back());
  EXPECT_EQ(encode_state(uneven), read_file(dir + "uneven.bin"));
  EXPECT_EQ(state_from_json(read_file(dir + "uneven.json")), uneven);
}

// States without the uneven flag are encoded exactly as before it existed (the same bytes, JSON
// without the key), so format version 1 still means one thing for them.
TEST(State, UnevenIsFlagsBitThreeAndAbsentFromJsonWhenFalse) {
  SamplerOptions o = options_of(10, 2, 0, OrderKind::kTorch, false);
  const std::string plain = encode_state({fingerprint(o), 0, 0});
  EXPECT_EQ(static_cast<unsigned char>(plain[18]), 1u);
  EXPECT_EQ(state_to_json({fingerprint(o), 0, 0}).find("uneven"), std::string::npos);
  o.uneven = true;
  const std::string uneven = encode_state({fingerprint(o), 0, 0});
  EXPECT_EQ(static_cast<unsigned char>(uneven[18]), 1u | 8u);
  EXPECT_EQ(plain.substr(0, 18), uneven.substr(0, 18));
  EXPECT_EQ(plain.substr(19, 37), uneven.substr(19, 37));
  EXPECT_NE(state_to_json({fingerprint(o), 0, 0}).find("\"uneven\": true"), std::string::npos);
  // An explicit false is read too.
  std::string json =
      state_to_json({fingerprint(options_of(10, 2, 0, OrderKind::kTorch, false)), 0, 0});
  json.replace(json.find("\"order\""), 0, "\"uneven\": false, ");
  EXPECT_FALSE(state_from_json(json).config.uneven);
}

TEST(State, FingerprintIsNormalizedAndIgnoresWorldSizeAndRank) {
  SamplerOptions a = options_of(10, 4, 1, OrderKind::kTorch, false);
  SamplerOptions b = options_of(10, 7, 6, OrderKind::kTorch, false);
  b.feistel_rounds = 3;  // irrelevant to the torch order
  EXPECT_EQ(fingerprint(a), fingerprint(b));
  a.order = b.order = OrderKind::kFeistel;
  b.feistel_rounds = a.feistel_rounds;
  b.randperm = RandpermVariant::kClassic;  // irrelevant to the Feistel order
  EXPECT_EQ(fingerprint(a), fingerprint(b));
  b.feistel_rounds = 9;
  EXPECT_EQ(differing_fields(fingerprint(a), fingerprint(b)),
            std::vector<std::string>{"feistel_rounds"});
  b.feistel_rounds = a.feistel_rounds;
  b.uneven = true;
  EXPECT_EQ(differing_fields(fingerprint(a), fingerprint(b)), std::vector<std::string>{"uneven"});
  EXPECT_EQ(field_value(fingerprint(b), "uneven"), "true");
}

// A checkpoint names the rounds its order ran, also when the options took the version's default.
TEST(State, FingerprintNamesTheDefaultRounds) {
  SamplerOptions o = options_of(1000, 1, 0, OrderKind::kFeistel, false);
  EXPECT_EQ(o.feistel_rounds, 0);
  EXPECT_EQ(fingerprint(o).feistel_rounds, 8);
  o.feistel_version = FeistelPermutation::kVersion1;
  EXPECT_EQ(fingerprint(o).feistel_rounds, 8);
  o.feistel_rounds = 12;
  EXPECT_EQ(fingerprint(o).feistel_rounds, 12);
  o.order = OrderKind::kTorch;
  EXPECT_EQ(fingerprint(o).feistel_rounds, 0);
}

TEST(State, ByteLayoutIsFixed) {
  SamplerOptions o = options_of(0x0102030405060708ull, 1, 0, OrderKind::kFeistel, true);
  o.seed = Seed(int64_t{-2});
  o.feistel_rounds = 8;
  o.feistel_version = FeistelPermutation::kVersion1;  // encoded as states were before version 2
  const std::string b = encode_state({fingerprint(o), 0x1112131415161718ull, 0x21ull});
  ASSERT_EQ(b.size(), kStateBytes);
  const unsigned char expected[56] = {
      'D',  'S',  'S',       'T',  'A',  'T',  'E',  0,     // magic
      1,    0,    60,        0,                             // format version, length
      1,    0,    0,         0,                             // algorithm version
      1,    0,    1 | 2 | 4, 8,                             // feistel, randperm, flags, rounds
      0,    0,    0,         0,                             // feistel version 1 (0), reserved
      0x08, 0x07, 0x06,      0x05, 0x04, 0x03, 0x02, 0x01,  // size
      0xfe, 0xff, 0xff,      0xff, 0xff, 0xff, 0xff, 0xff,  // seed -2
      0x18, 0x17, 0x16,      0x15, 0x14, 0x13, 0x12, 0x11,  // epoch
      0x21, 0,    0,         0,    0,    0,    0,    0,     // consumed
  };
  EXPECT_EQ(b.substr(0, 56), std::string(reinterpret_cast<const char*>(expected), 56));
  const uint32_t crc = crc32(b.substr(0, 56));
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(static_cast<unsigned char>(b[56 + k]), (crc >> (8 * k)) & 0xff);
  }
}

// The Feistel version sits in byte 20 (0 for version 1, so every earlier state still decodes)
// and in the JSON key "feistel_version" (absent for version 1).
TEST(State, FeistelVersion2IsByte20AndAJsonKey) {
  SamplerOptions o = options_of(1000, 2, 0, OrderKind::kFeistel, false);
  EXPECT_EQ(fingerprint(o).feistel_version, FeistelPermutation::kVersion2);  // the default
  const std::string v2 = encode_state({fingerprint(o), 1, 2});
  EXPECT_EQ(static_cast<int>(v2[20]), 2);
  EXPECT_NE(state_to_json({fingerprint(o), 1, 2}).find("\"feistel_version\": 2"),
            std::string::npos);
  o.feistel_version = FeistelPermutation::kVersion1;
  const std::string v1 = encode_state({fingerprint(o), 1, 2});
  EXPECT_EQ(static_cast<int>(v1[20]), 0);
  EXPECT_EQ(state_to_json({fingerprint(o), 1, 2}).find("feistel_version"), std::string::npos);
  // Normalized: 1 with the torch order, whatever the options say.
  SamplerOptions torch = options_of(10, 1, 0, OrderKind::kTorch, false);
  torch.feistel_version = FeistelPermutation::kVersion2;
  EXPECT_EQ(fingerprint(torch).feistel_version, FeistelPermutation::kVersion1);
  const std::string m = message_of([&] {
    resume(DistributedSampler(options_of(1000, 2, 0, OrderKind::kFeistel, false)),
           decode_state(v1));
  });
  EXPECT_NE(m.find("feistel_version = 1 in the state, 2 here"), std::string::npos) << m;
}

// A checkpoint written before version 2 existed, byte for byte as that release wrote it: the
// feistel order of 1000 samples, seed 42, epoch 3, one rank, nothing consumed. It decodes as
// version 1 and resumes on exactly the order it was written with (tests/golden/feistel.txt).
TEST(State, Version1CheckpointResumesOnVersion1) {
  const unsigned char head[56] = {'D', 'S', 'S', 'T', 'A', 'T', 'E', 0, 1, 0, 60,   0,    1, 0,
                                  0,   0,   1,   0,   1,   8,   0,   0, 0, 0, 0xe8, 0x03, 0, 0,
                                  0,   0,   0,   0,   42,  0,   0,   0, 0, 0, 0,    0,    3, 0,
                                  0,   0,   0,   0,   0,   0,   0,   0, 0, 0, 0,    0,    0, 0};
  std::string bytes(reinterpret_cast<const char*>(head), 56);
  const uint32_t crc = crc32(bytes);
  for (int k = 0; k < 4; ++k) bytes += static_cast<char>((crc >> (8 * k)) & 0xff);
  const SamplerState s = decode_state(bytes);
  EXPECT_EQ(s.config.feistel_version, FeistelPermutation::kVersion1);
  EXPECT_EQ(encode_state(s), bytes);
  const std::string old_json =
      "{\"format\": \"distsampler-state\", \"version\": 1, \"algorithm_version\": 1, "
      "\"size\": 1000, \"seed\": 42, \"shuffle\": true, \"drop_last\": false, "
      "\"order\": \"feistel\", \"randperm\": \"current\", \"feistel_rounds\": 8, "
      "\"epoch\": 3, \"consumed\": 0, \"crc32\": " +
      std::to_string(crc) + "}";
  EXPECT_EQ(state_from_json(old_json), s);
  EXPECT_EQ(state_to_json(s), old_json);

  SamplerOptions o = options_of(1000, 1, 0, OrderKind::kFeistel, false);
  o.seed = 42;
  o.feistel_version = FeistelPermutation::kVersion1;
  const RankView view = resume(DistributedSampler(o), s);
  const std::vector<uint64_t> frozen = {810, 336, 865, 245, 22,  230, 843, 654, 884, 63,
                                        817, 985, 9,   551, 248, 450, 906, 840, 929, 384};
  for (size_t i = 0; i < frozen.size(); ++i) EXPECT_EQ(view[i], frozen[i]) << i;
  // Resumed mid-epoch on two ranks: rank 1 reads global positions 11, 13, 15, ...
  o.world_size = 2;
  o.rank = 1;
  const RankView rest = resume(DistributedSampler(o), {s.config, 3, 10});
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rest[i], frozen[11 + 2 * i]) << i;
}

TEST(State, RoundTripsThroughBytesAndJson) {
  for (const SamplerState& s : sample_states()) {
    const std::string bytes = encode_state(s);
    EXPECT_EQ(decode_state(bytes), s);
    EXPECT_EQ(encode_state(decode_state(bytes)), bytes);
    const std::string json = state_to_json(s);
    EXPECT_EQ(state_from_json(json), s) << json;
  }
}

TEST(State, JsonIsReadable) {
  SamplerOptions o = options_of(10, 2, 0, OrderKind::kTorch, false);
  o.seed = Seed(int64_t{-3});
  const std::string json = state_to_json({fingerprint(o), 2, 6});
  EXPECT_NE(json.find("\"seed\": -3"), std::string::npos) << json;
  EXPECT_NE(json.find("\"consumed\": 6"), std::string::npos) << json;
  EXPECT_NE(json.find("\"order\": \"torch\""), std::string::npos) << json;
}

TEST(State, EverySingleByteFlipIsRejected) {
  for (const SamplerState& s : sample_states()) {
    const std::string good = encode_state(s);
    for (size_t i = 0; i < good.size(); ++i) {
      for (int x = 1; x < 256; ++x) {
        std::string bad = good;
        bad[i] = static_cast<char>(bad[i] ^ x);
        const std::string m = message_of([&] { decode_state(bad); });
        ASSERT_EQ(m.rfind("state: ", 0), 0u) << "byte " << i << " xor " << x << ": " << m;
      }
    }
  }
}

TEST(State, TruncatedAndTrailingBytesAreRejected) {
  const std::string good = encode_state(sample_states()[1]);
  for (size_t len = 0; len < good.size(); ++len) {
    const std::string m = message_of([&] { decode_state(good.substr(0, len)); });
    EXPECT_NE(m.find("truncated"), std::string::npos) << len << ": " << m;
  }
  EXPECT_NE(message_of([&] { decode_state(good + '\0'); }).find("trailing"), std::string::npos);
}

// Rewrites bytes [offset, offset + 4) and re-seals the checksum: a well-formed foreign state.
std::string resealed(std::string b, size_t offset, uint32_t value) {
  for (int k = 0; k < 4; ++k) b[offset + k] = static_cast<char>((value >> (8 * k)) & 0xff);
  const uint32_t crc = crc32(b.substr(0, 56));
  for (int k = 0; k < 4; ++k) b[56 + k] = static_cast<char>((crc >> (8 * k)) & 0xff);
  return b;
}

TEST(State, ForeignVersionsAndInvalidFieldsAreRejectedByName) {
  const std::string good = encode_state(sample_states()[0]);
  EXPECT_NE(message_of([&] {
              decode_state(resealed(good, 8, 60u << 16 | 2));
            }).find("format version 2 is not supported"),
            std::string::npos);
  EXPECT_NE(message_of([&] { decode_state(resealed(good, 12, 2)); }).find("algorithm_version = 2"),
            std::string::npos);
  // torch order with rounds set: not canonical.
  EXPECT_NE(message_of([&] {
              decode_state(resealed(good, 16, 0x05000100));
            }).find("feistel_rounds = 5 with order torch"),
            std::string::npos);
  EXPECT_NE(message_of([&] { decode_state(resealed(good, 16, 0x00000002)); }).find("order = 2"),
            std::string::npos);
  EXPECT_NE(message_of([&] { decode_state(resealed(good, 16, 0x00100000)); }).find("flags = 16"),
            std::string::npos);
  // uneven (bit 3) with drop_last (bit 1): the two exclude each other.
  EXPECT_NE(message_of([&] {
              decode_state(resealed(good, 16, 0x000b0000));
            }).find("uneven = true with drop_last = true"),
            std::string::npos);
  EXPECT_NE(message_of([&] { decode_state(resealed(good, 21, 1)); }).find("reserved"),
            std::string::npos);
  EXPECT_NE(message_of([&] { decode_state(resealed(good, 20, 1)); }).find("feistel version"),
            std::string::npos);
  // seed marked negative, bits positive.
  EXPECT_NE(message_of([&] { decode_state(resealed(good, 16, 0x00050000)); }).find("negative"),
            std::string::npos);
}

TEST(State, BadJsonIsRejectedWithTheReason) {
  const std::string good = state_to_json(sample_states()[1]);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string j = good;
    const size_t at = j.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return j.replace(at, from.size(), to);
  };
  EXPECT_NE(message_of([&] {
              state_from_json(replaced("\"consumed\": 996", "\"consumed\": 997"));
            }).find("checksum mismatch"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              state_from_json(replaced("\"seed\": -3", "\"seed\": -4"));
            }).find("checksum mismatch"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              state_from_json(replaced("\"epoch\": 7, ", ""));
            }).find("lacks the key 'epoch'"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              state_from_json(replaced("{", "{\"extra\": 1, "));
            }).find("unknown key 'extra'"),
            std::string::npos);
  EXPECT_NE(message_of([&] { state_from_json(replaced("{", "{\"epoch\": 7, ")); }).find("twice"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              state_from_json(replaced("\"version\": 1", "\"version\": 2"));
            }).find("format version 2"),
            std::string::npos);
  EXPECT_NE(
      message_of([&] {
        state_from_json(replaced("\"drop_last\": false", "\"drop_last\": false, \"uneven\": 1"));
      }).find("uneven = 1 is not true or false"),
      std::string::npos);
  // A state edited to uneven fails its checksum (the flag is in the encoding the CRC covers).
  EXPECT_NE(
      message_of([&] {
        state_from_json(replaced("\"drop_last\": false", "\"drop_last\": false, \"uneven\": true"));
      }).find("checksum mismatch"),
      std::string::npos);
  EXPECT_NE(message_of([&] { state_from_json(good + "x"); }).find("trailing"), std::string::npos);
  EXPECT_NE(message_of([&] { state_from_json(good.substr(0, good.size() - 1)); }).find("JSON"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              state_from_json(replaced("\"epoch\": 7", "\"epoch\": 07"));
            }).find("JSON is not valid at byte"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              state_from_json(replaced("\"epoch\": 7", "\"epoch\": 7.0"));
            }).find("epoch = 7.0 is not an integer"),
            std::string::npos);
  // Strings and numbers are not interchangeable: each of these is not the JSON the writer makes
  // (an unquoted word is not JSON at all; the message names the key whose value it is).
  for (const auto& [from, to, text] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"distsampler-state\"", "distsampler-state", "(the value of 'format')"},
           {"\"torch\"", "torch", "(the value of 'order')"},
           {"\"classic\"", "classic", "(the value of 'randperm')"},
           {"\"seed\": -3", "\"seed\": \"-3\"", "seed = '-3' is a string"},
           {"\"epoch\": 7", "\"epoch\": \"7\"", "epoch = '7' is a string"},
           {"\"shuffle\": true", "\"shuffle\": \"true\"", "shuffle = 'true' is a string"}}) {
    EXPECT_NE(message_of([&] { state_from_json(replaced(from, to)); }).find(text),
              std::string::npos)
        << to;
  }
  // What nlohmann::json would accept silently is refused, and every message is one line.
  for (const auto& [from, to, text] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"\"epoch\": 7", "\"epoch\": 18446744073709551616",
            "epoch = 18446744073709551616 is out of range"},
           {"\"seed\": -3", "\"seed\": -9223372036854775809",
            "seed = -9223372036854775809 is out of range"},
           {"\"epoch\": 7", "\"epoch\": 7e0", "epoch = 7e0 is not an integer"},
           {"\"epoch\": 7", "\"epoch\": null", "epoch = null"},
           {"\"epoch\": 7", "\"epoch\": [7]", "value of 'epoch' is an array"},
           {"\"epoch\": 7", "\"epoch\": {\"a\": 7}", "value of 'epoch' is an object"},
           {"\"torch\"", "\"to\\nrch\"", "order = 'to\\u000arch'"}}) {
    const std::string message = message_of([&] { state_from_json(replaced(from, to)); });
    EXPECT_NE(message.find(text), std::string::npos) << to << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_NE(message_of([&] { state_from_json("[" + good + "]"); }).find("is an array"),
            std::string::npos);
  // Every truncation fails.
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_NE(message_of([&] { state_from_json(good.substr(0, len)); }).rfind("state: ", 0),
              std::string::npos);
  }
}

TEST(State, EncodingANonNormalizedFingerprintFails) {
  SamplerState s = sample_states()[0];
  s.config.feistel_rounds = 4;
  EXPECT_NE(message_of([&] { encode_state(s); }).find("feistel_rounds"), std::string::npos);
}

TEST(State, ResumeChecksTheFingerprintAndStartsAtConsumed) {
  const DistributedSampler writer(options_of(103, 4, 0, OrderKind::kFeistel, false));
  const SamplerState s = decode_state(encode_state(make_state(writer, 3, 40)));
  const DistributedSampler reader(options_of(103, 3, 2, OrderKind::kFeistel, false));
  const RankView view = resume(reader, s);
  const RankView expected = reader.epoch(3, 40);
  EXPECT_EQ(std::vector<uint64_t>(view.begin(), view.end()),
            std::vector<uint64_t>(expected.begin(), expected.end()));
  EXPECT_EQ(consumed_after(view, 2), 40u + 2 * 3);
  EXPECT_THROW(consumed_after(view, view.size() + 1), std::out_of_range);
  // Consumed past the end (padding consumed): the epoch is complete.
  EXPECT_EQ(resume(reader, make_state(writer, 3, 105)).size(), 0u);

  SamplerOptions other = options_of(103, 3, 2, OrderKind::kFeistel, false);
  other.seed = 5;
  other.size = 104;
  const std::string m = message_of([&] { resume(DistributedSampler(other), s); });
  EXPECT_NE(m.find("size = 103 in the state, 104 here"), std::string::npos) << m;
  EXPECT_NE(m.find("seed = 0 in the state, 5 here"), std::string::npos) << m;
}

TEST(State, DisagreementNamesFieldsValuesAndRanks) {
  std::vector<Fingerprint> f(4, fingerprint(options_of(10, 4, 0, OrderKind::kTorch, false)));
  EXPECT_EQ(describe_disagreement(f), "");
  f[1].seed = 7;
  f[3].size = 11;
  EXPECT_EQ(describe_disagreement(f),
            "size differs across ranks: 10 on ranks 0, 1, 2; 11 on rank 3\n"
            "seed differs across ranks: 0 on ranks 0, 2, 3; 7 on rank 1");
  f[0].uneven = f[2].uneven = true;
  EXPECT_NE(describe_disagreement(f).find(
                "uneven differs across ranks: true on ranks 0, 2; false on ranks 1, 3"),
            std::string::npos)
      << describe_disagreement(f);
}

TEST(State, RandpermCountsOnlyWhereItChangesTheOrder) {
  // Below 214,748,364 samples (or unshuffled) both randperm variants give the same order: a state
  // saved under one resumes under the other, and ranks on different PyTorch versions agree.
  for (uint64_t n : {uint64_t{10}, kRandpermInsideOutThreshold - 1}) {
    SamplerOptions current = options_of(n, 2, 0, OrderKind::kTorch, false);
    SamplerOptions classic = current;
    classic.randperm = RandpermVariant::kClassic;
    EXPECT_TRUE(differing_fields(fingerprint(current), fingerprint(classic)).empty()) << n;
    EXPECT_EQ(describe_disagreement({fingerprint(current), fingerprint(classic)}), "") << n;
  }
  SamplerOptions current = options_of(kRandpermInsideOutThreshold, 2, 0, OrderKind::kTorch, false);
  SamplerOptions classic = current;
  classic.randperm = RandpermVariant::kClassic;
  EXPECT_EQ(differing_fields(fingerprint(current), fingerprint(classic)),
            std::vector<std::string>{"randperm"});
  EXPECT_EQ(describe_disagreement({fingerprint(current), fingerprint(classic)}),
            "randperm differs across ranks: current on rank 0; classic on rank 1");
  current.shuffle = classic.shuffle = false;  // the identity order either way
  EXPECT_TRUE(differing_fields(fingerprint(current), fingerprint(classic)).empty());
}

// ---- The elastic rule across resumes: a randomized simulation. ----
//
// "Exactly once" for one epoch, across any number of resumes (docs/design.md): order the reads
// by step (segment, then the rank-local index); the final step is the last one that read
// anything. With padding every index is read at least once, every repeated read happens in the
// final step, there are fewer repeats than the final segment's world size, and the repeats are
// the order's first positions (PyTorch's padding). With drop_last no index is read twice, and
// the unread indices are the order's last positions, fewer than the last segment's world size.

struct Rng {
  uint64_t counter;
  uint64_t next() { return mix64(counter++); }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }  // bias irrelevant here
};

struct Read {
  uint64_t segment, step, world_size, index;
};

std::string check_exactly_once(const std::vector<Read>& reads, const std::vector<uint64_t>& order,
                               bool drop_last, uint64_t last_world_size) {
  const uint64_t n = order.size();
  std::vector<uint64_t> count(n, 0);
  uint64_t final_segment = 0, final_step = 0, final_world = last_world_size;
  bool any = false;
  for (const Read& r : reads) {
    if (r.index >= n) return "index " + std::to_string(r.index) + " out of range";
    ++count[r.index];
    if (!any || r.segment > final_segment || (r.segment == final_segment && r.step > final_step)) {
      final_segment = r.segment, final_step = r.step, final_world = r.world_size;
      any = true;
    }
  }
  if (drop_last) {
    uint64_t missing = 0;
    for (uint64_t q = 0; q < n; ++q) {
      if (count[order[q]] > 1) return "index " + std::to_string(order[q]) + " read twice";
      if (count[order[q]] == 0) ++missing;
    }
    if (missing >= last_world_size && missing > 0) return "too many dropped";
    for (uint64_t q = n - missing; q < n; ++q) {
      if (count[order[q]] != 0) return "dropped indices are not the order's tail";
    }
    return "";
  }
  uint64_t extras = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (count[i] == 0) return "index " + std::to_string(i) + " never read";
    extras += count[i] - 1;
  }
  if (extras > 0 && extras >= final_world) return "too much padding";
  std::vector<uint64_t> expected_extra(n, 0);
  for (uint64_t j = 0; j < extras; ++j) ++expected_extra[order[j % n]];
  std::vector<uint64_t> seen(n, 0);
  for (const Read& r : reads) {
    if (++seen[r.index] > 1 && (r.segment != final_segment || r.step != final_step)) {
      return "index " + std::to_string(r.index) + " repeated before the final step";
    }
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (count[i] - 1 != expected_extra[i]) return "padding is not the order's start";
  }
  return "";
}

TEST(State, ElasticResumeReadsEveryIndexExactlyOnceRandomized) {
  Rng rng{0x5eed};
  int trials_with_wrap = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const uint64_t n = rng.below(4) == 0 ? rng.below(8) : rng.below(300);
    const OrderKind kind = trial % 2 ? OrderKind::kFeistel : OrderKind::kTorch;
    const bool drop_last = (trial / 2) % 2 == 1;
    const uint64_t epoch = rng.below(5);
    const int resumes = 1 + static_cast<int>(rng.below(4));
    SamplerOptions base = options_of(n, 1, 0, kind, drop_last);
    base.seed = Seed(static_cast<int64_t>(rng.next() >> 2));
    base.shuffle = rng.below(8) != 0;
    const RankView order_view = DistributedSampler(base).epoch(epoch);
    const std::vector<uint64_t> order(order_view.begin(), order_view.end());

    SamplerState state = make_state(DistributedSampler(base), epoch, 0);
    std::vector<Read> reads;
    uint64_t world = 1;
    for (int segment = 0; segment <= resumes; ++segment) {
      world = 1 + (rng.below(3) == 0 ? rng.below(64) : rng.below(8));
      // Every segment resumes from the serialized checkpoint, through bytes or JSON.
      state =
          segment % 2 ? decode_state(encode_state(state)) : state_from_json(state_to_json(state));
      std::vector<RankView> views;
      for (uint64_t r = 0; r < world; ++r) {
        SamplerOptions o = base;
        o.world_size = world;
        o.rank = r;
        views.push_back(resume(DistributedSampler(o), state));
        ASSERT_EQ(views[r].size(), views[0].size()) << "ranks disagree on the count";
      }
      const uint64_t start = views[0].partition().start;
      const uint64_t end = start + views[0].size() * world;
      uint64_t cut = end;  // the last segment runs to the end of the epoch
      if (segment < resumes) {
        // A synchronous cut (every rank took k) or any prefix of the global positions.
        cut = rng.below(2) ? start + rng.below(views[0].size() + 1) * world
                           : start + rng.below(end - start + 1);
      }
      for (uint64_t r = 0; r < world; ++r) {
        for (uint64_t i = 0; i < views[r].size(); ++i) {
          if (views[r].partition().global_position(i) >= cut) break;
          reads.push_back({static_cast<uint64_t>(segment), i, world, views[r][i]});
        }
      }
      if (segment < resumes) {
        if (cut > n && cut > start) ++trials_with_wrap;
        state.consumed = cut;
      }
    }
    const std::string verdict = check_exactly_once(reads, order, drop_last, world);
    ASSERT_EQ(verdict, "") << "trial " << trial << ": n = " << n << ", drop_last = " << drop_last;
  }
  EXPECT_GT(trials_with_wrap, 10);  // cuts inside the padding were exercised
}

// The checker above must be able to fail: perturbing a resume by one position is caught.
TEST(State, TheExactlyOnceCheckCatchesAnOffByOneResume) {
  for (bool drop_last : {false, true}) {
    const uint64_t n = 50;
    SamplerOptions base = options_of(n, 1, 0, OrderKind::kFeistel, drop_last);
    const RankView ov = DistributedSampler(base).epoch(0);
    const std::vector<uint64_t> order(ov.begin(), ov.end());
    for (int shift : {-1, +1}) {
      std::vector<Read> reads;
      const uint64_t cut = 20;
      for (uint64_t p = 0; p < cut; ++p) reads.push_back({0, p / 4, 4, order[p]});
      SamplerOptions o = base;
      o.world_size = 3;
      for (uint64_t r = 0; r < 3; ++r) {
        o.rank = r;
        const RankView v = DistributedSampler(o).epoch(0, cut + shift);
        for (uint64_t i = 0; i < v.size(); ++i) reads.push_back({1, i, 3, v[i]});
      }
      EXPECT_NE(check_exactly_once(reads, order, drop_last, 3), "")
          << "shift " << shift << " drop_last " << drop_last;
    }
  }
}

}  // namespace
}  // namespace distsampler
