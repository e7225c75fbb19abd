// partition.h: which global positions of an epoch's order a rank reads, and how many.
#ifndef DISTSAMPLER_PARTITION_H_
#define DISTSAMPLER_PARTITION_H_

#include <cstdint>

namespace distsampler {

// PyTorch's rule, generalized to a start position for resuming (the elastic rule): a job that
// starts at global position `start` of an epoch's order with W ranks gives rank r the positions
// start + r, start + r + W, start + r + 2W, ... (interleaved, not blocks). Without drop_last the
// positions run past the end and wrap around to the order's start (position p reads p mod n,
// several times over when W > 2n) so that every rank gets ceil((n - start) / W); with drop_last
// the tail is cut and every rank gets floor((n - start) / W). start = 0 is exactly PyTorch's
// DistributedSampler (whose float formula equals these integer ones for n < 2^53). A job resumed
// after consuming C positions uses start = C.
//
// Duplicate-free evaluation (every position exactly once across ranks) comes in two modes:
// - uneven: rank r reads only the real positions start + r + i * W < n, so rank sizes differ by at
//   most one (ranks below (n - start) mod W read one more);
// - padded-with-mask: the default padding (every rank the same number of steps, so collectives
//   cannot hang) with is_padding(i) flagging the wrapped-around slots, which a metric skips.
struct Partition {
  uint64_t size = 0;        // n, the dataset size
  uint64_t world_size = 1;  // W >= 1
  uint64_t rank = 0;        // 0 <= rank < W
  bool drop_last = false;
  // Global position the job starts at. A start at or past size (a job that consumed the whole
  // epoch, padding included) leaves no samples: the epoch is complete.
  uint64_t start = 0;
  // Uneven mode: no padding and no dropping; num_samples() depends on the rank. Excludes
  // drop_last.
  bool uneven = false;

  // Throws std::invalid_argument naming the field, the value and the allowed range.
  void validate() const;

  // This partition resumed at global position `start` of the epoch: the one place a start is
  // clamped. Any start at or past size (a loaded checkpoint of a complete epoch) becomes size,
  // which leaves no samples.
  Partition resumed_at(uint64_t position) const {
    Partition resumed = *this;
    resumed.start = position < size ? position : size;
    return resumed;
  }

  // Samples per rank (PyTorch's num_samples): the same on every rank, except in uneven mode.
  uint64_t num_samples() const {
    const uint64_t remaining = start < size ? size - start : 0;
    if (uneven) return num_real();
    return drop_last ? remaining / world_size
                     : remaining / world_size + (remaining % world_size != 0 ? 1 : 0);
  }
  // Positions read by all ranks together (PyTorch's total_size when start = 0; n - start in
  // uneven mode).
  uint64_t total_size() const {
    if (uneven) return start < size ? size - start : 0;
    return num_samples() * world_size;
  }
  // This rank's samples that are not padding: ceil((n - start - rank) / W), at most
  // num_samples(). Summed over ranks: n - start without drop_last.
  uint64_t num_real() const {
    const uint64_t first = start + rank;
    const uint64_t below = first < size ? size - first : 0;
    const uint64_t all = below / world_size + (below % world_size != 0 ? 1 : 0);
    if (!drop_last) return all;
    const uint64_t remaining = start < size ? size - start : 0;
    return remaining / world_size;  // every kept position is real
  }
  // Whether sample i (< num_samples()) is a wrapped-around repeat of an earlier position: the
  // mask of padded-with-mask evaluation. Never true with drop_last or in uneven mode.
  bool is_padding(uint64_t i) const { return global_position(i) >= size; }

  // The global position (before wrap-around) of this rank's i-th sample, i < num_samples().
  uint64_t global_position(uint64_t i) const { return start + rank + i * world_size; }
  // The order position it reads: global_position(i) mod size.
  uint64_t order_position(uint64_t i) const {
    const uint64_t p = global_position(i);
    return p < size ? p : p % size;
  }
};

}  // namespace distsampler

#endif  // DISTSAMPLER_PARTITION_H_
