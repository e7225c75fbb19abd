#include "distsampler/sampler.h"

#include <algorithm>
#include <cassert>
#include <stdexcept>
#include <string>
#include <utility>

namespace distsampler {

RankView::RankView(std::shared_ptr<const EpochOrder> order, const Partition& partition,
                   uint64_t epoch)
    : order_(std::move(order)),
      partition_(partition),
      epoch_(epoch),
      size_(partition.num_samples()) {
  assert(order_ && order_->size() == partition_.size);
  // Rank r's positions start + r + i * W stay below n for i < ceil((n - start - r) / W).
  const uint64_t first = partition_.start + partition_.rank;
  const uint64_t below = first < partition_.size ? partition_.size - first : 0;
  const uint64_t w = partition_.world_size;
  unwrapped_ = std::min(size_, below / w + (below % w != 0 ? 1 : 0));
}

uint64_t RankView::at(uint64_t i) const {
  if (i >= size_) {
    throw std::out_of_range(
        "index = " + std::to_string(i) +
        " is out of range; allowed: index < num_samples = " + std::to_string(size_));
  }
  return (*this)[i];
}

void RankView::fill(uint64_t first, uint64_t count, uint64_t* out) const {
  if (first > size_ || count > size_ - first) {
    throw std::out_of_range(
        "window [start = " + std::to_string(first) + ", start + count = " + std::to_string(first) +
        " + " + std::to_string(count) +
        ") is out of range; allowed: start + count <= num_samples = " + std::to_string(size_));
  }
  uint64_t j = 0;
  if (first < unwrapped_) {
    j = std::min(count, unwrapped_ - first);
    order_->gather(partition_.global_position(first), partition_.world_size, j, out);
  }
  for (; j < count; ++j) out[j] = (*this)[first + j];
}

DistributedSampler::DistributedSampler(const SamplerOptions& options)
    : options_(options),
      partition_{options.size,  options.world_size, options.rank, options.drop_last, 0,
                 options.uneven} {
  partition_.validate();
  validate(options_.order_options());
}

RankView DistributedSampler::epoch(uint64_t epoch) const { return this->epoch(epoch, 0); }

RankView DistributedSampler::epoch(uint64_t epoch, uint64_t start) const {
  return RankView(make_epoch_order(options_.order_options(), epoch), partition_.resumed_at(start),
                  epoch);
}

}  // namespace distsampler
