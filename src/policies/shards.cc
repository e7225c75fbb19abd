// Shard-aware order, in the spirit of WebDataset's shard shuffle plus a shuffle buffer, but as a
// pure function of (seed, epoch, position): a shuffle "buffer" of whole shards is a Feistel
// permutation over the window's samples, so any position is random access.
#include "distsampler/policies/shards.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "distsampler/feistel.h"
#include "distsampler/hash.h"

namespace distsampler {
namespace {

class ShardOrder final : public EpochOrder {
 public:
  ShardOrder(const ShardOptions& options, uint64_t total, uint64_t epoch)
      : EpochOrder(total), window_(options.window), epoch_(epoch) {
    const uint64_t m = options.shard_sizes.size();
    std::vector<uint64_t> start(m);
    for (uint64_t s = 0, sum = 0; s < m; ++s) start[s] = sum, sum += options.shard_sizes[s];
    const uint64_t key = derive_key(options.seed.bits(), 0, kDomainShards);
    // Version 1: shard orders are frozen by their tests and their checkpoints carry no version.
    const FeistelPermutation shard_order(m, key, epoch, FeistelPermutation::kVersion1Rounds,
                                         FeistelPermutation::kVersion1);
    shard_start_.resize(m);
    cum_.resize(m + 1);
    cum_[0] = 0;
    for (uint64_t j = 0; j < m; ++j) {
      const uint64_t s = shard_order(j);
      shard_start_[j] = start[s];
      cum_[j + 1] = cum_[j] + options.shard_sizes[s];
    }
    window_key_ = derive_key(options.seed.bits(), 1, kDomainShards);
  }

  uint64_t at(uint64_t position) const override {
    // The shuffled shard j holding `position`, then its window [first, last).
    const uint64_t j = std::upper_bound(cum_.begin(), cum_.end(), position) - cum_.begin() - 1;
    const uint64_t first = j / window_ * window_;
    const uint64_t last = std::min<uint64_t>(first + window_, cum_.size() - 1);
    const uint64_t base = cum_[first];
    const FeistelPermutation within(cum_[last] - base, mix64(window_key_ ^ first), epoch_,
                                    FeistelPermutation::kVersion1Rounds,
                                    FeistelPermutation::kVersion1);
    const uint64_t q = base + within(position - base);
    const uint64_t k =
        std::upper_bound(cum_.begin() + first, cum_.begin() + last + 1, q) - cum_.begin() - 1;
    return shard_start_[k] + (q - cum_[k]);
  }
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) const override {
    for (uint64_t j = 0; j < count; ++j) out[j] = at(first + j * stride);
  }

 private:
  uint64_t window_;
  uint64_t epoch_;
  uint64_t window_key_ = 0;
  std::vector<uint64_t> shard_start_;  // dataset index of the j-th shuffled shard's first sample
  std::vector<uint64_t> cum_;          // order position of the j-th shuffled shard's first sample
};

}  // namespace

BlockShardOrder::BlockShardOrder(uint64_t n, uint64_t block, uint64_t window, const Seed& seed,
                                 uint64_t epoch)
    : n_(n), block_(block), window_(window), epoch_(epoch) {
  if (block < 1) throw std::invalid_argument("block = 0 is out of range; allowed: block >= 1");
  if (window < 1) {
    throw std::invalid_argument("window = 0 is out of range; allowed: window >= 1 block");
  }
  if (n > FeistelPermutation::kMaxSize) {
    throw std::invalid_argument("n = " + std::to_string(n) +
                                " is out of range; allowed: n <= 2^63");
  }
  blocks_ = n / block + (n % block != 0 ? 1 : 0);
  short_ = blocks_ * block - n;
  // make_shard_order's keys and permutations (version 1: its orders are frozen).
  block_order_ = FeistelPermutation(blocks_, derive_key(seed.bits(), 0, kDomainShards), epoch,
                                    FeistelPermutation::kVersion1Rounds,
                                    FeistelPermutation::kVersion1);
  window_key_ = derive_key(seed.bits(), 1, kDomainShards);
  short_slot_ = blocks_ > 0 ? block_order_.inverse(blocks_ - 1) : 0;
}

uint64_t BlockShardOrder::slot_start(uint64_t slot) const {
  // j x block, less the last block's shortfall once it is behind.
  return slot * block_ - (slot > short_slot_ ? short_ : 0);
}

BlockShardOrder::Window BlockShardOrder::window_at(uint64_t first_slot) const {
  Window out;
  out.first_slot = first_slot;
  out.slots = std::min(window_, blocks_ - first_slot);
  out.base = slot_start(first_slot);
  out.items = slot_start(first_slot + out.slots) - out.base;
  return out;
}

BlockShardOrder::Window BlockShardOrder::window_of(uint64_t position) const {
  const uint64_t span = window_ * block_;
  const uint64_t short_window = short_slot_ / window_;
  uint64_t w = position / span;
  if (w > short_window ||
      (w == short_window &&
       position >= slot_start(std::min((short_window + 1) * window_, blocks_)))) {
    w = (position + short_) / span;
  }
  return window_at(w * window_);
}

FeistelPermutation BlockShardOrder::within(const Window& w) const {
  return FeistelPermutation(w.items, mix64(window_key_ ^ w.first_slot), epoch_,
                            FeistelPermutation::kVersion1Rounds, FeistelPermutation::kVersion1);
}

uint64_t BlockShardOrder::item(const Window& w, uint64_t q) const {
  // The window's blocks back to back in slot order; only the last block may be short.
  uint64_t slot = w.first_slot + q / block_;
  uint64_t offset = q % block_;
  if (short_slot_ >= w.first_slot && short_slot_ < w.first_slot + w.slots) {
    const uint64_t short_start = (short_slot_ - w.first_slot) * block_;
    if (q >= short_start + (block_ - short_)) {  // past the short block: shifted by its lack
      const uint64_t after = q - (short_start + (block_ - short_));
      slot = short_slot_ + 1 + after / block_;
      offset = after % block_;
    }
  }
  return block_order_(slot) * block_ + offset;
}

uint64_t BlockShardOrder::operator()(uint64_t position) const {
  const Window w = window_of(position);
  return item(w, within(w)(position - w.base));
}

uint64_t BlockShardOrder::at(uint64_t position) const {
  if (position >= n_) {
    throw std::out_of_range("position = " + std::to_string(position) +
                            " is out of range; allowed: position < " + std::to_string(n_));
  }
  return (*this)(position);
}

uint64_t BlockShardOrder::inverse(uint64_t item) const {
  // item()'s steps backwards: the block's slot, the item's place among its window's items in
  // slot order, and the window's permutation undone.
  const uint64_t slot = block_order_.inverse(item / block_);
  const Window w = window_at(slot / window_ * window_);
  return w.base + within(w).inverse(slot_start(slot) - w.base + item % block_);
}

void BlockShardOrder::gather(uint64_t first, uint64_t count, uint64_t* out) const {
  uint64_t j = 0;
  while (j < count) {
    const Window w = window_of(first + j);
    const FeistelPermutation p = within(w);
    for (; j < count && first + j < w.base + w.items; ++j) out[j] = item(w, p(first + j - w.base));
  }
}

void validate(const ShardOptions& options) {
  if (options.window < 1) {
    throw std::invalid_argument("window = 0 is out of range; allowed: window >= 1 shard");
  }
  uint64_t total = 0;
  for (uint64_t s = 0; s < options.shard_sizes.size(); ++s) {
    const uint64_t n = options.shard_sizes[s];
    if (n < 1 || n > FeistelPermutation::kMaxSize - total) {
      throw std::invalid_argument("shard_sizes[" + std::to_string(s) + "] = " + std::to_string(n) +
                                  " is not allowed; allowed: >= 1, all shards together <= 2^63");
    }
    total += n;
  }
}

std::shared_ptr<const EpochOrder> make_shard_order(const ShardOptions& options, uint64_t epoch) {
  validate(options);
  uint64_t total = 0;
  for (uint64_t n : options.shard_sizes) total += n;
  return std::make_shared<ShardOrder>(options, total, epoch);
}

}  // namespace distsampler
