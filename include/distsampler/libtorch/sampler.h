// libtorch/sampler.h: PyTorch's DistributedSampler as a libtorch torch::data sampler.
//
// libtorch's own torch::data::samplers::DistributedRandomSampler is another algorithm than the
// Python sampler (shared/reference: std::mt19937(epoch) with std::shuffle, contiguous rank
// blocks, an out-of-range index when size < num_replicas, the tail never sampled without
// duplicates, set_epoch lost in make_data_loader's copy). This one reads distsampler's
// DistributedSampler (sampler.h): the Python sampler's indices bit for bit (or the Feistel
// order), seed and epoch separate, interleaved ranks, wrap-around padding, the same on every
// compiler and standard library.
//
// Header-only; link the CMake target distsampler::libtorch (distsampler plus libtorch).
#ifndef DISTSAMPLER_LIBTORCH_SAMPLER_H_
#define DISTSAMPLER_LIBTORCH_SAMPLER_H_

#include <torch/data/samplers/base.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <torch/version.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distsampler/pass.h"
#include "distsampler/sampler.h"
#include "distsampler/state.h"

namespace distsampler::libtorch {

// The archive key save() writes and load() reads: a uint8 tensor holding encode_state's 60
// bytes (state.h; CRC-32 protected). Nest archives to keep several samplers in one file.
inline constexpr const char* kStateKey = "distsampler_state";

// The torch.randperm this libtorch's Python counterpart uses: the classic one before PyTorch 2.6
// (the first release carrying the inside-out algorithm for n >= 214,748,364: 2.6.0's source has
// it, 2.5 predates it), like the Python drop-in's randperm="auto". The two differ only for
// n >= 214,748,364.
inline constexpr RandpermVariant kLibtorchRandperm =
    (TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 6))
        ? RandpermVariant::kClassic
        : RandpermVariant::kCurrent;

namespace detail {
// A UserWarning without libtorch's "(Triggered internally at ...)" suffix: c10::Warning::warn in
// PyTorch 1.x, c10::warn(Warning) in 2.x (Debian 12 has 1.13, Debian 13 has 2.6).
inline void warn_verbatim(const c10::SourceLocation& where, const std::string& message) {
#if TORCH_VERSION_MAJOR >= 2
  c10::warn(c10::Warning(c10::UserWarning(), where, message, true));
#else
  c10::Warning::warn(where, message, true);
#endif
}
}  // namespace detail

// Writes `state` under kStateKey; reads it back, throwing std::invalid_argument that names the
// problem (missing key, not a 60-byte uint8 tensor, bad checksum, foreign format or algorithm).
inline void write_state(torch::serialize::OutputArchive& archive, const SamplerState& state);
inline SamplerState read_state(torch::serialize::InputArchive& archive);

// A rank's share of each epoch, handed out by next(batch_size) for torch::data's DataLoader.
//
//   auto sampler = distsampler::libtorch::DistributedSampler(dataset_size, world_size, rank);
//   auto loader = torch::data::make_data_loader(dataset, sampler, options);  // a copy
//   for (size_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);        // reaches the loader's copy: copies share one state
//     for (auto& batch : *loader) ...
//   }
//
// Copies are handles to one shared state (epoch, progress), so the loader's copy and the
// caller's handle stay one sampler; all members are thread-safe. A moved-from sampler may only be
// assigned to or destroyed.
//
// Passes. A pass is one epoch's share, read by next(); it starts at the first next() after
// construction, reset() or load(), and runs until the next reset() (the DataLoader calls reset()
// at every begin(), never at construction; after the share is exhausted next() returns nullopt
// until then). set_epoch(e) makes the next pass read epoch e. By default a pass started without a
// set_epoch() call since the previous pass replays the previous pass's epoch, as libtorch's and
// PyTorch's samplers do, and a shuffled one warns once (c10 warning) naming set_epoch. With
// auto_epoch = true such a pass reads the previous pass's epoch + 1 instead (and warns once):
// every rank must then start the same number of passes, or the ranks read different epochs and
// their shares overlap. An explicit set_epoch always wins.
//
// Checkpoints. save()/state() record (configuration fingerprint, epoch, consumed): the job read
// global positions [0, consumed) of the epoch, all ranks together, counted from what next()
// handed out (every rank hands out the same count). load() resumes on any number of ranks: the
// next pass reads this rank's share of the rest of that epoch (partition.h's elastic rule).
// A DataLoader with workers > 0 requests up to max_jobs batches ahead of the training loop, so a
// mid-epoch save() then counts batches the loop has not received, and resuming skips them. For
// an exact mid-epoch checkpoint use workers = 0, or write_state(archive, state_received(n)) with
// the n indices this rank's loop received in the current pass.
class DistributedSampler : public torch::data::samplers::Sampler<std::vector<size_t>> {
 public:
  // PyTorch's DistributedSampler arguments. randperm is kLibtorchRandperm.
  DistributedSampler(uint64_t size, uint64_t num_replicas, uint64_t rank, bool shuffle = true,
                     Seed seed = 0, bool drop_last = false, bool auto_epoch = false);
  // Any SamplerOptions (order, randperm, uneven, ...); validated as sampler.h's constructor does.
  explicit DistributedSampler(const SamplerOptions& options, bool auto_epoch = false);

  const SamplerOptions& options() const { return state_->core.options(); }
  bool auto_epoch() const { return state_->cursor.auto_epoch(); }
  // The epoch of the latest pass, or of the next one before any.
  uint64_t epoch() const;
  // The indices of the pass in progress, or of the next pass (after load(): what it resumes).
  uint64_t num_samples() const;

  // Makes the next pass read `epoch`. Setting the epoch that a loaded state is in keeps its
  // position; any other epoch starts at its beginning.
  void set_epoch(uint64_t epoch);

  // Ends the pass: the next next() starts a new one. new_size, when given, must be the size the
  // sampler was built for (std::invalid_argument otherwise: build a new sampler for a dataset of
  // another size, a checkpoint of one does not apply to the other).
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  // The next min(batch_size, left) indices of the pass, nullopt when it is exhausted. Starting a
  // pass throws std::out_of_range when the torch order's seed + epoch exceeds 2^64 - 1, and
  // std::invalid_argument when auto_epoch would advance past 2^64 - 1; batch_size must be >= 1.
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;

  // The checkpoint now, counting what next() handed out.
  SamplerState state() const;
  // The checkpoint of the current pass after this rank's loop received `received` of its indices
  // (std::out_of_range when more than were handed out), for DataLoaders that fetch ahead.
  SamplerState state_received(uint64_t received) const;
  // Resumes `state`, saved with any world size. Throws std::invalid_argument naming every field
  // in which its configuration differs from this sampler's (std::out_of_range when its epoch
  // cannot be read) and then changes nothing.
  void load_state(const SamplerState& state);

  void save(torch::serialize::OutputArchive& archive) const override;
  // read_state() then load_state(): throws std::invalid_argument naming the problem, changing
  // nothing.
  void load(torch::serialize::InputArchive& archive) override;

 private:
  struct Shared {
    explicit Shared(const SamplerOptions& options, bool auto_epoch)
        : core(options), cursor(auto_epoch) {}
    std::mutex mutex;
    const ::distsampler::DistributedSampler core;
    PassCursor cursor;             // the passes (pass.h)
    std::optional<RankView> view;  // the live pass's indices, while next() reads it (until reset())
  };

  // The checkpoint at `position`; the caller holds the mutex.
  static SamplerState state_at(const Shared& s, const Position& position) {
    return make_state(s.core, position.epoch, position.consumed);
  }

  std::shared_ptr<Shared> state_;
};

// ---- Implementation (header-only) ------------------------------------------------------------

inline void write_state(torch::serialize::OutputArchive& archive, const SamplerState& state) {
  const std::string bytes = encode_state(state);
  torch::Tensor tensor = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(tensor.data_ptr<uint8_t>()));
  archive.write(kStateKey, tensor, /*is_buffer=*/true);
}

inline SamplerState read_state(torch::serialize::InputArchive& archive) {
  const std::string where = std::string("archive key '") + kStateKey + "'";
  torch::Tensor tensor;
  bool found = false;
  try {
    found = archive.try_read(kStateKey, tensor, /*is_buffer=*/true);
  } catch (const c10::Error& e) {
    throw std::invalid_argument(where + " cannot be read: " + e.what_without_backtrace());
  }
  if (!found || !tensor.defined()) {
    throw std::invalid_argument(where + " is missing: not a distsampler sampler's archive");
  }
  if (tensor.scalar_type() != torch::kUInt8 || tensor.dim() != 1 ||
      tensor.numel() != static_cast<int64_t>(kStateBytes)) {
    throw std::invalid_argument(where + " holds a " +
                                std::string(c10::toString(tensor.scalar_type())) + " tensor of " +
                                std::to_string(tensor.numel()) + " elements; expected " +
                                std::to_string(kStateBytes) + " uint8 (encode_state's bytes)");
  }
  const torch::Tensor bytes = tensor.contiguous();
  return decode_state(std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                                  kStateBytes));  // throws std::invalid_argument "state: ..."
}

inline DistributedSampler::DistributedSampler(uint64_t size, uint64_t num_replicas, uint64_t rank,
                                              bool shuffle, Seed seed, bool drop_last,
                                              bool auto_epoch)
    : DistributedSampler(
          [&] {
            SamplerOptions o;
            o.size = size;
            o.world_size = num_replicas;
            o.rank = rank;
            o.shuffle = shuffle;
            o.seed = seed;
            o.drop_last = drop_last;
            o.randperm = kLibtorchRandperm;
            return o;
          }(),
          auto_epoch) {}

inline DistributedSampler::DistributedSampler(const SamplerOptions& options, bool auto_epoch)
    : state_(std::make_shared<Shared>(options, auto_epoch)) {}

inline uint64_t DistributedSampler::epoch() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->cursor.epoch();
}

inline uint64_t DistributedSampler::num_samples() const {
  const Shared& s = *state_;
  std::lock_guard<std::mutex> lock(state_->mutex);
  const PassCursor& cursor = s.cursor;
  if (cursor.explicit_epoch()) return s.core.remaining(cursor.resume_at());
  if (s.view && !cursor.live()->finished()) return cursor.live()->total;
  return s.core.remaining(0);
}

inline void DistributedSampler::set_epoch(uint64_t epoch) {
  Shared& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.cursor.set_epoch(epoch);
}

inline void DistributedSampler::reset(torch::optional<size_t> new_size) {
  Shared& s = *state_;
  if (new_size && *new_size != s.core.options().size) {
    throw std::invalid_argument(
        "new_size = " + std::to_string(*new_size) +
        " but this sampler was built for size = " + std::to_string(s.core.options().size) +
        "; allowed: the same size (build a new sampler for a dataset of another size)");
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.view.reset();
}

inline torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (batch_size == 0) {
    throw std::invalid_argument("batch_size = 0 is out of range; allowed: batch_size >= 1");
  }
  Shared& s = *state_;
  std::string warning;
  std::vector<size_t> out;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    PassCursor& cursor = s.cursor;
    if (!s.view) {  // a new pass: decide its epoch and start
      const PassPlan plan = cursor.plan(s.core.options().shuffle);
      RankView view = s.core.epoch(plan.epoch, plan.start);  // may throw: nothing changed yet
      const PassNotice notice = cursor.begin(plan, view.size(), s.core.options().world_size);
      s.view.emplace(std::move(view));
      warning = pass_notice_text(notice, plan.epoch, "distsampler::libtorch::DistributedSampler",
                                 "libtorch's and PyTorch's samplers do", "auto_epoch = true");
    }
    const Pass& pass = *cursor.live();
    const uint64_t count = std::min<uint64_t>(batch_size, pass.total - pass.taken);
    if (count > 0) {
      out.resize(count);
      if constexpr (std::is_same_v<size_t, uint64_t>) {
        s.view->fill(pass.taken, count, out.data());
      } else {
        std::vector<uint64_t> buffer(count);
        s.view->fill(pass.taken, count, buffer.data());
        std::copy(buffer.begin(), buffer.end(), out.begin());
      }
      cursor.set_taken(pass.taken + count);
    }
  }
  if (!warning.empty())
    detail::warn_verbatim({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, warning);
  if (out.empty()) return torch::nullopt;
  return out;
}

inline SamplerState DistributedSampler::state() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_at(*state_, state_->cursor.position());
}

inline SamplerState DistributedSampler::state_received(uint64_t received) const {
  const Shared& s = *state_;
  std::lock_guard<std::mutex> lock(state_->mutex);
  const std::optional<Pass>& live = s.cursor.live();
  const uint64_t handed = live ? live->taken : 0;
  if (received > handed) {
    throw std::out_of_range("received = " + std::to_string(received) +
                            " is out of range; allowed: received <= " + std::to_string(handed) +
                            ", the indices next() handed out in this pass");
  }
  if (!live) return state_at(s, s.cursor.position());
  return make_state(s.core, live->epoch, live->consumed_after(received));
}

inline void DistributedSampler::load_state(const SamplerState& loaded) {
  Shared& s = *state_;
  // Validates the configuration and the epoch before anything changes.
  const uint64_t left = resume(s.core, loaded).size();
  std::lock_guard<std::mutex> lock(s.mutex);
  const Position position{loaded.epoch, loaded.consumed};
  // The DataLoader starts the next pass right after a load: a complete epoch reads as a finished
  // pass, so state() gives it back and that next pass replays or advances.
  if (left == 0) {
    s.cursor.load_finished(position, s.core.options().world_size);
  } else {
    s.cursor.load(position, left);
  }
  s.view.reset();
}

inline void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  write_state(archive, state());
}

inline void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  load_state(read_state(archive));
}

}  // namespace distsampler::libtorch

#endif  // DISTSAMPLER_LIBTORCH_SAMPLER_H_
