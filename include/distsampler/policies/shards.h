// shards.h: a shard-aware epoch order for I/O locality: shuffled shards, shuffled within windows.
#ifndef DISTSAMPLER_POLICIES_SHARDS_H_
#define DISTSAMPLER_POLICIES_SHARDS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "distsampler/feistel.h"
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

// The same order for n items in blocks of `block` contiguous items (the last block holding the
// rest, n - (blocks - 1) x block), in O(1) memory and O(1) time a position: make_shard_order's
// order of shard_sizes {block, ..., block, rest} with that window and seed, bit for bit (its
// prefix sums are closed forms when every shard but the last has one size). The order of a
// token source in an object store (documents read a block at a time), where a source of 10^8
// documents in blocks of 1,000 would need 800 KB a source per epoch for the prefix sums.
// Throws std::invalid_argument naming block or window when 0, and n when over 2^63.
class BlockShardOrder {
 public:
  BlockShardOrder(uint64_t n, uint64_t block, uint64_t window, const Seed& seed, uint64_t epoch);

  uint64_t size() const { return n_; }
  uint64_t blocks() const { return blocks_; }
  // The item at `position` < size().
  uint64_t operator()(uint64_t position) const;
  // As operator(), but throws std::out_of_range when position >= size().
  uint64_t at(uint64_t position) const;
  // out[j] = (*this)(first + j) for j in [0, count), each window's permutation made once.
  void gather(uint64_t first, uint64_t count, uint64_t* out) const;
  // The position holding `item` < size(): (*this)(inverse(item)) == item, in O(1).
  uint64_t inverse(uint64_t item) const;

 private:
  struct Window {
    uint64_t first_slot;  // the window's first position in the shuffled block order
    uint64_t slots;       // its blocks
    uint64_t base;        // its first order position
    uint64_t items;       // its items
  };
  Window window_of(uint64_t position) const;
  Window window_at(uint64_t first_slot) const;  // the window of slots from first_slot
  uint64_t slot_start(uint64_t slot) const;     // order positions before slot `slot`
  FeistelPermutation within(const Window& w) const;
  uint64_t item(const Window& w, uint64_t q) const;  // the window's q-th item in slot order

  uint64_t n_ = 0, block_ = 1, window_ = 1, blocks_ = 0, epoch_ = 0;
  uint64_t window_key_ = 0;
  uint64_t short_ = 0;       // items the last block lacks: blocks_ x block_ - n_
  uint64_t short_slot_ = 0;  // the last block's position in the shuffled block order
  FeistelPermutation block_order_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_POLICIES_SHARDS_H_
