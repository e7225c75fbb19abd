// state.h: a sampler's checkpoint (configuration fingerprint, epoch, global samples consumed).
#ifndef DISTSAMPLER_STATE_H_
#define DISTSAMPLER_STATE_H_

#include <cstddef>
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
  // means nothing). 1 is also what states written before version 2 existed mean: they carry none.
  int feistel_version = 1;

  friend bool operator==(const Fingerprint& a, const Fingerprint& b);
  friend bool operator!=(const Fingerprint& a, const Fingerprint& b) { return !(a == b); }
};

Fingerprint fingerprint(const SamplerOptions& options);

// Whether the randperm variant changes the order this fingerprint describes: the torch order,
// shuffled, of at least kRandpermInsideOutThreshold samples (below it the variants agree).
bool randperm_matters(const Fingerprint& f);

// The names of the fields in which a and b differ ("size", "seed", ...), in declaration order.
// randperm counts only where it changes the order of a or b (randperm_matters), so a job and
// its checkpoint, or ranks, on different PyTorch versions agree wherever their orders do.
std::vector<std::string> differing_fields(const Fingerprint& a, const Fingerprint& b);
// A field's value as text ("torch", "true", "-3", ...); `field` is one of the names above.
std::string field_value(const Fingerprint& f, std::string_view field);

// Empty when every rank's fingerprint (per_rank[r] is rank r's) is the same; otherwise one line
// per differing field naming the values and the ranks that hold them, e.g.
// "seed differs across ranks: 0 on ranks 0, 2, 3; 7 on rank 1". randperm as in
// differing_fields: only where it changes some rank's order.
std::string describe_disagreement(const std::vector<Fingerprint>& per_rank);

// A checkpoint: the job has consumed global positions [0, consumed) of epoch `epoch`'s order
// (partition.h). A consumed count at or past the epoch's end (padding included) means the epoch
// is complete.
struct SamplerState {
  Fingerprint config;
  uint64_t epoch = 0;
  uint64_t consumed = 0;

  friend bool operator==(const SamplerState& a, const SamplerState& b) {
    return a.config == b.config && a.epoch == b.epoch && a.consumed == b.consumed;
  }
  friend bool operator!=(const SamplerState& a, const SamplerState& b) { return !(a == b); }
};

// The byte format, version 1: 60 bytes, little-endian, fixed layout (see docs/design.md), ending
// in the CRC-32 of the 56 bytes before it. The uneven flag (flags bit 3, JSON key "uneven"
// written only when true) came later without a new version: a state with uneven = false is
// encoded exactly as before, so every state written earlier decodes unchanged and older builds
// read it; one with uneven = true is rejected by older builds (unknown flag bit or key), never
// misread. The Feistel version (byte 20, JSON key "feistel_version") came the same way: 0 and an
// absent key mean version 1, so v1 states are encoded as before and decode as version 1; a
// version-2 state (byte 20 = 2, "feistel_version": 2) is rejected by older builds (nonzero
// reserved byte, unknown key), never resumed on the version-1 order.
inline constexpr uint16_t kStateFormatVersion = 1;
inline constexpr size_t kStateBytes = 60;

// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, as zlib.crc32): catches every error
// confined to 32 consecutive bits, so every single flipped byte.
uint32_t crc32(std::string_view bytes);

// Serialization. encode_state requires a state whose fingerprint is normalized (fingerprint()
// makes it so) and throws std::invalid_argument otherwise. decode_state and state_from_json are
// pure: on a truncated, corrupt (checksum), foreign-format, foreign-algorithm or otherwise
// invalid input they throw std::invalid_argument saying what is wrong, and there is nothing to
// change. Both formats carry the same checksum (the CRC-32 of the byte encoding);
// decode_state(encode_state(s)) == s, and decode_state accepts only canonical bytes, so
// encode_state(decode_state(b)) == b. The JSON reader takes any key order and whitespace.
std::string encode_state(const SamplerState& state);
SamplerState decode_state(std::string_view bytes);
std::string state_to_json(const SamplerState& state);
SamplerState state_from_json(std::string_view json);

// The state of a job running `sampler`'s configuration that has consumed `consumed` global
// positions of `epoch`.
SamplerState make_state(const DistributedSampler& sampler, uint64_t epoch, uint64_t consumed);

// The global positions consumed once this rank's view has handed out `taken` samples in a
// synchronous job (every rank took as many): view.partition().start + taken * world_size. Throws
// std::out_of_range when taken > view.size().
uint64_t consumed_after(const RankView& view, uint64_t taken);

// This rank's view of the rest of the checkpointed epoch, on this sampler's world size and rank
// (which may differ from the job that wrote the state): sampler.epoch(state.epoch,
// state.consumed), O(1) for the Feistel order. Throws std::invalid_argument naming every field
// in which the state's fingerprint differs from the sampler's.
RankView resume(const DistributedSampler& sampler, const SamplerState& state);

}  // namespace distsampler

#endif  // DISTSAMPLER_STATE_H_
