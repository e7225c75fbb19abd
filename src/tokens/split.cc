// split.cc: the held-out splits of the token sources (mix.h: Split, SplitRule): a document's
// split by a hash of (source, document), fixed-point bounds.
#include <algorithm>
#include <cmath>
#include <string>

#include "distsampler/hash.h"
#include "distsampler/tokens/mix.h"
#include "mix_internal.h"

namespace distsampler {

using mix_detail::invalid;
using mix_detail::kQuotaTotal;
using mix_detail::number;

std::string_view to_string(Split split) { return detail::variant_name(kSplits, split); }

Split parse_split(std::string_view text, std::string_view parameter) {
  return detail::parse_variant(kSplits, text, parameter, "a subset").value;
}

SplitRule::SplitRule(std::vector<double> fractions, std::string_view parameter)
    : fractions_(std::move(fractions)) {
  const std::string name(parameter);
  if (fractions_.empty() || fractions_.size() > 3) {
    invalid(name + ": " + std::to_string(fractions_.size()) +
            " fractions given; 1 to 3 allowed (train, validation, test, as Megatron's "
            "split=\"969,30,1\")");
  }
  double sum = 0;
  for (size_t i = 0; i < fractions_.size(); ++i) {
    if (!std::isfinite(fractions_[i]) || fractions_[i] < 0) {
      invalid(name + "[" + std::to_string(i) + "] = " + number(fractions_[i]) +
              "; a fraction must be finite and >= 0");
    }
    sum += fractions_[i];
  }
  if (!(sum > 0) || !std::isfinite(sum)) {
    invalid(name + ": the fractions sum to " + number(sum) + "; their sum must be finite and > 0");
  }
  fractions_.resize(3, 0.0);
  // Cumulative bounds in units of 2^-32, rounded to nearest: exact 0 and 2^32 at the ends.
  double cumulative = 0;
  for (size_t i = 0; i < 2; ++i) {
    cumulative += fractions_[i];
    const double scaled = std::floor(std::ldexp(cumulative / sum, Mixer::kQuotaBits) + 0.5);
    bounds_[i] = std::min<uint64_t>(kQuotaTotal, static_cast<uint64_t>(scaled));
  }
}

Split SplitRule::of(uint32_t source, uint64_t document) const {
  const uint64_t h = hash_at(derive_key(0, source, kDomainTokensSplit), document) >> 32;
  return h < bounds_[0] ? Split::kTrain : h < bounds_[1] ? Split::kValidation : Split::kTest;
}

}  // namespace distsampler
