// Quota schedule: nested two-way splits, each a Sturmian (Beatty) sequence floor(P * s + 1/2) of
// its parent's count. A two-way split is exact within 1/2 (the classical balance of Sturmian
// words); nesting adds the parent's error scaled by the share, and the tree search keeps the
// worst leaf within 1 where some tree allows it. Why not the alternatives: a per-position greedy
// (largest deficit) is within 1 but sequential; divisor methods (merging the datasets'
// arithmetic progressions) are random access but their error grows with the number of datasets.
#include "distsampler/policies/blend.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "distsampler/feistel.h"
#include "distsampler/hash.h"
#include "distsampler/policies/weighted.h"

namespace distsampler {
namespace {

using u128 = unsigned __int128;

// floor(p * share / 2^64 + 1/2).
uint64_t split(uint64_t p, uint64_t share) {
  return static_cast<uint64_t>((static_cast<u128>(p) * share + (u128{1} << 63)) >> 64);
}

uint64_t to_share(double s) {
  if (!(s > 0)) return 0;
  if (!(s < 1)) return ~uint64_t{0};
  return std::min<uint64_t>(static_cast<uint64_t>(std::ldexp(s, 64)), ~uint64_t{0});
}

struct Search {
  const std::vector<double>& w;  // weights of the datasets in the tree
  // Worst leaf width of the best tree over `mask` entered with width `width`; splits in preorder.
  double best(unsigned mask, double width, std::vector<int>* splits) const {
    if ((mask & (mask - 1)) == 0) return width;
    double total = 0;
    for (unsigned b = 0; b < w.size(); ++b) {
      if (mask & (1u << b)) total += w[b];
    }
    const unsigned low = mask & (~mask + 1);
    const unsigned rest = mask ^ low;
    double best_width = 1e300;
    std::vector<int> best_splits;
    // Subsets of `rest`, each joined with the lowest element: every unordered split once.
    for (unsigned sub = rest;; sub = (sub - 1) & rest) {
      const unsigned a = low | sub;
      const unsigned b = mask ^ a;
      if (b != 0) {
        double wa = 0;
        for (unsigned k = 0; k < w.size(); ++k) {
          if (a & (1u << k)) wa += w[k];
        }
        std::vector<int> sa;
        std::vector<int> sb;
        const double ea = best(a, 1 + wa / total * width, &sa);
        if (ea < best_width) {
          const double eb = best(b, 1 + (total - wa) / total * width, &sb);
          const double e = std::max(ea, eb);
          if (e < best_width) {
            best_width = e;
            best_splits.assign(1, static_cast<int>(a));
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

// Above kMaxExhaustive: split by weight into two near-equal halves, heaviest first.
void balanced_splits(const std::vector<double>& w, std::vector<uint64_t> items,
                     std::vector<std::vector<uint64_t>>* out) {
  if (items.size() <= 1) return;
  std::stable_sort(items.begin(), items.end(), [&](uint64_t a, uint64_t b) { return w[a] > w[b]; });
  std::vector<uint64_t> a;
  std::vector<uint64_t> b;
  double wa = 0;
  double wb = 0;
  for (uint64_t k : items) {
    if (wa <= wb) {
      a.push_back(k), wa += w[k];
    } else {
      b.push_back(k), wb += w[k];
    }
  }
  out->push_back(a);
  balanced_splits(w, a, out);
  balanced_splits(w, b, out);
}

}  // namespace

QuotaSchedule::QuotaSchedule(const std::vector<double>& weights) {
  const uint64_t k = weights.size();
  const double sum = detail::checked_weight_sum(weights);
  weights_.resize(k);
  std::vector<uint64_t> positive;
  for (uint64_t i = 0; i < k; ++i) {
    weights_[i] = weights[i] / sum;
    if (weights[i] > 0) positive.push_back(i);
  }
  // The tree's split sets, in preorder, as lists of dataset ids.
  std::vector<std::vector<uint64_t>> splits;
  if (positive.size() <= kMaxExhaustive) {
    std::vector<double> w;
    for (uint64_t d : positive) w.push_back(weights_[d]);
    std::vector<int> masks;
    Search{w}.best((1u << positive.size()) - 1, 0.0, &masks);
    for (int m : masks) {
      std::vector<uint64_t> set;
      for (uint64_t b = 0; b < positive.size(); ++b) {
        if (m & (1 << b)) set.push_back(positive[b]);
      }
      splits.push_back(set);
    }
  } else {
    balanced_splits(weights_, positive, &splits);
  }
  path_.assign(k, {});
  size_t next_split = 0;
  // Builds the subtree over `items` (sorted ids), consuming splits in preorder; returns its node.
  struct Builder {
    QuotaSchedule* self;
    const std::vector<std::vector<uint64_t>>& splits;
    size_t* next;
    int operator()(const std::vector<uint64_t>& items, double width, std::vector<int> path) const {
      const int id = static_cast<int>(self->nodes_.size());
      self->nodes_.push_back(Node{});
      if (items.size() == 1) {
        self->nodes_[id].dataset = items[0];
        self->path_[items[0]] = path;
        self->bound_ = std::max(self->bound_, width / 2);
        return id;
      }
      const std::vector<uint64_t>& first = splits[(*next)++];
      std::vector<uint64_t> second;
      double total = 0;
      double wa = 0;
      for (uint64_t d : items) {
        total += self->weights_[d];
        if (std::find(first.begin(), first.end(), d) != first.end()) {
          wa += self->weights_[d];
        } else {
          second.push_back(d);
        }
      }
      self->nodes_[id].share = to_share(wa / total);
      std::vector<int> pa = path;
      pa.push_back(id * 2 + 1);
      const int a = (*this)(first, 1 + wa / total * width, pa);
      std::vector<int> pb = path;
      pb.push_back(id * 2);
      const int b = (*this)(second, 1 + (total - wa) / total * width, pb);
      self->nodes_[id].first = a;
      self->nodes_[id].second = b;
      return id;
    }
  };
  Builder{this, splits, &next_split}(positive, 0.0, {});
}

BlendedSample QuotaSchedule::at(uint64_t i) const {
  uint64_t p0 = i;
  uint64_t p1 = i + 1;
  int node = 0;
  while (nodes_[node].first >= 0) {
    const Node& n = nodes_[node];
    const uint64_t c0 = split(p0, n.share);
    const uint64_t c1 = split(p1, n.share);
    if (c1 != c0) {
      p0 = c0, p1 = c1, node = n.first;
    } else {
      p0 -= c0, p1 -= c1, node = n.second;
    }
  }
  return BlendedSample{nodes_[node].dataset, p0};
}

uint64_t QuotaSchedule::count(uint64_t k, uint64_t i) const {
  if (k >= weights_.size()) {
    throw std::out_of_range("dataset = " + std::to_string(k) +
                            " is out of range; allowed: dataset < " +
                            std::to_string(weights_.size()));
  }
  if (weights_[k] == 0) return 0;
  uint64_t p = i;
  for (int step : path_[k]) {
    const uint64_t c = split(p, nodes_[step / 2].share);
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
}

BlendedSample BlendedSampler::global(uint64_t g) const {
  const BlendedSample s = schedule_.at(g);
  const uint64_t n = options_.sizes[s.dataset];
  const FeistelPermutation order(n, keys_[s.dataset], s.index / n);
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

}  // namespace distsampler
