// The checkpoint codecs (state.h): byte and JSON encodings with a CRC-32, driven by the
// fingerprint's table of fields (fingerprint.cc: each field's offset, width, flag bit and JSON
// reader); this file holds the frame around them (magic, versions, epoch, consumed, checksum).
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
#include <array>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>

#include "distsampler/state.h"

#include "distsampler/feistel.h"
#include "distsampler/order.h"
#include "distsampler/partition.h"

namespace distsampler {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'S', 'T', 'A', 'T', 'E', '\0'};
constexpr int kFlagsOffset = 18;
constexpr int kReservedOffset = 21;
constexpr int kReservedBytes = 3;

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
}  // namespace

namespace detail {
[[noreturn]] void state_error(const std::string& what) {
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
}  // namespace detail

namespace {

using detail::state_error;
[[noreturn]] void fail(const std::string& what) { state_error(what); }

std::string hex32(uint32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xf];
  return s;
}

void put(std::string& out, uint64_t value, int bytes) {
  for (int b = 0; b < bytes; ++b) out += static_cast<char>((value >> (8 * b)) & 0xff);
}

// Writes `value` little-endian into out[offset, offset + bytes).
void set(std::string& out, uint64_t value, int offset, int bytes) {
  for (int b = 0; b < bytes; ++b) out[offset + b] = static_cast<char>((value >> (8 * b)) & 0xff);
}

// Whether f holds the value a state without the field means (written as such: no key, code 0).
bool is_absent(const FingerprintField& row, const Fingerprint& f) {
  return row.absent != nullptr && row.value(f) == row.absent;
}

uint64_t get(std::string_view in, size_t offset, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + b])) << (8 * b);
  }
  return v;
}

// Throws unless the fingerprint is one that fingerprint() could have produced: an order and a
// partition their own validate() accepts (their messages, prefixed "state: "), with the fields
// that do not apply to the order at their normalized values (those of Fingerprint{}).
void check_normalized(const Fingerprint& f) {
  if (f.algorithm_version != kOrderAlgorithmVersion) {
    fail("algorithm_version = " + std::to_string(f.algorithm_version) +
         " is not supported; this build implements algorithm version " +
         std::to_string(kOrderAlgorithmVersion));
  }
  Partition partition;
  partition.size = f.size;
  partition.drop_last = f.drop_last;
  partition.uneven = f.uneven;
  try {
    validate(OrderOptions{f.size, f.seed, f.shuffle, f.order, f.randperm, f.feistel_rounds,
                          f.feistel_version});
    partition.validate();
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  const Fingerprint normalized;
  if (f.order == OrderKind::kTorch && f.feistel_rounds != normalized.feistel_rounds) {
    fail("feistel_rounds = " + std::to_string(f.feistel_rounds) + " with order torch; allowed: " +
         std::to_string(normalized.feistel_rounds) +
         " (rounds apply to the feistel order only)");
  }
  if (f.order == OrderKind::kTorch && f.feistel_version != normalized.feistel_version) {
    fail("feistel_version = " + std::to_string(f.feistel_version) + " with order torch; allowed: " +
         std::to_string(normalized.feistel_version) +
         " (the version applies to the feistel order only)");
  }
  if (f.order == OrderKind::kFeistel) {
    if (f.feistel_rounds == FeistelPermutation::kVersionDefaultRounds) {
      fail("feistel_rounds = " + std::to_string(f.feistel_rounds) +
           " with order feistel; allowed: 1 <= feistel_rounds <= " +
           std::to_string(FeistelPermutation::kMaxRounds) + " (the rounds the order ran)");
    }
    if (f.randperm != normalized.randperm) {
      fail("randperm = " + std::string(to_string(f.randperm)) +
           " with order feistel; allowed: " + std::string(to_string(normalized.randperm)) +
           " (randperm applies to the torch order only)");
    }
  }
  if (f.seed.negative() && (f.seed.bits() >> 63) == 0) fail("seed has an inconsistent sign");
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
  out.resize(kStateBytes - 20, '\0');  // the fingerprint's bytes, reserved ones 0
  uint64_t flags = 0;
  for (const FingerprintField& row : fingerprint_fields()) {
    const FieldCode code = is_absent(row, f) ? FieldCode{} : row.encode(f);
    if (row.width > 0) set(out, code.value, row.offset, row.width);
    if (row.bit >= 0 && code.flag) flags |= uint64_t{1} << row.bit;
  }
  set(out, flags, kFlagsOffset, 1);
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
  uint64_t known_flags = 0;
  for (const FingerprintField& row : fingerprint_fields()) {
    if (row.bit >= 0) known_flags |= uint64_t{1} << row.bit;
  }
  const uint64_t flags = get(bytes, kFlagsOffset, 1);
  if ((flags & ~known_flags) != 0) {
    fail("flags = " + std::to_string(flags) + " has unknown bits; allowed: 0.." +
         std::to_string(known_flags));
  }
  if (get(bytes, kReservedOffset, kReservedBytes) != 0) fail("reserved bytes 21..23 are not zero");
  SamplerState s;
  Fingerprint& f = s.config;
  for (const FingerprintField& row : fingerprint_fields()) {
    FieldCode code;
    if (row.width > 0) code.value = get(bytes, row.offset, row.width);
    if (row.bit >= 0) code.flag = ((flags >> row.bit) & 1) != 0;
    if (row.absent != nullptr && code.value == 0 && !code.flag) {
      row.read(row.absent, false, f);
    } else {
      row.decode(code, f);
    }
  }
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
  for (const FingerprintField& row : fingerprint_fields()) {
    if (is_absent(row, f)) continue;  // states written before the field read as before
    const std::string value = row.value(f);
    j += std::string(", \"") + row.name +
         "\": " + (row.kind == FieldKind::kName ? "\"" + value + "\"" : value);
  }
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
  for (const FingerprintField& row : fingerprint_fields()) {
    if (row.absent != nullptr && !o.has(row.name)) {
      row.read(row.absent, false, f);
      continue;
    }
    switch (row.kind) {
      case FieldKind::kUnsigned:
        row.read(std::to_string(o.take_u64(row.name)), true, f);
        break;
      case FieldKind::kInteger:
        row.read(o.take_integer(row.name), true, f);
        break;
      case FieldKind::kBool:
        row.read(o.take_bool(row.name) ? "true" : "false", true, f);
        break;
      case FieldKind::kName:
        row.read(o.take(row.name, true), true, f);
        break;
    }
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

}  // namespace distsampler
