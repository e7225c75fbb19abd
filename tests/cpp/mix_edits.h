// mix_edits.h: the test files' builders of mix.h's MixEdits (a weight change or ramp, an append, a
// skip list), labelled as the CLI labels its flags.
#ifndef DISTSAMPLER_TESTS_MIX_EDITS_H_
#define DISTSAMPLER_TESTS_MIX_EDITS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/tokens/mix.h"

namespace distsampler::testing_edits {

inline MixEdit change(uint64_t step, std::vector<double> weights, uint64_t until = 0) {
  MixEdit e;
  e.step = step;
  e.until = std::max(step, until);
  e.weights = std::move(weights);
  e.label = "change@" + std::to_string(step);
  return e;
}

inline MixEdit append(uint64_t step, uint32_t source, std::shared_ptr<const DocumentLengths> documents) {
  MixEdit e;
  e.kind = MixEdit::Kind::kAppend;
  e.step = step;
  e.source = source;
  e.documents = std::move(documents);
  e.label = "append@" + std::to_string(step);
  return e;
}

inline MixEdit skip(uint64_t step, std::vector<std::pair<uint32_t, uint64_t>> documents) {
  MixEdit e;
  e.kind = MixEdit::Kind::kSkip;
  e.step = step;
  e.skip = std::move(documents);
  e.label = "skip@" + std::to_string(step);
  return e;
}

}  // namespace distsampler::testing_edits

#endif  // DISTSAMPLER_TESTS_MIX_EDITS_H_
