// Quota schedule: nested two-way splits, each a Sturmian (Beatty) sequence floor(P a / t + 1/2)
// of its parent's count P, computed exactly: a / t is a ratio of integer weights (t <= 2^62), a
// 64-bit fixed-point guess of the quotient is off by at most one and the remainder
// d = P a - c t (it fits an int64) corrects it and says whether the split grows at P + 1.
//
// Bound. A split c is within 1/2 of P a / t (c - P a / t in (-1/2, 1/2]: the classical balance of
// Sturmian words), so a child's error is r + s e (r that rounding, s its share, e its parent's):
// a leaf's bound is (1/2) sum over the nodes v below the root on its path, the leaf included, of
// W_k / t_v. Every tree over up to 8 datasets is searched; above that Huffman's tree and a
// balanced split are compared. In Huffman's tree, when v and its sibling were joined they were
// the two lightest nodes, so v's parent's sibling, joined later, weighs at least v: every node's
// total is at least its child's plus that child's child, the totals on a path from a leaf grow at
// least like Fibonacci numbers (W_k, W_k, 2 W_k, 3 W_k, 5 W_k, ...) and the bound is below
// (sum of 1 / F_j) / 2 = 1.67994... Widths (twice the bound) are fixed-point and rounded up at
// every step, so the reported bound is never below the true one, and the search is integer
// arithmetic: the same tree on every compiler and architecture.
//
// Why not the alternatives: a per-position greedy (largest deficit) is within 1 but sequential;
// divisor methods (merging the datasets' arithmetic progressions) are random access but their
// error grows with the number of datasets; a double or 64-bit fixed-point share (as before) drifts
// by i * 2^-53 (1.67 at i = 10^17 for weights 1, 2, 3).
#include "distsampler/policies/blend.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string>
#include <utility>

#include "distsampler/feistel.h"
#include "distsampler/hash.h"
#include "distsampler/policies/weighted.h"

namespace distsampler {
namespace {

using u128 = unsigned __int128;
using detail::QuotaNode;

// Exact integer weights (the W_k) ----------------------------------------------------------------

// A positive finite double as mantissa * 2^exponent with an odd mantissa (< 2^53).
struct Dyadic {
  uint64_t mantissa = 0;
  int exponent = 0;
};

Dyadic dyadic(double w) {
  int e = 0;
  const double f = std::frexp(w, &e);  // w = f * 2^e, f in [1/2, 1): f * 2^53 is an integer
  uint64_t m = static_cast<uint64_t>(std::ldexp(f, 53));
  e -= 53;
  const int zeros = __builtin_ctzll(m);
  return Dyadic{m >> zeros, e + zeros};
}

int bit_length(uint64_t m) { return m == 0 ? 0 : 64 - __builtin_clzll(m); }

uint64_t gcd(uint64_t a, uint64_t b) {
  while (b != 0) a = std::exchange(b, a % b);
  return a;
}

// round(d * 2^shift), halves up, as long as the result is below 2^64 (callers keep it <= 2^62).
uint64_t scaled(Dyadic d, int shift) {
  const int e = d.exponent + shift;
  if (e >= 0) return d.mantissa << e;
  if (-e > 53) return 0;  // d * 2^shift < 2^53 / 2^54
  return (d.mantissa + (uint64_t{1} << (-e - 1))) >> -e;
}

struct IntegerWeights {
  std::vector<uint64_t> w;
  uint64_t total = 0;
  bool exact = false;
};

// The weights as integers summing to <= kMaxTotal: exactly when their lowest terms fit, otherwise
// max(1, round(weight * 2^s)) for positive weights with the largest s that fits.
IntegerWeights integer_weights(const std::vector<double>& weights, uint64_t max_total) {
  std::vector<Dyadic> d(weights.size());
  uint64_t g = 0;
  int low = 0;
  int high = 0;  // every weight < 2^high
  uint64_t positive = 0;
  for (uint64_t k = 0; k < weights.size(); ++k) {
    if (!(weights[k] > 0)) continue;
    d[k] = dyadic(weights[k]);
    const int top = d[k].exponent + bit_length(d[k].mantissa);
    low = positive == 0 ? d[k].exponent : std::min(low, d[k].exponent);
    high = positive == 0 ? top : std::max(high, top);
    g = gcd(g, d[k].mantissa);
    ++positive;
  }
  IntegerWeights out;
  out.w.assign(weights.size(), 0);
  // Lowest terms: W_k = (m_k / g) * 2^(e_k - low); g is odd, so it divides every W_k only through
  // the mantissas.
  bool fits = true;
  u128 sum = 0;
  for (uint64_t k = 0; fits && k < weights.size(); ++k) {
    if (d[k].mantissa == 0) continue;
    const uint64_t m = d[k].mantissa / g;
    const int shift = d[k].exponent - low;
    fits = shift + bit_length(m) <= 62;  // W_k < 2^62
    if (!fits) break;
    out.w[k] = m << shift;
    sum += out.w[k];
    fits = sum <= max_total;
  }
  if (fits) {
    out.total = static_cast<uint64_t>(sum);
    out.exact = true;
    return out;
  }
  // Quantized: with s = 61 - high - ceil(log2(positive)) every W_k <= 2^(61 - ceil(log2)), so the
  // sum fits; then the largest s that still fits (the sum is non-decreasing in s).
  auto total_at = [&](int s) {
    u128 t = 0;
    for (uint64_t k = 0; k < weights.size(); ++k) {
      if (d[k].mantissa != 0) t += std::max<uint64_t>(1, scaled(d[k], s));
    }
    return t;
  };
  int s = 61 - high - bit_length(positive - 1);
  while (total_at(s + 1) <= max_total) ++s;
  for (uint64_t k = 0; k < weights.size(); ++k) {
    if (d[k].mantissa != 0) out.w[k] = std::max<uint64_t>(1, scaled(d[k], s));
  }
  out.total = static_cast<uint64_t>(total_at(s));
  return out;
}

// Trees and their bounds --------------------------------------------------------------------------

// Widths are fixed-point with kOne = 1 and rounded up at every step, so a computed bound is never
// below the true one. A leaf's width is twice its bound; a child's is 1 + (t_child / t_v) * the
// parent's (the root's is 0).
constexpr int kFractionBits = 50;
constexpr uint64_t kOne = uint64_t{1} << kFractionBits;
constexpr uint64_t kInfinite = ~uint64_t{0};
constexpr uint64_t kWidthCap = uint64_t{1} << 62;  // far above any tree kept (< 3.4 * kOne)

uint64_t child_width(uint64_t child_total, uint64_t total, uint64_t width) {
  if (width >= kWidthCap) return kInfinite;
  const u128 p = static_cast<u128>(child_total) * width;
  return kOne + static_cast<uint64_t>((p + total - 1) / total);
}

struct Tree {
  std::vector<QuotaNode> nodes;
  int root = -1;

  int leaf(uint64_t dataset, uint64_t weight) {
    QuotaNode n;
    n.total = weight;
    n.dataset = dataset;
    nodes.push_back(n);
    return static_cast<int>(nodes.size()) - 1;
  }
  int join(int first, int second) {
    QuotaNode n;
    n.total = nodes[first].total + nodes[second].total;
    n.first_total = nodes[first].total;
    n.half = n.total / 2 + n.total % 2;
    n.share = static_cast<uint64_t>((static_cast<u128>(n.first_total) << 64) / n.total);
    n.first = first;
    n.second = second;
    nodes.push_back(n);
    return static_cast<int>(nodes.size()) - 1;
  }
  // The largest leaf width below `node` entered with `width` (kInfinite past kWidthCap).
  uint64_t worst(int node, uint64_t width) const {
    const QuotaNode& n = nodes[node];
    if (n.first < 0) return width;
    const uint64_t a = worst(n.first, child_width(n.first_total, n.total, width));
    const uint64_t b = worst(n.second, child_width(n.total - n.first_total, n.total, width));
    return std::max(a, b);
  }
};

// Every tree over up to kMaxExhaustive datasets: the smallest worst leaf width, with its first
// children (bit masks over `w`) in preorder. Integer arithmetic, so the same tree everywhere.
struct Search {
  const std::vector<uint64_t>& w;
  uint64_t total(unsigned mask) const {
    uint64_t t = 0;
    for (unsigned b = 0; b < w.size(); ++b) {
      if (mask & (1u << b)) t += w[b];
    }
    return t;
  }
  uint64_t best(unsigned mask, uint64_t width, std::vector<unsigned>* splits) const {
    if ((mask & (mask - 1)) == 0) return width;
    const uint64_t t = total(mask);
    const unsigned low = mask & (~mask + 1);
    const unsigned rest = mask ^ low;
    uint64_t best_width = kInfinite;
    std::vector<unsigned> best_splits;
    // Subsets of `rest`, each joined with the lowest element: every unordered split once.
    for (unsigned sub = rest;; sub = (sub - 1) & rest) {
      const unsigned a = low | sub;
      const unsigned b = mask ^ a;
      if (b != 0) {
        const uint64_t ta = total(a);
        std::vector<unsigned> sa;
        std::vector<unsigned> sb;
        const uint64_t ea = best(a, child_width(ta, t, width), &sa);
        if (ea < best_width) {
          const uint64_t eb = best(b, child_width(t - ta, t, width), &sb);
          const uint64_t e = std::max(ea, eb);
          if (e < best_width) {
            best_width = e;
            best_splits.assign(1, a);
            best_splits.insert(best_splits.end(), sa.begin(), sa.end());
            best_splits.insert(best_splits.end(), sb.begin(), sb.end());
          }
        }
      }
      if (sub == 0) break;
    }
    *splits = best_splits;
    return best_width;
  }
};

// Builds the searched tree over `mask`, consuming `splits` in preorder.
int build_searched(Tree* tree, const std::vector<uint64_t>& ids, const std::vector<uint64_t>& w,
                   unsigned mask, const std::vector<unsigned>& splits, size_t* next) {
  if ((mask & (mask - 1)) == 0) {
    const int b = __builtin_ctz(mask);
    return tree->leaf(ids[b], w[b]);
  }
  const unsigned a = splits[(*next)++];
  const int first = build_searched(tree, ids, w, a, splits, next);
  const int second = build_searched(tree, ids, w, mask ^ a, splits, next);
  return tree->join(first, second);
}

// Huffman's tree: join the two lightest (ties: the older node) until one is left.
Tree huffman(const std::vector<uint64_t>& ids, const std::vector<uint64_t>& w) {
  Tree tree;
  using Entry = std::pair<uint64_t, int>;  // (total, node): all distinct, so the order is total
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  for (uint64_t j = 0; j < ids.size(); ++j) {
    const int node = tree.leaf(ids[j], w[j]);
    queue.emplace(w[j], node);
  }
  while (queue.size() > 1) {
    const int a = queue.top().second;
    queue.pop();
    const int b = queue.top().second;
    queue.pop();
    const int node = tree.join(a, b);
    queue.emplace(tree.nodes[node].total, node);
  }
  tree.root = queue.top().second;
  return tree;
}

// Split by weight into two near-equal halves, heaviest first, and recurse.
int balanced(Tree* tree, std::vector<std::pair<uint64_t, uint64_t>> items) {  // (id, weight)
  if (items.size() == 1) return tree->leaf(items[0].first, items[0].second);
  std::stable_sort(items.begin(), items.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  std::vector<std::pair<uint64_t, uint64_t>> a;
  std::vector<std::pair<uint64_t, uint64_t>> b;
  uint64_t wa = 0;
  uint64_t wb = 0;
  for (const auto& item : items) {
    if (wa <= wb) {
      a.push_back(item), wa += item.second;
    } else {
      b.push_back(item), wb += item.second;
    }
  }
  const int first = balanced(tree, a);
  const int second = balanced(tree, b);
  return tree->join(first, second);
}

// floor(p * a / t + 1/2) for node n (a = first_total, t = total <= 2^62), and d = p * a - c * t,
// which lies in [-t/2, t/2). The 64-bit guess from `share` is c or c - 1, so d fits an int64
// before and after the correction.
struct Split {
  uint64_t c;
  int64_t d;
};

inline Split split(uint64_t p, const QuotaNode& n) {
  uint64_t c = static_cast<uint64_t>((static_cast<u128>(p) * n.share + (u128{1} << 63)) >> 64);
  auto d = static_cast<int64_t>(p * n.first_total - c * n.total);  // exact mod 2^64
  if (d >= static_cast<int64_t>(n.half)) {
    ++c;
    d -= static_cast<int64_t>(n.total);
  }
  return Split{c, d};
}

}  // namespace

QuotaSchedule::QuotaSchedule(const std::vector<double>& weights) {
  const uint64_t k = weights.size();
  detail::checked_weight_sum(weights);
  IntegerWeights integers = integer_weights(weights, kMaxTotal);
  quota_weights_ = std::move(integers.w);
  total_ = integers.total;
  exact_ = integers.exact;
  weights_.resize(k);
  std::vector<uint64_t> ids;
  std::vector<uint64_t> w;
  for (uint64_t d = 0; d < k; ++d) {
    weights_[d] = static_cast<double>(quota_weights_[d]) / static_cast<double>(total_);
    if (quota_weights_[d] > 0) ids.push_back(d), w.push_back(quota_weights_[d]);
  }
  Tree tree;
  uint64_t width = 0;
  if (ids.size() <= kMaxExhaustive) {
    std::vector<unsigned> splits;
    const unsigned all = (1u << ids.size()) - 1;
    Search{w}.best(all, 0, &splits);
    size_t next = 0;
    tree.root = build_searched(&tree, ids, w, all, splits, &next);
    width = tree.worst(tree.root, 0);
  } else {
    tree = huffman(ids, w);
    width = tree.worst(tree.root, 0);
    Tree other;
    std::vector<std::pair<uint64_t, uint64_t>> items;
    for (uint64_t j = 0; j < ids.size(); ++j) items.emplace_back(ids[j], w[j]);
    other.root = balanced(&other, items);
    const uint64_t other_width = other.worst(other.root, 0);
    if (other_width < width) tree = std::move(other), width = other_width;
  }
  // width < 3.36 * kOne < 2^52 (Huffman's bound), so the conversion is exact.
  bound_ = std::ldexp(static_cast<double>(width), -(kFractionBits + 1));
  nodes_ = std::move(tree.nodes);
  root_ = tree.root;
  path_.assign(k, {});
  std::vector<std::pair<int, std::vector<int>>> stack{{root_, {}}};
  while (!stack.empty()) {
    auto [node, path] = std::move(stack.back());
    stack.pop_back();
    const QuotaNode& n = nodes_[node];
    if (n.first < 0) {
      path_[n.dataset] = std::move(path);
      continue;
    }
    std::vector<int> second = path;
    second.push_back(node * 2);
    path.push_back(node * 2 + 1);
    stack.emplace_back(n.first, std::move(path));
    stack.emplace_back(n.second, std::move(second));
  }
}

BlendedSample QuotaSchedule::at(uint64_t i) const {
  // The first child's count grows from p to p + 1 exactly when 2 (d + a) >= t.
  uint64_t p = i;
  int node = root_;
  while (nodes_[node].first >= 0) {
    const QuotaNode& n = nodes_[node];
    const Split s = split(p, n);
    if (s.d + static_cast<int64_t>(n.first_total) >= static_cast<int64_t>(n.half)) {
      p = s.c, node = n.first;
    } else {
      p -= s.c, node = n.second;
    }
  }
  return BlendedSample{nodes_[node].dataset, p};
}

uint64_t QuotaSchedule::count(uint64_t k, uint64_t i) const {
  if (k >= weights_.size()) {
    throw std::out_of_range("dataset = " + std::to_string(k) +
                            " is out of range; allowed: dataset < " +
                            std::to_string(weights_.size()));
  }
  if (quota_weights_[k] == 0) return 0;
  uint64_t p = i;
  for (int step : path_[k]) {
    const uint64_t c = split(p, nodes_[step / 2]).c;
    p = (step % 2 == 1) ? c : p - c;
  }
  return p;
}

BlendedSampler::BlendedSampler(const BlendOptions& options)
    : options_(options),
      partition_{options.samples_per_epoch, options.world_size, options.rank, options.drop_last,
                 0} {
  partition_.validate();
  if (options.sizes.size() != options.weights.size()) {
    throw std::invalid_argument("sizes has length " + std::to_string(options.sizes.size()) +
                                "; allowed: one size per weight (" +
                                std::to_string(options.weights.size()) + " weights)");
  }
  schedule_ = QuotaSchedule(options.weights);
  uint64_t offset = 0;
  for (uint64_t k = 0; k < options.sizes.size(); ++k) {
    if (options.weights[k] > 0 &&
        (options.sizes[k] == 0 || options.sizes[k] > FeistelPermutation::kMaxSize)) {
      throw std::invalid_argument("sizes[" + std::to_string(k) +
                                  "] = " + std::to_string(options.sizes[k]) +
                                  " is not allowed for a dataset of positive weight; allowed: 1 "
                                  "<= size <= 2^63");
    }
    keys_.push_back(derive_key(options.seed.bits(), k, kDomainBlend));
    offsets_.push_back(offset);
    offset += options.sizes[k];
  }
  // Flat indices run up to the sum of the sizes: refuse a sum that would wrap them.
  u128 sum = 0;
  for (uint64_t size : options.sizes) sum += size;
  if (sum > ~uint64_t{0}) {
    std::string digits;
    for (; sum != 0; sum /= 10) digits.insert(digits.begin(), static_cast<char>('0' + sum % 10));
    throw std::invalid_argument("sizes sum to " + digits +
                                "; allowed: a sum <= 2^64 - 1 = 18446744073709551615, so that "
                                "every flat (concatenated) index fits in 64 bits");
  }
}

BlendedSample BlendedSampler::global(uint64_t g) const {
  const BlendedSample s = schedule_.at(g);
  const uint64_t n = options_.sizes[s.dataset];
  // Version 1: blend orders are frozen by their tests and their checkpoints carry no version.
  const FeistelPermutation order(n, keys_[s.dataset], s.index / n,
                                 FeistelPermutation::kVersion1Rounds,
                                 FeistelPermutation::kVersion1);
  return BlendedSample{s.dataset, order(s.index % n)};
}

BlendedSample BlendedSampler::operator()(uint64_t epoch, uint64_t i) const {
  const uint64_t spe = options_.samples_per_epoch;
  if (spe != 0 && epoch > (~uint64_t{0} - spe) / spe) {
    throw std::out_of_range("epoch = " + std::to_string(epoch) +
                            " is too large; allowed: (epoch + 1) * samples_per_epoch < 2^64");
  }
  return global(epoch * spe + partition_.order_position(i));
}

void BlendedSampler::fill(uint64_t epoch, uint64_t first, uint64_t count,
                          BlendedSample* out) const {
  const uint64_t n = num_samples();
  if (first > n || count > n - first) {
    throw std::out_of_range(
        "window [start = " + std::to_string(first) + ", start + count = " + std::to_string(first) +
        " + " + std::to_string(count) +
        ") is out of range; allowed: start + count <= num_samples = " + std::to_string(n));
  }
  for (uint64_t j = 0; j < count; ++j) out[j] = (*this)(epoch, first + j);
}

void QuotaSchedule::datasets(uint64_t first, uint64_t count, uint64_t* out) const {
  for (uint64_t j = 0; j < count; ++j) out[j] = at(first + j).dataset;
}

void BlendedSampler::fill_global(const uint64_t* positions, uint64_t count, uint64_t* datasets,
                                 uint64_t* indices, bool flat) const {
  for (uint64_t j = 0; j < count; ++j) {
    const BlendedSample s = global(positions[j]);
    datasets[j] = s.dataset;
    indices[j] = flat ? this->flat(s) : s.index;
  }
}

}  // namespace distsampler
