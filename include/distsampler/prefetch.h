// prefetch.h: a sampler that builds the next epoch's torch order in the background.
#ifndef DISTSAMPLER_PREFETCH_H_
#define DISTSAMPLER_PREFETCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>

#include "distsampler/sampler.h"

namespace distsampler {

namespace detail {
struct PrefetchState;
}  // namespace detail

// How a PrefetchingSampler gets an epoch's order: make_epoch_order(options, epoch) by default;
// node/node_order.h's node_order_builder shares one permutation per node. A builder that waits
// for another process polls `cancelled` and throws OrderCancelled once it returns true (the
// sampler is destroyed, or the epoch being built is no longer wanted).
using OrderBuilder = std::function<std::shared_ptr<const EpochOrder>(
    const OrderOptions& options, uint64_t epoch, const std::function<bool()>& cancelled)>;

struct OrderCancelled : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// DistributedSampler::epoch without the epoch-boundary stall of the torch order. The torch order
// materializes torch.randperm, O(n) per epoch (about 1.8 s at n = 10^8 here); while epoch e is
// read, this builds epoch e + 1's order on a background thread, so the next epoch() call finds it
// built. The views are DistributedSampler::epoch's, bit for bit (only the time of the build
// moves). Other orders are O(1) to build and pass straight through.
//
// Memory: at most two orders of this sampler exist because of it, the one being read and the
// one being built: the background build waits until the order handed out before the current one
// has been released (its last RankView destroyed). A build still waiting when epoch() asks for
// another epoch is cancelled; a build already running is waited for (it cannot be interrupted),
// then discarded when it is not the epoch asked for. The guess is always e + 1 (the usual loop;
// set_epoch jumps cost one synchronous build, as without prefetching).
//
// One worker thread per sampler, started at the first prefetch. Not thread-safe: one caller at
// a time (a training loop). The destructor waits for a running build. A child of fork() (a
// DataLoader worker) keeps the orders already built, never waits for the parent's worker (a
// build it had requested or was running is given up in the child), builds what it asks for
// itself and starts its own worker for the epochs after.
class PrefetchingSampler {
 public:
  // `prefetch` false: epoch() builds on demand, exactly as DistributedSampler::epoch. `build`
  // (when given) replaces make_epoch_order for every order, prefetched or not.
  explicit PrefetchingSampler(const SamplerOptions& options, bool prefetch = true,
                              OrderBuilder build = {});
  ~PrefetchingSampler();
  PrefetchingSampler(const PrefetchingSampler&) = delete;
  PrefetchingSampler& operator=(const PrefetchingSampler&) = delete;

  const DistributedSampler& sampler() const { return sampler_; }
  bool prefetching() const { return prefetch_; }

  // sampler().epoch(epoch, start), from the background build when it was epoch's; then starts
  // building epoch + 1. Errors are DistributedSampler::epoch's, thrown by the call that asks for
  // the epoch (a failed background build of an epoch never asked for is dropped).
  RankView epoch(uint64_t epoch, uint64_t start = 0);

  // For tests and benchmarks: epoch() calls served by a background build, and the orders of
  // this sampler alive now (handed out and not released, or built and not yet handed out).
  uint64_t hits() const { return hits_; }
  uint64_t live_orders() const;

 private:
  DistributedSampler sampler_;
  bool prefetch_;
  uint64_t hits_ = 0;
  std::shared_ptr<detail::PrefetchState> state_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_PREFETCH_H_
