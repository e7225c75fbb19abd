// wrap.h: distributes any deterministic sequence of indices (a user sampler's epoch) to ranks.
#ifndef DISTSAMPLER_POLICIES_WRAP_H_
#define DISTSAMPLER_POLICIES_WRAP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "distsampler/order.h"

namespace distsampler {

// An epoch order that is a given list: position p holds sequence[p]. The list need not be a
// permutation (a user sampler may repeat or skip indices); a RankView over it with any Partition
// hands rank r the list's positions r, r + W, ... with the partition's padding, dropping, uneven
// or masked rule. The caller's sampler must produce the same list on every rank for a given
// epoch (deterministic from its seed and epoch), which is what makes the cut disjoint.
std::shared_ptr<const EpochOrder> make_sequence_order(std::vector<uint64_t> sequence);

}  // namespace distsampler

#endif  // DISTSAMPLER_POLICIES_WRAP_H_
