// state.h: a sampler's checkpoint (configuration fingerprint, epoch, global samples consumed).
#ifndef DISTSAMPLER_STATE_H_
#define DISTSAMPLER_STATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "distsampler/fingerprint.h"  // Fingerprint, fingerprint(), differing_fields, ...
#include "distsampler/sampler.h"

namespace distsampler {

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
