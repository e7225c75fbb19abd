#include "cli.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <new>
#include <vector>

#include "distsampler/launch/env.h"
#include "distsampler/distsampler.h"
#include "distsampler/version.h"

namespace distsampler::cli {
namespace {

constexpr const char* kMainHelp = R"(usage: distsampler <command> [flags]

Deterministic distributed sampling: the dataset indices each rank of a data-parallel job reads,
PyTorch's DistributedSampler bit for bit (--order torch) or a random-access shuffle in O(1)
memory (--order feistel).

commands:
  indices   print one rank's indices for one epoch (or its rest, resumed at --consumed)
  audit     check that a job, resumed on another world size, reads every index exactly once
  tokens    language-model token streams over Megatron .bin/.idx sources: `tokens plan` prints
            the sequences a rank reads per step, `tokens audit` checks a run's checkpoints,
            `tokens prepare` makes sources from raw text (python -m distsampler.prepare)
  demo      the DistributedSampler post's experiments: the forgotten set_epoch, and why each
            rank needs a distributed sampler
  help      this text; `distsampler <command> --help` describes a command
  --version print "distsampler VERSION" (the library's version, version.h)

exit status: 0 success, 1 a check that failed (audit), 2 a bad flag or value, 3 the output
could not be written (a full disk, a closed stdout, a reader that left); 2 and 3 print one line
on stderr.
)";

constexpr const char* kIndicesHelp =
    R"(usage: distsampler indices --size N (--world-size W --rank R | --from-env) [flags]

Prints the dataset indices rank R reads in one epoch, in order: PyTorch's
DistributedSampler(range(N), num_replicas=W, rank=R, seed=S, shuffle, drop_last) after
set_epoch(E) with --order torch.

flags:
  --size N           dataset size, 0 <= N <= 2^63
  --world-size W     number of ranks, W >= 1
  --rank R           this rank, 0 <= R < W
  --from-env         rank and world size from the launcher that started this process, instead
                     of --world-size and --rank: torchrun (RANK, WORLD_SIZE), Open MPI's mpirun
                     (OMPI_COMM_WORLD_RANK/SIZE), MPICH (PMI_RANK/SIZE) or a SLURM job step
                     (srun: SLURM_PROCID, SLURM_STEP_NUM_TASKS); refused outside a step, where
                     SLURM's variables describe the allocation (a batch script without srun)
  --epoch E          epoch (default 0)
  --seed S           seed, any integer in [-2^63, 2^64 - 1] (default 0)
  --order ORDER      torch (PyTorch's exact order, builds the whole permutation) or feistel
                     (random access, O(1) memory) (default torch)
  --randperm V       torch order only: current (PyTorch >= 2.6 for N >= 214748364) or classic
                     (PyTorch <= 2.5, e.g. Debian's 1.13) (default current)
  --feistel-version V
                     feistel order only: 2 (uniform parity, exact small sizes, the size in
                     the key) or 1 (the order of releases before it, bit for bit) (default 2)
  --no-shuffle       the identity order 0, 1, ..., N - 1
  --drop-last        drop the tail instead of padding by wrap-around
  --uneven           duplicate-free evaluation: no padding, rank sizes differ by at most one
  --mask             text only: print "INDEX PAD" per line, PAD 1 for a wrapped-around repeat
                     that an evaluation metric must skip (padded-with-mask evaluation)
  --consumed C       resume: the job has consumed global positions [0, C) of the epoch; rank R
                     reads C + R, C + R + W, ... (the elastic rule; default 0, a fresh start)
  --start K          first rank-local position to print (default 0)
  --count M          how many to print (default: all from K on)
  --format FORMAT    text (one decimal index per line) or binary (little-endian uint64)
                     (default text)
)";

constexpr const char* kAuditHelp =
    R"(usage: distsampler audit --size N --world-size W [flags]

Replays every rank of a job plan through the sampler and checks, for each epoch, that every
index is read exactly once: with padding every index at least once and repeats only in the
final step, fewer than the final world size, from the order's start (PyTorch's padding); with
--drop-last no repeats and fewer than the last world size unread, from the order's tail. With
--consumed the job is stopped after global position C of epoch --cut-epoch and resumed there on
--resume-world-size ranks, which also run the later epochs. Prints one line per epoch and a
verdict.

flags:
  --size N                dataset size, 0 <= N <= 10^8
  --world-size W          ranks of the first job, 1 <= W <= 65536
  --epochs E              epochs to audit, 1..1000 (default 1), size x epochs <= 10^9
  --consumed C            the cut: positions consumed when the job stopped, 0 <= C <= the
                          positions the first job reads
  --resume-world-size W2  ranks of the resumed job, 1 <= W2 <= 65536
  --cut-epoch K           the epoch the cut is in (default 0)
  --seed, --order, --randperm, --feistel-version, --no-shuffle, --drop-last
                          as for `distsampler indices`
  --break overlap|gap     self-test: resume one position early (overlap) or late (gap), as a
                          checkpoint that miscounts would; the audit must then fail, unless the
                          shifted plan happens to be harmless (its wrap lands on the same padding)

exit status: 0 exactly-once holds, 1 it is violated, 2 a bad flag or value, 3 the output could
not be written.
)";

constexpr const char* kDemoHelp = R"(usage: distsampler demo [--order torch|feistel]

Replays the two experiments of the DistributedSampler post, printed per rank, epoch and batch:
  1. 16 samples, 2 ranks, batch size 2, 2 epochs: with the epoch never advancing (the forgotten
     set_epoch) both epochs read the same order; advancing it gives a new order each epoch.
  2. 8 samples, 2 ranks, batch size 4, 2 epochs: with the distributed sampler each rank reads
     its half; without it every rank reads the whole dataset, twice the work in all.
)";

bool is_help(const std::string& a) { return a == "--help" || a == "-h" || a == "help"; }

// Writes indices as text or little-endian uint64, in chunks.
void write_indices(const RankView& view, uint64_t first, uint64_t count, bool binary, bool mask,
                   std::ostream& out) {
  constexpr uint64_t kChunk = 1 << 16;
  // Longest text line: 20 digits, " 0" or " 1" with --mask, and the newline.
  constexpr uint64_t kMaxLine = 20 + 2 + 1;
  std::vector<uint64_t> indices(std::min(count, kChunk));
  std::vector<char> buffer(indices.size() * (binary ? 8 : kMaxLine));
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(kChunk, count - done);
    view.fill(first + done, n, indices.data());
    char* p = buffer.data();
    for (uint64_t j = 0; j < n; ++j) {
      const uint64_t v = indices[j];
      if (binary) {
        for (int b = 0; b < 8; ++b) *p++ = static_cast<char>((v >> (8 * b)) & 0xff);
      } else {
        p = std::to_chars(p, p + 20, v).ptr;
        if (mask) {
          *p++ = ' ';
          *p++ = view.is_padding(first + done + j) ? '1' : '0';
        }
        *p++ = '\n';
      }
    }
    out.write(buffer.data(), p - buffer.data());
    check_output(out);  // a reader that left stops the work here, not after all of it
    done += n;
  }
}

int run_indices(const std::vector<std::string>& args, std::ostream& out) {
  Flags flags(args, 1, {"--no-shuffle", "--drop-last", "--uneven", "--mask", "--from-env"});
  SamplerOptions options = parse_order_flags(flags);
  options.uneven = flags.take_switch("--uneven");
  const bool mask = flags.take_switch("--mask");
  if (flags.take_switch("--from-env")) {
    if (flags.has("--world-size") || flags.has("--rank")) {
      throw UsageError("--from-env with --world-size or --rank; allowed: one or the other");
    }
    const DistEnv env = resolve_dist_env();  // one line naming the variable when refused
    options.world_size = env.world_size;
    options.rank = env.rank;
  } else {
    for (const char* flag : {"--world-size", "--rank"}) {
      if (!flags.has(flag)) {
        throw UsageError(std::string("missing required flag ") + flag +
                         "; or --from-env, under torchrun, mpirun or srun");
      }
    }
    options.world_size = flags.take_required_u64("--world-size");
    options.rank = flags.take_required_u64("--rank");
  }
  const uint64_t epoch = flags.take_u64("--epoch", 0);
  const uint64_t consumed = flags.take_u64("--consumed", 0);
  const uint64_t start = flags.take_u64("--start", 0);
  const bool has_count = flags.has("--count");
  const uint64_t count_flag = flags.take_u64("--count", 0);
  const std::string format = flags.take_string("--format", "text");
  if (format != "text" && format != "binary") {
    throw UsageError("--format = '" + format + "' is not a format; allowed: text, binary");
  }
  if (mask && format != "text") {
    throw UsageError("--mask with --format = " + format + "; allowed: --mask with text only");
  }
  flags.finish();
  // Named here: the sampler's own message would name its parameter, start, which is not --start.
  constexpr uint64_t kMaxConsumed = uint64_t{1} << 63;
  if (consumed > kMaxConsumed) {
    throw UsageError("--consumed = " + std::to_string(consumed) +
                     " is too large; allowed: 0 <= consumed <= 2^63 = " +
                     std::to_string(kMaxConsumed) + " (at or past --size: nothing left)");
  }

  const DistributedSampler sampler(options);
  if (consumed > sampler.total_size()) {  // as audit: past the epoch's end is a wrong count
    throw UsageError("--consumed = " + std::to_string(consumed) +
                     " is out of range; allowed: 0 <= consumed <= " +
                     std::to_string(sampler.total_size()) + ", the positions the job reads");
  }
  const RankView view = sampler.epoch(epoch, consumed);
  const uint64_t num_samples = view.size();
  if (start > num_samples) {
    throw UsageError(
        "--start = " + std::to_string(start) +
        " is out of range; allowed: 0 <= start <= num_samples = " + std::to_string(num_samples));
  }
  const uint64_t count = has_count ? count_flag : num_samples - start;
  if (count > num_samples - start) {
    throw UsageError("--count = " + std::to_string(count) +
                     " is out of range; allowed: start + count <= num_samples = " +
                     std::to_string(num_samples) + " (start = " + std::to_string(start) + ")");
  }
  write_indices(view, start, count, format == "binary", mask, out);
  out.flush();
  return kExitOk;
}

}  // namespace

SamplerOptions parse_order_flags(Flags& flags) {
  SamplerOptions options;
  options.size = flags.take_required_u64("--size");
  options.seed = Seed::parse(flags.take_string("--seed", "0"), "--seed");
  const std::string order = flags.take_string("--order", std::string(to_string(options.order)));
  options.order = parse_order_kind(order, "--order");
  const bool randperm_given = flags.has("--randperm");
  const std::string randperm =
      flags.take_string("--randperm", std::string(to_string(options.randperm)));
  if (randperm_given && options.order != OrderKind::kTorch) {
    throw UsageError("--randperm = '" + randperm + "' with --order " +
                     std::string(to_string(options.order)) +
                     "; allowed: --randperm with the torch order only");
  }
  options.randperm = parse_randperm_variant(randperm, "--randperm");
  const bool version_given = flags.has("--feistel-version");
  const std::string version =
      flags.take_string("--feistel-version", std::to_string(options.feistel_version));
  if (version_given && options.order != OrderKind::kFeistel) {
    throw UsageError("--feistel-version = '" + version + "' with --order " +
                     std::string(to_string(options.order)) +
                     "; allowed: --feistel-version with the feistel order only");
  }
  options.feistel_version = parse_feistel_version(version, "--feistel-version");
  options.shuffle = !flags.take_switch("--no-shuffle");
  options.drop_last = flags.take_switch("--drop-last");
  return options;
}

uint64_t parse_u64(std::string_view text, std::string_view flag) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    throw UsageError(std::string(flag) + " = '" + std::string(text) +
                     "' is not an integer in [0, 18446744073709551615]");
  }
  return value;
}

Flags::Flags(const std::vector<std::string>& args, size_t first, std::vector<std::string> switches,
             std::vector<std::string> repeatable)
    : switches_(std::move(switches)), repeatable_(std::move(repeatable)) {
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      throw UsageError("unexpected argument '" + a + "'; flags start with --");
    }
    std::string name = a;
    std::string value;
    const size_t eq = a.find('=');
    const bool is_switch = std::find(switches_.begin(), switches_.end(), a) != switches_.end();
    if (eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      with_value_.insert(name);
    } else if (!is_switch) {
      // No value (last, or another flag follows): an error once the flag is taken, and an
      // unknown flag, not a missing value, when no command declares it.
      if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
        value = args[++i];
        with_value_.insert(name);
      } else {
        missing_value_.insert(name);
      }
    }
    const bool repeats =
        std::find(repeatable_.begin(), repeatable_.end(), name) != repeatable_.end();
    if (values_.count(name) != 0 && !repeats) {
      throw UsageError("flag " + name + " is given twice");
    }
    values_[name] = value;
    if (repeats) lists_[name].push_back(value);
  }
}

bool Flags::take_switch(const std::string& name) {
  taken_[name] = true;
  auto it = values_.find(name);
  if (it == values_.end()) return false;
  if (with_value_.count(name) != 0) throw UsageError("flag " + name + " takes no value");
  return true;
}

std::string Flags::take_string(const std::string& name, const std::string& fallback) {
  taken_[name] = true;
  if (missing_value_.count(name) != 0) throw UsageError("flag " + name + " needs a value");
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

uint64_t Flags::take_u64(const std::string& name, uint64_t fallback) {
  const std::string text = take_string(name, "");
  return has(name) ? parse_u64(text, name) : fallback;
}

uint64_t Flags::take_required_u64(const std::string& name) {
  if (!has(name)) throw UsageError("missing required flag " + name);
  return take_u64(name, 0);
}

std::vector<std::string> Flags::take_all(const std::string& name) {
  taken_[name] = true;
  if (missing_value_.count(name) != 0) throw UsageError("flag " + name + " needs a value");
  auto it = lists_.find(name);
  return it == lists_.end() ? std::vector<std::string>{} : it->second;
}

void Flags::finish() const {
  for (const auto& [name, value] : values_) {
    if (taken_.count(name) == 0) throw UsageError("unknown flag '" + name + "'");
  }
}

namespace {

// run() without the final check of the output.
int dispatch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || is_help(args[0])) {
    (args.empty() ? err : out) << kMainHelp;
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "--version") {
    if (args.size() > 1) {
      // One line naming the argument, as every other usage error (a quoted line break is a space).
      std::string extra = args[1];
      std::replace(extra.begin(), extra.end(), '\n', ' ');
      std::replace(extra.begin(), extra.end(), '\r', ' ');
      err << "distsampler --version: unexpected argument '" << extra
          << "'; --version takes no arguments\n";
      return kExitUsage;
    }
    out << "distsampler " << DISTSAMPLER_VERSION_STRING << "\n";
    return kExitOk;
  }
  const std::string& command = args[0];
  const bool wants_help = std::any_of(args.begin() + 1, args.end(), [](const std::string& a) {
    return a == "--help" || a == "-h";
  });
  try {
    if (command == "indices") {
      if (wants_help) return out << kIndicesHelp, kExitOk;
      return run_indices(args, out);
    }
    if (command == "audit") {
      if (wants_help) return out << kAuditHelp, kExitOk;
      return run_audit(args, out);
    }
    if (command == "tokens") {
      // `tokens prepare --help` is the Python module's (run_tokens passes its arguments on).
      const bool prepare = args.size() > 1 && args[1] == "prepare";
      if (wants_help && !prepare) return out << kTokensHelp, kExitOk;
      return run_tokens(args, out);
    }
    if (command == "demo") {
      if (wants_help) return out << kDemoHelp, kExitOk;
      return run_demo(args, out, err);
    }
    throw UsageError("unknown command '" + command +
                     "'; commands: indices, audit, tokens, demo, help");
  } catch (const OutputError&) {
    throw;
  } catch (const std::bad_alloc&) {
    err << "distsampler " << command << ": out of memory\n";
  } catch (const std::exception& e) {
    // One line even when a value quoted in the message holds a line break.
    std::string message = "distsampler " + command + ": " + e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::replace(message.begin(), message.end(), '\r', ' ');
    err << message << "\n";
  }
  return kExitUsage;
}

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    const int code = dispatch(args, out, err);
    out.flush();
    check_output(out);
    return code;
  } catch (const OutputError& e) {
    err << "distsampler" << (args.empty() ? "" : " " + args[0]) << ": " << e.what() << "\n";
    return kExitOutput;
  }
}

}  // namespace distsampler::cli
