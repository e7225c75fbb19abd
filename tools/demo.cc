// `distsampler demo`: the DistributedSampler post's two experiments, computed, not recorded.
#include <set>
#include <string>
#include <vector>

#include "cli.h"
#include "distsampler/distsampler.h"

namespace distsampler::cli {
namespace {

using Batches = std::vector<std::vector<uint64_t>>;

Batches batches_of(const RankView& view, uint64_t batch_size) {
  Batches out;
  for (uint64_t i = 0; i < view.size(); i += batch_size) {
    out.emplace_back();
    for (uint64_t j = i; j < view.size() && j < i + batch_size; ++j) out.back().push_back(view[j]);
  }
  return out;
}

std::string format(const Batches& batches) {
  std::string s;
  for (const auto& batch : batches) {
    s += s.empty() ? "[" : " [";
    for (size_t j = 0; j < batch.size(); ++j) s += (j ? ", " : "") + std::to_string(batch[j]);
    s += "]";
  }
  return s;
}

// Prints every rank's batches for epochs 0 and 1; `advance` says whether the epoch passed to the
// sampler follows the loop (set_epoch(e)) or stays 0.
struct EpochsRead {
  std::vector<std::multiset<uint64_t>> indices;  // per epoch, all ranks together
  bool repeated = true;                          // epoch 1 read exactly epoch 0's batches
};
EpochsRead print_epochs(const std::vector<DistributedSampler>& ranks, uint64_t batch_size,
                        bool advance, std::ostream& out) {
  EpochsRead read;
  read.indices.resize(2);
  std::vector<std::string> previous(ranks.size());
  for (uint64_t e = 0; e < 2; ++e) {
    for (size_t r = 0; r < ranks.size(); ++r) {
      const RankView view = ranks[r].epoch(advance ? e : 0);
      const std::string line = format(batches_of(view, batch_size));
      out << (r == 0 ? "  epoch " + std::to_string(e) : std::string(9, ' ')) << "  rank " << r
          << ": " << line;
      if (e > 0) {
        out << (line == previous[r] ? "   <- same as epoch 0" : "   <- new order");
        read.repeated = read.repeated && line == previous[r];
      }
      out << "\n";
      previous[r] = line;
      read.indices[e].insert(view.begin(), view.end());
    }
  }
  return read;
}

std::vector<DistributedSampler> ranks_of(uint64_t size, uint64_t world_size, OrderKind order) {
  std::vector<DistributedSampler> ranks;
  for (uint64_t r = 0; r < world_size; ++r) {
    SamplerOptions o;
    o.size = size;
    o.world_size = world_size;
    o.rank = r;
    o.order = order;
    ranks.emplace_back(o);
  }
  return ranks;
}

}  // namespace

int run_demo(const std::vector<std::string>& args, std::ostream& out, std::ostream&) {
  Flags flags(args, 1, {});
  const OrderKind order = parse_order_kind(flags.take_string("--order", "torch"), "--order");
  flags.finish();
  const char* order_name =
      order == OrderKind::kTorch ? "torch (PyTorch's exact indices)" : "feistel (random access)";

  out << "distsampler demo, order " << order_name << ", seed 0\n\n";
  out << "Experiment 1: 16 samples, 2 ranks, batch size 2, 2 epochs.\n\n";
  const auto ranks = ranks_of(16, 2, order);
  out << "(a) The epoch never advances: the training loop forgot sampler.set_epoch(e).\n";
  const auto stale = print_epochs(ranks, 2, false, out);
  out << (stale.repeated ? "    Every epoch replays epoch 0's samples" : "    The epochs differ")
      << ": the loss 'converges with a pattern'.\n\n";
  out << "(b) The epoch advances: sampler.epoch(e) here, sampler.set_epoch(e) in PyTorch.\n";
  const auto fresh = print_epochs(ranks, 2, true, out);
  const auto& epoch0 = fresh.indices[0];
  const bool exact =
      epoch0.size() == 16 && std::set<uint64_t>(epoch0.begin(), epoch0.end()).size() == 16;
  out << (fresh.repeated ? "    The same order again" : "    A new order each epoch")
      << "; in each epoch the 2 ranks read "
      << (exact ? "all 16 samples exactly once" : "NOT every sample exactly once") << ".\n\n";

  out << "Experiment 2: 8 samples, 2 ranks, batch size 4, 2 epochs.\n\n";
  out << "(a) With the distributed sampler: each rank reads its share.\n";
  const auto shared = print_epochs(ranks_of(8, 2, order), 4, true, out);
  out << "    Per epoch the ranks read " << shared.indices[0].size()
      << " samples in all: the dataset once.\n\n";
  out << "(b) Without it (a plain shuffling loader on every rank, each rank its own seed):\n";
  std::vector<DistributedSampler> alone;
  for (uint64_t r = 0; r < 2; ++r) {
    SamplerOptions o;
    o.size = 8;
    o.order = order;
    o.seed = 1000 + r;
    alone.emplace_back(o);
  }
  const auto whole = print_epochs(alone, 4, true, out);
  out << "    Per epoch the ranks read " << whole.indices[0].size()
      << " samples in all: every rank the whole "
      << "dataset, " << whole.indices[0].size() / 8
      << "x the work, and not what data parallelism means.\n";
  return kExitOk;
}

}  // namespace distsampler::cli
