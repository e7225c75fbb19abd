// whole_permutation.cc: the statistical battery of the shuffled orders (issue 13), side by side:
// its classic statistics, which look at a permutation as a whole (whole_permutation.h); main.cc is
// the command line, which runs them beside the structure-aware statistics of feistel_structure.cc.
//
// Four generators of a permutation of [0, n) from (seed, epoch): the Feistel order version 1,
// version 2, the torch order (torch.randperm seeded with seed + epoch) and a reference uniform
// shuffle (Fisher-Yates drawing from Philox4x32-10, Salmon et al., "Parallel Random Numbers: As
// Easy as 1, 2, 3", SC 2011, with Lemire's unbiased draws). Trial t uses seed t + 1, epoch 0.
// Each statistic becomes a z-score, |z| >= 4 being a deviation no fair generator shows by chance
// (one in 16,000 per statistic); the reference shuffle calibrates the battery itself.
//
// Statistics, per size n (exact moments under a uniform permutation unless said):
//   perm chi2     n <= 10: counts of each of the n! permutations (Lehmer rank), Pearson's
//                 statistic; mean n! - 1, variance 2 (n! - 1)(1 - 1/N) for N draws (exact for a
//                 uniform multinomial, so sparse cells are fine), as a chi-square of n! - 1.
//   parity        P(odd) against 1/2.
//   cycles        mean cycle count against H_n, variance sum 1/k - 1/k^2.
//   fixed points  mean 1, variance 1 (n >= 2).
//   inversions    per trial standardized (mean m(m-1)/4, variance m(m-1)(2m+5)/72), on the first
//                 m = min(n, 65536) positions (their values' relative order is uniform too).
//   serial        lag L = 1..10, 16, 32, ..., 256 (below n - 1) correlation of p(i), p(i + L),
//                 and of the inverse: each lag's mean against -1/(n - 1) with its exact variance
//                 under a uniform permutation (serial_variance), the lags' z^2 summed into a
//                 chi-square, one degree per lag. (The sample variance over T trials made it a t
//                 statistic with T - 1 degrees of freedom: at 10^7, 2 trials, the reference
//                 shuffle read z = 20.)
//   elem x pos    n <= 1000: the n x n counts of (position, element) over T trials; Pearson's
//                 statistic equals n^2 - nT + (2n/T) sum over trial pairs of their agreements, so
//                 its mean is n(n - 1) and its variance 2 n^2 (T - 1)/T (pairwise independent
//                 fixed-point counts): a chi-square of (n - 1)^2 scaled by n/(n - 1). n > 1000: 64
//                 x 64 bins, each trial a hypergeometric table, chi-square with 63^2 degrees of
//                 freedom scaled by n/(n - 1).
//   related keys  positions where the order agrees with the order of a related key: epoch + 1,
//                 seed + 1, seed + 2^32, size n + 1 (first n positions; mean n/(n + 1)), and
//                 (seed + 1, epoch) against (seed, epoch + 1); mean 1, variance 1 for unrelated.
//   pair diffs    n >= 1000: p(i + lag) - p(i) mod n over the disjoint pairs with i / lag even,
//                 for lag = 2^floor(k/2) and 2^ceil(k/2), k = bit_width(n - 1) (one unit of a
//                 Feistel network's left part), in 64 bins against uniform on [1, n): a
//                 chi-square of 63. It is what tells rounds apart: version 2 with 4 or 5 rounds
//                 gives z = 23 to 46 in 20 permutations, 6 and 8 pass at 131,073 and above;
//                 6 read z = 3.8 at 65,537 (2000 permutations), which therefore runs 8.
//   rank share    n >= 1000: 8 ranks read positions r, r + 8, ... (PyTorch's interleave) of a
//                 dataset sorted into 10 contiguous classes; each trial's rank x class table is
//                 hypergeometric, Pearson's statistics summed over trials.
// Chi-squares become z by Wilson and Hilferty's cube root. The battery is deterministic: the same
// z-scores on every run and platform, so a threshold cannot fail by chance later.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "distsampler/feistel.h"
#include "distsampler/torch_random.h"
#include "whole_permutation.h"
#include "reference_shuffle.h"
#include "stats.h"

namespace quality {

using distsampler::FeistelPermutation;

std::vector<Generator> generators() {
  auto feistel = [](int version) {
    return [version](uint64_t n, uint64_t seed, uint64_t epoch, uint64_t* out) {
      FeistelPermutation(n, seed, epoch, FeistelPermutation::kVersionDefaultRounds, version)
          .gather(0, 1, n, out);
    };
  };
  return {
      {"feistel v1", feistel(1)},
      {"feistel v2", feistel(2)},
      {"torch",
       [](uint64_t n, uint64_t seed, uint64_t epoch, uint64_t* out) {
         distsampler::torch_randperm<uint64_t>(n, seed + epoch,
                                               distsampler::RandpermVariant::kCurrent, out);
       }},
      {"uniform", reference_shuffle},
  };
}

uint64_t factorial(uint64_t n) { return n <= 1 ? 1 : n * factorial(n - 1); }

namespace {

// Running sums of one per-trial quantity.
struct Moments {
  double n = 0, sum = 0, sum2 = 0;
  void add(double x) {
    n += 1;
    sum += x;
    sum2 += x * x;
  }
  double mean() const { return sum / n; }
  // (mean - expected) / (sd / sqrt(count)); sd from the theory when given, else the sample's.
  double z(double expected, double variance = -1) const {
    if (n < 2) return 0;
    double v = variance;
    if (v < 0) v = std::max((sum2 - sum * sum / n) / (n - 1), 1e-300);
    return (mean() - expected) / std::sqrt(v / n);
  }
};

// The variance of the lag-L serial correlation r = S / ((n - L) var) of a uniform permutation of
// [0, n), S = sum over i < n - L of (p(i) - mu)(p(i + L) - mu), exactly: from the moments of
// sampling without replacement the centered values x (sum x = 0, s2 = sum x^2, s4 = sum x^4):
// E[x_a x_b] = -s2 / (n)_2, E[x_a^2 x_b^2] = (s2^2 - s4) / (n)_2, E[x_a^2 x_b x_c] =
// (2 s4 - s2^2) / (n)_3 and E[x_a x_b x_c x_d] = (3 s2^2 - 6 s4) / (n)_4 for distinct positions;
// of the (n - L)^2 ordered pairs of terms, n - L are the same term, 2 max(0, n - 2L) share one
// position, and the rest share none. Checked against enumeration of every permutation for
// n = 3..8 and every lag. Requires 1 <= L < n - 1.
double serial_variance(uint64_t n, uint64_t lag) {
  using R = long double;
  const R nn = static_cast<R>(n), m = static_cast<R>(n - lag);
  const R shared = n >= 2 * lag ? static_cast<R>(n - 2 * lag) : 0;
  const R s2 = nn * (nn * nn - 1) / 12, s4 = nn * (nn * nn - 1) * (3 * nn * nn - 7) / 240;
  const R ff2 = nn * (nn - 1), ff3 = ff2 * (nn - 2), ff4 = ff3 * (nn - 3);
  const R same = (s2 * s2 - s4) / ff2;
  const R one = n >= 3 ? (2 * s4 - s2 * s2) / ff3 : 0;
  const R none_count = m * (m - 1) - 2 * shared;
  const R none = n >= 4 ? (3 * s2 * s2 - 6 * s4) / ff4 : 0;
  const R mean_s = -m * s2 / ff2;
  const R var_s = m * same + 2 * shared * one + none_count * none - mean_s * mean_s;
  const R scale = m * s2 / nn;
  return static_cast<double>(var_s / (scale * scale));
}

// The Lehmer rank of a permutation of n <= 20 elements.
uint64_t lehmer_rank(const uint64_t* p, uint64_t n) {
  uint64_t rank = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t smaller = 0;
    for (uint64_t j = i + 1; j < n; ++j) smaller += p[j] < p[i];
    rank = rank * (n - i) + smaller;
  }
  return rank;
}

// Inversions of v (destroyed), by merge sort.
uint64_t inversions(std::vector<uint64_t>& v, std::vector<uint64_t>& scratch) {
  const size_t m = v.size();
  scratch.resize(m);
  uint64_t count = 0;
  for (size_t width = 1; width < m; width *= 2) {
    for (size_t lo = 0; lo < m; lo += 2 * width) {
      const size_t mid = std::min(lo + width, m), hi = std::min(lo + 2 * width, m);
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        if (v[j] < v[i]) {
          count += mid - i;
          scratch[k++] = v[j++];
        } else {
          scratch[k++] = v[i++];
        }
      }
      while (i < mid) scratch[k++] = v[i++];
      while (j < hi) scratch[k++] = v[j++];
    }
    v.swap(scratch);
  }
  return count;
}

// Lags 1..10, then 16, 32, ..., 256: a power of two is the distance between values that differ
// in one bit (a network over bits mixes some bits more slowly than others).
constexpr int kLags = 15;
constexpr uint64_t lag_of(int k) { return k < 10 ? k + 1 : uint64_t{16} << (k - 10); }
constexpr int kBins = 64;
constexpr int kRanks = 8, kClasses = 10;
constexpr uint64_t kInversionPrefix = 65536;

struct Accumulator {
  uint64_t n;
  std::vector<uint64_t> exhaustive;  // n <= 10
  uint64_t odd = 0;
  Moments cycles, fixed, inversions_z;
  Moments serial[2][kLags];
  std::vector<uint32_t> matrix;  // n <= 1000: n x n; else kBins x kBins
  double rank_share_chi2 = 0;
  uint64_t rank_share_trials = 0;
  Moments related[5];
  // n >= 1000: differences p(i + lag) - p(i) mod n in kBins bins, for the lags of split_lags.
  std::vector<uint64_t> split_diff[2];
  uint64_t split_pairs[2] = {0, 0};
};

// The distances 2^floor(k/2) and 2^ceil(k/2), k = bit_width(n - 1): positions that differ by
// one unit of a Feistel network's left part, for either way of splitting k bits. A network with
// too few rounds leaves p(i + lag) - p(i) far from uniform. Returns the number of distinct lags
// (1 when k is even).
int split_lags(uint64_t n, uint64_t lags[2]) {
  int k = 0;
  while ((n - 1) >> k != 0) ++k;
  lags[0] = uint64_t{1} << (k / 2);
  lags[1] = uint64_t{1} << ((k + 1) / 2);
  return lags[0] == lags[1] ? 1 : 2;
}

const char* const kRelated[5] = {"related: epoch + 1", "related: seed + 1", "related: seed + 2^32",
                                 "related: size n + 1", "related: (seed+1, e) vs (seed, e+1)"};

double harmonic(uint64_t n) {
  double h = 0;
  for (uint64_t k = n; k >= 1; --k) h += 1.0 / static_cast<double>(k);
  return h;
}

void add_trial(Accumulator& a, const std::vector<uint64_t>& p, std::vector<uint64_t>& inverse,
               std::vector<uint8_t>& seen, std::vector<uint64_t>& work,
               std::vector<uint64_t>& scratch) {
  const uint64_t n = a.n;
  if (n <= 10) ++a.exhaustive[lehmer_rank(p.data(), n)];
  // Cycles, parity, fixed points.
  std::fill(seen.begin(), seen.end(), 0);
  uint64_t cycles = 0, fixed = 0;
  for (uint64_t i = 0; i < n; ++i) {
    inverse[p[i]] = i;
    fixed += p[i] == i;
    if (seen[i]) continue;
    ++cycles;
    for (uint64_t j = i; !seen[j]; j = p[j]) seen[j] = 1;
  }
  a.odd += (n - cycles) & 1;
  a.cycles.add(static_cast<double>(cycles));
  a.fixed.add(static_cast<double>(fixed));
  // Inversions of the first m positions.
  const uint64_t m = std::min(n, kInversionPrefix);
  if (m >= 2) {
    work.assign(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(m));
    const double inv = static_cast<double>(inversions(work, scratch));
    const double md = static_cast<double>(m);
    a.inversions_z.add((inv - md * (md - 1) / 4) / std::sqrt(md * (md - 1) * (2 * md + 5) / 72));
  }
  // Serial correlations of p and of its inverse.
  const double mu = (static_cast<double>(n) - 1) / 2;
  const double var = (static_cast<double>(n) * static_cast<double>(n) - 1) / 12;
  for (int which = 0; which < 2 && n >= 3; ++which) {
    const std::vector<uint64_t>& q = which == 0 ? p : inverse;
    for (int k = 0; k < kLags && lag_of(k) < n - 1; ++k) {
      const uint64_t lag = lag_of(k);
      double s = 0;
      for (uint64_t i = 0; i + lag < n; ++i) {
        s += (static_cast<double>(q[i]) - mu) * (static_cast<double>(q[i + lag]) - mu);
      }
      a.serial[which][k].add(s / (static_cast<double>(n - lag) * var));
    }
  }
  // Element x position.
  if (n <= 1000) {
    for (uint64_t i = 0; i < n; ++i) ++a.matrix[i * n + p[i]];
  } else {
    for (uint64_t i = 0; i < n; ++i) ++a.matrix[(i * kBins / n) * kBins + p[i] * kBins / n];
  }
  // Rank share: rank x contiguous class.
  if (n >= 1000) {
    double counts[kRanks][kClasses] = {};
    for (uint64_t i = 0; i < n; ++i) counts[i % kRanks][p[i] * kClasses / n] += 1;
    double chi2 = 0;
    for (int r = 0; r < kRanks; ++r) {
      const double rank_size = static_cast<double>((n - r + kRanks - 1) / kRanks);
      for (int c = 0; c < kClasses; ++c) {
        const uint64_t lo = (c * n + kClasses - 1) / kClasses;  // first v with v*C/n == c
        const uint64_t hi = ((c + 1) * n + kClasses - 1) / kClasses;
        const double e = rank_size * static_cast<double>(hi - lo) / static_cast<double>(n);
        chi2 += (counts[r][c] - e) * (counts[r][c] - e) / e;
      }
    }
    a.rank_share_chi2 += chi2;
    ++a.rank_share_trials;
  }
  // Pair differences at the split lags, over disjoint pairs (i, i + lag): i / lag even.
  if (n >= 1000) {
    uint64_t lags[2];
    const int count = split_lags(n, lags);
    for (int l = 0; l < count; ++l) {
      const uint64_t lag = lags[l];
      for (uint64_t i = 0; i + lag < n; ++i) {
        if ((i / lag) % 2 != 0) continue;
        const uint64_t d = (p[i + lag] + n - p[i]) % n;
        ++a.split_diff[l][d * kBins / n];
        ++a.split_pairs[l];
      }
    }
  }
}

std::vector<Result> finish(const Accumulator& a, uint64_t trials) {
  const uint64_t n = a.n;
  const double T = static_cast<double>(trials);
  std::vector<Result> out;
  auto row = [&](const std::string& name, double z) { out.push_back({name, {z, 0, 0, 0}}); };
  if (n <= 10) {
    const double cells = static_cast<double>(factorial(n));
    const double e = T / cells;
    double chi2 = 0;
    for (uint64_t c : a.exhaustive) chi2 += (c - e) * (c - e) / e;
    row("perm chi2 (" + std::to_string(static_cast<uint64_t>(cells)) + " cells)",
        chi2_z(chi2, cells - 1));
  }
  if (n >= 2) row("parity P(odd)", (static_cast<double>(a.odd) - T / 2) / std::sqrt(T / 4));
  double cycle_var = 0;
  for (uint64_t k = 1; k <= n; ++k) cycle_var += 1.0 / k - 1.0 / (double(k) * k);
  if (n >= 2) row("cycles (mean)", a.cycles.z(harmonic(n), cycle_var));
  if (n >= 2) row("fixed points (mean)", a.fixed.z(1.0, 1.0));
  if (n >= 2) row("inversions", a.inversions_z.z(0.0, 1.0));
  for (int which = 0; which < 2 && n >= 3; ++which) {
    double chi2 = 0;
    int lags = 0;
    for (int k = 0; k < kLags && lag_of(k) < n - 1; ++k) {
      const double z = a.serial[which][k].z(-1.0 / (static_cast<double>(n) - 1),
                                            serial_variance(n, lag_of(k)));
      chi2 += z * z;
      ++lags;
    }
    const std::string last = std::to_string(lag_of(lags - 1));
    row(std::string(which == 0 ? "serial" : "inverse serial") + " lags 1.." +
            (lags > 10 ? "10, 16.." : "") + last,
        chi2_z(chi2, lags));
  }
  if (n <= 1000) {
    const double e = T / static_cast<double>(n);
    double chi2 = 0;
    for (uint32_t c : a.matrix) chi2 += (c - e) * (c - e) / e;
    // Mean n(n - 1), variance 2 n^2 (T - 1)/T: that of a chi-square of (n - 1)^2 degrees of
    // freedom scaled by n/(n - 1), up to (T - 1)/T; the cube root handles the skew at small n.
    const double nd = static_cast<double>(n);
    row("elem x pos (" + std::to_string(n) + "^2)",
        chi2_z(chi2 * (nd - 1) / nd, (nd - 1) * (nd - 1)));
  } else {
    double chi2 = 0;
    for (int b = 0; b < kBins; ++b) {
      for (int c = 0; c < kBins; ++c) {
        auto width = [&](int k) {
          return static_cast<double>((uint64_t(k + 1) * n + kBins - 1) / kBins -
                                     (uint64_t(k) * n + kBins - 1) / kBins);
        };
        const double e = T * width(b) * width(c) / static_cast<double>(n);
        const double o = a.matrix[b * kBins + c];
        chi2 += (o - e) * (o - e) / e;
      }
    }
    const double scale = static_cast<double>(n) / (static_cast<double>(n) - 1);
    row("elem x pos (64^2 bins)", chi2_z(chi2 / scale, (kBins - 1) * (kBins - 1)));
  }
  const double nd = static_cast<double>(n);
  for (int r = 0; r < 5; ++r) {
    if (a.related[r].n == 0) continue;
    if (r == 3) {
      // Agreements with an independent uniform order of n + 1 elements.
      const double mean = nd / (nd + 1);
      const double var = mean + nd * (nd - 1) * (1 / ((nd + 1) * nd) - 1 / ((nd + 1) * (nd + 1)));
      row(kRelated[r], a.related[r].z(mean, var));
    } else {
      row(kRelated[r], a.related[r].z(1.0, 1.0));
    }
  }
  uint64_t lags[2];
  const int lag_count = n >= 1000 ? split_lags(n, lags) : 0;
  for (int l = 0; l < lag_count; ++l) {
    // Under a uniform order p(i + lag) - p(i) is uniform on [1, n).
    double chi2 = 0;
    for (int b = 0; b < kBins; ++b) {
      const uint64_t lo = (uint64_t(b) * n + kBins - 1) / kBins;  // first d with d*kBins/n == b
      const uint64_t hi = (uint64_t(b + 1) * n + kBins - 1) / kBins;
      const double width = static_cast<double>(hi - lo - (b == 0 ? 1 : 0));
      const double e = static_cast<double>(a.split_pairs[l]) * width / (nd - 1);
      const double o = static_cast<double>(a.split_diff[l][b]);
      chi2 += (o - e) * (o - e) / e;
    }
    int log2_lag = 0;
    while ((uint64_t{1} << log2_lag) < lags[l]) ++log2_lag;
    row("pair differences, lag 2^" + std::to_string(log2_lag), chi2_z(chi2, kBins - 1));
  }
  if (a.rank_share_trials > 0) {
    const double k = (kRanks - 1) * (kClasses - 1);
    const double scale = nd / (nd - 1);
    row("rank share (8 ranks x 10 classes)",
        chi2_z(a.rank_share_chi2 / scale, k * static_cast<double>(a.rank_share_trials)));
  }
  return out;
}

}  // namespace

// Runs every statistic of one size for one generator; returns rows with z in column 0 and the
// fraction of odd permutations in *p_odd.
std::vector<Result> run_size(const Generator& g, const SizePlan& plan, double* p_odd) {
  const uint64_t n = plan.n;
  Accumulator a;
  a.n = n;
  if (n <= 10) a.exhaustive.assign(factorial(n), 0);
  a.matrix.assign(n <= 1000 ? n * n : kBins * kBins, 0);
  for (auto& d : a.split_diff) d.assign(kBins, 0);
  std::vector<uint64_t> p(n), q(n + 1), inverse(n), work, scratch;
  std::vector<uint8_t> seen(n);
  for (uint64_t t = 0; t < plan.trials; ++t) {
    const uint64_t seed = t + 1;
    g.fill(n, seed, 0, p.data());
    add_trial(a, p, inverse, seen, work, scratch);
    if (t >= plan.related_trials) continue;
    auto agree = [&](uint64_t count) {
      uint64_t same = 0;
      for (uint64_t i = 0; i < count; ++i) same += p[i] == q[i];
      return static_cast<double>(same);
    };
    g.fill(n, seed, 1, q.data());
    a.related[0].add(agree(n));
    g.fill(n, seed + 1, 0, q.data());
    a.related[1].add(agree(n));
    g.fill(n, seed + (uint64_t{1} << 32), 0, q.data());
    a.related[2].add(agree(n));
    g.fill(n + 1, seed, 0, q.data());
    a.related[3].add(agree(n));
    // (seed + 1, epoch 0) against (seed, epoch 1): p becomes the first.
    g.fill(n, seed + 1, 0, p.data());
    g.fill(n, seed, 1, q.data());
    a.related[4].add(agree(n));
  }
  *p_odd = static_cast<double>(a.odd) / static_cast<double>(plan.trials);
  return finish(a, plan.trials);
}

// serial_variance against the variance of r over every permutation of n = 3..7, every lag.
bool serial_variance_matches_enumeration() {
  for (uint64_t n = 3; n <= 7; ++n) {
    for (uint64_t lag = 1; lag + 1 < n; ++lag) {
      std::vector<uint64_t> p(n);
      for (uint64_t i = 0; i < n; ++i) p[i] = i;
      const double mu = (static_cast<double>(n) - 1) / 2;
      const double var = (static_cast<double>(n) * static_cast<double>(n) - 1) / 12;
      double count = 0, sum = 0, sum2 = 0;
      do {
        double s = 0;
        for (uint64_t i = 0; i + lag < n; ++i) {
          s += (static_cast<double>(p[i]) - mu) * (static_cast<double>(p[i + lag]) - mu);
        }
        const double r = s / (static_cast<double>(n - lag) * var);
        count += 1;
        sum += r;
        sum2 += r * r;
      } while (std::next_permutation(p.begin(), p.end()));
      const double exact = sum2 / count - (sum / count) * (sum / count);
      if (std::fabs(serial_variance(n, lag) - exact) > 1e-9 * exact) return false;
    }
  }
  return true;
}

}  // namespace quality
