// State dicts (state_dict.h): the checkpoint every Python sampler's state_dict() returns, built and
// checked here so that the package holds no format, checksum or field list of its own (the value
// they are made of, DictValue, and its texts: dict_value.cc).
#include "distsampler/state_dict.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/fingerprint.h"

namespace distsampler {
namespace {

using Type = DictValue::Type;

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// The entry `key` of a dict known to hold it.
const DictValue& at(const DictValue& dict, std::string_view key) { return *dict.find(key); }

bool is_int(const DictValue& v) { return v.type == Type::kInt; }

// An int entry in [minimum, 2^64 - 1], else the message "state <key> = <repr> is out of range;
// allowed: an int in [<minimum>, 2^64 - 1]".
uint64_t checked_u64(const DictValue& state, const std::string& key, uint64_t minimum) {
  const DictValue& v = at(state, key);
  uint64_t out = 0;
  if (!v.as_u64(out) || out < minimum) {
    fail("state " + key + " = " + python_repr(v) + " is out of range; allowed: an int in [" +
         std::to_string(minimum) + ", 2^64 - 1]");
  }
  return out;
}

std::vector<std::string> missing_keys(const DictValue& state, const std::vector<std::string>& keys) {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (state.find(key) == nullptr) missing.push_back(key);
  }
  return missing;
}

void require_dict(const DictValue& state) {
  if (state.type != Type::kDict) {
    fail("state must be a dict from state_dict(), not " + state.type_name);
  }
}

void require_keys(const DictValue& state, const std::vector<std::string>& keys) {
  const std::vector<std::string> missing = missing_keys(state, keys);
  if (!missing.empty()) fail("state is missing " + join_names(missing) + "; expected a state_dict()");
}

}  // namespace

// ---- Policy checkpoints ---------------------------------------------------------------------------

namespace {

// The entries the checksum covers: everything but the checksum.
DictValue policy_fields(const PolicyCheckpoint& c) {
  DictValue fields = DictValue::dict();
  fields.set("version", DictValue::integer(kPolicyStateVersion))
      .set("kind", DictValue::string(c.kind))
      .set("epoch", DictValue::integer(c.epoch))
      .set("consumed", DictValue::integer(c.consumed))
      .set("world_size", DictValue::integer(c.world_size))
      .set("config", c.config);
  if (c.position.type != DictValue::Type::kNone) fields.set("position", c.position);
  return fields;
}

}  // namespace

DictValue policy_state_dict(const PolicyCheckpoint& c) {
  DictValue state = policy_fields(c);
  state.set("checksum", DictValue::integer(crc32(canonical_json(state))));
  return state;
}

PolicyCheckpoint parse_policy_state(const DictValue& state, std::string_view kind,
                                    const DictValue& config,
                                    const std::vector<std::string>& loose) {
  const std::string mine(kind);
  require_dict(state);
  if (state.find("kind") == nullptr && state.find("state") != nullptr) {
    fail("state is a distsampler.torch.DistributedSampler's state_dict() (no 'kind'), not a " +
         mine + "'s");
  }
  require_keys(state, {"version", "kind", "epoch", "consumed", "world_size", "config", "checksum"});
  const DictValue& version = at(state, "version");
  if (!is_int(version) || version.text != std::to_string(kPolicyStateVersion)) {
    fail("state version = " + python_repr(version) + " is not supported; allowed: " +
         std::to_string(kPolicyStateVersion));
  }
  DictValue fields = DictValue::dict();
  for (const auto& entry : state.entries) {
    if (entry.first != "checksum") fields.set(entry.first, entry.second);
  }
  const DictValue& checksum = at(state, "checksum");
  std::string computed;
  try {
    computed = std::to_string(crc32(canonical_json(fields)));
  } catch (const std::invalid_argument&) {
    computed.clear();  // an entry JSON cannot hold was never written by state_dict()
  }
  if (!is_int(checksum) || checksum.text != computed) {
    fail("state checksum = " + python_repr(checksum) +
         " does not match its contents: the state was edited or is corrupt");
  }
  const DictValue& their_kind = at(state, "kind");
  if (their_kind.type != Type::kString || their_kind.text != mine) {
    fail("state kind = " + python_repr(their_kind) + " but this sampler is a " + mine);
  }
  PolicyCheckpoint out;
  out.kind = mine;
  out.epoch = checked_u64(state, "epoch", 0);
  out.consumed = checked_u64(state, "consumed", 0);
  out.world_size = checked_u64(state, "world_size", 1);
  const DictValue& theirs = at(state, "config");
  std::vector<std::string> keys;
  for (const auto* side : {&config, &theirs}) {
    for (const auto& entry : side->entries) keys.push_back(entry.first);
  }
  std::vector<std::string> sorted;  // the union, sorted, once each
  for (const std::string& key : keys) {
    size_t i = 0;
    while (i < sorted.size() && sorted[i] < key) ++i;
    if (i == sorted.size() || sorted[i] != key) sorted.insert(sorted.begin() + i, key);
  }
  std::string differences;
  const DictValue none;
  for (const std::string& key : sorted) {
    const DictValue* a = theirs.find(key);
    const DictValue* b = config.find(key);
    if (a != nullptr && b != nullptr && same_value(*a, *b)) continue;
    if (a != nullptr && b != nullptr && std::find(loose.begin(), loose.end(), key) != loose.end()) {
      continue;
    }
    differences += (differences.empty() ? "" : "; ") + std::string("state ") + key + " = " +
                   python_repr(a ? *a : none) + " but this sampler's " + key + " = " +
                   python_repr(b ? *b : none);
  }
  if (!differences.empty()) {
    fail("state does not match this sampler's configuration: " + differences);
  }
  out.config = config;
  if (const DictValue* position = state.find("position")) out.position = *position;
  return out;
}

// ---- The plain sampler's state dict ---------------------------------------------------------------

DictValue field_dict_value(const FingerprintField& row, const Fingerprint& f) {
  const std::string text = row.value(f);
  switch (row.kind) {
    case FieldKind::kUnsigned:
    case FieldKind::kInteger:
      return DictValue::integer_text(text);
    case FieldKind::kBool:
      return DictValue::boolean(text == "true");
    case FieldKind::kName:
      break;
  }
  return DictValue::string(text);
}

DictValue sampler_state_dict(const SamplerState& state, uint64_t world_size) {
  DictValue out = DictValue::dict();
  out.set("version", DictValue::integer(kSamplerStateDictVersion))
      .set("epoch", DictValue::integer(state.epoch))
      .set("consumed", DictValue::integer(state.consumed))
      .set("world_size", DictValue::integer(world_size));
  for (const FingerprintField& row : fingerprint_fields()) {
    out.set(row.name, field_dict_value(row, state.config));
  }
  out.set("state", DictValue::string(state_to_json(state)));
  return out;
}

namespace {

bool after_dict_version_2(const FingerprintField& row) {
  return std::string_view(row.name) == "feistel_version";
}

void check_world_size(const DictValue& state) {
  const DictValue& w = at(state, "world_size");
  uint64_t value = 0;
  if (!w.as_u64(value) || value < 1) {
    fail("state world_size = " + python_repr(w) + " is not a positive int");
  }
}

SamplerState from_version_2(const DictValue& state) {
  // Every field but those that came after version-2 dicts were first written (dicts of
  // earlier releases lack them; the checksummed state decides).
  std::vector<std::string> required = {"state", "epoch", "consumed", "world_size"};
  for (const FingerprintField& row : fingerprint_fields()) {
    if (!after_dict_version_2(row)) required.emplace_back(row.name);
  }
  require_keys(state, required);
  const DictValue& text = at(state, "state");
  if (text.type != Type::kString) {
    fail("state state = " + python_repr(text) + " is not the state's JSON text");
  }
  const SamplerState s = state_from_json(text.text);
  std::vector<std::pair<std::string, DictValue>> expected = {
      {"epoch", DictValue::integer(s.epoch)}, {"consumed", DictValue::integer(s.consumed)}};
  for (const FingerprintField& row : fingerprint_fields()) {
    if (after_dict_version_2(row) && state.find(row.name) == nullptr) continue;
    expected.emplace_back(row.name, field_dict_value(row, s.config));
  }
  for (const auto& [key, value] : expected) {
    const DictValue& given = at(state, key);
    if (given.type_name != value.type_name) {
      fail("state " + key + " = " + python_repr(given) + " has type " + given.type_name +
           "; allowed: " + value.type_name + ", as state_dict() writes it");
    }
    if (!same_value(given, value)) {
      fail("state " + key + " = " + python_repr(given) + " disagrees with the checksummed state's " +
           key + " = " + python_repr(value) +
           " (the 'state' entry): the state was edited or is corrupt");
    }
  }
  check_world_size(state);
  return s;
}

// Version 1 (issue 3's: no checksum, the configuration as entries) for `sampler`.
SamplerState from_version_1(const DictValue& state, const DistributedSampler& sampler) {
  const SamplerOptions& o = sampler.options();
  require_keys(state, {"epoch", "consumed", "size", "world_size", "seed", "shuffle", "drop_last",
                       "order", "randperm"});
  const std::vector<std::pair<std::string, DictValue>> mine = {
      {"size", DictValue::integer(o.size)},
      {"seed", DictValue::integer_text(o.seed.to_string())},
      {"shuffle", DictValue::boolean(o.shuffle)},
      {"drop_last", DictValue::boolean(o.drop_last)},
      {"order", DictValue::string(std::string(to_string(o.order)))},
      {"randperm",
       DictValue::string(std::string(to_string(o.randperm)))}};
  for (const auto& [key, value] : mine) {
    const DictValue& given = at(state, key);
    if (given.type_name != value.type_name || !same_value(given, value)) {
      fail("state " + key + " = " + python_repr(given) + " does not match this sampler's " + key +
           " = " + python_repr(value));
    }
  }
  const Fingerprint here = fingerprint(o);
  for (const FingerprintField& row : fingerprint_fields()) {
    // A version-1 state was written before every field with an "absent" value existed: it means
    // that value (feistel version 1), which the sampler must have.
    if (row.absent == nullptr || row.value(here) == row.absent) continue;
    if (std::string(row.name) == "feistel_version") {
      fail("state order = 'feistel' is a version-1 state (written before feistel_version 2 "
           "existed) but this sampler's feistel_version = " + row.value(here) +
           "; allowed: feistel_version=" + row.absent);
    }
  }
  check_world_size(state);
  uint64_t world_size = 0;
  at(state, "world_size").as_u64(world_size);
  const uint64_t epoch = checked_u64(state, "epoch", 0);
  const DictValue& consumed_value = at(state, "consumed");
  const uint64_t pad = world_size - 1;
  const uint64_t limit = o.drop_last ? o.size : (o.size > UINT64_MAX - pad ? UINT64_MAX : o.size + pad);
  uint64_t consumed = 0;
  if (!consumed_value.as_u64(consumed) || consumed > limit) {
    fail("state consumed = " + python_repr(consumed_value) + " is out of range; allowed: an int in [0, " +
         std::to_string(limit) + "] for size = " + std::to_string(o.size) +
         ", world_size = " + std::to_string(world_size));
  }
  return make_state(sampler, epoch, consumed);
}

}  // namespace

SamplerState parse_sampler_state(const DictValue& state, const DistributedSampler& sampler) {
  require_dict(state);
  const DictValue* kind = state.find("kind");
  if (kind != nullptr && kind->type == Type::kString) {
    fail("state kind = " + python_repr(*kind) + ": a " + kind->text +
         "'s state_dict(), not a DistributedSampler's");
  }
  const DictValue* version = state.find("version");
  const std::string text = version != nullptr && is_int(*version) ? version->text : "";
  SamplerState s;
  if (text == "1") {
    s = from_version_1(state, sampler);
  } else if (text == std::to_string(kSamplerStateDictVersion)) {
    s = from_version_2(state);
  } else {
    fail("state version = " + (version ? python_repr(*version) : std::string("None")) +
         " is not supported; allowed: 1, " + std::to_string(kSamplerStateDictVersion));
  }
  const Fingerprint here = fingerprint(sampler.options());
  const std::vector<std::string> fields = differing_fields(s.config, here);
  if (!fields.empty()) {
    std::string message = "state does not match this sampler's configuration: ";
    for (size_t i = 0; i < fields.size(); ++i) {
      message += (i ? "; " : "") + std::string("state ") + fields[i] + " = " +
                 field_value(s.config, fields[i]) + " but this sampler's " + fields[i] + " = " +
                 field_value(here, fields[i]);
    }
    fail(message);
  }
  return s;
}

// ---- Worker iterators and the DataLoader ---------------------------------------------------------

namespace {

// repr(value) cut at 200 characters, as f"{value!r:.200}".
std::string short_repr(const DictValue& value) { return python_repr(value).substr(0, 200); }

bool is_version(const DictValue& state, uint64_t version) {
  const DictValue* v = state.find("version");
  return v != nullptr && ((is_int(*v) && v->text == std::to_string(version)) ||
                          (v->type == Type::kBool && v->flag && version == 1));
}

}  // namespace

DictValue worker_state_dict(const WorkerPosition& p, const DictValue& where) {
  DictValue state = DictValue::dict();
  state.set("version", DictValue::integer(kWorkerStateVersion))
      .set("epoch", DictValue::integer(p.epoch))
      .set("start", DictValue::integer(p.start))
      .set("yielded", DictValue::integer(p.yielded));
  for (const auto& [key, value] : where.entries) state.set(key, value);
  return state;
}

WorkerPosition parse_worker_state(const DictValue& state, const DictValue& where) {
  if (state.type != Type::kDict || !is_version(state, kWorkerStateVersion)) {
    fail("iterator state must be a DistributedIterableDataset iterator's state_dict() of version " +
         std::to_string(kWorkerStateVersion) + ", not " + short_repr(state));
  }
  const DictValue none;
  for (const auto& [key, mine] : where.entries) {
    const DictValue* theirs = state.find(key);
    if (theirs == nullptr || !same_value(*theirs, mine)) {
      fail("iterator state " + key + " = " + python_repr(theirs ? *theirs : none) +
           " but this worker's " + key + " = " + python_repr(mine) +
           ": a worker's state resumes on the same world size, rank and num_workers "
           "(distsampler.data.DataLoader resumes on any world size)");
    }
  }
  uint64_t values[3] = {0, 0, 0};
  const char* keys[3] = {"epoch", "start", "yielded"};
  for (int i = 0; i < 3; ++i) {
    const DictValue* v = state.find(keys[i]);
    if (v == nullptr || !v->as_u64(values[i])) {
      fail(std::string("iterator state ") + keys[i] + " = " + python_repr(v ? *v : none) +
           " is out of range; allowed: an int in [0, 2^64 - 1]");
    }
  }
  return WorkerPosition{values[0], values[1], values[2]};
}

DictValue loader_state_dict(uint64_t batches) {
  DictValue state = DictValue::dict();
  state.set("version", DictValue::integer(kLoaderStateVersion))
      .set("batches", DictValue::integer(batches));
  return state;
}

uint64_t parse_loader_state(const DictValue& state, std::string_view entry) {
  if (state.type != Type::kDict || !is_version(state, kLoaderStateVersion)) {
    fail("state must be a DataLoader.state_dict() of version " +
         std::to_string(kLoaderStateVersion) + ", not " + short_repr(state));
  }
  const DictValue* batches = state.find("batches");
  uint64_t out = 0;
  if (batches == nullptr || !batches->as_u64(out)) {
    fail("state batches = " + (batches ? python_repr(*batches) : std::string("None")) +
         " is out of range; allowed: an int >= 0");
  }
  if (entry == "dataset" && state.find(entry) == nullptr) {
    fail("state has no 'dataset' entry: it was not saved by a DataLoader over a "
         "DistributedIterableDataset");
  }
  if (entry == "sampler" && state.find(entry) == nullptr) {
    fail("state has no 'sampler' entry: it was saved by a DataLoader whose sampler has no state");
  }
  return out;
}

// ---- What the ranks gathered -----------------------------------------------------------------

std::string describe_by_rank(const std::vector<DictValue>& per_rank) {
  std::set<std::string> keys;
  for (const DictValue& values : per_rank) {
    for (const auto& entry : values.entries) keys.insert(entry.first);
  }
  std::string out;
  for (const std::string& key : keys) {
    std::vector<std::pair<std::string, std::vector<size_t>>> groups;  // first seen first
    for (size_t rank = 0; rank < per_rank.size(); ++rank) {
      const DictValue* value = per_rank[rank].find(key);
      const std::string text = value != nullptr ? python_repr(*value) : "None";
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&](const auto& g) { return g.first == text; });
      if (group == groups.end()) group = groups.insert(groups.end(), {text, {}});
      group->second.push_back(rank);
    }
    if (groups.size() < 2) continue;
    out += (out.empty() ? "" : "; ") + key + " = ";
    for (size_t g = 0; g < groups.size(); ++g) {
      out += (g ? "; " : "") + groups[g].first + " on rank" +
             (groups[g].second.size() > 1 ? "s " : " ");
      for (size_t i = 0; i < groups[g].second.size(); ++i) {
        out += (i ? ", " : "") + std::to_string(groups[g].second[i]);
      }
    }
  }
  return out;
}

std::string describe_collectives(const std::vector<DictValue>& gathered, std::string_view call) {
  std::vector<DictValue> calls;
  bool differ = false;
  for (const DictValue& theirs : gathered) {
    const DictValue* their_call = theirs.find("distsampler_call");
    const bool named = their_call != nullptr && their_call->type == DictValue::Type::kString &&
                       !their_call->text.empty();
    differ = differ || !named || their_call->text != call;
    calls.push_back(DictValue::dict().set(
        "call", DictValue::string(named ? their_call->text : "another collective")));
  }
  if (!differ) return "";
  return "the ranks are in different collectives (" + describe_by_rank(calls) +
         "): every rank must call " + std::string(call) + " (and start its passes) in the same "
         "order";
}

std::string describe_checkpoints(const std::vector<DictValue>& per_rank) {
  std::string failed;
  std::vector<DictValue> loaded;
  for (size_t rank = 0; rank < per_rank.size(); ++rank) {
    const DictValue* error = per_rank[rank].find("error");
    if (error != nullptr && error->type == DictValue::Type::kString && !error->text.empty()) {
      failed += (failed.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) +
                ": " + error->text;
    }
    DictValue fields = DictValue::dict();
    for (const auto& [key, value] : per_rank[rank].entries) {
      if (key != "error") fields.set(key, value);
    }
    loaded.push_back(std::move(fields));
  }
  if (!failed.empty()) {
    return "the checkpoint could not be loaded on every rank, refusing to resume: " + failed;
  }
  const std::string differ = describe_by_rank(loaded);
  return differ.empty() ? "" : "the ranks loaded different checkpoints, refusing to resume: " +
                                   differ;
}

}  // namespace distsampler
