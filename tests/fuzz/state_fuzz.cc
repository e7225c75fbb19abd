// libFuzzer target for the state decoders (state.h): on any input, decode_state and
// state_from_json either throw std::invalid_argument or return a state that re-encodes to the
// same bytes (decode_state accepts canonical encodings only) and round-trips through the other
// format. Anything else (a crash, another exception, a sanitizer report) is a finding.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "distsampler/state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace distsampler;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    const SamplerState s = decode_state(in);
    if (encode_state(s) != in) std::abort();
    if (state_from_json(state_to_json(s)) != s) std::abort();
  } catch (const std::invalid_argument&) {
  }
  try {
    const SamplerState s = state_from_json(in);
    if (decode_state(encode_state(s)) != s) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
