// policy.h: a sampling policy as the one pass sampler sees it (configuration, counts, a pass's
// items as a pure function of (epoch, start)), and that pass sampler with its checkpoint.
//
// Every sampler of the Python package (the drop-in, the policies, the iterable adapter) is a
// PolicySampler over one Policy: the shells map PyTorch's signatures onto a Policy and hand its
// items out; the passes, the position and the checkpoint are kept here, once.
//
//   PolicySampler sampler(weighted_policy(weights, options), /*auto_epoch=*/false);
//   sampler.set_epoch(e);
//   PolicySampler::Started pass = sampler.start();   // decides epoch and start, builds the items
//   ... hand out pass.items, reporting sampler.set_handed(pass.serial, k) ...
//   DictValue state = sampler.state_dict();          // resumes on any number of ranks
#ifndef DISTSAMPLER_POLICY_H_
#define DISTSAMPLER_POLICY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distsampler/pass.h"
#include "distsampler/prefetch.h"
#include "distsampler/sampler.h"
#include "distsampler/state_dict.h"

namespace distsampler {

// What one item of a pass is: a dataset index; an index and whether it is real (not padding);
// a pair (dataset, index within it); a batch of indices.
enum class ItemShape { kIndex, kIndexMask, kPair, kBatch };

// The items one rank reads in one pass.
class PassItems {
 public:
  virtual ~PassItems() = default;
  virtual uint64_t size() const = 0;
  // Items [first, first + count), all inside [0, size()): kIndex writes out[j], kIndexMask and
  // kPair out[2j] and out[2j + 1]; kBatch items are read with batch().
  virtual void fill(uint64_t first, uint64_t count, uint64_t* out) const = 0;
  // Item j (< size()) of a kBatch pass.
  virtual std::vector<uint64_t> batch(uint64_t j) const;
};

// A rank's view of an epoch (sampler.h) as pass items.
std::shared_ptr<const PassItems> view_items(RankView view, bool with_mask = false);

class Policy {
 public:
  virtual ~Policy() = default;
  // The sampler's name in checkpoints (its PyTorch-facing class: "WeightedDistributedSampler").
  virtual std::string kind() const = 0;
  // What a checkpoint must match (a DictValue dict; never the world size or the rank).
  virtual DictValue config() const = 0;
  virtual uint64_t world_size() const = 0;
  virtual ItemShape shape() const { return ItemShape::kIndex; }
  // Whether replaying an epoch repeats a shuffled order (the replay notice's condition).
  virtual bool shuffled() const { return true; }
  // Items this rank reads in a pass starting at global position `start` (any start).
  virtual uint64_t remaining(uint64_t start) const = 0;
  // The pass of `epoch` from global position `start`; throws (changing nothing) when the epoch
  // cannot be read.
  virtual std::shared_ptr<const PassItems> items(uint64_t epoch, uint64_t start) = 0;

  // The checkpoint at `position`, and back: state_dict.h's policy format unless a policy keeps
  // another (the drop-in's fingerprint). parse_state throws std::invalid_argument naming the
  // entry; `summary` gets what every rank must agree on (configuration, epoch, consumed).
  virtual DictValue state_dict(const Position& position) const;
  virtual Position parse_state(const DictValue& state, std::string* summary) const;
  // Configuration keys a checkpoint need not match (state_dict.h's parse_policy_state).
  virtual std::vector<std::string> loose_keys() const { return {}; }
};

// distsampler.torch.DistributedSampler's policy (kind "DistributedSampler", the fingerprint's
// checkpoint format, state_dict.h), and the other samplers over DistributedSampler: the
// duplicate-free evaluation sampler (kind "DistributedEvalSampler"; `with_mask`: kIndexMask items)
// and the iterable adapter ("DistributedIterableDataset"), whose configurations are fingerprint
// fields. Their views come from `source` once set (a PrefetchingSampler of the same options).
class PlainPolicy : public Policy {
 public:
  enum class Kind { kDropIn, kEval, kIterable };
  PlainPolicy(Kind kind, const SamplerOptions& options, bool with_mask = false);
  const DistributedSampler& sampler() const { return sampler_; }
  void set_source(std::shared_ptr<PrefetchingSampler> source) { source_ = std::move(source); }

  std::string kind() const override;
  DictValue config() const override;
  uint64_t world_size() const override { return sampler_.options().world_size; }
  ItemShape shape() const override { return with_mask_ ? ItemShape::kIndexMask : ItemShape::kIndex; }
  bool shuffled() const override { return sampler_.options().shuffle; }
  uint64_t remaining(uint64_t start) const override { return sampler_.remaining(start); }
  std::shared_ptr<const PassItems> items(uint64_t epoch, uint64_t start) override;
  DictValue state_dict(const Position& position) const override;
  Position parse_state(const DictValue& state, std::string* summary) const override;
  std::vector<std::string> loose_keys() const override;

 private:
  Kind kind_;
  DistributedSampler sampler_;
  bool with_mask_;
  std::shared_ptr<PrefetchingSampler> source_;
};

// What one DataLoader worker of K reads of the iterable adapter's pass (distsampler.data): of the
// rank's view of (epoch, start), batches w, w + K, w + 2K, ... of `batch_size` items, so that
// torch's round-robin over the workers hands the loop the view's batches in order. Its position
// is state_dict.h's WorkerPosition (what torchdata keeps per worker).
class WorkerShare {
 public:
  // Throws std::invalid_argument when batch_size or workers is 0 or worker >= workers.
  WorkerShare(DistributedSampler sampler, uint64_t batch_size, uint64_t worker, uint64_t workers,
              const WorkerPosition& at);
  const WorkerPosition& position() const { return at_; }
  // Continues from `at` (another worker's state of the same split).
  void seek(const WorkerPosition& at);
  // The dataset index of the next item of this worker's share, and it counted as yielded; none
  // at the share's end.
  std::optional<uint64_t> next();

 private:
  DistributedSampler sampler_;
  uint64_t batch_size_;
  uint64_t worker_;
  uint64_t workers_;
  WorkerPosition at_;
  RankView view_;
};

// The one pass sampler: pass.h's PassCursor over a Policy, the live pass's progress and the
// checkpoint. Not thread-safe (one training loop).
class PolicySampler {
 public:
  PolicySampler(std::shared_ptr<Policy> policy, bool auto_epoch);
  PolicySampler(std::shared_ptr<Policy> policy, const PassCursor::State& cursor);

  Policy& policy() const { return *policy_; }
  const PassCursor& cursor() const { return cursor_; }
  void set_epoch(uint64_t epoch);
  // True once after a complete epoch was loaded into a sampler set to a later epoch: the next
  // pass is empty (pass.h's skip_finished).
  bool skip_finished() { return cursor_.skip_finished(); }

  struct Started {
    uint64_t epoch = 0;
    uint64_t start = 0;
    uint64_t serial = 0;  // the pass's number, for progress reports
    PassNotice notice = PassNotice::kNone;
    std::shared_ptr<const PassItems> items;
  };
  // Decides the next pass (pass.h's plan), builds its items (which may throw: nothing changes),
  // and makes it the live pass.
  Started start();

  // Progress of pass `serial` (ignored once another pass started): `handed` items handed out;
  // `receive`: a loader reports that the loop received the first `count` (from then on the
  // checkpoint counts receipts, not hand-outs). Counts are clamped to the pass's items.
  void set_handed(uint64_t serial, uint64_t handed);
  void receive(uint64_t serial, uint64_t count);
  void receive_all(uint64_t serial);
  uint64_t serial() const { return serial_; }
  bool tracked() const { return tracked_; }

  // (epoch, consumed) a checkpoint taken now records.
  Position position();
  DictValue state_dict();
  // The position a state dict holds for this sampler (throws, changing nothing), and loading it.
  Position parse_state(const DictValue& state, std::string* summary) const {
    return policy_->parse_state(state, summary);
  }
  void load(const Position& position);

 private:
  std::shared_ptr<Policy> policy_;
  PassCursor cursor_;
  uint64_t serial_ = 0;
  bool tracked_ = false;
  uint64_t handed_ = 0;
  uint64_t received_ = 0;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_POLICY_H_
