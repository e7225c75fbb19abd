// samplers.h: every sampling policy as a Policy (policy.h) for the one pass sampler: weighted,
// blended, shard-aware, a wrapped user order, batches and length-bucketed batches.
#ifndef DISTSAMPLER_POLICIES_SAMPLERS_H_
#define DISTSAMPLER_POLICIES_SAMPLERS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distsampler/order.h"
#include "distsampler/policies/batches.h"
#include "distsampler/policies/blend.h"
#include "distsampler/policies/shards.h"
#include "distsampler/policies/weighted.h"
#include "distsampler/policy.h"

namespace distsampler {

// How a policy cuts a stream among ranks: partition.h's rule (interleaved, padded by wrap-around
// or drop_last). Validated like Partition.
struct RankCut {
  uint64_t world_size = 1;
  uint64_t rank = 0;
  bool drop_last = false;
};

// Each factory validates its options and throws std::invalid_argument naming the field. The kind
// (the checkpoint's) is the PyTorch-facing class, the configuration what its checkpoint matches.

// WeightedDistributedSampler: weighted.h's draws; `weights` has options.size entries.
std::shared_ptr<Policy> weighted_policy(std::vector<double> weights, const WeightedOptions& options);

// BlendedDistributedSampler: blend.h's stream, epoch e = positions [e S, (e + 1) S). `flat`:
// kIndex items (indices into the concatenated datasets), else kPair (dataset, index).
std::shared_ptr<Policy> blended_policy(const BlendOptions& options, bool flat);

// ShardedDistributedSampler: shards.h's order.
std::shared_ptr<Policy> sharded_policy(const ShardOptions& options, const RankCut& cut);

// DistributedSamplerWrapper: a user sampler's output each epoch (the same on every rank), cut.
struct SequenceSource {
  std::string name;                                     // the wrapped sampler's class
  std::function<uint64_t()> size;                       // its len()
  std::function<std::vector<uint64_t>(uint64_t)> epoch;  // its indices for an epoch
};
std::shared_ptr<Policy> wrapper_policy(SequenceSource source, const RankCut& cut);

// DistributedBatchSampler: batches of batch_size cut from the epoch's order (order.h), dealt to
// ranks (batches.h's BatchView). kBatch items.
std::shared_ptr<Policy> batch_policy(const OrderOptions& order, uint64_t batch_size,
                                     const RankCut& cut);

// BucketedBatchSampler: batches of the bucketed order (batches.h). kBatch items.
std::shared_ptr<Policy> bucketed_policy(const BucketOptions& options, const RankCut& cut);

}  // namespace distsampler

#endif  // DISTSAMPLER_POLICIES_SAMPLERS_H_
