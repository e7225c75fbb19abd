// state_dict.h: every sampler's checkpoint as the plain dict its Python state_dict() returns, one
// codec for every kind (the plain sampler's fingerprint, each policy's configuration).
#ifndef DISTSAMPLER_STATE_DICT_H_
#define DISTSAMPLER_STATE_DICT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distsampler/state.h"

namespace distsampler {

// A value of a state dict as Python hands it over (the binding translates types only): None, a
// bool, an int of any size (as decimal text), a float, a str, a list, a dict (insertion order), or
// anything else (its repr). `type_name` is Python's type(value).__name__, for the messages.
struct DictValue {
  enum class Type { kNone, kBool, kInt, kFloat, kString, kList, kDict, kOther };
  Type type = Type::kNone;
  bool flag = false;      // kBool
  std::string text;       // kInt: decimal digits (with '-'); kString: the text; kOther: its repr
  std::string type_name = "NoneType";
  double number = 0;      // kFloat
  std::vector<DictValue> items;                            // kList
  std::vector<std::pair<std::string, DictValue>> entries;  // kDict

  static DictValue none() { return DictValue{}; }
  static DictValue boolean(bool value);
  static DictValue integer(uint64_t value);
  static DictValue integer_text(std::string decimal);  // a signed or unsigned decimal
  static DictValue real(double value);
  static DictValue string(std::string value);
  static DictValue list(std::vector<DictValue> items);
  static DictValue dict();
  static DictValue other(std::string repr, std::string type_name);

  // kDict: appends (or replaces) key; returns *this for chaining.
  DictValue& set(const std::string& key, DictValue value);
  // kDict: the value of key, or nullptr (also for any other type).
  const DictValue* find(std::string_view key) const;
  // kInt within [0, 2^64 - 1]: the value; otherwise false.
  bool as_u64(uint64_t& out) const;
};

// Python's repr() of the value: None, True, 3, 0.25, 'torch', [1, 2], {'a': 1}.
std::string python_repr(const DictValue& value);
// json.dumps(value, sort_keys=True, separators=(",", ":")): floats as Python writes them, strings
// ASCII with \u escapes. Throws std::invalid_argument for a value JSON cannot hold (kOther).
std::string canonical_json(const DictValue& value);
// Whether two values are equal as their canonical JSON (kOther by repr).
bool same_value(const DictValue& a, const DictValue& b);

// ---- The policy samplers' checkpoint (policy.h's Policy) -------------------------------------
//
// {"version": 1, "kind", "epoch", "consumed", "world_size", "config", "checksum"}: the job of
// `world_size` ranks consumed global positions [0, consumed) of `epoch`'s stream; `config` is
// what the loading sampler must match; the checksum is the CRC-32 of the canonical JSON of the
// other entries (the format written by every release since the policies came).
inline constexpr uint64_t kPolicyStateVersion = 1;

struct PolicyCheckpoint {
  std::string kind;  // the sampler's class, e.g. "WeightedDistributedSampler"
  DictValue config;  // a kDict
  uint64_t epoch = 0;
  uint64_t consumed = 0;
  uint64_t world_size = 1;
  // Where in its stream a sampler stands beyond `consumed`, when that is more than one count (a
  // token plan's per-source cursors); written as "position" when not None, covered by the
  // checksum like every entry.
  DictValue position;
};

DictValue policy_state_dict(const PolicyCheckpoint& checkpoint);
// The checkpoint a state dict holds for a sampler of `kind` configured as `config`; throws
// std::invalid_argument naming the entry (malformed, edited, foreign kind or configuration).
// `loose`: configuration keys that need not match, because they do not change this sampler's
// stream (the randperm variant of an order it does not change: states written under another
// PyTorch still load).
PolicyCheckpoint parse_policy_state(const DictValue& state, std::string_view kind,
                                    const DictValue& config,
                                    const std::vector<std::string>& loose = {});

// ---- The plain sampler's checkpoint (distsampler.torch.DistributedSampler) -------------------
//
// Version 2: {"version": 2, "epoch", "consumed", "world_size", the fingerprint's fields
// (readable copies), "state": state_to_json(...)}; "state" decides, the copies must agree.
// Version 1 (no checksum; its configuration entries are compared with the sampler's) still loads.
inline constexpr uint64_t kSamplerStateDictVersion = 2;

DictValue sampler_state_dict(const SamplerState& state, uint64_t world_size);
// The state a dict of either version holds for `sampler` (its configuration must match); throws
// std::invalid_argument naming the entry.
SamplerState parse_sampler_state(const DictValue& state, const DistributedSampler& sampler);

// ---- The iterable adapter's worker iterators, and distsampler.data.DataLoader -------------------
//
// A worker iterator's state (torchdata's StatefulDataLoader keeps one per worker): {"version": 1,
// "epoch", "start", "yielded"} and `where` (world size, rank, worker, workers, configuration),
// which the loading worker must match.
inline constexpr uint64_t kWorkerStateVersion = 1;
struct WorkerPosition {
  uint64_t epoch = 0;
  uint64_t start = 0;
  uint64_t yielded = 0;
};
DictValue worker_state_dict(const WorkerPosition& position, const DictValue& where);
WorkerPosition parse_worker_state(const DictValue& state, const DictValue& where);

// The DataLoader's state: {"version": 1, "batches"} plus its source's state under `entry`
// ("sampler" or "dataset", added by the loader). parse_loader_state returns the batches and
// checks that `entry` (when not empty) is there.
inline constexpr uint64_t kLoaderStateVersion = 1;
DictValue loader_state_dict(uint64_t batches);
uint64_t parse_loader_state(const DictValue& state, std::string_view entry);

// ---- What the ranks gathered in the package's collectives (load_state_dict's agreement) -------
//
// One clause per key whose values differ across the ranks' dicts, keys sorted, values as Python's
// repr (a missing key is None): "epoch = 3 on ranks 0, 2; 4 on rank 1"; "" when all agree.
std::string describe_by_rank(const std::vector<DictValue>& per_rank);
// What each rank sent to a collective ({"distsampler_call": its call, "payload": ...}): "" when
// every rank is in `call`, else the one-line message naming the ranks in another collective.
std::string describe_collectives(const std::vector<DictValue>& gathered, std::string_view call);
// The checkpoints the ranks loaded ({"error": None or its text, "epoch", "consumed",
// "configuration"}): "" when every rank loaded the same one, else the one-line message naming the
// ranks that failed, or the fields that differ and their ranks.
std::string describe_checkpoints(const std::vector<DictValue>& per_rank);

// The Python type and value of a fingerprint field: an int, a bool or a str.
DictValue field_dict_value(const FingerprintField& row, const Fingerprint& f);

}  // namespace distsampler

#endif  // DISTSAMPLER_STATE_DICT_H_
