// distsampler audit: replays a job plan (every rank of every segment, through the real RankView)
// and checks the exactly-once rule of docs/design.md for each epoch.
#include <algorithm>
#include <string>
#include <vector>

#include "cli.h"
#include "distsampler/distsampler.h"

namespace distsampler::cli {
namespace {

// The largest dataset audited: one counter per index, plus the torch order in memory.
constexpr uint64_t kMaxAuditSize = 100'000'000;
// The most index reads one audit replays (size x epochs): about a minute on one core.
constexpr uint64_t kMaxAuditReads = 1'000'000'000;

// One run of the job inside an epoch: `world_size` ranks from global position `start` on, each
// rank reading its positions below `stop` (the cut where the job was stopped, or no limit).
struct Segment {
  uint64_t start = 0;
  uint64_t world_size = 1;
  uint64_t stop = UINT64_MAX;
};

struct EpochVerdict {
  bool ok = true;
  std::string detail;
};

// Reads every segment's positions through RankView and checks, with n = size and W_f the world
// size of the segment holding the final step (the last step that read anything) or, with
// drop_last, of the last segment:
//   padding:   every index read >= 1 time; repeats only in the final step; fewer than W_f of
//              them; and they are the order's first positions (the defined padding);
//   drop_last: no index read twice; fewer than W_last unread, and they are the order's last
//              positions (the defined drop).
EpochVerdict audit_epoch(const SamplerOptions& options, uint64_t epoch,
                         const std::vector<Segment>& segments) {
  const uint64_t n = options.size;
  const auto order = make_epoch_order(options.order_options(), epoch);
  std::vector<std::vector<RankView>> views(segments.size());
  std::vector<uint64_t> steps(segments.size(), 0);  // steps that read something, per segment
  for (size_t s = 0; s < segments.size(); ++s) {
    for (uint64_t r = 0; r < segments[s].world_size; ++r) {
      const Partition p{n, segments[s].world_size, r, options.drop_last, segments[s].start};
      p.validate();
      views[s].emplace_back(order, p, epoch);
      const RankView& v = views[s].back();
      uint64_t taken = v.size();
      if (segments[s].stop != UINT64_MAX) {
        // Positions below stop: the first max(0, ceil((stop - start - r) / W)).
        const uint64_t first = p.start + r;
        const uint64_t below = segments[s].stop > first ? segments[s].stop - first : 0;
        taken = std::min(taken, below / p.world_size + (below % p.world_size != 0));
      }
      steps[s] = std::max(steps[s], taken);
    }
  }
  size_t final_segment = segments.size();
  for (size_t s = 0; s < segments.size(); ++s) {
    if (steps[s] > 0) final_segment = s;
  }
  const uint64_t final_world = options.drop_last || final_segment == segments.size()
                                   ? segments.back().world_size
                                   : segments[final_segment].world_size;

  std::vector<uint32_t> count(n, 0);
  uint64_t reads = 0, early_repeats = 0;
  std::string first_problem;
  for (size_t s = 0; s < segments.size(); ++s) {
    for (const RankView& v : views[s]) {
      for (uint64_t i = 0; i < v.size(); ++i) {
        if (v.partition().global_position(i) >= segments[s].stop) break;
        const uint64_t index = v[i];
        ++reads;
        if (++count[index] > 1 &&
            (options.drop_last || s != final_segment || i + 1 != steps[final_segment])) {
          if (early_repeats++ == 0) {
            first_problem = "index " + std::to_string(index) + " read again at segment " +
                            std::to_string(s) + ", rank " + std::to_string(v.partition().rank) +
                            ", step " + std::to_string(i) + ", before the final step";
          }
        }
      }
    }
  }
  EpochVerdict verdict;
  auto violate = [&](const std::string& what) {
    if (verdict.ok) verdict.detail = what;
    verdict.ok = false;
  };
  if (early_repeats > 0) {
    violate(std::to_string(early_repeats) + " repeated read(s); first: " + first_problem);
  }
  uint64_t unread = 0;
  for (uint64_t i = 0; i < n; ++i) unread += count[i] == 0;
  const std::string counts = std::to_string(reads) + " reads of " + std::to_string(n) +
                             " indices, final world size " + std::to_string(final_world);
  if (options.drop_last) {
    if (unread > 0 && unread >= final_world) {
      violate(std::to_string(unread) + " indices never read (" + counts +
              "); drop_last drops fewer than the final world size");
    }
    for (uint64_t q = n - std::min(unread, n); q < n && verdict.ok; ++q) {
      if (count[order->at(q)] != 0) {
        violate("the unread indices are not the order's last " + std::to_string(unread) +
                " positions (" + counts + ")");
      }
    }
    if (verdict.ok)
      verdict.detail =
          counts + ": each read once, " + std::to_string(unread) + " dropped from the order's tail";
    return verdict;
  }
  if (unread > 0) {
    for (uint64_t i = 0; i < n; ++i) {
      if (count[i] == 0) {
        violate(std::to_string(unread) + " indices never read, e.g. index " + std::to_string(i) +
                " (" + counts + ")");
        break;
      }
    }
  }
  const uint64_t padding = reads + unread - n;  // reads beyond the first of each index
  if (padding > 0 && padding >= final_world) {
    violate(std::to_string(padding) + " padding reads (" + counts +
            "); padding is fewer than the final world size");
  }
  if (verdict.ok && padding > 0) {
    // The repeats must be order positions 0, 1, ..., padding - 1 (mod n): PyTorch's padding.
    std::vector<uint32_t> expected(n, 1);
    for (uint64_t j = 0; j < padding; ++j) ++expected[order->at(j % n)];
    for (uint64_t i = 0; i < n; ++i) {
      if (count[i] != expected[i]) {
        violate("the padding is not the order's first " + std::to_string(padding) +
                " positions: index " + std::to_string(i) + " read " + std::to_string(count[i]) +
                " times (" + counts + ")");
        break;
      }
    }
  }
  if (verdict.ok) {
    verdict.detail = counts + ": each read once, plus " + std::to_string(padding) +
                     " padding from the order's start";
  }
  return verdict;
}

}  // namespace

int run_audit(const std::vector<std::string>& args, std::ostream& out) {
  Flags flags(args, 1, {"--no-shuffle", "--drop-last"});
  SamplerOptions options = parse_order_flags(flags);
  const uint64_t world_size = flags.take_required_u64("--world-size");
  const uint64_t epochs = flags.take_u64("--epochs", 1);
  const bool has_cut = flags.has("--consumed");
  const uint64_t consumed = flags.take_u64("--consumed", 0);
  const bool has_resume = flags.has("--resume-world-size");
  const uint64_t resume_world = flags.take_u64("--resume-world-size", 0);
  const uint64_t cut_epoch = flags.take_u64("--cut-epoch", 0);
  const std::string broken = flags.take_string("--break", "");
  flags.finish();

  if (has_cut != has_resume) {
    throw UsageError("--consumed and --resume-world-size go together (a cut and the resumed job)");
  }
  if (options.size > kMaxAuditSize) {
    throw UsageError("--size = " + std::to_string(options.size) +
                     " is too large to audit; allowed: size <= " + std::to_string(kMaxAuditSize));
  }
  if (epochs < 1 || epochs > 1000) {
    throw UsageError("--epochs = " + std::to_string(epochs) + " is out of range; allowed: 1..1000");
  }
  if (options.size * epochs > kMaxAuditReads) {
    throw UsageError(
        "--size x --epochs = " + std::to_string(options.size) + " x " + std::to_string(epochs) +
        " is too much to audit; allowed: size x epochs <= " + std::to_string(kMaxAuditReads));
  }
  constexpr uint64_t kMaxWorld = 1 << 16;
  for (auto [name, w] : {std::pair<const char*, uint64_t>{"--world-size", world_size},
                         {"--resume-world-size", has_cut ? resume_world : 1}}) {
    if (w < 1 || w > kMaxWorld) {
      throw UsageError(std::string(name) + " = " + std::to_string(w) +
                       " is out of range; allowed: 1 <= world size <= 65536");
    }
  }
  options.world_size = world_size;
  options.rank = 0;
  const DistributedSampler first(options);  // validates the order flags
  // The torch order of the last epoch needs seed + epoch within PyTorch's range: refuse the plan
  // before any epoch is printed, not midway through it.
  if (options.shuffle && options.order == OrderKind::kTorch) options.seed.plus_epoch(epochs - 1);
  if (has_cut) {
    if (consumed > first.total_size()) {
      throw UsageError("--consumed = " + std::to_string(consumed) +
                       " is out of range; allowed: 0 <= consumed <= " +
                       std::to_string(first.total_size()) + ", the positions the first job reads");
    }
    if (cut_epoch >= epochs) {
      throw UsageError("--cut-epoch = " + std::to_string(cut_epoch) +
                       " is out of range; allowed: cut epoch < epochs = " + std::to_string(epochs));
    }
  } else if (flags.has("--cut-epoch")) {
    throw UsageError("--cut-epoch needs --consumed");
  }
  // Self-test: a plan whose resume is off by one position, as a checkpoint that miscounts would
  // make it. Some off-by-one plans are harmless (a shifted start can wrap onto the same padding);
  // the verdict is then still "holds".
  uint64_t resume_at = consumed;
  if (!broken.empty()) {
    if (!has_cut) throw UsageError("--break needs --consumed and --resume-world-size");
    if (broken == "overlap") {
      if (consumed == 0) throw UsageError("--break overlap needs --consumed >= 1");
      resume_at = consumed - 1;
    } else if (broken == "gap") {
      resume_at = consumed + 1;
    } else {
      throw UsageError("--break = '" + broken + "' is not a perturbation; allowed: overlap, gap");
    }
  }

  uint64_t failed = 0;
  for (uint64_t e = 0; e < epochs; ++e) {
    std::vector<Segment> segments;
    std::string plan;
    if (!has_cut || e < cut_epoch) {
      segments.push_back({0, world_size, UINT64_MAX});
      plan = "W=" + std::to_string(world_size);
    } else if (e == cut_epoch) {
      segments.push_back({0, world_size, consumed});
      segments.push_back({resume_at, resume_world, UINT64_MAX});
      plan = "W=" + std::to_string(world_size) + " to position " + std::to_string(consumed) +
             ", then W=" + std::to_string(resume_world) + " from position " +
             std::to_string(resume_at);
    } else {
      segments.push_back({0, resume_world, UINT64_MAX});
      plan = "W=" + std::to_string(resume_world);
    }
    const EpochVerdict v = audit_epoch(options, e, segments);
    failed += !v.ok;
    out << "epoch " << e << " (" << plan << "): " << (v.ok ? "ok, " : "VIOLATION, ") << v.detail
        << "\n";
    out.flush();
    check_output(out);  // no more epochs for a reader that left
  }
  if (failed == 0) {
    out << "verdict: exactly-once holds in all " << epochs << " epoch(s)\n";
  } else {
    out << "verdict: exactly-once VIOLATED in " << failed << " of " << epochs << " epoch(s)\n";
  }
  out.flush();
  return failed == 0 ? kExitOk : kExitCheckFailed;
}

}  // namespace distsampler::cli
