// bit_correlations.h: the structure-aware battery's linear correlations of input and output bits.
#ifndef DISTSAMPLER_QUALITY_BIT_CORRELATIONS_H_
#define DISTSAMPLER_QUALITY_BIT_CORRELATIONS_H_

#include <cstdint>
#include <vector>

#include "feistel_structure.h"

namespace quality {

// For every input bit i and output bit j of a permutation p of [0, n) (the value's bits, which are
// the Feistel network's coordinates' bits), S_ij = sum over x of (bit_i(x) - mu_i)(bit_j(p(x)) -
// mu_j), variance sum (bit_i - mu_i)^2 * sum (bit_j - mu_j)^2 / (n - 1) under a uniform order
// (the permutation test's). Rows: the chi-square of the k^2 cells per key (pooled: their sum; and
// the worst key's), and the worst cell pooled over the keys; k = bit_width(n - 1).
class LinearStats {
 public:
  explicit LinearStats(uint64_t n);
  // One key's permutation; seed names it in the worst key's row.
  void add(const std::vector<uint64_t>& p, uint64_t seed);
  // The two rows, after every key.
  void append_rows(std::vector<Row>& rows) const;

 private:
  uint64_t n_;
  int k_;
  int keys_ = 0;
  std::vector<double> sum_, var_;  // pooled S and variance per cell (j * k + i)
  double chi2_sum_ = 0, worst_key_ = 0;
  uint64_t worst_seed_ = 0;
  std::vector<uint64_t> bits_;  // scratch: one bitset per output bit
};

}  // namespace quality

#endif  // DISTSAMPLER_QUALITY_BIT_CORRELATIONS_H_
