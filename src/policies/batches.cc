// Length bucketing as in fairseq/AllenNLP "bucket iterators" (sort by length within a pool,
// batch, shuffle the batches), made deterministic and world-size independent: the pool is a
// window of a keyed order and the batch shuffle a keyed Feistel permutation.
#include "distsampler/policies/batches.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "distsampler/feistel.h"
#include "distsampler/hash.h"
#include "distsampler/policies/wrap.h"

namespace distsampler {
void validate(const BucketOptions& options) {
  if (options.batch_size < 1) {
    throw std::invalid_argument("batch_size = 0 is out of range; allowed: batch_size >= 1");
  }
  if (options.window_batches < 1) {
    throw std::invalid_argument("window_batches = 0 is out of range; allowed: window_batches >= 1");
  }
  if (options.batch_size > (uint64_t{1} << 40) / options.window_batches) {
    throw std::invalid_argument(
        "window_batches * batch_size = " + std::to_string(options.window_batches) + " * " +
        std::to_string(options.batch_size) + " is too large; allowed: at most 2^40");
  }
}

std::shared_ptr<const EpochOrder> make_bucketed_order(const BucketOptions& options,
                                                      uint64_t epoch) {
  validate(options);
  const uint64_t n = options.lengths.size();
  const uint64_t b = options.batch_size;
  // Version 1 throughout the policies: their orders are frozen by their tests and checkpoints
  // carry no Feistel version for them.
  const FeistelPermutation shuffle(n, options.seed.bits(), epoch,
                                   FeistelPermutation::kVersion1Rounds,
                                   FeistelPermutation::kVersion1);
  std::vector<uint64_t> windowed(n);
  shuffle.gather(0, 1, n, windowed.data());
  const uint64_t window = options.window_batches * b;
  for (uint64_t first = 0; first < n; first += window) {
    const auto begin = windowed.begin() + first;
    const auto end = windowed.begin() + std::min(n, first + window);
    // (length, index) is a strict total order: the sorted result is unique.
    std::sort(begin, end, [&](uint64_t x, uint64_t y) {
      return options.lengths[x] != options.lengths[y] ? options.lengths[x] < options.lengths[y]
                                                      : x < y;
    });
  }
  const uint64_t full = n / b;
  const FeistelPermutation batch_order(full, derive_key(options.seed.bits(), 0, kDomainBatches),
                                       epoch, FeistelPermutation::kVersion1Rounds,
                                       FeistelPermutation::kVersion1);
  std::vector<uint64_t> out(n);
  for (uint64_t j = 0; j < full; ++j) {
    const uint64_t src = batch_order(j) * b;
    std::copy(windowed.begin() + src, windowed.begin() + src + b, out.begin() + j * b);
  }
  std::copy(windowed.begin() + full * b, windowed.end(), out.begin() + full * b);
  return make_sequence_order(std::move(out));
}

BatchView::BatchView(std::shared_ptr<const EpochOrder> order, uint64_t batch_size,
                     uint64_t world_size, uint64_t rank, bool drop_last)
    : order_(std::move(order)), batch_size_(batch_size) {
  if (batch_size < 1) {
    throw std::invalid_argument("batch_size = 0 is out of range; allowed: batch_size >= 1");
  }
  const uint64_t n = order_->size();
  global_batches_ = n / batch_size + (n % batch_size != 0 ? 1 : 0);
  const uint64_t usable = drop_last ? n / batch_size : global_batches_;
  partition_ = Partition{usable, world_size, rank, drop_last, 0};
  partition_.validate();
}

std::vector<uint64_t> BatchView::global(uint64_t b) const {
  if (b >= global_batches_) {
    throw std::out_of_range("batch = " + std::to_string(b) + " is out of range; allowed: batch < " +
                            std::to_string(global_batches_));
  }
  const uint64_t first = b * batch_size_;
  const uint64_t count = std::min(batch_size_, order_->size() - first);
  std::vector<uint64_t> out(count);
  order_->gather(first, 1, count, out.data());
  return out;
}

std::vector<uint64_t> BatchView::operator[](uint64_t j) const {
  if (j >= size()) {
    throw std::out_of_range("batch = " + std::to_string(j) + " is out of range; allowed: batch < " +
                            std::to_string(size()) + " (this rank's batches)");
  }
  return global(global_batch(j));
}

}  // namespace distsampler
