// feistel_structure.h: the structure-aware statistics (feistel_structure.cc) as the runs of
// feistel_structure_report.cc call them: a generator's rows at one size, and the weak-key search.
#ifndef DISTSAMPLER_QUALITY_FEISTEL_STRUCTURE_H_
#define DISTSAMPLER_QUALITY_FEISTEL_STRUCTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "stats.h"

namespace quality {

struct Gen {
  std::string name;
  Fill fill;
  bool weakened;  // expected to fail
  bool fixed;     // the same permutation for every seed (chosen round keys): one key only
};

// One statistic of one generator at one size.
struct Row {
  std::string statistic;
  double pooled = 0, worst_key = 0;  // both adjusted for the members (and keys)
  std::string where;                 // the member (and seed) of the worst
  bool has_worst_key = true;
};

// Every statistic of g on `keys` permutations of [0, n), seeds first_seed, first_seed + 1, ...
// (one key when g is fixed).
std::vector<Row> measure(const Gen& g, uint64_t n, int keys, uint64_t first_seed = 1);

// The largest |z| of the rows, pooled or worst key.
double worst_of(const std::vector<Row>& rows);

// The weak-key search: `keys` seeds of one generator at size n, the XOR members' collisions in
// both coordinates per key; the worst key as one deviate among keys * statistics.
struct Search {
  double worst = 0, adjusted = 0;
  uint64_t seed = 0;
  std::string member;
  int keys = 0, statistics = 0;
};

Search weak_key_search(const Gen& g, uint64_t n, int keys, uint64_t first_seed);

}  // namespace quality

#endif  // DISTSAMPLER_QUALITY_FEISTEL_STRUCTURE_H_
