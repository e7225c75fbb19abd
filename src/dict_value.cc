// dict_value.cc: DictValue (state_dict.h), the Python value a checkpoint is made of, and its two
// texts: python_repr (the messages) and canonical_json (the checksums). Python's json.dumps and
// repr() are reproduced where a checksum or a message depends on them (floats in the shortest form
// that reads back, Python's switch to exponents at 1e16 and 1e-4).
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/state_dict.h"

namespace distsampler {
namespace {

using Type = DictValue::Type;

// repr(float) / json.dumps(float): the shortest digits that read back (std::to_chars), laid out
// as Python's float_repr_style 'short' does: positional for exponents in [-4, 16), else d.ddde+XX.
std::string float_text(double v, bool json) {
  if (std::isnan(v)) return json ? "NaN" : "nan";
  if (std::isinf(v)) return v > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf");
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), v, std::chars_format::scientific);
  std::string s(buffer, result.ptr);
  std::string sign;
  if (s[0] == '-') sign = "-", s.erase(0, 1);
  const size_t e = s.find('e');
  const int exponent = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
    const auto point = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= point) return sign + digits + std::string(point - digits.size(), '0') + ".0";
    return sign + digits.substr(0, point) + "." + digits.substr(point);
  }
  std::string out = sign + digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int magnitude = std::abs(exponent);
  return out + "e" + (exponent < 0 ? "-" : "+") + (magnitude < 10 ? "0" : "") +
         std::to_string(magnitude);
}

// The code points of UTF-8 text (a malformed byte stands for itself).
std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    if (extra == 0 || i + extra >= s.size()) {
      out.push_back(c);
      ++i;
      continue;
    }
    uint32_t cp = c & (0x3f >> extra);
    for (int k = 1; k <= extra; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += static_cast<size_t>(extra) + 1;
  }
  return out;
}

std::string hex4(uint32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string out = "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += digits[(v >> shift) & 0xf];
  return out;
}

// json.dumps(str) with ensure_ascii: \" \\ \n \r \t \b \f, other controls and non-ASCII as \uXXXX
// (surrogate pairs above the BMP).
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (uint32_t cp : code_points(s)) {
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (cp >= 0x7f && cp < 0x10000)) {
      out += cp == 0x7f ? std::string(1, '\x7f') : hex4(cp);
    } else if (cp >= 0x10000) {
      const uint32_t v = cp - 0x10000;
      out += hex4(0xd800 + (v >> 10)) + hex4(0xdc00 + (v & 0x3ff));
    } else {
      out += static_cast<char>(cp);
    }
  }
  return out + "\"";
}

// repr(str): single quotes unless the text holds one and no double quote.
std::string repr_string(const std::string& s) {
  const bool single = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = single ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\', out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      static const char* digits = "0123456789abcdef";
      out += std::string("\\x") + digits[u >> 4] + digits[u & 0xf];
    } else {
      out += c;
    }
  }
  return out + quote;
}

}  // namespace

// ---- DictValue ----------------------------------------------------------------------------------

DictValue DictValue::boolean(bool value) {
  DictValue v;
  v.type = Type::kBool, v.flag = value, v.type_name = "bool";
  return v;
}
DictValue DictValue::integer(uint64_t value) { return integer_text(std::to_string(value)); }
DictValue DictValue::integer_text(std::string decimal) {
  DictValue v;
  v.type = Type::kInt, v.text = std::move(decimal), v.type_name = "int";
  return v;
}
DictValue DictValue::real(double value) {
  DictValue v;
  v.type = Type::kFloat, v.number = value, v.type_name = "float";
  return v;
}
DictValue DictValue::string(std::string value) {
  DictValue v;
  v.type = Type::kString, v.text = std::move(value), v.type_name = "str";
  return v;
}
DictValue DictValue::list(std::vector<DictValue> items) {
  DictValue v;
  v.type = Type::kList, v.items = std::move(items), v.type_name = "list";
  return v;
}
DictValue DictValue::dict() {
  DictValue v;
  v.type = Type::kDict, v.type_name = "dict";
  return v;
}
DictValue DictValue::other(std::string repr, std::string type_name) {
  DictValue v;
  v.type = Type::kOther, v.text = std::move(repr), v.type_name = std::move(type_name);
  return v;
}

DictValue& DictValue::set(const std::string& key, DictValue value) {
  for (auto& entry : entries) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return *this;
    }
  }
  entries.emplace_back(key, std::move(value));
  return *this;
}

const DictValue* DictValue::find(std::string_view key) const {
  if (type != Type::kDict) return nullptr;
  for (const auto& entry : entries) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

bool DictValue::as_u64(uint64_t& out) const {
  if (type != Type::kInt || text.empty() || text[0] == '-' || text.size() > 20) return false;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), out);
  return result.ec == std::errc() && result.ptr == text.data() + text.size();
}

std::string python_repr(const DictValue& v) {
  switch (v.type) {
    case Type::kNone: return "None";
    case Type::kBool: return v.flag ? "True" : "False";
    case Type::kInt: return v.text;
    case Type::kFloat: return float_text(v.number, false);
    case Type::kString: return repr_string(v.text);
    case Type::kOther: return v.text;
    case Type::kList: {
      std::string out = "[";
      for (size_t i = 0; i < v.items.size(); ++i) out += (i ? ", " : "") + python_repr(v.items[i]);
      return out + "]";
    }
    case Type::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < v.entries.size(); ++i) {
        out += (i ? ", " : "") + repr_string(v.entries[i].first) + ": " +
               python_repr(v.entries[i].second);
      }
      return out + "}";
    }
  }
  return "";
}

std::string canonical_json(const DictValue& v) {
  switch (v.type) {
    case Type::kNone: return "null";
    case Type::kBool: return v.flag ? "true" : "false";
    case Type::kInt: return v.text;
    case Type::kFloat: return float_text(v.number, true);
    case Type::kString: return json_string(v.text);
    case Type::kOther:
      throw std::invalid_argument("a " + v.type_name + " (" + v.text + ") is not JSON");
    case Type::kList: {
      std::string out = "[";
      for (size_t i = 0; i < v.items.size(); ++i) out += (i ? "," : "") + canonical_json(v.items[i]);
      return out + "]";
    }
    case Type::kDict: {
      std::vector<const std::pair<std::string, DictValue>*> sorted;
      for (const auto& entry : v.entries) sorted.push_back(&entry);
      // Insertion sort by key: a state's dicts have a handful of keys, and std::sort's order of
      // equal keys cannot matter (keys are unique).
      for (size_t i = 1; i < sorted.size(); ++i) {
        for (size_t j = i; j > 0 && sorted[j]->first < sorted[j - 1]->first; --j) {
          std::swap(sorted[j], sorted[j - 1]);
        }
      }
      std::string out = "{";
      for (size_t i = 0; i < sorted.size(); ++i) {
        out += (i ? "," : "") + json_string(sorted[i]->first) + ":" +
               canonical_json(sorted[i]->second);
      }
      return out + "}";
    }
  }
  return "";
}

bool same_value(const DictValue& a, const DictValue& b) {
  if (a.type == Type::kOther || b.type == Type::kOther) {
    return a.type == b.type && a.text == b.text && a.type_name == b.type_name;
  }
  return canonical_json(a) == canonical_json(b);
}

}  // namespace distsampler
