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

// Which dataset each position of an unbounded stream takes, so that after any prefix of length i
// dataset k has been taken c_k(i) times with |c_k(i) - i * w_k| <= error_bound() (<= 1 whenever
// a tree is found, always for up to 4 datasets; see the construction below), and c_k(i) is a
// pure function of i computed in O(depth) <= O(K) time with O(K) memory.
//
// Construction: a binary tree over the datasets. The root's count is i. A node with count P
// gives its first child floor(P * s + 1/2) (s = the child's share of the node's weight, as a
// 64-bit fixed-point fraction) and its second child the rest; both counts are non-decreasing in
// i and grow by at most one per position, so position i belongs to the one leaf whose count
// grows between i and i + 1. If a node's error (count - i * weight) lies in [-E/2, E/2], its
// children's lie in [-(1 + s E)/2, (1 + s E)/2]: children of the root are within 1/2, leaves at
// depth two within (1 + s)/2 < 1, and deeper leaves depend on the shares on their path. The
// constructor searches every tree (up to 8 datasets; a balanced split by weight above that) for
// the smallest worst-case bound and reports it.
class QuotaSchedule {
 public:
  static constexpr uint64_t kMaxExhaustive = 8;

  QuotaSchedule() = default;
  // Throws std::invalid_argument for an empty list or a weight that is negative, NaN, infinite,
  // or when all are zero. Zero weights are allowed: such a dataset is never taken.
  explicit QuotaSchedule(const std::vector<double>& weights);

  uint64_t num_datasets() const { return weights_.size(); }
  // The normalized weights w_k (sum 1).
  const std::vector<double>& weights() const { return weights_; }
  // Proven bound on |c_k(i) - i * w_k| for every k and i (rounding of the weights aside, about
  // i * 2^-52).
  double error_bound() const { return bound_; }

  // The dataset at stream position i, and how many earlier positions took that dataset.
  BlendedSample at(uint64_t i) const;
  // c_k(i): positions among [0, i) that took dataset k.
  uint64_t count(uint64_t k, uint64_t i) const;

 private:
  struct Node {
    uint64_t share = 0;  // first child's share of this node's weight, times 2^64
    int first = -1;      // children (node indices), or -1 for a leaf
    int second = -1;
    uint64_t dataset = 0;  // leaves only
  };
  int build(const std::vector<uint64_t>& datasets, const std::vector<int>& split_masks);

  std::vector<double> weights_;
  std::vector<Node> nodes_;             // nodes_[0] is the root
  std::vector<std::vector<int>> path_;  // per dataset: (node, went_first) steps from the root
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
  // Validates (one size per weight, sizes >= 1 for positive weights, Partition's rules) and
  // throws std::invalid_argument naming the field.
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
  // The sample's index in the concatenation of the datasets (torch's ConcatDataset order).
  uint64_t flat(BlendedSample s) const { return offsets_[s.dataset] + s.index; }

 private:
  BlendOptions options_;
  Partition partition_;
  QuotaSchedule schedule_;
  std::vector<uint64_t> keys_;     // per dataset order key
  std::vector<uint64_t> offsets_;  // prefix sums of sizes
};

}  // namespace distsampler

#endif  // DISTSAMPLER_POLICIES_BLEND_H_
