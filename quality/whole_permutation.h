// whole_permutation.h: the battery's classic statistics (whole_permutation.cc), which look at a
// permutation as a whole, over the four generators side by side.
#ifndef DISTSAMPLER_QUALITY_WHOLE_PERMUTATION_H_
#define DISTSAMPLER_QUALITY_WHOLE_PERMUTATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace quality {

// A permutation of [0, n) from (seed, epoch).
struct Generator {
  const char* name;
  std::function<void(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t* out)> fill;
};

// Feistel version 1, version 2, the torch order and the reference shuffle, in that order.
std::vector<Generator> generators();
constexpr int kGenerators = 4;
constexpr int kV1 = 0, kV2 = 1, kUniform = 3;

struct SizePlan {
  uint64_t n;
  uint64_t trials;          // permutations per generator (for n <= 10 also the exhaustive draws)
  uint64_t related_trials;  // of which this many also get the related-key orders
};

// One statistic's z-score per generator.
struct Result {
  std::string statistic;
  double z[kGenerators];
};

uint64_t factorial(uint64_t n);

// Runs every statistic of one size for one generator (trial t: seed t + 1, epoch 0); returns
// rows with z in column 0 and the fraction of odd permutations in *p_odd.
std::vector<Result> run_size(const Generator& g, const SizePlan& plan, double* p_odd);

// Whether the serial statistics' exact variance equals an enumeration of every permutation of
// n = 3..7 at every lag (the short mode checks it).
bool serial_variance_matches_enumeration();

}  // namespace quality

#endif  // DISTSAMPLER_QUALITY_WHOLE_PERMUTATION_H_
