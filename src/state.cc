// Checkpoint state: fingerprint, byte and JSON encodings with a CRC-32.
//
// Byte format, version 1 (all integers little-endian):
//   0  magic "DSSTATE\0"     8 bytes
//   8  format version        u16 (1)
//  10  total length          u16 (60)
//  12  algorithm version     u32 (kOrderAlgorithmVersion)
//  16  order                 u8  (0 torch, 1 feistel)
//  17  randperm              u8  (0 current, 1 classic; 0 unless torch)
//  18  flags                 u8  (bit 0 shuffle, bit 1 drop_last, bit 2 seed negative,
//                                 bit 3 uneven; others 0)
//  19  feistel rounds        u8  (1..32 for feistel, 0 otherwise)
//  20  feistel version       u8  (2 for feistel version 2; 0 otherwise: feistel version 1, or
//                                 not feistel; states from before version 2 hold 0 here)
//  21  reserved              u8 x 3 (0)
//  24  size                  u64
//  32  seed bits             u64 (two's complement)
//  40  epoch                 u64
//  48  consumed              u64
//  56  CRC-32 of bytes 0..55 u32
// The CRC is the textbook table-driven CRC-32 (Peterson and Brown 1961; IEEE 802.3), the same
// function as zlib's crc32() (tests/adversarial/state_mutation_test.cc compares them on every
// mutant). It stays hand-written: ten lines that keep the core library free of link dependencies
// (zlib is needed by the optional loader only, and the Python wheel builds without it), and zlib
// is no faster on a 56-byte state (measured, g++ -O2: 178-195 ns the table, 167-312 ns zlib 1.2.13,
// noise of a shared machine). The JSON is read with nlohmann::json (header-only, see JsonObject).
#include "distsampler/state.h"

#include <array>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "distsampler/pass.h"
#include "distsampler/torch_random.h"

namespace distsampler {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'S', 'T', 'A', 'T', 'E', '\0'};
constexpr uint64_t kMaxSize = uint64_t{1} << 63;
constexpr const char* kFieldNames[] = {"algorithm_version", "size",           "seed",  "shuffle",
                                       "drop_last",         "uneven",         "order", "randperm",
                                       "feistel_rounds",    "feistel_version"};

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// Every message is one line: a control character quoted from a JSON string (a "\n" escape
// decodes to a line break) is shown as its \u00XX escape.
[[noreturn]] void fail(const std::string& what) {
  std::string message = "state: ";
  for (char c : what) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char* digits = "0123456789abcdef";
      message += std::string("\\u00") + digits[u >> 4] + digits[u & 0xf];
    } else {
      message += c;
    }
  }
  throw std::invalid_argument(message);
}

std::string hex32(uint32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xf];
  return s;
}

void put(std::string& out, uint64_t value, int bytes) {
  for (int b = 0; b < bytes; ++b) out += static_cast<char>((value >> (8 * b)) & 0xff);
}

uint64_t get(std::string_view in, size_t offset, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + b])) << (8 * b);
  }
  return v;
}

const char* randperm_name(RandpermVariant v) {
  return v == RandpermVariant::kClassic ? "classic" : "current";
}

// Throws unless the fingerprint is one that fingerprint() could have produced.
void check_normalized(const Fingerprint& f) {
  if (f.algorithm_version != kOrderAlgorithmVersion) {
    fail("algorithm_version = " + std::to_string(f.algorithm_version) +
         " is not supported; this build implements algorithm version " +
         std::to_string(kOrderAlgorithmVersion));
  }
  if (f.size > kMaxSize) {
    fail("size = " + std::to_string(f.size) + " is too large; allowed: size <= 2^63");
  }
  if (f.order != OrderKind::kTorch && f.order != OrderKind::kFeistel) {
    fail("order = " + std::to_string(static_cast<int>(f.order)) + " is not an order");
  }
  if (f.randperm != RandpermVariant::kCurrent && f.randperm != RandpermVariant::kClassic) {
    fail("randperm = " + std::to_string(static_cast<int>(f.randperm)) + " is not a variant");
  }
  if (f.order == OrderKind::kTorch && f.feistel_rounds != 0) {
    fail("feistel_rounds = " + std::to_string(f.feistel_rounds) +
         " with order torch; allowed: 0 (rounds apply to the feistel order only)");
  }
  if (f.order == OrderKind::kTorch && f.feistel_version != FeistelPermutation::kVersion1) {
    fail("feistel_version = " + std::to_string(f.feistel_version) +
         " with order torch; allowed: 1 (the version applies to the feistel order only)");
  }
  if (f.order == OrderKind::kFeistel) {
    if (f.feistel_version != FeistelPermutation::kVersion1 &&
        f.feistel_version != FeistelPermutation::kVersion2) {
      fail("feistel_version = " + std::to_string(f.feistel_version) +
           " is not supported; allowed: 1, 2");
    }
    if (f.feistel_rounds < 1 || f.feistel_rounds > FeistelPermutation::kMaxRounds) {
      fail("feistel_rounds = " + std::to_string(f.feistel_rounds) +
           " is out of range; allowed: 1 <= feistel_rounds <= 32");
    }
    if (f.randperm != RandpermVariant::kCurrent) {
      fail(
          "randperm = classic with order feistel; allowed: current (randperm applies to the "
          "torch order only)");
    }
  }
  if (f.uneven && f.drop_last) {
    fail("uneven = true with drop_last = true; allowed: at most one of uneven and drop_last");
  }
  if (f.seed.negative() && (f.seed.bits() >> 63) == 0) fail("seed has an inconsistent sign");
}

Seed seed_from(uint64_t bits, bool negative) {
  return negative ? Seed(static_cast<int64_t>(bits)) : Seed(bits);
}

// A strict reader for the flat JSON object state_to_json writes, over nlohmann::json's SAX
// parser (RFC 8259 syntax, UTF-8, no trailing data). nlohmann's own DOM would keep the last of
// two equal keys and turn integers past 2^64 - 1 into doubles, so the events are checked here:
// one object of scalars, no key twice, integers only (a number with a fraction or exponent, or
// beyond the 64-bit range, is named as such), and every key used (finish()).
class JsonObject : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit JsonObject(std::string_view text) : text_size_(text.size()) {
    nlohmann::json::sax_parse(text.begin(), text.end(), this);
    if (!complete_) fail("JSON ends before its object does");
  }

  // The value of `key` as text (strings without quotes); throws when missing, or when the value
  // is a string and `string` is false or the reverse. Marks the key used.
  const std::string& take(const std::string& key, bool string) {
    auto it = values_.find(key);
    if (it == values_.end()) fail("JSON lacks the key '" + key + "'");
    used_[key] = true;
    if ((it->second.kind == Kind::kString) != string) {
      fail("JSON " + key + " = " + shown(it->second) +
           (string ? " is not a string" : " is a string") +
           "; allowed: " + (string ? "a quoted string" : "an unquoted number or true/false"));
    }
    return it->second.text;
  }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  uint64_t take_u64(const std::string& key) {
    const std::string& v = take(key, false);
    if (values_.at(key).kind != Kind::kUnsigned) {
      fail("JSON " + key + " = " + v + " is not an unsigned integer");
    }
    return values_.at(key).u64;
  }
  // A signed or unsigned integer, as decimal text (the seed).
  const std::string& take_integer(const std::string& key) {
    const std::string& v = take(key, false);
    const Kind kind = values_.at(key).kind;
    if (kind != Kind::kUnsigned && kind != Kind::kNegative) {
      fail("JSON " + key + " = " + v + " is not an integer");
    }
    return v;
  }
  bool take_bool(const std::string& key) {
    const std::string& v = take(key, false);
    if (values_.at(key).kind != Kind::kBool)
      fail("JSON " + key + " = " + v + " is not true or false");
    return v == "true";
  }
  void finish() const {
    for (const auto& [key, value] : values_) {
      if (used_.count(key) == 0) fail("JSON has the unknown key '" + key + "'");
    }
  }

  // nlohmann::json_sax: each event either records a member or throws naming what is wrong.
  bool null() override { return scalar(Kind::kNull, "null"); }
  bool boolean(bool v) override { return scalar(Kind::kBool, v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override {
    return scalar(v < 0 ? Kind::kNegative : Kind::kUnsigned, std::to_string(v),
                  static_cast<uint64_t>(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    return scalar(Kind::kUnsigned, std::to_string(v), v);
  }
  bool number_float(number_float_t, const string_t& text) override {
    const bool integral = text.find_first_of(".eE") == std::string::npos;
    fail("JSON " + key_ + " = " + text +
         (integral ? " is out of range; allowed: -2^63 <= value <= 2^64 - 1"
                   : " is not an integer"));
  }
  bool string(string_t& v) override { return scalar(Kind::kString, v); }
  bool binary(binary_t&) override { fail("JSON holds binary data"); }
  bool start_object(std::size_t) override {
    if (depth_++ != 0) fail("JSON value of '" + key_ + "' is an object; allowed: a scalar");
    return true;
  }
  bool key(string_t& k) override {
    if (values_.count(k) != 0) fail("JSON key '" + k + "' twice");
    key_ = k;
    in_value_ = true;
    return true;
  }
  bool end_object() override {
    complete_ = --depth_ == 0;
    return true;
  }
  bool start_array(std::size_t) override {
    fail(depth_ == 0 ? std::string("JSON is an array; allowed: an object")
                     : "JSON value of '" + key_ + "' is an array; allowed: a scalar");
  }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    if (position > text_size_) fail("JSON ends before its object does");
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 3: ...", on one
    // line (nlohmann escapes control characters in the token it quotes).
    std::string why = e.what();
    if (why.find("expected end of input") != std::string::npos) {
      fail("JSON has trailing characters at byte " +
           std::to_string(position == 0 ? 0 : position - 1));
    }
    const size_t colon = why.find(": ");
    if (colon != std::string::npos) why = why.substr(colon + 2);
    fail("JSON is not valid at byte " + std::to_string(position == 0 ? 0 : position - 1) +
         (in_value_ ? " (the value of '" + key_ + "')" : std::string()) + ": " + why);
  }

 private:
  enum class Kind { kNull, kBool, kUnsigned, kNegative, kString };
  struct Value {
    Kind kind;
    std::string text;
    uint64_t u64;
  };

  static std::string shown(const Value& v) {
    return v.kind == Kind::kString ? "'" + v.text + "'" : v.text;
  }
  bool scalar(Kind kind, std::string text, uint64_t u64 = 0) {
    if (depth_ == 0) fail("JSON is a single " + text + "; allowed: an object");
    in_value_ = false;
    if (kind == Kind::kNull)
      fail("JSON " + key_ + " = null; allowed: a number, true/false or a string");
    values_.emplace(key_, Value{kind, std::move(text), u64});
    return true;
  }

  size_t text_size_;
  int depth_ = 0;
  bool complete_ = false;
  bool in_value_ = false;  // after a key, before its value
  std::string key_;
  std::map<std::string, Value> values_;
  std::map<std::string, bool> used_;
};

}  // namespace

bool operator==(const Fingerprint& a, const Fingerprint& b) {
  return differing_fields(a, b).empty();
}

Fingerprint fingerprint(const SamplerOptions& options) {
  Fingerprint f;
  f.size = options.size;
  f.seed = options.seed;
  f.shuffle = options.shuffle;
  f.drop_last = options.drop_last;
  f.uneven = options.uneven;
  f.order = options.order;
  if (options.order == OrderKind::kTorch) f.randperm = options.randperm;
  if (options.order == OrderKind::kFeistel) {
    // The rounds the order runs: a checkpoint names them even when the options took the default.
    f.feistel_rounds = options.feistel_rounds != FeistelPermutation::kVersionDefaultRounds
                           ? options.feistel_rounds
                           : FeistelPermutation::default_rounds(options.feistel_version);
    f.feistel_version = options.feistel_version;
  }
  return f;
}

std::string field_value(const Fingerprint& f, std::string_view field) {
  if (field == "algorithm_version") return std::to_string(f.algorithm_version);
  if (field == "size") return std::to_string(f.size);
  if (field == "seed") return f.seed.to_string();
  if (field == "shuffle") return f.shuffle ? "true" : "false";
  if (field == "drop_last") return f.drop_last ? "true" : "false";
  if (field == "uneven") return f.uneven ? "true" : "false";
  if (field == "order") return std::string(to_string(f.order));
  if (field == "randperm") return randperm_name(f.randperm);
  if (field == "feistel_rounds") return std::to_string(f.feistel_rounds);
  if (field == "feistel_version") return std::to_string(f.feistel_version);
  throw std::invalid_argument("field = '" + std::string(field) + "' is not a fingerprint field");
}

bool randperm_matters(const Fingerprint& f) {
  return f.order == OrderKind::kTorch && f.shuffle && f.size >= kRandpermInsideOutThreshold;
}

std::vector<std::string> differing_fields(const Fingerprint& a, const Fingerprint& b) {
  std::vector<std::string> out;
  for (const char* name : kFieldNames) {
    if (std::string_view(name) == "randperm" && !randperm_matters(a) && !randperm_matters(b)) {
      continue;
    }
    if (field_value(a, name) != field_value(b, name)) out.emplace_back(name);
  }
  return out;
}

std::string describe_disagreement(const std::vector<Fingerprint>& per_rank) {
  std::string message;
  bool randperm_counts = false;
  for (const Fingerprint& f : per_rank) randperm_counts = randperm_counts || randperm_matters(f);
  for (const char* name : kFieldNames) {
    if (std::string_view(name) == "randperm" && !randperm_counts) continue;
    // value -> ranks, in order of first appearance (ranks ascending).
    std::vector<std::pair<std::string, std::vector<size_t>>> groups;
    for (size_t r = 0; r < per_rank.size(); ++r) {
      const std::string v = field_value(per_rank[r], name);
      size_t g = 0;
      while (g < groups.size() && groups[g].first != v) ++g;
      if (g == groups.size()) groups.push_back({v, {}});
      groups[g].second.push_back(r);
    }
    if (groups.size() <= 1) continue;
    if (!message.empty()) message += "\n";
    message += std::string(name) + " differs across ranks:";
    for (size_t g = 0; g < groups.size(); ++g) {
      message += (g == 0 ? " " : "; ") + groups[g].first + " on rank" +
                 (groups[g].second.size() > 1 ? "s" : "");
      for (size_t i = 0; i < groups[g].second.size(); ++i) {
        message += (i == 0 ? " " : ", ") + std::to_string(groups[g].second[i]);
      }
    }
  }
  return message;
}

uint32_t crc32(std::string_view bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (char ch : bytes) c = kCrcTable[(c ^ static_cast<unsigned char>(ch)) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string encode_state(const SamplerState& state) {
  const Fingerprint& f = state.config;
  check_normalized(f);
  std::string out(kMagic, sizeof(kMagic));
  put(out, kStateFormatVersion, 2);
  put(out, kStateBytes, 2);
  put(out, f.algorithm_version, 4);
  put(out, f.order == OrderKind::kFeistel ? 1 : 0, 1);
  put(out, f.randperm == RandpermVariant::kClassic ? 1 : 0, 1);
  put(out,
      (f.shuffle ? 1 : 0) | (f.drop_last ? 2 : 0) | (f.seed.negative() ? 4 : 0) |
          (f.uneven ? 8 : 0),
      1);
  put(out, static_cast<uint64_t>(f.feistel_rounds), 1);
  put(out, f.feistel_version == FeistelPermutation::kVersion2 ? 2 : 0, 1);
  put(out, 0, 3);
  put(out, f.size, 8);
  put(out, f.seed.bits(), 8);
  put(out, state.epoch, 8);
  put(out, state.consumed, 8);
  put(out, crc32(out), 4);
  return out;
}

SamplerState decode_state(std::string_view bytes) {
  if (bytes.size() < 12) {
    fail("truncated: " + std::to_string(bytes.size()) + " bytes, fewer than the 12-byte header");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    fail("not a distsampler state (the magic bytes \"DSSTATE\\0\" are missing)");
  }
  const uint64_t version = get(bytes, 8, 2);
  if (version != kStateFormatVersion) {
    fail("format version " + std::to_string(version) + " is not supported; this build reads " +
         std::to_string(kStateFormatVersion));
  }
  const uint64_t length = get(bytes, 10, 2);
  if (length != kStateBytes) {
    fail("header length = " + std::to_string(length) + "; a version-1 state has " +
         std::to_string(kStateBytes) + " bytes");
  }
  if (bytes.size() != kStateBytes) {
    fail((bytes.size() < kStateBytes ? "truncated: " : "trailing bytes: ") +
         std::to_string(bytes.size()) + " bytes; a version-1 state has " +
         std::to_string(kStateBytes));
  }
  const uint32_t stored = static_cast<uint32_t>(get(bytes, 56, 4));
  const uint32_t computed = crc32(bytes.substr(0, 56));
  if (stored != computed) {
    fail("checksum mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) +
         "): the state is corrupt");
  }
  SamplerState s;
  Fingerprint& f = s.config;
  f.algorithm_version = static_cast<uint32_t>(get(bytes, 12, 4));
  const uint64_t order = get(bytes, 16, 1);
  const uint64_t randperm = get(bytes, 17, 1);
  const uint64_t flags = get(bytes, 18, 1);
  if (order > 1) fail("order = " + std::to_string(order) + "; allowed: 0 (torch), 1 (feistel)");
  if (randperm > 1) {
    fail("randperm = " + std::to_string(randperm) + "; allowed: 0 (current), 1 (classic)");
  }
  if (flags > 15) fail("flags = " + std::to_string(flags) + " has unknown bits; allowed: 0..15");
  const uint64_t feistel_version = get(bytes, 20, 1);
  if (feistel_version != 0 && !(feistel_version == 2 && order == 1)) {
    fail("feistel version byte = " + std::to_string(feistel_version) +
         "; allowed: 0 (version 1, or not feistel), 2 (feistel version 2)");
  }
  if (get(bytes, 21, 3) != 0) fail("reserved bytes 21..23 are not zero");
  f.order = order == 1 ? OrderKind::kFeistel : OrderKind::kTorch;
  f.randperm = randperm == 1 ? RandpermVariant::kClassic : RandpermVariant::kCurrent;
  f.shuffle = (flags & 1) != 0;
  f.drop_last = (flags & 2) != 0;
  f.uneven = (flags & 8) != 0;
  f.feistel_rounds = static_cast<int>(get(bytes, 19, 1));
  f.feistel_version = feistel_version == 2 ? 2 : 1;
  f.size = get(bytes, 24, 8);
  const uint64_t seed_bits = get(bytes, 32, 8);
  const bool negative = (flags & 4) != 0;
  if (negative && (seed_bits >> 63) == 0) fail("seed is marked negative but its bits are not");
  f.seed = seed_from(seed_bits, negative);
  s.epoch = get(bytes, 40, 8);
  s.consumed = get(bytes, 48, 8);
  check_normalized(f);
  return s;
}

std::string state_to_json(const SamplerState& state) {
  const std::string bytes = encode_state(state);  // validates, and gives the checksum
  const Fingerprint& f = state.config;
  std::string j =
      "{\"format\": \"distsampler-state\", \"version\": " + std::to_string(kStateFormatVersion);
  j += ", \"algorithm_version\": " + std::to_string(f.algorithm_version);
  j += ", \"size\": " + std::to_string(f.size);
  j += ", \"seed\": " + f.seed.to_string();
  j += std::string(", \"shuffle\": ") + (f.shuffle ? "true" : "false");
  j += std::string(", \"drop_last\": ") + (f.drop_last ? "true" : "false");
  if (f.uneven) j += ", \"uneven\": true";  // absent means false (see state.h)
  j += ", \"order\": \"" + std::string(to_string(f.order)) + "\"";
  j += std::string(", \"randperm\": \"") + randperm_name(f.randperm) + "\"";
  j += ", \"feistel_rounds\": " + std::to_string(f.feistel_rounds);
  // Absent means 1 (see state.h), so version-1 states read as before everywhere.
  if (f.feistel_version == FeistelPermutation::kVersion2) j += ", \"feistel_version\": 2";
  j += ", \"epoch\": " + std::to_string(state.epoch);
  j += ", \"consumed\": " + std::to_string(state.consumed);
  j += ", \"crc32\": " + std::to_string(get(bytes, 56, 4)) + "}";
  return j;
}

SamplerState state_from_json(std::string_view json) {
  JsonObject o(json);
  if (o.take("format", true) != "distsampler-state") {
    fail("JSON format = '" + o.take("format", true) + "'; allowed: distsampler-state");
  }
  const uint64_t version = o.take_u64("version");
  if (version != kStateFormatVersion) {
    fail("format version " + std::to_string(version) + " is not supported; this build reads " +
         std::to_string(kStateFormatVersion));
  }
  SamplerState s;
  Fingerprint& f = s.config;
  const uint64_t algorithm = o.take_u64("algorithm_version");
  if (algorithm > UINT32_MAX) fail("JSON algorithm_version = " + std::to_string(algorithm));
  f.algorithm_version = static_cast<uint32_t>(algorithm);
  f.size = o.take_u64("size");
  const std::string& seed = o.take_integer("seed");
  try {
    f.seed = Seed::parse(seed, "seed");
  } catch (const std::invalid_argument& e) {
    fail(std::string("JSON ") + e.what());
  }
  f.shuffle = o.take_bool("shuffle");
  f.drop_last = o.take_bool("drop_last");
  f.uneven = o.has("uneven") && o.take_bool("uneven");
  const std::string& order = o.take("order", true);
  if (order != "torch" && order != "feistel") {
    fail("JSON order = '" + order + "'; allowed: torch, feistel");
  }
  f.order = order == "torch" ? OrderKind::kTorch : OrderKind::kFeistel;
  const std::string& randperm = o.take("randperm", true);
  if (randperm != "current" && randperm != "classic") {
    fail("JSON randperm = '" + randperm + "'; allowed: current, classic");
  }
  f.randperm = randperm == "classic" ? RandpermVariant::kClassic : RandpermVariant::kCurrent;
  const uint64_t rounds = o.take_u64("feistel_rounds");
  if (rounds > 255) fail("JSON feistel_rounds = " + std::to_string(rounds) + " is out of range");
  f.feistel_rounds = static_cast<int>(rounds);
  if (o.has("feistel_version")) {
    const uint64_t version = o.take_u64("feistel_version");
    if (version != 2 || f.order != OrderKind::kFeistel) {
      fail("JSON feistel_version = " + std::to_string(version) +
           "; allowed: 2 with order feistel (absent means version 1)");
    }
    f.feistel_version = 2;
  }
  s.epoch = o.take_u64("epoch");
  s.consumed = o.take_u64("consumed");
  const uint64_t stored = o.take_u64("crc32");
  o.finish();
  check_normalized(f);
  const std::string bytes = encode_state(s);
  const uint32_t computed = static_cast<uint32_t>(get(bytes, 56, 4));
  if (stored != computed) {
    fail("checksum mismatch (stored " + std::to_string(stored) + ", computed " +
         std::to_string(computed) + "): the state is corrupt");
  }
  return s;
}

SamplerState make_state(const DistributedSampler& sampler, uint64_t epoch, uint64_t consumed) {
  return SamplerState{fingerprint(sampler.options()), epoch, consumed};
}

uint64_t consumed_after(const RankView& view, uint64_t taken) {
  const Partition& partition = view.partition();
  return Pass{view.epoch(), partition.start, partition.world_size, view.size(), 0}.consumed_after(
      taken);
}

RankView resume(const DistributedSampler& sampler, const SamplerState& state) {
  const Fingerprint here = fingerprint(sampler.options());
  const std::vector<std::string> fields = differing_fields(state.config, here);
  if (!fields.empty()) {
    std::string message = "state does not match this sampler's configuration:";
    for (size_t i = 0; i < fields.size(); ++i) {
      message += (i == 0 ? " " : "; ") + fields[i] + " = " + field_value(state.config, fields[i]) +
                 " in the state, " + field_value(here, fields[i]) + " here";
    }
    throw std::invalid_argument(message);
  }
  return sampler.epoch(state.epoch, state.consumed);
}

}  // namespace distsampler
