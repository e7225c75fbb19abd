// shards.h: a shard-aware epoch order for I/O locality: shuffled shards, shuffled within windows.
#ifndef DISTSAMPLER_POLICIES_SHARDS_H_
#define DISTSAMPLER_POLICIES_SHARDS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "distsampler/order.h"
#include "distsampler/seed.h"

namespace distsampler {

// Samples stored in shards: shard s holds the contiguous dataset indices
// [start_s, start_s + shard_sizes[s]) in file order.
struct ShardOptions {
  std::vector<uint64_t> shard_sizes;  // each >= 1; the dataset size is their sum (<= 2^63)
  uint64_t window = 4;                // shards shuffled together, >= 1
  Seed seed;
};

// Throws std::invalid_argument naming the field (an empty shard, window 0, too many samples).
void validate(const ShardOptions& options);

// Epoch e's order: the shards in the order of FeistelPermutation(num_shards, seed, e), cut into
// consecutive windows of `window` shards; within a window all its samples are shuffled together
// by a Feistel permutation keyed by (seed, window, e). Window w occupies the order positions
// after every sample of windows 0..w-1, so a stretch of the order touches about `window` shards
// (a rank reading every W-th position shares its window with the other ranks). window = 1 only
// shuffles within shards; window >= num_shards is a full shuffle of the dataset.
//
// Random access: O(log(num_shards)) per position after an O(num_shards) build per epoch (the
// shuffled shards' prefix sums); memory O(num_shards). Independent of the world size: a
// RankView over this order cuts it as it cuts any other.
std::shared_ptr<const EpochOrder> make_shard_order(const ShardOptions& options, uint64_t epoch);

}  // namespace distsampler

#endif  // DISTSAMPLER_POLICIES_SHARDS_H_
