// The one pass sampler and the plain samplers' policy (policy.h).
#include "distsampler/policy.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "distsampler/fingerprint.h"

namespace distsampler {
namespace {

class ViewItems : public PassItems {
 public:
  ViewItems(RankView view, bool with_mask) : view_(std::move(view)), with_mask_(with_mask) {}
  uint64_t size() const override { return view_.size(); }
  void fill(uint64_t first, uint64_t count, uint64_t* out) const override {
    if (!with_mask_) return view_.fill(first, count, out);
    const uint64_t real = view_.num_real();
    for (uint64_t j = 0; j < count; ++j) {
      out[2 * j] = view_.at(first + j);
      out[2 * j + 1] = first + j < real ? 1 : 0;
    }
  }

 private:
  RankView view_;
  bool with_mask_;
};

// The fingerprint's fields `names` as a configuration, plus those with an "absent" value where
// they differ from it (a state written before such a field existed lacks it).
DictValue fingerprint_config(const Fingerprint& f, const std::vector<std::string>& names) {
  DictValue config = DictValue::dict();
  for (const FingerprintField& row : fingerprint_fields()) {
    const bool listed = std::find(names.begin(), names.end(), row.name) != names.end();
    const bool differs = row.absent != nullptr && row.value(f) != row.absent;
    if (listed || differs) config.set(row.name, field_dict_value(row, f));
  }
  return config;
}

}  // namespace

std::vector<uint64_t> PassItems::batch(uint64_t) const {
  throw std::logic_error("batch(): these pass items are not batches");
}

std::shared_ptr<const PassItems> view_items(RankView view, bool with_mask) {
  return std::make_shared<ViewItems>(std::move(view), with_mask);
}

DictValue Policy::state_dict(const Position& position) const {
  return policy_state_dict(PolicyCheckpoint{kind(), config(), position.epoch, position.consumed,
                                            world_size(), DictValue{}});
}

Position Policy::parse_state(const DictValue& state, std::string* summary) const {
  const DictValue mine = config();
  const PolicyCheckpoint c = parse_policy_state(state, kind(), mine, loose_keys());
  if (summary != nullptr) *summary = canonical_json(mine);
  return Position{c.epoch, c.consumed};
}

// ---- PlainPolicy ------------------------------------------------------------------------------

PlainPolicy::PlainPolicy(Kind kind, const SamplerOptions& options, bool with_mask)
    : kind_(kind), sampler_(options), with_mask_(with_mask) {}

std::string PlainPolicy::kind() const {
  switch (kind_) {
    case Kind::kDropIn: return "DistributedSampler";
    case Kind::kEval: return "DistributedEvalSampler";
    case Kind::kIterable: return "DistributedIterableDataset";
  }
  return "";
}

DictValue PlainPolicy::config() const {
  const Fingerprint f = fingerprint(sampler_.options());
  if (kind_ == Kind::kDropIn) {
    DictValue all = DictValue::dict();
    for (const FingerprintField& row : fingerprint_fields()) {
      all.set(row.name, field_dict_value(row, f));
    }
    return all;
  }
  // The evaluation sampler never drops, the adapter is never uneven: each lists its own.
  const char* partition_field = kind_ == Kind::kEval ? "uneven" : "drop_last";
  return fingerprint_config(f, {"algorithm_version", "size", "seed", "shuffle", partition_field,
                                "order", "randperm", "feistel_rounds"});
}

namespace {
// The iterable adapter's pass in the process that decides it: its count only (the DataLoader's
// workers read the items, each its own view).
class CountedItems : public PassItems {
 public:
  explicit CountedItems(uint64_t size) : size_(size) {}
  uint64_t size() const override { return size_; }
  void fill(uint64_t, uint64_t, uint64_t*) const override {
    throw std::logic_error("fill(): the adapter's workers read its items");
  }

 private:
  uint64_t size_;
};
}  // namespace

std::shared_ptr<const PassItems> PlainPolicy::items(uint64_t epoch, uint64_t start) {
  if (kind_ == Kind::kIterable) {
    check_epoch(sampler_.options().order_options(), epoch);  // without building the order
    return std::make_shared<CountedItems>(sampler_.remaining(start));
  }
  return view_items(source_ ? source_->epoch(epoch, start) : sampler_.epoch(epoch, start),
                    with_mask_);
}

std::vector<std::string> PlainPolicy::loose_keys() const {
  // The randperm variant where it does not change the order (the fingerprint's rule).
  if (randperm_matters(fingerprint(sampler_.options()))) return {};
  return {"randperm"};
}

DictValue PlainPolicy::state_dict(const Position& position) const {
  if (kind_ != Kind::kDropIn) return Policy::state_dict(position);
  return sampler_state_dict(make_state(sampler_, position.epoch, position.consumed),
                            world_size());
}

Position PlainPolicy::parse_state(const DictValue& state, std::string* summary) const {
  if (kind_ != Kind::kDropIn) return Policy::parse_state(state, summary);
  const SamplerState s = parse_sampler_state(state, sampler_);
  if (summary != nullptr) *summary = state_to_json(SamplerState{s.config, 0, 0});
  return Position{s.epoch, s.consumed};
}

// ---- WorkerShare --------------------------------------------------------------------------------

WorkerShare::WorkerShare(DistributedSampler sampler, uint64_t batch_size, uint64_t worker,
                         uint64_t workers, const WorkerPosition& at)
    : sampler_(std::move(sampler)),
      batch_size_(batch_size),
      worker_(worker),
      workers_(workers),
      at_(at),
      view_(sampler_.epoch(at.epoch, at.start)) {
  if (batch_size == 0 || workers == 0 || worker >= workers) {
    throw std::invalid_argument("WorkerShare: batch_size = " + std::to_string(batch_size) +
                                ", worker = " + std::to_string(worker) + ", workers = " +
                                std::to_string(workers) +
                                "; allowed: batch_size >= 1, worker < workers");
  }
}

void WorkerShare::seek(const WorkerPosition& at) {
  view_ = sampler_.epoch(at.epoch, at.start);  // may throw: nothing changed yet
  at_ = at;
}

std::optional<uint64_t> WorkerShare::next() {
  const uint64_t batch = at_.yielded / batch_size_;
  const uint64_t within = at_.yielded % batch_size_;
  // Past the view (and past 2^64, which no view reaches) the share has ended.
  const unsigned __int128 position =
      (static_cast<unsigned __int128>(batch) * workers_ + worker_) * batch_size_ + within;
  if (position >= view_.size()) return std::nullopt;
  ++at_.yielded;
  return view_[static_cast<uint64_t>(position)];
}

// ---- PolicySampler ------------------------------------------------------------------------------

PolicySampler::PolicySampler(std::shared_ptr<Policy> policy, bool auto_epoch)
    : policy_(std::move(policy)), cursor_(auto_epoch) {}

PolicySampler::PolicySampler(std::shared_ptr<Policy> policy, const PassCursor::State& cursor)
    : policy_(std::move(policy)), cursor_(cursor) {
  if (cursor.live) handed_ = cursor.live->taken;  // a copy resumes where its original stood
}

void PolicySampler::set_epoch(uint64_t epoch) {
  position();  // the live pass's progress first: set_epoch keeps an unfinished pass's position
  cursor_.set_epoch(epoch);
}

PolicySampler::Started PolicySampler::start() {
  const PassPlan plan = cursor_.plan(policy_->shuffled());
  Started started;
  started.items = policy_->items(plan.epoch, plan.start);  // may throw: nothing changed yet
  started.notice = cursor_.begin(plan, started.items->size(), policy_->world_size());
  started.epoch = plan.epoch;
  started.start = plan.start;
  started.serial = ++serial_;
  tracked_ = false;
  handed_ = received_ = 0;
  return started;
}

void PolicySampler::set_handed(uint64_t serial, uint64_t handed) {
  if (serial == serial_) handed_ = handed;
}

void PolicySampler::receive(uint64_t serial, uint64_t count) {
  if (serial != serial_) return;
  tracked_ = true;
  received_ = count;
}

void PolicySampler::receive_all(uint64_t serial) {
  if (serial == serial_ && cursor_.live()) receive(serial, cursor_.live()->total);
}

Position PolicySampler::position() {
  if (cursor_.live()) {
    const uint64_t taken = tracked_ ? received_ : handed_;
    cursor_.set_taken(std::min(taken, cursor_.live()->total));
  }
  return cursor_.position();
}

DictValue PolicySampler::state_dict() { return policy_->state_dict(position()); }

void PolicySampler::load(const Position& position) {
  cursor_.load(position, policy_->remaining(position.consumed));
  ++serial_;  // reports about the pass before the load are stale
  tracked_ = false;
  handed_ = received_ = 0;
}

}  // namespace distsampler
