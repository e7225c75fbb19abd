// feistel_structure.cc: the battery's statistics that know the Feistel construction (issue 20).
// Those of whole_permutation.cc look at a permutation as a whole; these look where a Feistel
// network with too few rounds, or a weak round function, leaves structure: pairs of positions one
// input difference apart, and what the network makes of the difference.
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
//   uniform on [1, n) (what whole_permutation.cc's pair-difference statistic computes at two lags).
// Linear correlations of input and output bits: bit_correlations.h.
// Multiple comparisons: a row's worst key (and worst member, worst cell) is the largest |z| of
// many; it is reported as its Sidak-adjusted z, the deviate whose two-sided tail is 1 - (1 -
// p)^count, so that |z| >= 4 keeps its meaning (once in 16,000) whatever the number of keys or
// members.
//
// Generators: the library's orders (version 2 at any rounds, version 1), the reference shuffle,
// and a model of version 2's network with a pluggable round function and chosen round keys
// (feistel_model.h). A weak-key search runs the XOR statistics over many keys and reports the
// worst. feistel_structure_report.cc runs them all and writes the tables.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bit_correlations.h"
#include "stats.h"
#include "feistel_structure.h"

namespace quality {
namespace {

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
  LinearStats linear;
  explicit SizeStats(uint64_t n_)
      : n(n_), members(members_of(n_)), stats(members.size()), linear(n_) {}
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
SizeStats run_generator(const Gen& g, uint64_t n, int keys, uint64_t first_seed) {
  SizeStats st(n);
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
    st.linear.add(p, seed);
    ++st.keys;
  }
  return st;
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
  st.linear.append_rows(rows);
  return rows;
}

}  // namespace

std::vector<Row> measure(const Gen& g, uint64_t n, int keys, uint64_t first_seed) {
  return rows_of(run_generator(g, n, keys, first_seed));
}

double worst_of(const std::vector<Row>& rows) {
  double w = 0;
  for (const Row& r : rows) {
    w = std::max(w, std::fabs(r.pooled));
    if (r.has_worst_key) w = std::max(w, std::fabs(r.worst_key));
  }
  return w;
}

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

}  // namespace quality
