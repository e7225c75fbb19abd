// Alias method: A. J. Walker, "An efficient method for generating discrete random variables with
// general distributions" (ACM TOMS 1977); construction after M. D. Vose, "A linear algorithm for
// generating random numbers with a given distribution" (IEEE TSE 1991). Randomness is
// counter-based (hash.h), never a generator that advances.
#include "distsampler/policies/weighted.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include "distsampler/hash.h"

namespace distsampler {
namespace {

constexpr uint64_t kAlways = ~uint64_t{0};

// A probability in [0, 1] as a threshold on a uniform 64-bit word.
uint64_t to_threshold(double p) {
  if (!(p < 1.0)) return kAlways;
  if (!(p > 0.0)) return 0;
  return static_cast<uint64_t>(std::ldexp(p, 64));  // p < 1, so below 2^64
}

}  // namespace

double detail::checked_weight_sum(const std::vector<double>& weights) {
  if (weights.empty())
    throw std::invalid_argument("weights is empty; allowed: at least one weight");
  double sum = 0;
  for (uint64_t i = 0; i < weights.size(); ++i) {
    const double w = weights[i];
    if (!std::isfinite(w) || w < 0) {
      throw std::invalid_argument("weights[" + std::to_string(i) + "] = " + std::to_string(w) +
                                  " is not allowed; allowed: finite and >= 0");
    }
    sum += w;
  }
  if (!(sum > 0)) {
    throw std::invalid_argument("weights are all zero; allowed: at least one weight > 0");
  }
  if (!std::isfinite(sum)) {
    throw std::invalid_argument("weights sum to infinity; allowed: a finite sum");
  }
  return sum;
}

AliasTable::AliasTable(const std::vector<double>& weights) {
  const uint64_t n = weights.size();
  const double sum = detail::checked_weight_sum(weights);
  // Vose: scaled[i] = w_i * n / sum; columns below 1 are topped up by one column above 1.
  std::vector<double> scaled(n);
  std::vector<uint64_t> small;
  std::vector<uint64_t> large;
  for (uint64_t i = 0; i < n; ++i) {
    scaled[i] = weights[i] / sum * static_cast<double>(n);
    (scaled[i] < 1.0 ? small : large).push_back(i);
  }
  threshold_.assign(n, kAlways);
  alias_.resize(n);
  for (uint64_t i = 0; i < n; ++i) alias_[i] = i;
  while (!small.empty() && !large.empty()) {
    const uint64_t s = small.back();
    small.pop_back();
    const uint64_t l = large.back();
    threshold_[s] = to_threshold(scaled[s]);
    alias_[s] = l;
    scaled[l] = (scaled[l] + scaled[s]) - 1.0;
    if (scaled[l] < 1.0) {
      large.pop_back();
      small.push_back(l);
    }
  }
  // Leftovers are 1 up to rounding: they keep their own column.
}

uint64_t AliasTable::draw(uint64_t u, uint64_t v) const {
  const uint64_t column = scale_to(u, alias_.size());
  const uint64_t t = threshold_[column];
  return (t == kAlways || v < t) ? column : alias_[column];
}

double AliasTable::probability(uint64_t index) const {
  const double n = static_cast<double>(alias_.size());
  const auto keep = [&](uint64_t c) {
    return threshold_[c] == kAlways ? 1.0 : std::ldexp(static_cast<double>(threshold_[c]), -64);
  };
  double p = keep(index) / n;
  for (uint64_t c = 0; c < alias_.size(); ++c) {
    if (c != index && alias_[c] == index) p += (1.0 - keep(c)) / n;
  }
  return p;
}

std::vector<double> class_balanced_weights(const std::vector<int64_t>& labels) {
  if (labels.empty()) throw std::invalid_argument("labels is empty; allowed: at least one label");
  std::map<int64_t, uint64_t> counts;
  for (int64_t label : labels) ++counts[label];
  std::vector<double> weights(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    weights[i] = 1.0 / static_cast<double>(counts[labels[i]]);
  }
  return weights;
}

WeightedSampler::WeightedSampler(const std::vector<double>& weights, const WeightedOptions& options)
    : options_(options),
      partition_{options.num_samples, options.world_size, options.rank, options.drop_last, 0} {
  partition_.validate();
  if (weights.size() != options.size) {
    throw std::invalid_argument("weights has length " + std::to_string(weights.size()) +
                                "; allowed: length == size = " + std::to_string(options.size));
  }
  table_ = AliasTable(weights);
}

uint64_t WeightedSampler::global(uint64_t epoch, uint64_t g) const {
  const uint64_t key = derive_key(options_.seed.bits(), epoch, kDomainWeighted);
  return table_.draw(hash_at(key, 2 * g), hash_at(key, 2 * g + 1));
}

void WeightedSampler::fill(uint64_t epoch, uint64_t first, uint64_t count, uint64_t* out) const {
  const uint64_t n = num_samples();
  if (first > n || count > n - first) {
    throw std::out_of_range(
        "window [" + std::to_string(first) + ", " + std::to_string(first) + " + " +
        std::to_string(count) +
        ") is out of range; allowed: start + count <= num_samples = " + std::to_string(n));
  }
  const uint64_t key = derive_key(options_.seed.bits(), epoch, kDomainWeighted);
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t g = partition_.global_position(first + j);
    out[j] = table_.draw(hash_at(key, 2 * g), hash_at(key, 2 * g + 1));
  }
}

void WeightedSampler::fill_global(uint64_t epoch, uint64_t first, uint64_t stride, uint64_t count,
                                  uint64_t* out) const {
  const uint64_t key = derive_key(options_.seed.bits(), epoch, kDomainWeighted);
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t g = first + j * stride;
    out[j] = table_.draw(hash_at(key, 2 * g), hash_at(key, 2 * g + 1));
  }
}

}  // namespace distsampler
