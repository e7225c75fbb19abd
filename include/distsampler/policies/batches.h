// batches.h: distributed batches cut from the global order, and length-bucketed batches.
#ifndef DISTSAMPLER_POLICIES_BATCHES_H_
#define DISTSAMPLER_POLICIES_BATCHES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "distsampler/order.h"
#include "distsampler/partition.h"
#include "distsampler/seed.h"

namespace distsampler {

// Length-bucketed order for variable-length sequences: the epoch's global order (a Feistel
// shuffle keyed by (seed, epoch)) is cut into windows of window_batches * batch_size samples;
// each window is sorted by (length, index), cut into batches of batch_size, and the batches of
// the whole epoch are shuffled by FeistelPermutation(num_batches, key(seed, epoch)). The one
// incomplete batch (when batch_size does not divide n) stays last, so batches are exactly the
// consecutive batch_size-chunks of this order. O(n) memory and O(n log(window)) time per epoch:
// the lengths are O(n) anyway.
struct BucketOptions {
  std::vector<uint64_t> lengths;  // one per sample
  uint64_t batch_size = 1;
  uint64_t window_batches = 64;  // batches sorted together; 1 sorts within each batch only
  Seed seed;
};

// Throws std::invalid_argument naming the field (batch_size or window_batches 0, too many
// samples).
void validate(const BucketOptions& options);
std::shared_ptr<const EpochOrder> make_bucketed_order(const BucketOptions& options, uint64_t epoch);

// Batches of any epoch order dealt to ranks: global batch b is order positions
// [b * batch_size, min((b + 1) * batch_size, n)), so the list of batches does not depend on the
// world size. Rank r reads global batches r, r + W, r + 2W, ... (partition.h's rule over
// batches): without drop_last every rank gets ceil(num_batches / W), the last ones wrapping
// around to batch 0; with drop_last the incomplete final batch and the tail of batches that
// does not fill a round of W ranks are dropped, and every rank gets floor(full_batches / W).
class BatchView {
 public:
  // Throws std::invalid_argument for batch_size 0 or a bad world_size/rank.
  BatchView(std::shared_ptr<const EpochOrder> order, uint64_t batch_size, uint64_t world_size,
            uint64_t rank, bool drop_last);

  uint64_t batch_size() const { return batch_size_; }
  // Batches of the epoch, all ranks together, before padding or dropping.
  uint64_t num_global_batches() const { return global_batches_; }
  // Batches this rank reads.
  uint64_t size() const { return partition_.num_samples(); }
  // The global batch number of this rank's j-th batch, j < size().
  uint64_t global_batch(uint64_t j) const { return partition_.order_position(j); }
  // Whether this rank's j-th batch is a wrapped-around repeat (padding).
  bool is_padding(uint64_t j) const { return partition_.is_padding(j); }
  // The indices of global batch b (< num_global_batches()).
  std::vector<uint64_t> global(uint64_t b) const;
  // This rank's j-th batch; throws std::out_of_range when j >= size().
  std::vector<uint64_t> operator[](uint64_t j) const;

 private:
  std::shared_ptr<const EpochOrder> order_;
  uint64_t batch_size_;
  uint64_t global_batches_;
  Partition partition_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_POLICIES_BATCHES_H_
