// weighted.h: weighted sampling with replacement across ranks, one global stream for every W.
#ifndef DISTSAMPLER_POLICIES_WEIGHTED_H_
#define DISTSAMPLER_POLICIES_WEIGHTED_H_

#include <cstdint>
#include <vector>

#include "distsampler/partition.h"
#include "distsampler/seed.h"

namespace distsampler {

// Walker's alias table over per-sample weights (Vose's O(n) construction): a draw is one column
// chosen uniformly and one biased coin, O(1) whatever the weights. Built in IEEE double
// arithmetic in a fixed order, so the table has the same bits on every platform.
class AliasTable {
 public:
  AliasTable() = default;
  // Throws std::invalid_argument naming the first bad weight (negative, NaN or infinite) or when
  // the weights are empty or all zero.
  explicit AliasTable(const std::vector<double>& weights);

  uint64_t size() const { return alias_.size(); }
  // The index drawn by two uniform 64-bit words: column = scale_to(u, n); keep it when
  // v < threshold[column], else take its alias.
  uint64_t draw(uint64_t u, uint64_t v) const;
  // The probability this table gives to `index` (for tests): w_index / sum(w) up to rounding.
  double probability(uint64_t index) const;

 private:
  std::vector<uint64_t> threshold_;  // keep the column when v < threshold (2^64 - 1: always)
  std::vector<uint64_t> alias_;
};

namespace detail {
// The sum of `weights`; throws std::invalid_argument naming the first negative, NaN or infinite
// weight, or when the list is empty, all zero, or sums to infinity.
double checked_weight_sum(const std::vector<double>& weights);
}  // namespace detail

// Per-sample weights that balance classes: weight 1 / count(label), so that every class present
// is drawn equally often. Labels are any integers; throws std::invalid_argument when empty.
std::vector<double> class_balanced_weights(const std::vector<int64_t>& labels);

struct WeightedOptions {
  uint64_t size = 0;         // len(dataset); weights must have this length
  uint64_t num_samples = 0;  // draws per epoch, all ranks together (WeightedRandomSampler's)
  uint64_t world_size = 1;
  uint64_t rank = 0;
  Seed seed;
  bool drop_last = false;  // false: every rank gets ceil(num_samples / W) draws
};

// PyTorch's WeightedRandomSampler(weights, num_samples, replacement=True), distributed. Global
// draw g of epoch e is a pure function of (weights, seed, e, g):
//   u = hash_at(key(seed, e), 2g), v = hash_at(key(seed, e), 2g + 1), index = table.draw(u, v),
// so the global stream is the same for every world size and any draw is random access. Rank r
// reads global draws r, r + W, r + 2W, ... (the interleaved rule of partition.h); without
// drop_last the last draws run past num_samples and simply continue the stream (with
// replacement there is nothing to wrap around).
class WeightedSampler {
 public:
  // Validates the options (as Partition does) and the weights (length == size, finite,
  // non-negative, not all zero); throws std::invalid_argument naming the problem.
  WeightedSampler(const std::vector<double>& weights, const WeightedOptions& options);

  const WeightedOptions& options() const { return options_; }
  const AliasTable& table() const { return table_; }
  // Draws per rank.
  uint64_t num_samples() const { return partition_.num_samples(); }

  // Global draw g of epoch e (any g: the stream is unbounded).
  uint64_t global(uint64_t epoch, uint64_t g) const;
  // This rank's i-th draw of epoch e; requires i < num_samples().
  uint64_t operator()(uint64_t epoch, uint64_t i) const {
    return global(epoch, partition_.global_position(i));
  }
  // out[j] = (*this)(epoch, first + j); throws std::out_of_range outside [0, num_samples()).
  void fill(uint64_t epoch, uint64_t first, uint64_t count, uint64_t* out) const;
  // out[j] = global(epoch, first + j * stride) for j < count: any positions of the stream (a
  // pass resumed at a global position reads first = start + rank, stride = world size).
  void fill_global(uint64_t epoch, uint64_t first, uint64_t stride, uint64_t count,
                   uint64_t* out) const;

 private:
  WeightedOptions options_;
  Partition partition_;
  AliasTable table_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_POLICIES_WEIGHTED_H_
