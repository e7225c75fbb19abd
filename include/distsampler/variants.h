// variants.h: a named variant's table row (value, name, checkpoint code) and its lookups.
#ifndef DISTSAMPLER_VARIANTS_H_
#define DISTSAMPLER_VARIANTS_H_

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace distsampler {

// One row of a variant table: order.h's kOrderKinds, torch_random.h's kRandpermVariants,
// feistel.h's kFeistelVersions (whose rows add fields of their own). `name` is how text spells
// the value (CLI flags, Python arguments, JSON checkpoints), `code` its byte in the binary
// checkpoint (state.h). Every parse, to_string, check, codec and "allowed:" list reads the table,
// so a new variant is one row there plus its implementation (docs/design.md, "Adding a variant").
// Values, names and codes are unique within a table (tests/cpp/variants_test.cc).
template <class T>
struct VariantRow {
  T value;
  const char* name;
  uint8_t code;
};

namespace detail {

// The row holding `value`, `name` or byte `code`; nullptr when none does.
template <class Row, size_t N, class T>
constexpr const Row* find_variant(const Row (&table)[N], T value) {
  for (const Row& row : table) {
    if (row.value == value) return &row;
  }
  return nullptr;
}
template <class Row, size_t N>
constexpr const Row* find_variant_name(const Row (&table)[N], std::string_view name) {
  for (const Row& row : table) {
    if (name == row.name) return &row;
  }
  return nullptr;
}
template <class Row, size_t N>
constexpr const Row* find_variant_code(const Row (&table)[N], uint64_t code) {
  for (const Row& row : table) {
    if (row.code == code) return &row;
  }
  return nullptr;
}

// The names in table order, "torch, feistel": what every "allowed:" of the kind lists.
template <class Row, size_t N>
std::string variant_names(const Row (&table)[N]) {
  std::string out;
  for (const Row& row : table) out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

// The codes with their names, "0 (torch), 1 (feistel)": what a byte checkpoint may hold.
template <class Row, size_t N>
std::string variant_codes(const Row (&table)[N]) {
  std::string out;
  for (const Row& row : table) {
    out += (out.empty() ? "" : ", ") + std::to_string(row.code) + " (" + row.name + ")";
  }
  return out;
}

// The row named `text`, or std::invalid_argument
// "<parameter> = '<text>' is not <noun>; allowed: <names>".
template <class Row, size_t N>
const Row& parse_variant(const Row (&table)[N], std::string_view text, std::string_view parameter,
                         std::string_view noun) {
  if (const Row* row = find_variant_name(table, text)) return *row;
  throw std::invalid_argument(std::string(parameter) + " = '" + std::string(text) + "' is not " +
                              std::string(noun) + "; allowed: " + variant_names(table));
}

// The row holding `value`, or std::invalid_argument
// "<parameter> = <value as an integer> is not <noun>; allowed: <names>".
template <class Row, size_t N, class T>
const Row& check_variant(const Row (&table)[N], T value, std::string_view parameter,
                         std::string_view noun) {
  if (const Row* row = find_variant(table, value)) return *row;
  throw std::invalid_argument(std::string(parameter) + " = " +
                              std::to_string(static_cast<long long>(value)) + " is not " +
                              std::string(noun) + "; allowed: " + variant_names(table));
}

// The name of `value`, "unknown" when no row holds it (a value cast from an integer).
template <class Row, size_t N, class T>
constexpr std::string_view variant_name(const Row (&table)[N], T value) {
  const Row* row = find_variant(table, value);
  return row != nullptr ? row->name : "unknown";
}

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_VARIANTS_H_
