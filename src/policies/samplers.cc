// Every sampling policy as a Policy (samplers.h): its configuration (what a checkpoint matches:
// the entries the Python samplers wrote before this core, so their states keep loading), its
// counts (partition.h's rule over its stream) and its pass items.
#include "distsampler/policies/samplers.h"

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distsampler/partition.h"
#include "distsampler/policies/wrap.h"
#include "distsampler/state.h"

namespace distsampler {
namespace {

// CRC-32 of an array's bytes (little-endian, as numpy's tobytes() on every platform we build
// for): a checkpoint's stand-in for weights, lengths or shard sizes.
template <typename T>
DictValue digest(const std::vector<T>& values) {
  return DictValue::integer(crc32(std::string_view(reinterpret_cast<const char*>(values.data()),
                                                   values.size() * sizeof(T))));
}

DictValue seed_value(const Seed& seed) { return DictValue::integer_text(seed.to_string()); }

Partition cut_of(uint64_t size, const RankCut& cut) {
  Partition p{size, cut.world_size, cut.rank, cut.drop_last, 0, false};
  p.validate();
  return p;
}

// Items at the global positions a Partition gives this rank, read by `read`.
class PositionItems : public PassItems {
 public:
  using Read = std::function<void(uint64_t position, uint64_t stride, uint64_t count, uint64_t*)>;
  PositionItems(Partition positions, Read read) : p_(positions), read_(std::move(read)) {}
  uint64_t size() const override { return p_.num_samples(); }
  void fill(uint64_t first, uint64_t count, uint64_t* out) const override {
    if (first > size() || count > size() - first) throw std::out_of_range("fill: window outside");
    read_(p_.global_position(first), p_.world_size, count, out);
  }

 private:
  Partition p_;
  Read read_;
};

// A Policy whose stream is cut by one Partition over `size` positions.
class CutPolicy : public Policy {
 public:
  CutPolicy(std::string kind, DictValue config, uint64_t size, const RankCut& cut)
      : kind_(std::move(kind)), config_(std::move(config)), partition_(cut_of(size, cut)) {}
  std::string kind() const override { return kind_; }
  DictValue config() const override { return config_; }
  uint64_t world_size() const override { return partition_.world_size; }
  uint64_t remaining(uint64_t start) const override {
    return partition_.resumed_at(start).num_samples();
  }

 protected:
  std::string kind_;
  DictValue config_;
  Partition partition_;
};

class WeightedPolicy : public CutPolicy {
 public:
  WeightedPolicy(std::vector<double> weights, const WeightedOptions& o)
      : CutPolicy("WeightedDistributedSampler", config_of(weights, o), o.num_samples,
                  RankCut{o.world_size, o.rank, o.drop_last}),
        sampler_(std::make_shared<WeightedSampler>(weights, o)) {}
  std::shared_ptr<const PassItems> items(uint64_t epoch, uint64_t start) override {
    // With replacement nothing wraps around: past num_samples the draws continue the stream.
    std::shared_ptr<const WeightedSampler> s = sampler_;
    return std::make_shared<PositionItems>(
        partition_.resumed_at(start),
        [s, epoch](uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) {
          s->fill_global(epoch, first, stride, count, out);
        });
  }

 private:
  static DictValue config_of(const std::vector<double>& weights, const WeightedOptions& o) {
    DictValue c = DictValue::dict();
    c.set("weights", digest(weights))
        .set("size", DictValue::integer(o.size))
        .set("num_samples", DictValue::integer(o.num_samples))
        .set("seed", seed_value(o.seed))
        .set("drop_last", DictValue::boolean(o.drop_last));
    return c;
  }
  std::shared_ptr<const WeightedSampler> sampler_;
};

class BlendedItems : public PassItems {
 public:
  BlendedItems(std::shared_ptr<const BlendedSampler> s, Partition p, uint64_t base, bool flat)
      : s_(std::move(s)), p_(p), base_(base), flat_(flat) {}
  uint64_t size() const override { return p_.num_samples(); }
  void fill(uint64_t first, uint64_t count, uint64_t* out) const override {
    if (first > size() || count > size() - first) throw std::out_of_range("fill: window outside");
    std::vector<uint64_t> positions(count), datasets(count), indices(count);
    for (uint64_t j = 0; j < count; ++j) positions[j] = base_ + p_.order_position(first + j);
    s_->fill_global(positions.data(), count, datasets.data(), indices.data(), flat_);
    for (uint64_t j = 0; j < count; ++j) {
      if (flat_) {
        out[j] = indices[j];
      } else {
        out[2 * j] = datasets[j], out[2 * j + 1] = indices[j];
      }
    }
  }

 private:
  std::shared_ptr<const BlendedSampler> s_;
  Partition p_;
  uint64_t base_;
  bool flat_;
};

class BlendedPolicy : public CutPolicy {
 public:
  BlendedPolicy(const BlendOptions& o, bool flat)
      : CutPolicy("BlendedDistributedSampler", config_of(o), o.samples_per_epoch,
                  RankCut{o.world_size, o.rank, o.drop_last}),
        sampler_(std::make_shared<BlendedSampler>(o)),
        per_epoch_(o.samples_per_epoch),
        flat_(flat) {}
  ItemShape shape() const override { return flat_ ? ItemShape::kIndex : ItemShape::kPair; }
  std::shared_ptr<const PassItems> items(uint64_t epoch, uint64_t start) override {
    if (per_epoch_ != 0 && epoch > UINT64_MAX / per_epoch_) {
      throw std::out_of_range("epoch = " + std::to_string(epoch) +
                              " is out of range: epoch * samples_per_epoch exceeds 2^64 - 1");
    }
    return std::make_shared<BlendedItems>(sampler_, partition_.resumed_at(start),
                                          epoch * per_epoch_, flat_);
  }

 private:
  static DictValue config_of(const BlendOptions& o) {
    std::vector<DictValue> sizes, weights;
    for (uint64_t s : o.sizes) sizes.push_back(DictValue::integer(s));
    for (double w : o.weights) weights.push_back(DictValue::real(w));
    DictValue c = DictValue::dict();
    c.set("sizes", DictValue::list(std::move(sizes)))
        .set("weights", DictValue::list(std::move(weights)))
        .set("samples_per_epoch", DictValue::integer(o.samples_per_epoch))
        .set("seed", seed_value(o.seed))
        .set("drop_last", DictValue::boolean(o.drop_last));
    return c;
  }
  std::shared_ptr<const BlendedSampler> sampler_;
  uint64_t per_epoch_;
  bool flat_;
};

// A policy that cuts an epoch order (order.h) among ranks as DistributedSampler does.
class OrderPolicy : public Policy {
 public:
  using OrderOf = std::function<std::shared_ptr<const EpochOrder>(uint64_t epoch)>;
  OrderPolicy(std::string kind, std::function<DictValue()> config, std::function<uint64_t()> size,
              const RankCut& cut, OrderOf order)
      : kind_(std::move(kind)), config_(std::move(config)), size_(std::move(size)), cut_(cut),
        order_(std::move(order)) {
    partition();  // validates the cut
  }
  std::string kind() const override { return kind_; }
  DictValue config() const override { return config_(); }
  uint64_t world_size() const override { return cut_.world_size; }
  uint64_t remaining(uint64_t start) const override {
    return partition().resumed_at(start).num_samples();
  }
  std::shared_ptr<const PassItems> items(uint64_t epoch, uint64_t start) override {
    const Partition p = partition();
    std::shared_ptr<const EpochOrder> order = order_(epoch);
    return view_items(RankView(std::move(order), p.resumed_at(start), epoch));
  }

 private:
  Partition partition() const { return cut_of(size_(), cut_); }
  std::string kind_;
  std::function<DictValue()> config_;
  std::function<uint64_t()> size_;
  RankCut cut_;
  OrderOf order_;
};

class BatchItems : public PassItems {
 public:
  BatchItems(BatchView view, Partition batches) : view_(std::move(view)), batches_(batches) {}
  uint64_t size() const override { return batches_.num_samples(); }
  void fill(uint64_t, uint64_t, uint64_t*) const override {
    throw std::logic_error("fill(): batch items are read with batch()");
  }
  std::vector<uint64_t> batch(uint64_t j) const override {
    if (j >= size()) throw std::out_of_range("batch: j = " + std::to_string(j) + " >= size()");
    return view_.global(batches_.order_position(j));
  }

 private:
  BatchView view_;
  Partition batches_;
};

// Batches of batch_size cut from an epoch order of `size` samples, dealt to ranks.
class BatchPolicy : public Policy {
 public:
  using OrderOf = OrderPolicy::OrderOf;
  BatchPolicy(std::string kind, DictValue config, uint64_t size, uint64_t batch_size,
              const RankCut& cut, bool shuffled, OrderOf order,
              std::vector<std::string> loose = {})
      : kind_(std::move(kind)), config_(std::move(config)), batch_size_(batch_size), cut_(cut),
        shuffled_(shuffled), order_(std::move(order)), loose_(std::move(loose)) {
    // BatchView's checks of batch_size, world size and rank, on no samples.
    BatchView(make_sequence_order({}), batch_size, cut.world_size, cut.rank, cut.drop_last);
    // Without drop_last every batch counts (the last may be short); with it, full ones only.
    const uint64_t usable = cut.drop_last ? size / batch_size
                                          : size / batch_size + (size % batch_size != 0 ? 1 : 0);
    batches_ = cut_of(usable, cut);
  }
  std::string kind() const override { return kind_; }
  DictValue config() const override { return config_; }
  uint64_t world_size() const override { return cut_.world_size; }
  ItemShape shape() const override { return ItemShape::kBatch; }
  bool shuffled() const override { return shuffled_; }
  uint64_t remaining(uint64_t start) const override {
    return batches_.resumed_at(start).num_samples();
  }
  std::vector<std::string> loose_keys() const override { return loose_; }
  std::shared_ptr<const PassItems> items(uint64_t epoch, uint64_t start) override {
    BatchView view(order_(epoch), batch_size_, cut_.world_size, cut_.rank, cut_.drop_last);
    return std::make_shared<BatchItems>(std::move(view), batches_.resumed_at(start));
  }

 private:
  std::string kind_;
  DictValue config_;
  uint64_t batch_size_;
  RankCut cut_;
  bool shuffled_;
  OrderOf order_;
  std::vector<std::string> loose_;
  Partition batches_;
};

}  // namespace

std::shared_ptr<Policy> weighted_policy(std::vector<double> weights,
                                        const WeightedOptions& options) {
  return std::make_shared<WeightedPolicy>(std::move(weights), options);
}

std::shared_ptr<Policy> blended_policy(const BlendOptions& options, bool flat) {
  return std::make_shared<BlendedPolicy>(options, flat);
}

std::shared_ptr<Policy> sharded_policy(const ShardOptions& options, const RankCut& cut) {
  validate(options);
  uint64_t size = 0;
  for (uint64_t s : options.shard_sizes) size += s;  // validate() bounds the sum
  DictValue config = DictValue::dict();
  config.set("shard_sizes", digest(options.shard_sizes))
      .set("shards", DictValue::integer(options.shard_sizes.size()))
      .set("window", DictValue::integer(options.window))
      .set("seed", seed_value(options.seed))
      .set("drop_last", DictValue::boolean(cut.drop_last));
  return std::make_shared<OrderPolicy>(
      "ShardedDistributedSampler", [config] { return config; }, [size] { return size; }, cut,
      [options](uint64_t epoch) { return make_shard_order(options, epoch); });
}

std::shared_ptr<Policy> wrapper_policy(SequenceSource source, const RankCut& cut) {
  auto shared = std::make_shared<SequenceSource>(std::move(source));
  const bool drop_last = cut.drop_last;
  return std::make_shared<OrderPolicy>(
      "DistributedSamplerWrapper",
      [shared, drop_last] {
        DictValue c = DictValue::dict();
        c.set("sampler", DictValue::string(shared->name))
            .set("size", DictValue::integer(shared->size()))
            .set("drop_last", DictValue::boolean(drop_last));
        return c;
      },
      [shared] { return shared->size(); }, cut,
      [shared](uint64_t epoch) {
        std::vector<uint64_t> order = shared->epoch(epoch);
        const uint64_t size = shared->size();
        if (order.size() != size) {
          throw std::invalid_argument("the wrapped sampler yielded " +
                                      std::to_string(order.size()) +
                                      " indices but its len() is " + std::to_string(size));
        }
        return make_sequence_order(std::move(order));
      });
}

std::shared_ptr<Policy> batch_policy(const OrderOptions& order, uint64_t batch_size,
                                     const RankCut& cut) {
  validate(order);
  DictValue config = DictValue::dict();
  config.set("size", DictValue::integer(order.size))
      .set("batch_size", DictValue::integer(batch_size))
      .set("seed", seed_value(order.seed))
      .set("shuffle", DictValue::boolean(order.shuffle))
      .set("drop_last", DictValue::boolean(cut.drop_last))
      .set("order", DictValue::string(std::string(to_string(order.kind))))
      .set("randperm",
           DictValue::string(std::string(to_string(order.randperm))));
  // The Feistel version only where it applies and is not the one a state without it means (code
  // 0, feistel.h): states written before version 2 existed lack it.
  if (order.kind == OrderKind::kFeistel && order.shuffle &&
      check_feistel_version(order.feistel_version).code != 0) {
    config.set("feistel_version", DictValue::integer(static_cast<uint64_t>(order.feistel_version)));
  }
  // The randperm variant only changes the shuffled torch order of large datasets.
  const bool randperm_changes = order.kind == OrderKind::kTorch && order.shuffle &&
                                order.size >= kRandpermInsideOutThreshold;
  return std::make_shared<BatchPolicy>(
      "DistributedBatchSampler", std::move(config), order.size, batch_size, cut, order.shuffle,
      [order](uint64_t epoch) { return make_epoch_order(order, epoch); },
      randperm_changes ? std::vector<std::string>{} : std::vector<std::string>{"randperm"});
}

std::shared_ptr<Policy> bucketed_policy(const BucketOptions& options, const RankCut& cut) {
  validate(options);
  DictValue config = DictValue::dict();
  config.set("lengths", digest(options.lengths))
      .set("size", DictValue::integer(options.lengths.size()))
      .set("batch_size", DictValue::integer(options.batch_size))
      .set("window_batches", DictValue::integer(options.window_batches))
      .set("seed", seed_value(options.seed))
      .set("drop_last", DictValue::boolean(cut.drop_last));
  return std::make_shared<BatchPolicy>(
      "BucketedBatchSampler", std::move(config), options.lengths.size(), options.batch_size, cut,
      true, [options](uint64_t epoch) { return make_bucketed_order(options, epoch); });
}

}  // namespace distsampler
