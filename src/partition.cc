#include "distsampler/partition.h"

#include <stdexcept>
#include <string>

namespace distsampler {

void Partition::validate() const {
  constexpr uint64_t kMax = uint64_t{1} << 63;
  const std::string max = std::to_string(kMax);
  if (size > kMax) {
    throw std::invalid_argument("size = " + std::to_string(size) +
                                " is too large; allowed: size <= 2^63 = " + max);
  }
  if (world_size < 1 || world_size > kMax) {
    throw std::invalid_argument("world_size = " + std::to_string(world_size) +
                                " is out of range; allowed: 1 <= world_size <= 2^63 = " + max);
  }
  if (rank >= world_size) {
    throw std::invalid_argument(
        "rank = " + std::to_string(rank) +
        " is out of range; allowed: 0 <= rank < world_size = " + std::to_string(world_size));
  }
  if (uneven && drop_last) {
    throw std::invalid_argument(
        "uneven = true with drop_last = true; allowed: at most one of uneven and drop_last");
  }
  if (start > kMax) {
    throw std::invalid_argument("start = " + std::to_string(start) +
                                " is too large; allowed: start <= 2^63 = " + max);
  }
}

}  // namespace distsampler
