// The battery's statistics that know the Feistel construction (issue 20). The classic statistics
// of quality.cc look at a permutation as a whole; these look where a Feistel network with too few
// rounds, or a weak round function, leaves structure: pairs of positions one input difference
// apart, and what the network makes of the difference.
//
// Coordinates. Version 2's network splits a value v < n into a left part l = v >> s in [0, L) and
// a right part r = v & (2^s - 1), s = ceil(k / 2), k = bit_width(n - 1), L = ceil(n / 2^s). Every
// generator is read in these coordinates, so the statistics are the same for all of them.
//
// Input differences ("members"), each a set of disjoint position pairs (x, x + D), D a lag:
// - XOR 2^j, j < k: the pairs with bit j of x clear (x and x XOR 2^j: x / 2^j even). j < s flips
//   a bit of the right part, j >= s one of the left part: both halves.
// - + a with carry, a = 2^j for j in {0, 1, s, s + 1}: the pairs with x / a odd, where adding a
//   carries into the bits above (x = ...0111 + 1): additive differences that are not an XOR.
// - + a, a in {3, 5} and + 3 * 2^s (x / a even): small additive differences that are not a power
//   of two, in the right half and in the left.
// - The inverse's XOR 2^j: the same pairs of values, the positions that hold them (decryption).
// Output differences of a pair (x, y), values p(x), p(y):
// - mod n: p(y) - p(x) mod n, uniform on [1, n) for a uniform order.
// - network: (l(p(y)) - l(p(x)) mod L, r(p(y)) XOR r(p(x))), how version 2's rounds combine
//   parts (additions modulo L on the left, XOR on the right); counted over the pairs whose two
//   values lie in the full rows l < L - 1, where a uniform order makes the difference of a pair
//   that of two distinct values drawn from (L - 1) * 2^s, with the closed-form law in net_q.
// Statistics of a member:
// - collisions, per key: C = the pairs of pairs with the same output difference, against
//   E = C(m, 2) q for m pairs and q the probability that two independent differences agree
//   (pairwise-independent indicators: variance E (1 - q)); z = (C - E) / sqrt(E (1 - q)). Too few
//   rounds (or a round function that maps a difference to a few differences) make differences
//   repeat. Reported pooled over the keys (sum of C - E over the sum of the variances) and for
//   the worst key.
// - distribution: p(y) - p(x) mod n in 64 bins, pooled over the keys, a chi-square of 63 against
//   uniform on [1, n) (what quality.cc's pair-difference statistic computes at two lags).
// Linear correlations, per key: for every input bit i and output bit j (the value's bits, which
// are the network's coordinates' bits), S_ij = sum over x of (bit_i(x) - mu_i)(bit_j(p(x)) -
// mu_j), variance sum (bit_i - mu_i)^2 * sum (bit_j - mu_j)^2 / (n - 1) under a uniform order
// (the permutation test's). Rows: the chi-square of the k^2 cells per key, and the worst cell
// pooled over the keys.
// Multiple comparisons: a row's worst key (and worst member, worst cell) is the largest |z| of
// many; it is reported as its Sidak-adjusted z, the deviate whose two-sided tail is 1 - (1 -
// p)^count, so that |z| >= 4 keeps its meaning (once in 16,000) whatever the number of keys or
// members.
//
// Generators: the library's orders (version 2 at any rounds, version 1), the reference shuffle,
// and a model of version 2's network (the same equations and keys, quality checks it against the
// library bit for bit) with a pluggable round function: the current mix, the multiply-only round
// of the first version 2 (the one the audit of issue 20 broke), and a linear one (the mix with its
// two integer multiplications replaced by carry-less ones: GF(2)-affine), and with chosen round
// keys. A weak-key search runs the XOR statistics over many keys and reports the worst.
#include "quality_structure.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>
#include <vector>

#include "distsampler/feistel.h"
#include "distsampler/hash.h"

namespace quality {
namespace {

using distsampler::FeistelPermutation;

// ---- z-scores -------------------------------------------------------------------------------

double two_sided_p(double z) { return std::erfc(std::fabs(z) / std::sqrt(2.0)); }

// The |z| whose two-sided tail is p (bisection; p in (0, 1]).
double z_of_p(double p) {
  double lo = 0, hi = 40;
  for (int i = 0; i < 100; ++i) {
    const double mid = (lo + hi) / 2;
    if (two_sided_p(mid) > p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return (lo + hi) / 2;
}

// The largest |z| of `count` as one deviate: Sidak's adjustment, sign kept.
double adjust(double z, double count) {
  if (count <= 1) return z;
  const double p = two_sided_p(z);
  double a;
  if (p < 1e-200) {
    // Beyond double precision: the tail is exp(-z^2 / 2) up to a slowly varying factor.
    a = std::sqrt(std::max(z * z - 2 * std::log(count), 0.0));
  } else {
    a = z_of_p(-std::expm1(count * std::log1p(-p)));
  }
  return z < 0 ? -a : a;
}

double chi2_z(double chi2, double dof) {
  const double h = 2.0 / (9.0 * dof);
  return (std::cbrt(chi2 / dof) - (1 - h)) / std::sqrt(h);
}

int bit_width(uint64_t x) {
  int w = 0;
  for (; x != 0; x >>= 1) ++w;
  return w;
}

// ---- the model network ----------------------------------------------------------------------

enum class RoundKind { kMix, kMultiply, kLinear };

// The carry-less product x * m mod 2^32 (GF(2)[t] modulo t^32), by bytes of x.
struct ClmulTable {
  uint32_t t[4][256];
  explicit ClmulTable(uint32_t m) {
    for (int b = 0; b < 4; ++b) {
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t r = 0;
        const uint32_t x = v << (8 * b);
        for (int i = 0; i < 32; ++i) {
          if ((x >> i) & 1) r ^= m << i;
        }
        t[b][v] = r;
      }
    }
  }
  uint32_t operator()(uint32_t x) const {
    return t[0][x & 255] ^ t[1][(x >> 8) & 255] ^ t[2][(x >> 16) & 255] ^ t[3][x >> 24];
  }
};

struct Model {
  uint64_t n;
  int rounds, s;
  uint32_t mask, size;  // 2^s - 1, L
  RoundKind kind;
  uint32_t key[FeistelPermutation::kMaxRounds], key2[FeistelPermutation::kMaxRounds];

  // Version 2's keys for (seed, epoch 0) and n; keys_override >= 0: every round key (both words)
  // that value instead.
  Model(uint64_t n_, uint64_t seed, int rounds_, RoundKind kind_, int64_t keys_override = -1)
      : n(n_), rounds(rounds_), kind(kind_) {
    const int k = bit_width(n - 1);
    s = (k + 1) / 2;
    mask = static_cast<uint32_t>((uint64_t{1} << s) - 1);
    size = static_cast<uint32_t>(((n - 1) >> s) + 1);
    uint64_t state =
        distsampler::mix64(distsampler::derive_key(seed, 0, distsampler::kDomainFeistelOrder2) ^
                           distsampler::mix64(n ^ 0x6e2d73697a65ull));
    for (int r = 0; r < rounds; ++r) {
      state = distsampler::mix64(state);
      key[r] = static_cast<uint32_t>(state >> 32);
      key2[r] = static_cast<uint32_t>(state);
      if (keys_override >= 0) key[r] = key2[r] = static_cast<uint32_t>(keys_override);
    }
  }
  uint32_t f(uint32_t x, int r) const {
    static const ClmulTable m1(FeistelPermutation::kMixMultiplier1);
    static const ClmulTable m2(FeistelPermutation::kMixMultiplier2);
    switch (kind) {
      case RoundKind::kMultiply:
        return (x ^ key[r]) * (key2[r] | 1u);
      case RoundKind::kMix: {
        uint32_t h = (x ^ key[r]) * FeistelPermutation::kMixMultiplier1;
        h ^= (h >> FeistelPermutation::kMixShift) ^ key2[r];
        return h * FeistelPermutation::kMixMultiplier2;
      }
      case RoundKind::kLinear: {
        uint32_t h = m1(x ^ key[r]);
        h ^= (h >> FeistelPermutation::kMixShift) ^ key2[r];
        return m2(h);
      }
    }
    return 0;
  }
  uint64_t encrypt(uint64_t x) const {
    uint32_t left = static_cast<uint32_t>(x >> s), right = static_cast<uint32_t>(x) & mask;
    for (int r = 0; r < rounds; r += 2) {
      right ^= static_cast<uint32_t>(f(left, r) >> (32 - s));
      if (r + 1 < rounds) {
        const uint32_t c =
            static_cast<uint32_t>((static_cast<uint64_t>(f(right, r + 1)) * size) >> 32);
        left += c;
        if (left >= size) left -= size;
      }
    }
    return (static_cast<uint64_t>(left) << s) | right;
  }
  uint64_t operator()(uint64_t x) const {
    do {
      x = encrypt(x);
    } while (x >= n);
    return x;
  }
};

// ---- generators -----------------------------------------------------------------------------

struct Gen {
  std::string name;
  Fill fill;
  bool weakened;  // expected to fail
  bool fixed;     // the same permutation for every seed (chosen round keys): one key only
};

Fill library(int version, int rounds) {
  return [version, rounds](uint64_t n, uint64_t seed, uint64_t* out) {
    FeistelPermutation(n, seed, 0, rounds, version).gather(0, 1, n, out);
  };
}

Fill model(RoundKind kind, int rounds, int64_t keys_override = -1) {
  return [kind, rounds, keys_override](uint64_t n, uint64_t seed, uint64_t* out) {
    const Model m(n, seed, rounds, kind, keys_override);
    for (uint64_t i = 0; i < n; ++i) out[i] = m(i);
  };
}

// ---- members --------------------------------------------------------------------------------

struct Member {
  std::string name;
  int family;
  uint64_t lag;
  bool odd;  // pairs with x / lag odd (+ lag with carry) instead of even
};

constexpr int kFamilies = 5;
const char* const kFamilyNames[kFamilies] = {
    "XOR 2^j, right half", "XOR 2^j, left half", "+a, right half (a=1,2 carry; 3, 5)",
    "+a*2^s, left half (a=1,2 carry; 3)", "inverse: XOR 2^j, both halves"};
constexpr int kInverseFamily = 4;

std::vector<Member> members_of(uint64_t n) {
  const int k = bit_width(n - 1), s = (k + 1) / 2;
  std::vector<Member> out;
  for (int j = 0; j < k; ++j) {
    out.push_back({"XOR 2^" + std::to_string(j), j < s ? 0 : 1, uint64_t{1} << j, false});
  }
  for (int j : {0, 1}) {
    out.push_back({"+" + std::to_string(1 << j) + " carry", 2, uint64_t{1} << j, true});
  }
  for (uint64_t a : {3, 5}) out.push_back({"+" + std::to_string(a), 2, a, false});
  for (int j : {0, 1}) {
    out.push_back({"+" + std::to_string(1 << j) + "*2^s carry", 3, uint64_t{1} << (s + j), true});
  }
  out.push_back({"+3*2^s", 3, uint64_t{3} << s, false});
  for (int j = 0; j < k; ++j) {
    out.push_back({"inv XOR 2^" + std::to_string(j), kInverseFamily, uint64_t{1} << j, false});
  }
  return out;
}

// ---- accumulators ---------------------------------------------------------------------------

constexpr int kBins = 64;

struct Collisions {
  double sum_excess = 0, sum_var = 0;  // pooled
  double worst = 0;                    // the worst key's z
  uint64_t worst_seed = 0;
  int keys = 0;
  void add(double c, double e, double q, uint64_t seed) {
    const double v = e * (1 - q);
    sum_excess += c - e;
    sum_var += v;
    const double z = v > 0 ? (c - e) / std::sqrt(v) : 0;
    if (keys == 0 || std::fabs(z) > std::fabs(worst)) {
      worst = z;
      worst_seed = seed;
    }
    ++keys;
  }
  double pooled() const { return sum_var > 0 ? sum_excess / std::sqrt(sum_var) : 0; }
};

struct MemberStats {
  Collisions mod_n, net;
  std::vector<uint64_t> hist = std::vector<uint64_t>(kBins, 0);
  uint64_t pairs = 0;
};

// What one generator's keys at one size add up to.
struct SizeStats {
  uint64_t n = 0;
  int keys = 0;
  std::vector<Member> members;
  std::vector<MemberStats> stats;
  // Linear correlations: pooled S and variance per cell, chi-square per key.
  std::vector<double> lin_sum, lin_var;
  double lin_chi2_sum = 0, lin_worst_key = 0;
  uint64_t lin_worst_seed = 0;
};

// The probability that two independent differences of distinct values drawn from the full rows
// (L - 1) * 2^s agree, in network coordinates.
double net_q(uint64_t L, int s) {
  const double R = std::ldexp(1.0, s), lf = static_cast<double>(L - 1);
  const double F = lf * R, T = F * (F - 1);
  const double same_row = lf * R / T, other_row = (lf - 1) * R / T;
  return (R - 1) * same_row * same_row + (static_cast<double>(L) - 1) * R * other_row * other_row;
}

// Scratch shared by the statistics of one key.
struct Scratch {
  // Sized for both coordinates: n differences mod n, L * 2^s in network coordinates.
  explicit Scratch(uint64_t n) {
    const int s = (bit_width(n - 1) + 1) / 2;
    count.assign(std::max(n, (((n - 1) >> s) + 1) << s), 0);
  }
  std::vector<uint32_t> count;  // per output difference
  std::vector<uint32_t> diffs;  // of the current member's pairs
  std::vector<uint64_t> bits;   // linear: one bitset per output bit
};

// One member on one order (p, or its inverse): collisions in both coordinates, the histogram.
void member_stats(const std::vector<uint64_t>& p, const Member& m, uint64_t seed, Scratch& sc,
                  MemberStats& st) {
  const uint64_t n = p.size();
  const int k = bit_width(n - 1), s = (k + 1) / 2;
  const uint64_t L = ((n - 1) >> s) + 1, rmask = (uint64_t{1} << s) - 1;
  // floor(d * 64 / n) for d * 64 < 2^32 by one multiply (Lemire, Kaser and Kurz 2019).
  const uint64_t magic = ~uint64_t{0} / n + 1;
  sc.diffs.clear();
  uint64_t collisions = 0;
  const uint64_t lag = m.lag;
  const uint64_t start = m.odd ? lag : 0;
  for (uint64_t base = start; base + lag < n; base += 2 * lag) {
    const uint64_t end = std::min(base + lag, n - lag);
    for (uint64_t x = base; x < end; ++x) {
      const uint64_t a = p[x], b = p[x + lag];
      const uint64_t d = b >= a ? b - a : b + n - a;
      collisions += sc.count[d]++;
      ++st.hist[static_cast<uint64_t>((static_cast<unsigned __int128>(d << 6) * magic) >> 64)];
      sc.diffs.push_back(static_cast<uint32_t>(d));
    }
  }
  const double mp = static_cast<double>(sc.diffs.size());
  st.pairs += sc.diffs.size();
  for (uint32_t d : sc.diffs) sc.count[d] = 0;
  const double q = 1.0 / (static_cast<double>(n) - 1);
  st.mod_n.add(static_cast<double>(collisions), mp * (mp - 1) / 2 * q, q, seed);
  // Network coordinates, both values in the full rows.
  sc.diffs.clear();
  collisions = 0;
  for (uint64_t base = start; base + lag < n; base += 2 * lag) {
    const uint64_t end = std::min(base + lag, n - lag);
    for (uint64_t x = base; x < end; ++x) {
      const uint64_t a = p[x], b = p[x + lag];
      const uint64_t la = a >> s, lb = b >> s;
      if (la >= L - 1 || lb >= L - 1) continue;
      const uint64_t dl = lb >= la ? lb - la : lb + L - la;
      const uint64_t d = (dl << s) | ((a ^ b) & rmask);
      collisions += sc.count[d]++;
      sc.diffs.push_back(static_cast<uint32_t>(d));
    }
  }
  const double mq = static_cast<double>(sc.diffs.size());
  for (uint32_t d : sc.diffs) sc.count[d] = 0;
  const double qn = net_q(L, s);
  st.net.add(static_cast<double>(collisions), mq * (mq - 1) / 2 * qn, qn, seed);
}

// Linear correlations of input bit i and output bit j over the whole order.
void linear_stats(const std::vector<uint64_t>& p, uint64_t seed, Scratch& sc, SizeStats& st) {
  const uint64_t n = p.size();
  const int k = bit_width(n - 1);
  const uint64_t words = (n + 63) / 64;
  sc.bits.assign(static_cast<size_t>(k) * words, 0);
  for (uint64_t x = 0; x < n; ++x) {
    const uint64_t v = p[x];
    for (int j = 0; j < k; ++j) sc.bits[j * words + x / 64] |= ((v >> j) & 1) << (x % 64);
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
      const uint64_t b = sc.bits[j * words + w];
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
      st.lin_sum[j * k + i] += S;
      st.lin_var[j * k + i] += var;
    }
  }
  const double dof = static_cast<double>(k) * k;
  st.lin_chi2_sum += chi2;
  const double z = chi2_z(chi2, dof);
  if (st.keys == 0 || std::fabs(z) > std::fabs(st.lin_worst_key)) {
    st.lin_worst_key = z;
    st.lin_worst_seed = seed;
  }
}

SizeStats run_generator(const Gen& g, uint64_t n, int keys, uint64_t first_seed = 1) {
  SizeStats st;
  st.n = n;
  st.members = members_of(n);
  st.stats.resize(st.members.size());
  const int k = bit_width(n - 1);
  st.lin_sum.assign(static_cast<size_t>(k) * k, 0);
  st.lin_var.assign(static_cast<size_t>(k) * k, 0);
  Scratch sc(n);
  std::vector<uint64_t> p(n), inv(n);
  const int K = g.fixed ? 1 : keys;
  for (int t = 0; t < K; ++t) {
    const uint64_t seed = first_seed + static_cast<uint64_t>(t);
    g.fill(n, seed, p.data());
    for (uint64_t i = 0; i < n; ++i) inv[p[i]] = i;
    for (size_t m = 0; m < st.members.size(); ++m) {
      const Member& mem = st.members[m];
      member_stats(mem.family == kInverseFamily ? inv : p, mem, seed, sc, st.stats[m]);
    }
    linear_stats(p, seed, sc, st);
    ++st.keys;
  }
  return st;
}

// ---- rows -----------------------------------------------------------------------------------

struct Row {
  std::string statistic;
  double pooled = 0, worst_key = 0;  // both adjusted for the members (and keys)
  std::string where;                 // the member (and seed) of the worst
  bool has_worst_key = true;
};

std::string fmt(double x, int decimals = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, x);
  return buf;
}

std::vector<Row> rows_of(const SizeStats& st) {
  std::vector<Row> rows;
  const double n = static_cast<double>(st.n);
  for (int f = 0; f < kFamilies; ++f) {
    for (int what = 0; what < 3; ++what) {
      Row row;
      row.statistic =
          std::string(kFamilyNames[f]) + (what == 0   ? ": collisions, diff mod n"
                                          : what == 1 ? ": collisions, diff in network coords"
                                                      : ": diff mod n, 64 bins");
      double best_pooled = 0, best_key = 0;
      std::string pooled_at, key_at;
      uint64_t key_seed = 0;
      int count = 0;
      for (size_t m = 0; m < st.members.size(); ++m) {
        if (st.members[m].family != f) continue;
        ++count;
        const MemberStats& ms = st.stats[m];
        double pooled;
        if (what == 2) {
          double chi2 = 0;
          for (int b = 0; b < kBins; ++b) {
            const uint64_t lo = (uint64_t(b) * st.n + kBins - 1) / kBins;
            const uint64_t hi = (uint64_t(b + 1) * st.n + kBins - 1) / kBins;
            const double width = static_cast<double>(hi - lo - (b == 0 ? 1 : 0));
            const double e = static_cast<double>(ms.pairs) * width / (n - 1);
            const double o = static_cast<double>(ms.hist[b]);
            chi2 += (o - e) * (o - e) / e;
          }
          pooled = chi2_z(chi2, kBins - 1);
        } else {
          const Collisions& c = what == 0 ? ms.mod_n : ms.net;
          pooled = c.pooled();
          if (count == 1 || std::fabs(c.worst) > std::fabs(best_key)) {
            best_key = c.worst;
            key_at = st.members[m].name;
            key_seed = c.worst_seed;
          }
        }
        if (count == 1 || std::fabs(pooled) > std::fabs(best_pooled)) {
          best_pooled = pooled;
          pooled_at = st.members[m].name;
        }
      }
      if (count == 0) continue;
      row.pooled = adjust(best_pooled, count);
      row.has_worst_key = what != 2;
      row.worst_key = adjust(best_key, static_cast<double>(count) * st.keys);
      row.where =
          pooled_at +
          (row.has_worst_key ? "; key: " + key_at + ", seed " + std::to_string(key_seed) : "");
      rows.push_back(row);
    }
  }
  // Linear: per-key chi-squares pooled (their sum), the worst key's, the worst pooled cell.
  const int k = bit_width(st.n - 1);
  const double dof = static_cast<double>(k) * k;
  Row lin;
  lin.statistic = "linear: bit i of x vs bit j of p(x), chi2 of k^2 cells";
  lin.pooled = chi2_z(st.lin_chi2_sum, dof * st.keys);
  lin.worst_key = adjust(st.lin_worst_key, st.keys);
  lin.where = "key: seed " + std::to_string(st.lin_worst_seed);
  rows.push_back(lin);
  Row cell;
  cell.statistic = "linear: worst cell (i, j), pooled over keys";
  double best = 0;
  for (int j = 0; j < k; ++j) {
    for (int i = 0; i < k; ++i) {
      const double z = st.lin_sum[j * k + i] / std::sqrt(st.lin_var[j * k + i]);
      if (std::fabs(z) > std::fabs(best)) {
        best = z;
        cell.where = "i = " + std::to_string(i) + ", j = " + std::to_string(j);
      }
    }
  }
  cell.pooled = adjust(best, dof);
  cell.has_worst_key = false;
  rows.push_back(cell);
  return rows;
}

double worst_of(const std::vector<Row>& rows) {
  double w = 0;
  for (const Row& r : rows) {
    w = std::max(w, std::fabs(r.pooled));
    if (r.has_worst_key) w = std::max(w, std::fabs(r.worst_key));
  }
  return w;
}

std::string size_name(uint64_t n) {
  if (n == 10000000) return "10^7";
  return std::to_string(n);
}

// The weak-key search: `keys` seeds of one generator at size n, the XOR members' collisions in
// both coordinates per key; the worst key as one deviate among keys * statistics.
struct Search {
  double worst = 0, adjusted = 0;
  uint64_t seed = 0;
  std::string member;
  int keys = 0, statistics = 0;
};

Search weak_key_search(const Gen& g, uint64_t n, int keys, uint64_t first_seed) {
  Search out;
  std::vector<Member> members;
  for (const Member& m : members_of(n)) {
    if (m.family <= 1) members.push_back(m);
  }
  Scratch sc(n);
  std::vector<uint64_t> p(n);
  for (int t = 0; t < keys; ++t) {
    const uint64_t seed = first_seed + static_cast<uint64_t>(t);
    g.fill(n, seed, p.data());
    for (const Member& m : members) {
      MemberStats st;
      member_stats(p, m, seed, sc, st);
      for (const Collisions* c : {&st.mod_n, &st.net}) {
        if (std::fabs(c->worst) > std::fabs(out.worst)) {
          out.worst = c->worst;
          out.seed = seed;
          out.member = m.name + (c == &st.mod_n ? ", mod n" : ", network");
        }
      }
    }
  }
  out.keys = keys;
  out.statistics = static_cast<int>(members.size()) * 2;
  out.adjusted = adjust(out.worst, static_cast<double>(keys) * out.statistics);
  return out;
}

// f(i) for every i < count on `threads` threads, in order of i as threads free up (jobs listed
// longest first balance best). Each job writes only its own results: deterministic.
template <typename F>
void parallel_for(size_t count, int threads, F f) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < count; i = next++) f(i);
    });
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace

std::string sweep_rounds(uint64_t n, int keys, int max_rounds, uint64_t first_seed) {
  std::ostringstream out;
  for (int r = 1; r <= max_rounds; ++r) {
    const Gen g{"", library(FeistelPermutation::kVersion2, r), true, false};
    const std::vector<Row> rows = rows_of(run_generator(g, n, keys, first_seed));
    const Row* worst = &rows[0];
    double w = 0;
    for (const Row& row : rows) {
      const double z =
          std::max(std::fabs(row.pooled), row.has_worst_key ? std::fabs(row.worst_key) : 0);
      if (z > w) {
        w = z;
        worst = &row;
      }
    }
    out << "n = " << n << ", " << keys << " keys, " << r << " rounds: worst |z| " << fmt(w) << " ("
        << worst->statistic << "; " << worst->where << ")\n";
    std::fprintf(stderr, "%s", out.str().c_str());
  }
  return out.str();
}

std::string check_permutations(const std::string& name, uint64_t n, int keys, const Fill& fill,
                               double* worst_out) {
  const Gen g{name, fill, false, false};
  const std::vector<Row> rows = rows_of(run_generator(g, n, keys, 0));
  std::ostringstream out;
  double worst = 0;
  for (const Row& row : rows) {
    const double z =
        std::max(std::fabs(row.pooled), row.has_worst_key ? std::fabs(row.worst_key) : 0);
    worst = std::max(worst, z);
    out << "| " << name << " | " << size_name(n) << " | " << keys << " | " << row.statistic
        << " | " << fmt(row.pooled) << " | "
        << (row.has_worst_key ? fmt(row.worst_key) + " (" + row.where + ")" : std::string("-"))
        << " |\n";
  }
  if (worst_out != nullptr) *worst_out = worst;
  return out.str();
}

StructureReport run_structure(bool long_mode, const Fill& reference, uint64_t max_n,
                              int thread_count) {
  StructureReport rep;
  std::ostringstream text, md;
  const int v2 = FeistelPermutation::kVersion2;
  const int def = FeistelPermutation::kVersion2Rounds;
  // The model against the library: the same values except the parity correction's two.
  {
    bool same = true;
    for (uint64_t n : {uint64_t{131073}, uint64_t{1000003}}) {
      for (uint64_t seed : {1, 2}) {
        const Model m(n, seed, def, RoundKind::kMix);
        const FeistelPermutation lib(n, seed, 0, def, v2);
        uint64_t differ = 0;
        for (uint64_t i = 0; i < n; ++i) differ += m(i) != lib(i);
        if (differ != 0 && differ != 2) same = false;
      }
    }
    rep.model_matches_library = same;
    text << "model network == library version 2 (up to the parity swap): " << (same ? "yes" : "NO")
         << "\n";
  }
  const int weak = FeistelPermutation::kVersion2Rounds / 2;
  std::vector<Gen> gens = {
      {"v2 (default, " + std::to_string(def) + " rounds)", library(v2, 0), false, false},
      {"uniform (reference)", reference, false, false},
      {"v2, " + std::to_string(weak) + " rounds", library(v2, weak), true, false},
      {"linear round, " + std::to_string(def) + " rounds", model(RoundKind::kLinear, def), true,
       false},
      {"multiply round, 6 rounds (audited v2)", model(RoundKind::kMultiply, 6), true, false},
  };
  struct Plan {
    uint64_t n;
    int keys;
  };
  std::vector<Plan> plans =
      long_mode ? std::vector<Plan>{{131073, 30}, {1000003, 4}, {3000017, 1}, {10000000, 1}}
                : std::vector<Plan>{{131073, 10}, {1000003, 1}};
  plans.erase(
      std::remove_if(plans.begin(), plans.end(), [&](const Plan& p) { return p.n > max_n; }),
      plans.end());
  // Every (size, generator) on its own thread, the largest sizes first.
  const int threads = thread_count > 0 ? thread_count : long_mode ? 4 : 2;
  std::vector<std::vector<std::vector<Row>>> table(plans.size(),
                                                   std::vector<std::vector<Row>>(gens.size()));
  parallel_for(plans.size() * gens.size(), threads, [&](size_t job) {
    const size_t p = plans.size() - 1 - job / gens.size(), g = job % gens.size();
    const auto start = std::chrono::steady_clock::now();
    table[p][g] = rows_of(run_generator(gens[g], plans[p].n, plans[p].keys));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "structure n=%llu %s: worst %.2f (%.1f s)\n",
                 static_cast<unsigned long long>(plans[p].n), gens[g].name.c_str(),
                 worst_of(table[p][g]), secs);
  });
  text << "\nstructure-aware statistics (pooled z / worst key z, adjusted; see "
          "tools/quality_structure.cc)\n";
  bool every_weak_fails = true;
  std::vector<bool> stat_caught;
  for (size_t p = 0; p < plans.size(); ++p) {
    const Plan& plan = plans[p];
    const std::vector<std::vector<Row>>& per_gen = table[p];
    for (size_t g = 0; g < gens.size(); ++g) {
      const std::vector<Row>& rows = per_gen[g];
      const double w = worst_of(rows);
      if (g == 0) rep.worst_default = std::max(rep.worst_default, w);
      if (g == 1) rep.worst_reference = std::max(rep.worst_reference, w);
      if (gens[g].weakened && w < 4) every_weak_fails = false;
      if (stat_caught.empty()) stat_caught.assign(rows.size() * 2, false);
      for (size_t r = 0; r < rows.size(); ++r) {
        if (!gens[g].weakened) continue;
        if (std::fabs(rows[r].pooled) >= 4) stat_caught[2 * r] = true;
        if (!rows[r].has_worst_key || std::fabs(rows[r].worst_key) >= 4) {
          stat_caught[2 * r + 1] = true;
        }
      }
    }
    for (size_t r = 0; r < per_gen[0].size(); ++r) {
      text << size_name(plan.n) << " (" << plan.keys << " keys)  " << per_gen[0][r].statistic
           << "\n";
      for (size_t g = 0; g < gens.size(); ++g) {
        const Row& row = per_gen[g][r];
        char buf[256];
        std::snprintf(buf, sizeof(buf), "    %-40s %10.2f %10s   %s\n", gens[g].name.c_str(),
                      row.pooled, row.has_worst_key ? fmt(row.worst_key).c_str() : "-",
                      row.where.c_str());
        text << buf;
      }
    }
  }
  rep.weakened_caught = every_weak_fails;
  rep.statistics_proven =
      std::all_of(stat_caught.begin(), stat_caught.end(), [](bool b) { return b; });
  text << "every weakened network fails at every size: " << (every_weak_fails ? "yes" : "NO")
       << "; every statistic catches a weakened network: " << (rep.statistics_proven ? "yes" : "NO")
       << "\n";

  // Rounds: the library's version 2 at each round count, worst |z| over every statistic.
  const std::vector<Plan> sweep_plans =
      long_mode ? std::vector<Plan>{{131073, 20}, {1000003, 1}} : std::vector<Plan>{};
  const int max_rounds = def;
  std::vector<std::vector<double>> sweep(sweep_plans.size(), std::vector<double>(max_rounds));
  parallel_for(sweep_plans.size() * max_rounds, threads, [&](size_t job) {
    const size_t p = sweep_plans.size() - 1 - job / max_rounds;
    const int r = static_cast<int>(job % max_rounds) + 1;
    const Gen g{"", library(v2, r), true, false};
    sweep[p][r - 1] =
        worst_of(rows_of(run_generator(g, sweep_plans[p].n, sweep_plans[p].keys, 1000)));
    std::fprintf(stderr, "sweep n=%llu rounds=%d: worst %.2f\n",
                 static_cast<unsigned long long>(sweep_plans[p].n), r, sweep[p][r - 1]);
  });

  // Chosen round keys (the model with the default rounds) and the weak-key search.
  const uint64_t key_n = long_mode ? 1000003 : 131073;
  std::vector<Gen> chosen = {
      {"round keys all 0", model(RoundKind::kMix, def, 0), false, true},
      {"round keys all 0xffffffff", model(RoundKind::kMix, def, 0xffffffffll), false, true},
      {"round keys all 0x80000000", model(RoundKind::kMix, def, 0x80000000ll), false, true},
  };
  std::vector<double> chosen_worst(chosen.size());
  const uint64_t search_n = 131073;
  const int search_keys = long_mode ? 200 : 30;
  Search search_default, search_multiply8;
  parallel_for(chosen.size() + 2, threads, [&](size_t job) {
    if (job == 0) {
      search_default = weak_key_search(gens[0], search_n, search_keys, 100000);
    } else if (job == 1) {
      search_multiply8 = weak_key_search({"", model(RoundKind::kMultiply, 8), true, false},
                                         search_n, search_keys, 100000);
    } else {
      chosen_worst[job - 2] = worst_of(rows_of(run_generator(chosen[job - 2], key_n, 1)));
    }
  });
  for (double w : chosen_worst) rep.worst_default = std::max(rep.worst_default, w);
  rep.worst_default = std::max(rep.worst_default, std::fabs(search_default.adjusted));
  text << "chosen round keys (n = " << key_n << "):";
  for (size_t i = 0; i < chosen.size(); ++i) {
    text << " " << chosen[i].name << " " << fmt(chosen_worst[i]) << ";";
  }
  text << "\nweak-key search, n = " << search_n << ", " << search_keys
       << " keys: default worst key z = " << fmt(search_default.worst) << " (adjusted "
       << fmt(search_default.adjusted) << ", seed " << search_default.seed << ", "
       << search_default.member << "); multiply round 8 rounds: " << fmt(search_multiply8.worst)
       << " (adjusted " << fmt(search_multiply8.adjusted) << ", seed " << search_multiply8.seed
       << ", " << search_multiply8.member << ")\n";
  for (size_t i = 0; i < sweep.size(); ++i) {
    text << "rounds sweep n = " << sweep_plans[i].n << ":";
    for (size_t r = 0; r < sweep[i].size(); ++r) text << " " << r + 1 << ": " << fmt(sweep[i][r]);
    text << "\n";
  }

  // The markdown section.
  md << "## Structure-aware statistics\n\n"
     << "tools/quality_structure.cc defines them: pairs of positions one input difference apart "
        "(single-bit\nXOR in either half of the network, additions with carry, small additive "
        "differences, the inverse's\nXOR pairs), the collisions of their output differences per "
        "key (mod n and in the network's\ncoordinates), their distribution pooled over keys, "
        "and linear correlations of input and output\nbits. Each cell: the z-score pooled over "
        "the keys / the worst key's, both Sidak-adjusted for the\nmembers (and keys) they are the "
        "worst of, so |z| >= 4 keeps its meaning.\n\n";
  md << "Worst |z| of the default order over every statistic, size, chosen key and the weak-key "
        "search: "
     << fmt(rep.worst_default) << "; of the reference: " << fmt(rep.worst_reference) << ".\n\n";
  md << "| n | keys | statistic |";
  for (const Gen& g : gens) md << " " << g.name << " |";
  md << "\n|---|---|---|";
  for (size_t g = 0; g < gens.size(); ++g) md << "---|";
  md << "\n";
  for (size_t p = 0; p < plans.size(); ++p) {
    for (size_t r = 0; r < table[p][0].size(); ++r) {
      md << "| " << size_name(plans[p].n) << " | " << plans[p].keys << " | "
         << table[p][0][r].statistic << " |";
      for (size_t g = 0; g < gens.size(); ++g) {
        const Row& row = table[p][g][r];
        md << " " << fmt(row.pooled);
        if (row.has_worst_key) md << " / " << fmt(row.worst_key);
        md << " |";
      }
      md << "\n";
    }
  }
  md << "\nWorst |z| per size and generator:\n\n| n | keys |";
  for (const Gen& g : gens) md << " " << g.name << " |";
  md << "\n|---|---|";
  for (size_t g = 0; g < gens.size(); ++g) md << "---|";
  md << "\n";
  for (size_t p = 0; p < plans.size(); ++p) {
    md << "| " << size_name(plans[p].n) << " | " << plans[p].keys << " |";
    for (size_t g = 0; g < gens.size(); ++g) md << " " << fmt(worst_of(table[p][g])) << " |";
    md << "\n";
  }
  if (!sweep.empty()) {
    md << "\nRounds: the library's version 2 at each round count, worst |z| over every "
          "statistic above\n(seeds from 1000):\n\n| n | keys |";
    for (int r = 1; r <= max_rounds; ++r) md << " " << r << " |";
    md << "\n|---|---|";
    for (int r = 1; r <= max_rounds; ++r) md << "---|";
    md << "\n";
    for (size_t i = 0; i < sweep.size(); ++i) {
      md << "| " << size_name(sweep_plans[i].n) << " | " << sweep_plans[i].keys << " |";
      for (double w : sweep[i]) md << " " << fmt(w) << " |";
      md << "\n";
    }
  }
  md << "\nChosen round keys (the model network, default rounds, n = " << size_name(key_n)
     << "), worst |z|:";
  for (size_t i = 0; i < chosen.size(); ++i) {
    md << (i ? ";" : "") << " " << chosen[i].name << " " << fmt(chosen_worst[i]);
  }
  md << ".\n\nWeak-key search (n = " << search_n << ", seeds 100000 to " << 100000 + search_keys - 1
     << ", XOR collisions mod n and in network coordinates, " << search_default.statistics
     << " statistics per key): the default's worst key z = " << fmt(search_default.worst)
     << " (seed " << search_default.seed << ", " << search_default.member << "), adjusted "
     << fmt(search_default.adjusted)
     << "; the multiply round at 8 rounds: " << fmt(search_multiply8.worst) << " (seed "
     << search_multiply8.seed << ", " << search_multiply8.member << "), adjusted "
     << fmt(search_multiply8.adjusted) << ".\n";
  rep.text = text.str();
  rep.markdown = md.str();
  return rep;
}

}  // namespace quality
