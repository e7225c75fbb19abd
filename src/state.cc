// Checkpoint state (state.h): a sampler's state, the consumed rule and resuming. The fingerprint
// is fingerprint.cc's, the byte and JSON codecs state_codec.cc's.
#include "distsampler/state.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "distsampler/pass.h"

namespace distsampler {

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
