// feistel_structure_report.h: the battery's statistics that know the Feistel construction
// (issue 20, feistel_structure.cc), as quality's command line runs them
// (feistel_structure_report.cc).
#ifndef DISTSAMPLER_QUALITY_FEISTEL_STRUCTURE_REPORT_H_
#define DISTSAMPLER_QUALITY_FEISTEL_STRUCTURE_REPORT_H_

#include <cstdint>
#include <string>

#include "stats.h"

namespace quality {

// The heading of the structure-aware section of docs/quality.md (its markdown starts with it).
inline constexpr char kStructureHeading[] = "## Structure-aware statistics";

struct StructureReport {
  std::string text;      // the console tables
  std::string markdown;  // the section of docs/quality.md
  // The default order's and the reference's worst |z| over every statistic and size (keys and
  // members adjusted as the tables say), and whether every weakened network failed some
  // statistic at every size it ran, and every statistic caught some weakened network.
  double worst_default = 0, worst_reference = 0;
  bool weakened_caught = false, statistics_proven = false;
  bool model_matches_library = false;
};

// Runs the structure-aware statistics; `reference` is the battery's uniform shuffle. The long mode
// writes docs/quality.md's figures (minutes); the short one runs in the ctest test.
// max_n: only the sizes up to it (the long mode's largest take the longest); threads: how many
// (size, generator) jobs run at once.
StructureReport run_structure(bool long_mode, const Fill& reference, uint64_t max_n = ~uint64_t{0},
                              int threads = 0);

// The library's version 2 at 1..max_rounds rounds (seeds from first_seed), the worst |z| and its
// statistic per round count: how the default's rounds were chosen.
std::string sweep_rounds(uint64_t n, int keys, int max_rounds, uint64_t first_seed);

// The statistics on `keys` permutations of [0, n) from elsewhere (a peer library's order):
// fill(n, key, out) writes key's permutation, key in [0, keys). Returns one markdown row per
// statistic (| name | n | keys | statistic | pooled z | worst key's z (where) |); *worst_out, when
// given, receives the largest |z| of them.
std::string check_permutations(const std::string& name, uint64_t n, int keys, const Fill& fill,
                               double* worst_out = nullptr);

}  // namespace quality

#endif  // DISTSAMPLER_QUALITY_FEISTEL_STRUCTURE_REPORT_H_
