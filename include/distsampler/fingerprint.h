// fingerprint.h: what every rank of a job, and a job and its checkpoint, must agree on; its
// fields as one table that drives equality, the differing-fields messages and both codecs.
#ifndef DISTSAMPLER_FINGERPRINT_H_
#define DISTSAMPLER_FINGERPRINT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "distsampler/order.h"
#include "distsampler/sampler.h"
#include "distsampler/seed.h"

namespace distsampler {

// The version of everything that decides which index a global position holds: the Feistel
// construction and its key derivation, the torch-exact randperm, and the elastic partition rule.
// Any change to their output takes a new value, so that an old checkpoint cannot silently resume
// on a different order.
inline constexpr uint32_t kOrderAlgorithmVersion = 1;

// What all ranks of a job, and a job and its checkpoint, must agree on. The world size and the
// rank are deliberately absent: a checkpoint resumes on any number of ranks. Fields that do not
// apply to the order are normalized (randperm is kCurrent unless order is kTorch, feistel_rounds
// is 0 unless order is kFeistel, feistel_version 1), so equal fingerprints mean equal orders.
// Every field is a row of fingerprint_fields(); a field added here is added there.
struct Fingerprint {
  uint32_t algorithm_version = kOrderAlgorithmVersion;
  uint64_t size = 0;
  Seed seed;
  bool shuffle = true;
  bool drop_last = false;
  bool uneven = false;  // SamplerOptions::uneven: which ranks read what, never which order
  OrderKind order = OrderKind::kTorch;
  RandpermVariant randperm = RandpermVariant::kCurrent;
  int feistel_rounds = 0;
  // The FeistelPermutation version of the feistel order, 1 or 2; 1 for the torch order (where it
  // means nothing). States written before version 2 existed carry none (the table's "absent").
  int feistel_version = 1;

  friend bool operator==(const Fingerprint& a, const Fingerprint& b);
  friend bool operator!=(const Fingerprint& a, const Fingerprint& b) { return !(a == b); }
};

Fingerprint fingerprint(const SamplerOptions& options);

// Whether the randperm variant changes the order this fingerprint describes: the torch order,
// shuffled, of at least kRandpermInsideOutThreshold samples (below it the variants agree).
bool randperm_matters(const Fingerprint& f);

// How a field's value reads outside C++ (JSON, Python): an unsigned integer, a signed or
// unsigned one (the seed), true/false, or a name (a JSON string).
enum class FieldKind { kUnsigned, kInteger, kBool, kName };

// A field's code in the byte format (state.h): `value` at its bytes, `flag` at its flags bit.
struct FieldCode {
  uint64_t value = 0;
  bool flag = false;
};

// One row of the fingerprint's table: everything that reads or writes the field.
struct FingerprintField {
  const char* name;
  FieldKind kind;
  // The value as text ("torch", "true", "-3"): field_value, the messages, JSON, Python's repr.
  std::string (*value)(const Fingerprint& f);
  // What a state without the field means (a field added after states were written): its JSON key
  // is written only for another value, its byte code is 0 for this one. nullptr: always present.
  const char* absent;
  // Whether the field changes the order f describes; nullptr: always. A field that applies to
  // neither of two fingerprints does not make them differ.
  bool (*applies)(const Fingerprint& f);
  // The byte format: the code's value at bytes [offset, offset + width) (width 0: none), its flag
  // at bit `bit` of the flags byte (-1: none).
  int offset, width, bit;
  FieldCode (*encode)(const Fingerprint& f);
  // Sets the field from a code other than the absent value's, or throws std::invalid_argument
  // ("state: ...") naming it; fields earlier in the table are already set.
  void (*decode)(FieldCode code, Fingerprint& f);
  // Sets the field from its JSON value as text (strings unquoted); present: the key was there
  // (otherwise text is `absent`). Throws like decode.
  void (*read)(const std::string& text, bool present, Fingerprint& f);
};

// The table, in declaration order (the order of messages, JSON keys and Python's repr).
const std::vector<FingerprintField>& fingerprint_fields();

// The names of the fields in which a and b differ ("size", "seed", ...), in table order. A field
// counts only where it applies to a or b (randperm: randperm_matters), so a job and its
// checkpoint, or ranks, on different PyTorch versions agree wherever their orders do.
std::vector<std::string> differing_fields(const Fingerprint& a, const Fingerprint& b);
// A field's value as text ("torch", "true", "-3", ...); `field` is one of the names above.
std::string field_value(const Fingerprint& f, std::string_view field);

// Empty when every rank's fingerprint (per_rank[r] is rank r's) is the same; otherwise one line
// per differing field naming the values and the ranks that hold them, e.g.
// "seed differs across ranks: 0 on ranks 0, 2, 3; 7 on rank 1". A field only where it applies
// to some rank's fingerprint, as in differing_fields.
std::string describe_disagreement(const std::vector<Fingerprint>& per_rank);

namespace detail {
// Throws std::invalid_argument("state: " + what), control characters escaped (state_codec.cc).
[[noreturn]] void state_error(const std::string& what);
}  // namespace detail

}  // namespace distsampler

#endif  // DISTSAMPLER_FINGERPRINT_H_
