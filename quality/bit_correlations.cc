// bit_correlations.cc: the linear correlations of input and output bits (bit_correlations.h).
#include "bit_correlations.h"

#include <cmath>
#include <string>

namespace quality {

LinearStats::LinearStats(uint64_t n)
    : n_(n),
      k_(bit_width(n - 1)),
      sum_(static_cast<size_t>(k_) * k_, 0),
      var_(static_cast<size_t>(k_) * k_, 0) {}

void LinearStats::add(const std::vector<uint64_t>& p, uint64_t seed) {
  const uint64_t n = n_;
  const int k = k_;
  const uint64_t words = (n + 63) / 64;
  bits_.assign(static_cast<size_t>(k) * words, 0);
  for (uint64_t x = 0; x < n; ++x) {
    const uint64_t v = p[x];
    for (int j = 0; j < k; ++j) bits_[j * words + x / 64] |= ((v >> j) & 1) << (x % 64);
  }
  // Ones of bit i among [0, n).
  auto ones = [n](int i) {
    const uint64_t period = uint64_t{2} << i, half = uint64_t{1} << i;
    return (n / period) * half + (n % period > half ? n % period - half : 0);
  };
  static const uint64_t kLowMask[6] = {0xaaaaaaaaaaaaaaaaull, 0xccccccccccccccccull,
                                       0xf0f0f0f0f0f0f0f0ull, 0xff00ff00ff00ff00ull,
                                       0xffff0000ffff0000ull, 0xffffffff00000000ull};
  const double nd = static_cast<double>(n);
  double chi2 = 0;
  for (int j = 0; j < k; ++j) {
    std::vector<uint64_t> both(k, 0);
    for (uint64_t w = 0; w < words; ++w) {
      const uint64_t b = bits_[j * words + w];
      if (b == 0) continue;
      const uint64_t pc = static_cast<uint64_t>(__builtin_popcountll(b));
      for (int i = 0; i < k && i < 6; ++i) both[i] += __builtin_popcountll(b & kLowMask[i]);
      for (int i = 6; i < k; ++i) both[i] += ((w >> (i - 6)) & 1) * pc;
    }
    const double mj = static_cast<double>(ones(j)) / nd;
    for (int i = 0; i < k; ++i) {
      const double mi = static_cast<double>(ones(i)) / nd;
      const double S = static_cast<double>(both[i]) - nd * mi * mj;
      const double var = nd * mi * (1 - mi) * nd * mj * (1 - mj) / (nd - 1);
      chi2 += S * S / var;
      sum_[j * k + i] += S;
      var_[j * k + i] += var;
    }
  }
  const double dof = static_cast<double>(k) * k;
  chi2_sum_ += chi2;
  const double z = chi2_z(chi2, dof);
  if (keys_ == 0 || std::fabs(z) > std::fabs(worst_key_)) {
    worst_key_ = z;
    worst_seed_ = seed;
  }
  ++keys_;
}

void LinearStats::append_rows(std::vector<Row>& rows) const {
  const int k = k_;
  const double dof = static_cast<double>(k) * k;
  Row lin;
  lin.statistic = "linear: bit i of x vs bit j of p(x), chi2 of k^2 cells";
  lin.pooled = chi2_z(chi2_sum_, dof * keys_);
  lin.worst_key = adjust(worst_key_, keys_);
  lin.where = "key: seed " + std::to_string(worst_seed_);
  rows.push_back(lin);
  Row cell;
  cell.statistic = "linear: worst cell (i, j), pooled over keys";
  double best = 0;
  for (int j = 0; j < k; ++j) {
    for (int i = 0; i < k; ++i) {
      const double z = sum_[j * k + i] / std::sqrt(var_[j * k + i]);
      if (std::fabs(z) > std::fabs(best)) {
        best = z;
        cell.where = "i = " + std::to_string(i) + ", j = " + std::to_string(j);
      }
    }
  }
  cell.pooled = adjust(best, dof);
  cell.has_worst_key = false;
  rows.push_back(cell);
}

}  // namespace quality
