// blend.h: blending datasets by weight with exact quotas on every prefix, in O(datasets) memory.
#ifndef DISTSAMPLER_POLICIES_BLEND_H_
#define DISTSAMPLER_POLICIES_BLEND_H_

#include <cstdint>
#include <vector>

#include "distsampler/partition.h"
#include "distsampler/seed.h"

namespace distsampler {

// One position of a blended stream: sample `index` of dataset `dataset`.
struct BlendedSample {
  uint64_t dataset = 0;
  uint64_t index = 0;
  friend bool operator==(BlendedSample a, BlendedSample b) {
    return a.dataset == b.dataset && a.index == b.index;
  }
};

namespace detail {
// A node of QuotaSchedule's tree.
struct QuotaNode {
  uint64_t total = 0;        // t_v: the sum of its leaves' W
  uint64_t first_total = 0;  // a: the first child's total (internal nodes)
  uint64_t half = 0;         // ceil(t_v / 2)
  uint64_t share = 0;        // floor(a * 2^64 / t_v): a split's first guess, then corrected
  int first = -1;            // children (node indices), or -1 for a leaf
  int second = -1;
  uint64_t dataset = 0;  // leaves only
};
}  // namespace detail

// Which dataset each position of an unbounded stream takes, so that after any prefix of length i
// dataset k has been taken c_k(i) times with
//
//   |c_k(i) - i * W_k / T| <= error_bound()   for every k and every i in [0, 2^64 - 1],
//
// exactly (integer arithmetic throughout), where W_k = quota_weights()[k] and T = quota_total()
// are integers fixed at construction: the weights' exact ratios in lowest terms whenever those
// sum to <= 2^62 (quota_exact(); e.g. any integers summing to <= 2^62, or
// 0.5/0.25/0.15/0.07/0.03, as every double is a dyadic rational), and otherwise W_k =
// round(weights[k] * 2^s) (>= 1 for a positive weight) with the largest s that keeps T <= 2^62, so
// T > 2^61 - K and |W_k / T - w_k| < (1 + K w_k) / T for the normalized weights w_k (K datasets of
// positive weight). error_bound() is below 1 for up to 4 datasets of positive weight and below 1.68
// for any number; c_k(i) is a pure function of i computed in O(depth) time (depth < K) with O(K)
// memory.
//
// Construction (blend.cc has the proof): a binary tree over the datasets of positive weight;
// the root's count is i, and a node whose leaves weigh t in all, with count P, gives its first
// child (leaves weighing a) floor(P * a / t + 1/2), exactly, and its second child the rest. Both
// counts are non-decreasing in P and grow by at most one per position, so position i belongs to
// the one leaf whose count grows between i and i + 1. Leaf k's bound is (1/2) * sum of W_k / t_v
// over the nodes v on its path below the root, leaf included; the constructor tries every tree
// up to kMaxExhaustive datasets, Huffman's tree and a balanced split above that, and keeps the
// smallest worst bound, rounded up by < depth * 2^-51.
class QuotaSchedule {
 public:
  static constexpr uint64_t kMaxExhaustive = 8;
  // The largest quota_total().
  static constexpr uint64_t kMaxTotal = uint64_t{1} << 62;

  QuotaSchedule() = default;
  // Throws std::invalid_argument for an empty list or a weight that is negative, NaN, infinite,
  // or when all are zero. Zero weights are allowed: such a dataset is never taken.
  explicit QuotaSchedule(const std::vector<double>& weights);

  uint64_t num_datasets() const { return weights_.size(); }
  // W_k / T rounded to double (sum 1 up to rounding); the exact targets are the integers below.
  const std::vector<double>& weights() const { return weights_; }
  // The integer weights W_k the quotas follow exactly, their sum T (<= kMaxTotal), and whether
  // W_k / T equals weights[k] / (sum of weights) exactly for every k.
  const std::vector<uint64_t>& quota_weights() const { return quota_weights_; }
  uint64_t quota_total() const { return total_; }
  bool quota_exact() const { return exact_; }
  // Proven bound on |c_k(i) - i * W_k / T| for every k and every i < 2^64.
  double error_bound() const { return bound_; }

  // The dataset at stream position i (any i < 2^64), and how many earlier positions took it.
  BlendedSample at(uint64_t i) const;
  // c_k(i): positions among [0, i) that took dataset k.
  uint64_t count(uint64_t k, uint64_t i) const;
  // out[j] = at(first + j).dataset for j < count.
  void datasets(uint64_t first, uint64_t count, uint64_t* out) const;

 private:
  std::vector<double> weights_;
  std::vector<uint64_t> quota_weights_;
  uint64_t total_ = 0;
  bool exact_ = false;
  std::vector<detail::QuotaNode> nodes_;
  int root_ = 0;
  std::vector<std::vector<int>> path_;  // per dataset: node * 2 + (went first) from the root
  double bound_ = 0;
};

struct BlendOptions {
  std::vector<uint64_t> sizes;     // samples per dataset, each >= 1 when its weight is > 0
  std::vector<double> weights;     // one per dataset, normalized internally
  uint64_t samples_per_epoch = 0;  // positions of the blended stream per epoch, all ranks
  uint64_t world_size = 1;
  uint64_t rank = 0;
  Seed seed;
  bool drop_last = false;  // as DistributedSampler: pad by wrap-around within the epoch, or drop
};

// Datasets blended by weight into one stream, each dataset read in its own shuffled order:
// stream position g takes (k, j) = schedule.at(g); the j-th sample drawn from dataset k is
// FeistelPermutation(size_k, key(seed, k), j / size_k)(j mod size_k), so each dataset's epochs
// cycle on their own (a small dataset is reshuffled every time it is used up) and stay a
// permutation within each of its epochs. Epoch e of the blend is stream positions
// [e * samples_per_epoch, (e + 1) * samples_per_epoch), cut among ranks by partition.h's rule,
// so the global stream is the same for every world size. O(K) memory, O(K) per position.
class BlendedSampler {
 public:
  // Validates (one size per weight, sizes >= 1 for positive weights, sizes summing to at most
  // 2^64 - 1 so that flat indices never wrap, Partition's rules) and throws
  // std::invalid_argument naming the field.
  explicit BlendedSampler(const BlendOptions& options);

  const QuotaSchedule& schedule() const { return schedule_; }
  uint64_t num_samples() const { return partition_.num_samples(); }
  uint64_t num_datasets() const { return schedule_.num_datasets(); }

  // Stream position g (any g, across epochs): the dataset and the sample index within it.
  BlendedSample global(uint64_t g) const;
  // This rank's i-th sample of epoch e; requires i < num_samples().
  BlendedSample operator()(uint64_t epoch, uint64_t i) const;
  // out[j] = (*this)(epoch, first + j); throws std::out_of_range outside [0, num_samples()).
  void fill(uint64_t epoch, uint64_t first, uint64_t count, BlendedSample* out) const;
  // The sample's index in the concatenation of the datasets (torch's ConcatDataset order); below
  // the sum of the sizes, which the constructor checks fits in 64 bits.
  uint64_t flat(BlendedSample s) const { return offsets_[s.dataset] + s.index; }
  // For j < count, the sample at stream position positions[j] (any, across epochs: a resumed
  // pass): datasets[j], and indices[j] within that dataset or, when flat, flat(sample).
  void fill_global(const uint64_t* positions, uint64_t count, uint64_t* datasets, uint64_t* indices,
                   bool flat) const;

 private:
  BlendOptions options_;
  Partition partition_;
  QuotaSchedule schedule_;
  std::vector<uint64_t> keys_;     // per dataset order key
  std::vector<uint64_t> offsets_;  // prefix sums of sizes
};

}  // namespace distsampler

#endif  // DISTSAMPLER_POLICIES_BLEND_H_
