// mix_internal.h: what the mixer's files share (mix.cc: configuration and edits; wf2q.cc: the
// draw and its state; split.cc: the held-out splits): exact wide integers, the 2^32 quota total,
// the error every check raises and how a number is written in its message.
#ifndef DISTSAMPLER_TOKENS_MIX_INTERNAL_H_
#define DISTSAMPLER_TOKENS_MIX_INTERNAL_H_

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "distsampler/tokens/mix.h"

namespace distsampler {
namespace mix_detail {

using Wide = unsigned __int128;
using SignedWide = __int128;
constexpr uint64_t kQuotaTotal = uint64_t{1} << Mixer::kQuotaBits;

[[noreturn]] inline void invalid(const std::string& message) {
  throw std::invalid_argument(message);
}

// A double as the user's value, exactly (17 significant digits).
inline std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

}  // namespace mix_detail
}  // namespace distsampler

#endif  // DISTSAMPLER_TOKENS_MIX_INTERNAL_H_
