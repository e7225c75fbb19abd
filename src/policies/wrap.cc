#include "distsampler/policies/wrap.h"

#include <utility>

namespace distsampler {
namespace {

class SequenceOrder final : public EpochOrder {
 public:
  explicit SequenceOrder(std::vector<uint64_t> sequence)
      : EpochOrder(sequence.size()), sequence_(std::move(sequence)) {}
  uint64_t at(uint64_t position) const override { return sequence_[position]; }
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) const override {
    for (uint64_t j = 0; j < count; ++j) out[j] = sequence_[first + j * stride];
  }

 private:
  std::vector<uint64_t> sequence_;
};

}  // namespace

std::shared_ptr<const EpochOrder> make_sequence_order(std::vector<uint64_t> sequence) {
  return std::make_shared<SequenceOrder>(std::move(sequence));
}

}  // namespace distsampler
