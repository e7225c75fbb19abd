// sampler.h: a rank's view of an epoch, order x partition, with the epoch as an argument.
#ifndef DISTSAMPLER_SAMPLER_H_
#define DISTSAMPLER_SAMPLER_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>

#include "distsampler/order.h"
#include "distsampler/partition.h"
#include "distsampler/seed.h"

namespace distsampler {

// PyTorch's DistributedSampler parameters, plus the choice of order.
struct SamplerOptions {
  uint64_t size = 0;        // len(dataset)
  uint64_t world_size = 1;  // num_replicas
  uint64_t rank = 0;
  Seed seed;  // any integer in [-2^63, 2^64 - 1], as torch.Generator.manual_seed takes
  bool shuffle = true;
  bool drop_last = false;
  OrderKind order = OrderKind::kTorch;
  RandpermVariant randperm = RandpermVariant::kCurrent;
  // 0: the version's default (FeistelPermutation::default_rounds: 8 for either version).
  int feistel_rounds = FeistelPermutation::kVersionDefaultRounds;
  // Duplicate-free evaluation without padding: rank sizes differ by at most one (partition.h).
  // Excludes drop_last. For padded-with-mask evaluation keep the default padding and skip the
  // samples RankView::is_padding flags.
  bool uneven = false;
  // Which construction of the Feistel order (feistel.h): 2 for new jobs; 1 reproduces orders
  // (and resumes checkpoints) of earlier releases bit for bit.
  int feistel_version = FeistelPermutation::kDefaultVersion;

  OrderOptions order_options() const {
    return OrderOptions{size, seed, shuffle, order, randperm, feistel_rounds, feistel_version};
  }
};

// The dataset indices one rank reads in one epoch: index i of the view is
// order[partition.order_position(i)]. A value type, cheap to copy (the order is shared).
class RankView {
 public:
  RankView(std::shared_ptr<const EpochOrder> order, const Partition& partition, uint64_t epoch);

  uint64_t size() const { return size_; }
  uint64_t epoch() const { return epoch_; }
  const Partition& partition() const { return partition_; }
  const EpochOrder& order() const { return *order_; }

  // Requires i < size().
  uint64_t operator[](uint64_t i) const { return order_->at(partition_.order_position(i)); }
  // Throws std::out_of_range when i >= size().
  uint64_t at(uint64_t i) const;
  // Whether sample i (< size()) is padding, a repeat that evaluation metrics must skip.
  bool is_padding(uint64_t i) const { return partition_.is_padding(i); }
  // Samples that are not padding; they come first, the padding (if any) is the last sample.
  uint64_t num_real() const { return partition_.num_real(); }
  // out[j] = (*this)[first + j] for j < count, in bulk; throws std::out_of_range when the window
  // [first, first + count) is not inside [0, size()).
  void fill(uint64_t first, uint64_t count, uint64_t* out) const;

  class iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = uint64_t;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = uint64_t;

    iterator() = default;
    iterator(const RankView* view, uint64_t i) : view_(view), i_(i) {}
    uint64_t operator*() const { return (*view_)[i_]; }
    uint64_t operator[](difference_type d) const { return (*view_)[i_ + d]; }
    iterator& operator++() { return ++i_, *this; }
    iterator operator++(int) { return iterator(view_, i_++); }
    iterator& operator--() { return --i_, *this; }
    iterator operator--(int) { return iterator(view_, i_--); }
    iterator& operator+=(difference_type d) { return i_ += d, *this; }
    iterator& operator-=(difference_type d) { return i_ -= d, *this; }
    friend iterator operator+(iterator it, difference_type d) { return it += d; }
    friend iterator operator+(difference_type d, iterator it) { return it += d; }
    friend iterator operator-(iterator it, difference_type d) { return it -= d; }
    friend difference_type operator-(iterator a, iterator b) {
      return static_cast<difference_type>(a.i_ - b.i_);
    }
    friend bool operator==(iterator a, iterator b) { return a.i_ == b.i_; }
    friend bool operator!=(iterator a, iterator b) { return a.i_ != b.i_; }
    friend bool operator<(iterator a, iterator b) { return a.i_ < b.i_; }
    friend bool operator>(iterator a, iterator b) { return a.i_ > b.i_; }
    friend bool operator<=(iterator a, iterator b) { return a.i_ <= b.i_; }
    friend bool operator>=(iterator a, iterator b) { return a.i_ >= b.i_; }

   private:
    const RankView* view_ = nullptr;
    uint64_t i_ = 0;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, size_); }

 private:
  std::shared_ptr<const EpochOrder> order_;
  Partition partition_;
  uint64_t epoch_;
  uint64_t size_;
  uint64_t unwrapped_;  // positions [0, unwrapped_) read the order without wrap-around
};

// PyTorch's DistributedSampler without its hidden state: there is no "current epoch", the epoch
// is an argument of epoch(), so forgetting to advance it is visible in the calling code.
//
//   DistributedSampler sampler({.size = n, .world_size = W, .rank = r, .seed = 0});
//   for (uint64_t e = 0; e < epochs; ++e)
//     for (uint64_t index : sampler.epoch(e)) ...
class DistributedSampler {
 public:
  // Validates every field; throws std::invalid_argument naming the field, its value and the
  // allowed range (world_size >= 1, 0 <= rank < world_size, size <= 2^63, ...).
  explicit DistributedSampler(const SamplerOptions& options);

  const SamplerOptions& options() const { return options_; }
  uint64_t num_samples() const { return partition_.num_samples(); }
  uint64_t total_size() const { return partition_.total_size(); }
  const Partition& partition() const { return partition_; }

  // This rank's indices for `epoch`. With the torch order this builds the epoch's permutation
  // (O(n)); with the Feistel order it is O(1). Throws std::out_of_range when the torch order's
  // seed + epoch exceeds 2^64 - 1.
  RankView epoch(uint64_t epoch) const;
  // The same epoch resumed at global position `start` (the elastic rule, partition.h): rank r
  // reads start + r, start + r + W, ...; after each rank took k samples from a view started at
  // C, the job has consumed C + k * W (pass.h's Pass::consumed_after). Any start at or past
  // size() leaves an empty view: the epoch is complete (Partition::resumed_at).
  RankView epoch(uint64_t epoch, uint64_t start) const;
  // The samples this rank reads in an epoch resumed at global position `start`: the size of
  // epoch(e, start), without building the epoch's order.
  uint64_t remaining(uint64_t start) const { return partition_.resumed_at(start).num_samples(); }

 private:
  SamplerOptions options_;
  Partition partition_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_SAMPLER_H_
