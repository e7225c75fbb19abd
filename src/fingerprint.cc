// The fingerprint's fields as one table (fingerprint.h): each row names a field, its text value,
// what a state without it means, where it applies, and its code in both checkpoint formats.
// Equality, differing_fields, field_value, describe_disagreement, the byte and JSON codecs
// (state_codec.cc) and the Python binding all walk this table, so a new field is one row here.
#include "distsampler/fingerprint.h"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/feistel.h"
#include "distsampler/torch_random.h"
#include "distsampler/variants.h"

namespace distsampler {
namespace {

using detail::state_error;

std::string text_of(bool value) { return value ? "true" : "false"; }

// The byte code of `value`'s row (the value is checked before encoding: check_normalized).
template <class Row, size_t N, class T>
FieldCode code_of(const Row (&table)[N], T value) {
  const Row* row = detail::find_variant(table, value);
  return FieldCode{row != nullptr ? row->code : 0u};
}

// The row of byte code `code`, or "state: <field> = <code>; allowed: 0 (torch), 1 (feistel)".
template <class Row, size_t N>
const Row& row_of_code(const Row (&table)[N], const char* field, uint64_t code) {
  const Row* row = detail::find_variant_code(table, code);
  if (row == nullptr) {
    state_error(std::string(field) + " = " + std::to_string(code) +
                "; allowed: " + detail::variant_codes(table));
  }
  return *row;
}

// The row named `text` in a JSON state, or "state: JSON <field> = '<text>'; allowed: <names>".
template <class Row, size_t N>
const Row& row_of_name(const Row (&table)[N], const char* field, const std::string& text) {
  const Row* row = detail::find_variant_name(table, text);
  if (row == nullptr) {
    state_error("JSON " + std::string(field) + " = '" + text +
                "'; allowed: " + detail::variant_names(table));
  }
  return *row;
}

// The Feistel version a state without the field means (code 0), and the others, "2".
const FeistelVersionRow& absent_feistel_version() {
  return *detail::find_variant_code(kFeistelVersions, 0);
}
std::string written_feistel_versions() {
  std::string out;
  for (const FeistelVersionRow& row : kFeistelVersions) {
    if (row.code != 0) out += (out.empty() ? "" : ", ") + std::string(row.name);
  }
  return out;
}
std::string written_feistel_version_codes() {
  std::string out;
  for (const FeistelVersionRow& row : kFeistelVersions) {
    if (row.code != 0) {
      out += ", " + std::to_string(row.code) + " (feistel version " + row.name + ")";
    }
  }
  return out;
}

// The text of an unsigned JSON value (the reader has checked that it is one).
uint64_t unsigned_of(const std::string& text) { return std::stoull(text); }

Seed seed_from(uint64_t bits, bool negative) {
  return negative ? Seed(static_cast<int64_t>(bits)) : Seed(bits);
}

// A row: name, kind, value, value when absent, applies, byte offset, width, flags bit, encode,
// decode, JSON read (fingerprint.h). The flags byte's bits: 0 shuffle, 1 drop_last, 2 the seed's
// sign, 3 uneven.
std::vector<FingerprintField> make_fields() {
  return {
      {"algorithm_version", FieldKind::kUnsigned,
       [](const Fingerprint& f) { return std::to_string(f.algorithm_version); }, nullptr, nullptr,
       12, 4, -1, [](const Fingerprint& f) { return FieldCode{f.algorithm_version}; },
       [](FieldCode c, Fingerprint& f) { f.algorithm_version = static_cast<uint32_t>(c.value); },
       [](const std::string& text, bool, Fingerprint& f) {
         const uint64_t v = unsigned_of(text);
         if (v > UINT32_MAX) state_error("JSON algorithm_version = " + text);
         f.algorithm_version = static_cast<uint32_t>(v);
       }},
      {"size", FieldKind::kUnsigned, [](const Fingerprint& f) { return std::to_string(f.size); },
       nullptr, nullptr, 24, 8, -1, [](const Fingerprint& f) { return FieldCode{f.size}; },
       [](FieldCode c, Fingerprint& f) { f.size = c.value; },
       [](const std::string& text, bool, Fingerprint& f) { f.size = unsigned_of(text); }},
      {"seed", FieldKind::kInteger, [](const Fingerprint& f) { return f.seed.to_string(); },
       nullptr, nullptr, 32, 8, 2,
       [](const Fingerprint& f) { return FieldCode{f.seed.bits(), f.seed.negative()}; },
       [](FieldCode c, Fingerprint& f) {
         if (c.flag && (c.value >> 63) == 0) {
           state_error("seed is marked negative but its bits are not");
         }
         f.seed = seed_from(c.value, c.flag);
       },
       [](const std::string& text, bool, Fingerprint& f) {
         try {
           f.seed = Seed::parse(text, "seed");
         } catch (const std::invalid_argument& e) {
           state_error(std::string("JSON ") + e.what());
         }
       }},
      {"shuffle", FieldKind::kBool, [](const Fingerprint& f) { return text_of(f.shuffle); },
       nullptr, nullptr, 18, 0, 0, [](const Fingerprint& f) { return FieldCode{0, f.shuffle}; },
       [](FieldCode c, Fingerprint& f) { f.shuffle = c.flag; },
       [](const std::string& text, bool, Fingerprint& f) { f.shuffle = text == "true"; }},
      {"drop_last", FieldKind::kBool, [](const Fingerprint& f) { return text_of(f.drop_last); },
       nullptr, nullptr, 18, 0, 1, [](const Fingerprint& f) { return FieldCode{0, f.drop_last}; },
       [](FieldCode c, Fingerprint& f) { f.drop_last = c.flag; },
       [](const std::string& text, bool, Fingerprint& f) { f.drop_last = text == "true"; }},
      // Came after format version 1: states without it were even.
      {"uneven", FieldKind::kBool, [](const Fingerprint& f) { return text_of(f.uneven); }, "false",
       nullptr, 18, 0, 3, [](const Fingerprint& f) { return FieldCode{0, f.uneven}; },
       [](FieldCode c, Fingerprint& f) { f.uneven = c.flag; },
       [](const std::string& text, bool, Fingerprint& f) { f.uneven = text == "true"; }},
      {"order", FieldKind::kName,
       [](const Fingerprint& f) { return std::string(to_string(f.order)); }, nullptr, nullptr, 16,
       1, -1, [](const Fingerprint& f) { return code_of(kOrderKinds, f.order); },
       [](FieldCode c, Fingerprint& f) {
         f.order = row_of_code(kOrderKinds, "order", c.value).value;
       },
       [](const std::string& text, bool, Fingerprint& f) {
         f.order = row_of_name(kOrderKinds, "order", text).value;
       }},
      {"randperm", FieldKind::kName,
       [](const Fingerprint& f) { return std::string(to_string(f.randperm)); }, nullptr,
       &randperm_matters, 17, 1, -1,
       [](const Fingerprint& f) { return code_of(kRandpermVariants, f.randperm); },
       [](FieldCode c, Fingerprint& f) {
         f.randperm = row_of_code(kRandpermVariants, "randperm", c.value).value;
       },
       [](const std::string& text, bool, Fingerprint& f) {
         f.randperm = row_of_name(kRandpermVariants, "randperm", text).value;
       }},
      {"feistel_rounds", FieldKind::kUnsigned,
       [](const Fingerprint& f) { return std::to_string(f.feistel_rounds); }, nullptr, nullptr, 19,
       1, -1,
       [](const Fingerprint& f) { return FieldCode{static_cast<uint64_t>(f.feistel_rounds)}; },
       [](FieldCode c, Fingerprint& f) { f.feistel_rounds = static_cast<int>(c.value); },
       [](const std::string& text, bool, Fingerprint& f) {
         const uint64_t rounds = unsigned_of(text);
         if (rounds > 255) state_error("JSON feistel_rounds = " + text + " is out of range");
         f.feistel_rounds = static_cast<int>(rounds);
       }},
      // Came after format version 1: states without it were version 1 (or not feistel). Its
      // codes and which versions are written: kFeistelVersions (feistel.h).
      {"feistel_version", FieldKind::kUnsigned,
       [](const Fingerprint& f) { return std::to_string(f.feistel_version); },
       absent_feistel_version().name, nullptr, 20, 1, -1,
       [](const Fingerprint& f) { return code_of(kFeistelVersions, f.feistel_version); },
       [](FieldCode c, Fingerprint& f) {
         const FeistelVersionRow* row = detail::find_variant_code(kFeistelVersions, c.value);
         if (row == nullptr || row->code == 0 || f.order != OrderKind::kFeistel) {
           state_error("feistel version byte = " + std::to_string(c.value) +
                       "; allowed: 0 (version " + absent_feistel_version().name +
                       ", or not feistel)" + written_feistel_version_codes());
         }
         f.feistel_version = row->value;
       },
       [](const std::string& text, bool present, Fingerprint& f) {
         const FeistelVersionRow* row = detail::find_variant_name(kFeistelVersions, text);
         if (row == nullptr || (present && (row->code == 0 || f.order != OrderKind::kFeistel))) {
           state_error("JSON feistel_version = " + text + "; allowed: " +
                       written_feistel_versions() + " with order feistel (absent means version " +
                       absent_feistel_version().name + ")");
         }
         f.feistel_version = row->value;
       }},
  };
}

bool counts(const FingerprintField& field, const Fingerprint& f) {
  return field.applies == nullptr || field.applies(f);
}

}  // namespace

const std::vector<FingerprintField>& fingerprint_fields() {
  static const std::vector<FingerprintField> fields = make_fields();
  return fields;
}

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
  for (const FingerprintField& row : fingerprint_fields()) {
    if (field == row.name) return row.value(f);
  }
  throw std::invalid_argument("field = '" + std::string(field) + "' is not a fingerprint field");
}

bool randperm_matters(const Fingerprint& f) {
  return f.order == OrderKind::kTorch && f.shuffle && f.size >= kRandpermInsideOutThreshold;
}

std::vector<std::string> differing_fields(const Fingerprint& a, const Fingerprint& b) {
  std::vector<std::string> out;
  for (const FingerprintField& row : fingerprint_fields()) {
    if (!counts(row, a) && !counts(row, b)) continue;
    if (row.value(a) != row.value(b)) out.emplace_back(row.name);
  }
  return out;
}

std::string describe_disagreement(const std::vector<Fingerprint>& per_rank) {
  std::string message;
  for (const FingerprintField& row : fingerprint_fields()) {
    bool applies = false;
    for (const Fingerprint& f : per_rank) applies = applies || counts(row, f);
    if (!applies) continue;
    // value -> ranks, in order of first appearance (ranks ascending).
    std::vector<std::pair<std::string, std::vector<size_t>>> groups;
    for (size_t r = 0; r < per_rank.size(); ++r) {
      const std::string v = row.value(per_rank[r]);
      size_t g = 0;
      while (g < groups.size() && groups[g].first != v) ++g;
      if (g == groups.size()) groups.push_back({v, {}});
      groups[g].second.push_back(r);
    }
    if (groups.size() <= 1) continue;
    if (!message.empty()) message += "\n";
    message += std::string(row.name) + " differs across ranks:";
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

}  // namespace distsampler
