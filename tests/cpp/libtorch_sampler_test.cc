// libtorch/sampler.h: PyTorch's DistributedSampler indices through libtorch's sampler interface
// and DataLoader, and each defect of libtorch's DistributedRandomSampler
// (shared/reference/torch-semantics.md) shown present there and absent here.
#include <gtest/gtest.h>
#include <torch/data/dataloader.h>
#include <torch/data/datasets/base.h>
#include <torch/data/datasets/map.h>
#include <torch/data/samplers/distributed.h>
#include <torch/data/transforms/stack.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "distsampler/libtorch/sampler.h"
#include "golden.h"

namespace distsampler::libtorch {
namespace {

using Indices = std::vector<uint64_t>;
using Batches = std::vector<Indices>;

// All indices of one pass, by batches of `batch_size`, read straight from the sampler.
template <typename S>
Batches read_pass(S& sampler, size_t batch_size) {
  Batches out;
  while (auto batch = sampler.next(batch_size)) out.emplace_back(batch->begin(), batch->end());
  return out;
}

Indices flat(const Batches& batches) {
  Indices out;
  for (const Indices& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

// distsampler's own view (sampler.h), already proven bit-exact against PyTorch.
Indices core_indices(const SamplerOptions& options, uint64_t epoch, uint64_t start = 0) {
  const RankView view = ::distsampler::DistributedSampler(options).epoch(epoch, start);
  return Indices(view.begin(), view.end());
}

SamplerOptions options_of(uint64_t n, uint64_t w, uint64_t r, Seed seed = 0) {
  SamplerOptions o;
  o.size = n;
  o.world_size = w;
  o.rank = r;
  o.seed = seed;
  o.randperm = kLibtorchRandperm;
  return o;
}

// A dataset whose sample i is the index i itself, so a batch shows which indices it read.
struct IndexDataset : torch::data::datasets::Dataset<IndexDataset> {
  explicit IndexDataset(size_t n) : n(n) {}
  torch::data::Example<> get(size_t index) override {
    return {torch::tensor(static_cast<int64_t>(index)), torch::tensor(0)};
  }
  torch::optional<size_t> size() const override { return n; }
  size_t n;
};

// Iterates a real make_data_loader(dataset.map(Stack<>), sampler, options) for `epochs` epochs;
// before_epoch(e) runs before each (the caller's set_epoch). Returns each epoch's batches.
template <typename S>
std::vector<Batches> run_loader(size_t n, const S& sampler, size_t batch_size, size_t workers,
                                uint64_t epochs,
                                const std::function<void(uint64_t)>& before_epoch) {
  auto loader = torch::data::make_data_loader(
      IndexDataset(n).map(torch::data::transforms::Stack<>()), sampler,
      torch::data::DataLoaderOptions().batch_size(batch_size).workers(workers));
  std::vector<Batches> out;
  for (uint64_t e = 0; e < epochs; ++e) {
    before_epoch(e);
    out.emplace_back();
    for (auto& batch : *loader) {
      const torch::Tensor data = batch.data.contiguous();
      const int64_t* p = data.data_ptr<int64_t>();
      out.back().emplace_back(p, p + data.numel());
    }
  }
  return out;
}

Batches chunk(const Indices& indices, size_t batch_size) {
  Batches out;
  for (size_t i = 0; i < indices.size(); i += batch_size) {
    out.emplace_back(
        indices.begin() + static_cast<std::ptrdiff_t>(i),
        indices.begin() + static_cast<std::ptrdiff_t>(std::min(indices.size(), i + batch_size)));
  }
  return out;
}

// libtorch 1.13's DistributedRandomSampler rebuilt from its source (torch/csrc/api/src/data/
// samplers/distributed.cpp): pad the identity with i - size, std::shuffle with
// std::mt19937(epoch), rank r takes the contiguous block [r * k, (r + 1) * k).
Indices libtorch_reference(size_t n, size_t w, size_t r, size_t epoch, bool allow_duplicates) {
  const size_t k = allow_duplicates ? (n + w - 1) / w : n / w;
  const size_t count = w == 1 ? n : k * w;
  std::vector<size_t> all(count);
  std::iota(all.begin(), all.end(), size_t{0});
  for (size_t i = n; i < count; ++i) all[i] = i - n;
  std::mt19937 rand(static_cast<std::mt19937::result_type>(epoch));
  std::shuffle(all.begin(), all.end(), rand);
  return Indices(all.begin() + static_cast<std::ptrdiff_t>(r * k),
                 all.begin() + static_cast<std::ptrdiff_t>(std::min(count, (r + 1) * k)));
}

Indices libtorch_epoch(size_t n, size_t w, size_t r, size_t epoch, bool allow_duplicates = true) {
  torch::data::samplers::DistributedRandomSampler s(n, w, r, allow_duplicates);
  s.set_epoch(epoch);
  s.reset();
  return flat(read_pass(s, 1000));
}

// Collects c10 warnings (the auto_epoch notice). The handler's interface changed in PyTorch 2
// (process(const Warning&), the guard in c10::WarningUtils); Debian 12 has 1.13, Debian 13 2.6.
struct WarningCollector : c10::WarningHandler {
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
#else
  void process(const c10::SourceLocation&, const std::string& msg, bool) override {
    messages.push_back(msg);
  }
#endif
  std::vector<std::string> messages;
};
#if TORCH_VERSION_MAJOR >= 2
using WarningHandlerGuard = c10::WarningUtils::WarningHandlerGuard;
#else
using WarningHandlerGuard = c10::Warning::WarningHandlerGuard;
#endif

// ---- (a) PyTorch's indices, from PyTorch itself --------------------------------------------

// tests/golden/torch_sampler.txt was written by torch 1.13's DistributedSampler
// (tests/golden/regenerate.py): ~700 cases over size, world size, rank, epoch, seed (negative,
// >= 2^63), shuffle, drop_last.
TEST(LibtorchSampler, IndicesEqualPytorchGolden) {
  const auto cases = testing::read_golden("torch_sampler.txt");
  size_t checked = 0;
  for (const auto& c : cases) {
    ASSERT_EQ(c.fields.size(), 7u) << c.line;
    const uint64_t size = std::stoull(c.fields[0]), world = std::stoull(c.fields[1]);
    const uint64_t rank = std::stoull(c.fields[2]), epoch = std::stoull(c.fields[3]);
    const Seed seed = Seed::parse(c.fields[4]);
    DistributedSampler sampler(size, world, rank, c.fields[5] == "1", seed, c.fields[6] == "1");
    sampler.set_epoch(epoch);
    EXPECT_EQ(sampler.num_samples(), c.values.size()) << c.line;
    const Batches batches = read_pass(sampler, 7);
    EXPECT_EQ(flat(batches), c.values) << c.line;
    for (size_t b = 0; b + 1 < batches.size(); ++b) ASSERT_EQ(batches[b].size(), 7u) << c.line;
    ++checked;
  }
  EXPECT_GT(checked, 600u);
}

TEST(LibtorchSampler, FeistelOrderAndUnevenEqualTheCore) {
  for (uint64_t n : {0, 1, 5, 64, 65, 1000}) {
    for (uint64_t w : {1, 3, 8}) {
      for (uint64_t r = 0; r < w; ++r) {
        SamplerOptions o = options_of(n, w, r, Seed(int64_t{-5}));
        o.order = OrderKind::kFeistel;
        o.uneven = n % 2 == 1;
        DistributedSampler sampler(o);
        for (uint64_t e : {0, 1, 9}) {
          sampler.set_epoch(e);
          sampler.reset();
          EXPECT_EQ(flat(read_pass(sampler, 4)), core_indices(o, e)) << n << " " << w << " " << r;
        }
      }
    }
  }
}

// ---- (b) libtorch's defects, present there and absent here -----------------------------------

// libtorch: no seed, the generator is std::mt19937(epoch), so every job shuffles alike and the
// order rests on std::shuffle (another standard library, another order). Here: seed and epoch
// are separate, and the order is PyTorch's (MT19937 randperm written out, no std::shuffle).
TEST(LibtorchSampler, SeedIsNotTheEpoch) {
  for (size_t e : {0, 1, 7}) {
    EXPECT_EQ(libtorch_epoch(16, 1, 0, e), libtorch_reference(16, 1, 0, e, true)) << e;
  }
  // PyTorch's randperm(16) with seed 0 (shared/reference), read by rank 0 of 1.
  DistributedSampler seed0(16, 1, 0, true, 0);
  EXPECT_EQ(flat(read_pass(seed0, 16)),
            (Indices{12, 10, 9, 6, 11, 8, 13, 5, 2, 14, 15, 0, 4, 3, 7, 1}));
  // randperm(10) with seed 42: seed 42 at epoch 0, and seed 40 at epoch 2 (PyTorch adds them).
  const Indices seed42{2, 6, 1, 8, 4, 5, 0, 9, 3, 7};
  DistributedSampler a(10, 1, 0, true, 42), b(10, 1, 0, true, 40), c(10, 1, 0, true, 0);
  EXPECT_EQ(flat(read_pass(a, 10)), seed42);
  b.set_epoch(2);
  EXPECT_EQ(flat(read_pass(b, 10)), seed42);
  // Different seeds at the same epoch give different orders; libtorch cannot express a seed.
  c.set_epoch(0);
  EXPECT_NE(flat(read_pass(c, 10)), seed42);
}

// libtorch: rank r reads a contiguous block of one shuffled list. Here: rank r reads positions
// r, r + W, r + 2W, ... of PyTorch's order (DistributedSampler(range(16), W=2, seed=0)).
TEST(LibtorchSampler, RanksInterleaveNotBlocks) {
  const Indices list = libtorch_reference(16, 1, 0, 0, true);  // the whole shuffled list
  EXPECT_EQ(libtorch_epoch(16, 2, 0, 0), Indices(list.begin(), list.begin() + 8));
  EXPECT_EQ(libtorch_epoch(16, 2, 1, 0), Indices(list.begin() + 8, list.end()));
  const Indices order{12, 10, 9, 6, 11, 8, 13, 5, 2, 14, 15, 0, 4, 3, 7, 1};  // randperm(16)
  for (uint64_t r = 0; r < 2; ++r) {
    DistributedSampler sampler(16, 2, r);
    const Indices mine = flat(read_pass(sampler, 3));
    ASSERT_EQ(mine.size(), 8u);
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i], order[r + 2 * i]) << r << " " << i;
  }
}

// libtorch: with size < num_replicas a rank receives an index >= size (size 1, 3 replicas: index
// 1). Here every index is in range, and equals PyTorch's (n=3, W=8: 2, 0, 1, 2, 0, 1, 2, 0).
TEST(LibtorchSampler, SizeBelowWorldSizeStaysInRange) {
  bool out_of_range = false;
  for (size_t r = 0; r < 3; ++r) {
    for (uint64_t i : libtorch_epoch(1, 3, r, 0)) out_of_range = out_of_range || i >= 1;
  }
  EXPECT_TRUE(out_of_range) << "libtorch's sampler no longer hands out index >= size";
  for (uint64_t r = 0; r < 3; ++r) {
    DistributedSampler sampler(1, 3, r);
    EXPECT_EQ(flat(read_pass(sampler, 4)), Indices{0});
  }
  const Indices pytorch{2, 0, 1, 2, 0, 1, 2, 0};
  for (uint64_t r = 0; r < 8; ++r) {
    DistributedSampler sampler(3, 8, r);
    EXPECT_EQ(flat(read_pass(sampler, 4)), Indices{pytorch[r]}) << r;
  }
  DistributedSampler empty(0, 4, 3);
  EXPECT_FALSE(empty.next(4).has_value());
}

// libtorch with allow_duplicates = false: n=10, W=3 truncates the list before shuffling, so index
// 9 is never read, in any epoch. Here: without drop_last every index is read exactly once across
// ranks once the wrap-around padding is set aside; with drop_last the order is shuffled before the
// tail is cut, so every index is read in some epoch.
TEST(LibtorchSampler, TailIsSampled) {
  std::set<uint64_t> libtorch_seen, ours_seen;
  for (size_t e = 0; e < 20; ++e) {
    for (size_t r = 0; r < 3; ++r) {
      for (uint64_t i : libtorch_epoch(10, 3, r, e, false)) libtorch_seen.insert(i);
      DistributedSampler sampler(10, 3, r, true, 0, /*drop_last=*/true);
      sampler.set_epoch(e);
      for (uint64_t i : flat(read_pass(sampler, 2))) ours_seen.insert(i);
    }
  }
  EXPECT_EQ(libtorch_seen.count(9), 0u) << "libtorch's sampler now reads the tail";
  EXPECT_EQ(ours_seen.size(), 10u);

  for (uint64_t n : {1, 7, 10, 16, 33}) {
    for (uint64_t w : {2, 3, 5, 8}) {
      std::map<uint64_t, int> count;  // index -> reads at global positions < n
      for (uint64_t r = 0; r < w; ++r) {
        DistributedSampler sampler(n, w, r, true, 3);
        sampler.set_epoch(4);
        const Indices mine = flat(read_pass(sampler, 3));
        ASSERT_EQ(mine.size(), (n + w - 1) / w);
        for (size_t i = 0; i < mine.size(); ++i) {
          ASSERT_LT(mine[i], n);
          if (r + i * w < n) ++count[mine[i]];  // positions >= n are the padding
        }
      }
      ASSERT_EQ(count.size(), n) << n << " " << w;
      for (const auto& [index, reads] : count) EXPECT_EQ(reads, 1) << index;
    }
  }
}

// libtorch: make_data_loader copies the sampler, so the caller's set_epoch never reaches the
// loader and every epoch replays epoch 0. Here copies share one state: the batches of epoch e are
// this rank's indices for e, with 0 or 2 worker threads.
TEST(LibtorchSampler, SetEpochSurvivesMakeDataLoader) {
  const size_t n = 50, w = 3, r = 1, bs = 4;
  torch::data::samplers::DistributedRandomSampler theirs(n, w, r);
  const auto lt = run_loader(n, theirs, bs, 0, 3, [&](uint64_t e) { theirs.set_epoch(e); });
  EXPECT_EQ(lt[1], lt[0]) << "libtorch's set_epoch now reaches the loader";
  EXPECT_EQ(lt[2], lt[0]);
  EXPECT_EQ(flat(lt[0]), libtorch_reference(n, w, r, 0, true));

  for (size_t workers : {0, 2}) {
    DistributedSampler sampler(n, w, r, true, 11);
    const auto ours =
        run_loader(n, sampler, bs, workers, 3, [&](uint64_t e) { sampler.set_epoch(e); });
    for (uint64_t e = 0; e < 3; ++e) {
      EXPECT_EQ(ours[e], chunk(core_indices(options_of(n, w, r, 11), e), bs)) << workers << e;
    }
    EXPECT_NE(ours[0], ours[1]);
    EXPECT_EQ(sampler.epoch(), 2u);
  }
}

// Without set_epoch, libtorch's loader replays one order (above), and so does ours by default,
// warning once that it replays; with auto_epoch = true each pass the loader starts (reset() at
// begin(), the first next() after it) advances the epoch, with one warning.
TEST(LibtorchSampler, ForgottenSetEpochReplaysByDefaultAndAdvancesWithAutoEpoch) {
  const size_t n = 40, w = 2, r = 0, bs = 5;
  WarningCollector warnings;
  WarningHandlerGuard guard(&warnings);
  for (size_t workers : {0, 2}) {
    warnings.messages.clear();
    DistributedSampler sampler(n, w, r, true, 0, false, /*auto_epoch=*/true);
    const auto ours = run_loader(n, sampler, bs, workers, 3, [](uint64_t) {});
    for (uint64_t e = 0; e < 3; ++e) {
      EXPECT_EQ(ours[e], chunk(core_indices(options_of(n, w, r), e), bs)) << workers << e;
    }
    EXPECT_NE(ours[0], ours[1]);
    EXPECT_NE(ours[1], ours[2]);
    ASSERT_EQ(warnings.messages.size(), 1u);
    EXPECT_NE(warnings.messages[0].find("auto_epoch = true advances to epoch 1"), std::string::npos);
  }
  warnings.messages.clear();
  DistributedSampler pytorch_like(n, w, r);
  EXPECT_FALSE(pytorch_like.auto_epoch());
  const auto same = run_loader(n, pytorch_like, bs, 0, 3, [](uint64_t) {});
  EXPECT_EQ(same[0], chunk(core_indices(options_of(n, w, r), 0), bs));
  EXPECT_EQ(same[1], same[0]);
  EXPECT_EQ(same[2], same[0]);
  ASSERT_EQ(warnings.messages.size(), 1u);
  EXPECT_NE(warnings.messages[0].find("replays epoch 0's order"), std::string::npos);
  EXPECT_NE(warnings.messages[0].find("set_epoch"), std::string::npos);
  warnings.messages.clear();
  DistributedSampler unshuffled(n, w, r, /*shuffle=*/false);
  run_loader(n, unshuffled, bs, 0, 2, [](uint64_t) {});
  EXPECT_TRUE(warnings.messages.empty());  // replaying an unshuffled order repeats nothing new
  // A reset() without a next() starts no pass: two resets in a row advance once.
  DistributedSampler s(n, w, r, true, 0, false, /*auto_epoch=*/true);
  read_pass(s, bs);
  s.reset();
  s.reset();
  EXPECT_EQ(flat(read_pass(s, bs)), core_indices(options_of(n, w, r), 1));
  // An explicit set_epoch wins, also after passes that auto-advanced.
  s.set_epoch(0);
  s.reset();
  EXPECT_EQ(flat(read_pass(s, bs)), core_indices(options_of(n, w, r), 0));
}

TEST(LibtorchSampler, CopiesShareOneSampler) {
  DistributedSampler a(20, 2, 0);
  DistributedSampler b = a;
  b.set_epoch(5);
  EXPECT_EQ(a.epoch(), 5u);
  const auto first = a.next(3);
  ASSERT_TRUE(first.has_value());
  const auto second = b.next(3);  // continues the same pass
  ASSERT_TRUE(second.has_value());
  const Indices expected = core_indices(options_of(20, 2, 0), 5);
  EXPECT_EQ(Indices(second->begin(), second->end()),
            Indices(expected.begin() + 3, expected.begin() + 6));
  EXPECT_EQ(a.state().consumed, 12u);
}

std::string to_bytes(const DistributedSampler& sampler) {
  torch::serialize::OutputArchive archive;
  sampler.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void from_bytes(DistributedSampler& sampler, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  sampler.load(archive);
}

// save/load through torch::serialize archives (bytes in between): a job of 4 ranks stopped
// mid-epoch resumes with 3 ranks that read exactly the rest, every index once.
TEST(LibtorchSampler, SaveLoadResumesOnAnotherWorldSize) {
  const uint64_t n = 103, bs = 5, epoch = 2, taken_batches = 4;
  WarningCollector warnings;  // the pass after the reloaded complete epoch advances by itself
  WarningHandlerGuard guard(&warnings);
  std::vector<std::string> saved;
  std::map<uint64_t, int> reads;  // index -> reads at real global positions
  for (uint64_t r = 0; r < 4; ++r) {
    DistributedSampler sampler(n, 4, r, true, 9);
    sampler.set_epoch(epoch);
    for (uint64_t b = 0; b < taken_batches; ++b) {
      const auto batch = sampler.next(bs);
      for (size_t i : *batch) ++reads[i];
    }
    saved.push_back(to_bytes(sampler));
    EXPECT_EQ(sampler.state().consumed, taken_batches * bs * 4);
    EXPECT_EQ(sampler.state().epoch, epoch);
  }
  EXPECT_EQ(saved[1], saved[0]);  // the same checkpoint on every rank: rank 0 saves it
  const uint64_t consumed = taken_batches * bs * 4;
  for (uint64_t r = 0; r < 3; ++r) {
    DistributedSampler resumed(n, 3, r, true, 9);
    from_bytes(resumed, saved[0]);
    EXPECT_EQ(resumed.epoch(), epoch);
    EXPECT_EQ(resumed.num_samples(), (n - consumed + 2) / 3);
    resumed.set_epoch(epoch);  // the training loop's call keeps the loaded position
    const Indices rest = flat(read_pass(resumed, bs));
    EXPECT_EQ(rest, core_indices(options_of(n, 3, r, 9), epoch, consumed));
    for (size_t i = 0; i < rest.size(); ++i) {
      if (consumed + r + 3 * i < n) ++reads[rest[i]];
    }
    // After the pass: the epoch is complete, and the next epoch's pass reads it whole.
    EXPECT_GE(resumed.state().consumed, n);
    resumed.set_epoch(epoch + 1);
    resumed.reset();
    EXPECT_EQ(flat(read_pass(resumed, bs)), core_indices(options_of(n, 3, r, 9), epoch + 1));
  }
  ASSERT_EQ(reads.size(), n);
  for (const auto& [index, count] : reads) EXPECT_EQ(count, 1) << index;

  // A round trip keeps (fingerprint, epoch, consumed) exactly; a complete epoch reloads as
  // complete, so auto_epoch goes on to the next epoch.
  DistributedSampler done(n, 4, 0, true, 9);
  done.set_epoch(epoch);
  read_pass(done, 64);
  DistributedSampler other(n, 4, 0, true, 9, false, /*auto_epoch=*/true);
  from_bytes(other, to_bytes(done));
  EXPECT_EQ(other.state(), done.state());
  EXPECT_EQ(flat(read_pass(other, 64)), core_indices(options_of(n, 4, 0, 9), epoch + 1));
  // Without auto_epoch the pass after it replays that epoch whole, as after any pass (it read the
  // empty rest again before pass.h), and set_epoch of that epoch keeps the loaded position.
  DistributedSampler replaying(n, 4, 0, true, 9);
  from_bytes(replaying, to_bytes(done));
  EXPECT_EQ(flat(read_pass(replaying, 64)), core_indices(options_of(n, 4, 0, 9), epoch));
  DistributedSampler kept(n, 4, 0, true, 9);
  from_bytes(kept, to_bytes(done));
  kept.set_epoch(epoch);
  EXPECT_TRUE(flat(read_pass(kept, 64)).empty());
}

// With worker threads the DataLoader asks for batches ahead of the loop, so state() counts more
// than the loop received; state_received(n) is exact.
TEST(LibtorchSampler, PrefetchIsCountedAndStateReceivedIsExact) {
  const size_t n = 200, bs = 4;
  DistributedSampler sampler(n, 2, 0);
  sampler.set_epoch(1);
  auto loader = torch::data::make_data_loader(
      IndexDataset(n).map(torch::data::transforms::Stack<>()), sampler,
      torch::data::DataLoaderOptions().batch_size(bs).workers(2));
  size_t received = 0;
  for (auto& batch : *loader) {
    received += static_cast<size_t>(batch.data.numel());
    if (received == 3 * bs) break;
  }
  EXPECT_GT(sampler.state().consumed, received * 2);
  const SamplerState exact = sampler.state_received(received);
  EXPECT_EQ(exact.consumed, received * 2);
  EXPECT_THROW(sampler.state_received(n), std::out_of_range);
  DistributedSampler resumed(n, 2, 0);
  resumed.load_state(exact);
  const Indices all = core_indices(options_of(n, 2, 0), 1);
  EXPECT_EQ(flat(read_pass(resumed, bs)), Indices(all.begin() + 3 * bs, all.end()));
}

// A corrupt, foreign or mismatched archive is rejected with std::invalid_argument naming the
// problem, and the sampler is unchanged.
TEST(LibtorchSampler, CorruptArchiveIsRejectedAndChangesNothing) {
  DistributedSampler source(100, 2, 0, true, 4);
  source.set_epoch(3);
  source.next(10);
  const std::string state_bytes = encode_state(source.state());

  DistributedSampler target(100, 2, 0, true, 4);
  target.set_epoch(1);
  target.next(6);
  const SamplerState before = target.state();

  auto expect_rejected = [&](const std::function<void(torch::serialize::OutputArchive&)>& write,
                             const std::string& problem) {
    torch::serialize::OutputArchive out;
    write(out);
    std::ostringstream bytes;
    out.save_to(bytes);
    try {
      from_bytes(target, bytes.str());
      ADD_FAILURE() << "accepted; expected an error about " << problem;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(problem), std::string::npos) << e.what();
    }
    EXPECT_EQ(target.state(), before);
  };
  auto tensor_of = [](std::string bytes) {
    torch::Tensor t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(t.data_ptr<uint8_t>()));
    return t;
  };
  std::string flipped = state_bytes;
  flipped[50] = static_cast<char>(flipped[50] ^ 0x04);  // inside `consumed`
  expect_rejected([&](auto& a) { a.write(kStateKey, tensor_of(flipped), true); }, "checksum");
  expect_rejected([&](auto& a) { a.write(kStateKey, tensor_of(state_bytes.substr(0, 59)), true); },
                  "59 elements");
  expect_rejected([&](auto& a) { a.write(kStateKey, torch::zeros({60}), true); }, "Float");
  expect_rejected([&](auto& a) { a.write("something_else", tensor_of(state_bytes), true); },
                  "missing");
  DistributedSampler other_seed(100, 2, 0, true, 5);
  expect_rejected([&](auto& a) { other_seed.save(a); }, "seed");
  // Still the same pass: the next indices continue where they were.
  const Indices e1 = core_indices(options_of(100, 2, 0, 4), 1);
  EXPECT_EQ(flat(read_pass(target, 100)), Indices(e1.begin() + 6, e1.end()));
}

// README.md's section "libtorch" shows the lines between the [readme] markers, indented by four
// spaces; the test runs them and checks that the README holds them verbatim.
TEST(LibtorchSampler, ReadmeSnippet) {
  const uint64_t world_size = 2, rank = 1, epochs = 2;
  auto dataset = IndexDataset(100);
  Batches seen;  // every epoch's batches, in order
  auto train_step = [&](const torch::Tensor& data, const torch::Tensor&) {
    const torch::Tensor d = data.contiguous();
    seen.emplace_back(d.data_ptr<int64_t>(), d.data_ptr<int64_t>() + d.numel());
  };
  // [readme]
  distsampler::libtorch::DistributedSampler sampler(*dataset.size(), world_size, rank);
  auto loader =
      torch::data::make_data_loader(std::move(dataset).map(torch::data::transforms::Stack<>()),
                                    sampler, torch::data::DataLoaderOptions().batch_size(64));
  for (size_t epoch = 0; epoch < epochs; ++epoch) {
    sampler.set_epoch(epoch);  // reaches the loader's copy: copies share one state
    for (auto& batch : *loader) train_step(batch.data, batch.target);
  }
  torch::serialize::OutputArchive archive;  // (configuration, epoch, consumed)
  sampler.save(archive);
  // [readme]
  Batches expected;
  for (uint64_t e = 0; e < epochs; ++e) {
    for (const Indices& b : chunk(core_indices(options_of(100, 2, 1), e), 64)) {
      expected.push_back(b);
    }
  }
  EXPECT_EQ(seen, expected);
  DistributedSampler resumed(100, 3, 0);
  torch::serialize::InputArchive in;
  std::stringstream bytes;
  archive.save_to(bytes);
  in.load_from(bytes);
  resumed.load(in);
  EXPECT_EQ(resumed.state(), sampler.state());

  std::ifstream source(__FILE__), readme(DISTSAMPLER_SOURCE_DIR "/README.md");
  ASSERT_TRUE(source && readme) << __FILE__ << ", README.md";
  std::string line, block, text((std::istreambuf_iterator<char>(readme)), {});
  bool inside = false;
  while (std::getline(source, line)) {
    const size_t mark = line.find("// [readme]");
    if (mark != std::string::npos && mark == line.find_first_not_of(' ')) {
      if ((inside = !inside)) continue;
      break;
    }
    if (inside) block += "    " + line.substr(std::min(line.size(), size_t{2})) + "\n";
  }
  ASSERT_FALSE(block.empty());
  EXPECT_NE(text.find(block), std::string::npos) << "README.md lacks, indented by 4:\n" << block;
}

TEST(LibtorchSampler, BadArgumentsThrow) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 0, 0), std::invalid_argument);
  DistributedSampler s(10, 2, 0);
  EXPECT_THROW(s.next(0), std::invalid_argument);
  EXPECT_THROW(s.reset(11), std::invalid_argument);
  s.reset(10);
  // seed + epoch beyond 2^64 - 1: the pass cannot start, nothing changes.
  DistributedSampler top(10, 2, 0, true, Seed(UINT64_MAX));
  top.set_epoch(1);
  EXPECT_THROW(top.next(2), std::out_of_range);
  EXPECT_EQ(top.state().epoch, 1u);
  top.set_epoch(0);
  EXPECT_TRUE(top.next(2).has_value());
}

}  // namespace
}  // namespace distsampler::libtorch
