// A synchronous data-parallel "training" loop under MPI that checkpoints and resumes on any
// number of ranks: the pattern to copy, and the program the kill-and-resume tests run.
//
//   mpirun -np 4 mpi_checkpoint --size 1001 --checkpoint ckpt --log-dir logs --run 0
//   (killed)  mpirun -np 3 mpi_checkpoint --size 1001 --checkpoint ckpt --log-dir logs --run 1
//
// Every step each rank takes a batch from its view, then all ranks meet in an all-reduce (the
// gradient exchange). Every --checkpoint-every steps rank 0 saves the sampler state (epoch,
// global positions consumed) atomically; a restarted job, with any number of ranks, resumes
// from it. Each rank appends what it consumed to <log-dir>/run<R>.rank<r>.log as lines
// "epoch consumed_after_step world_size index"; rank 0 writes <log-dir>/run<R>.start with the
// state it started from. --kill-rank/--kill-step make that rank SIGKILL itself before that step
// (counted from this run's start), as a crash would.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>

#include "distsampler/dist/mpi.h"
#include "distsampler/distsampler.h"

namespace {

using distsampler::DistributedSampler;
using distsampler::RankView;
using distsampler::SamplerOptions;
using distsampler::SamplerState;

std::map<std::string, std::string> parse_flags(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--drop-last" || a == "--no-shuffle") {
      flags[a] = "1";
    } else if (a.rfind("--", 0) == 0 && i + 1 < argc) {
      flags[a] = argv[++i];
    } else {
      throw std::invalid_argument("unexpected argument '" + a + "'");
    }
  }
  return flags;
}

uint64_t u64(const std::map<std::string, std::string>& f, const std::string& name, uint64_t def) {
  auto it = f.find(name);
  return it == f.end() ? def : std::stoull(it->second);
}

std::string text(const std::map<std::string, std::string>& f, const std::string& name,
                 const std::string& def) {
  auto it = f.find(name);
  return it == f.end() ? def : it->second;
}

// Write to a temporary name, then rename: a crash mid-write leaves the previous checkpoint.
void save(const std::string& path, const SamplerState& state) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << distsampler::encode_state(state);
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
  }
}

int train(int argc, char** argv, int rank, int world) {
  const auto flags = parse_flags(argc, argv);
  SamplerOptions options;
  options.size = u64(flags, "--size", 1001);
  options.seed = distsampler::Seed::parse(text(flags, "--seed", "0"));
  options.order = distsampler::parse_order_kind(text(flags, "--order", "torch"));
  options.drop_last = flags.count("--drop-last") != 0;
  options.shuffle = flags.count("--no-shuffle") == 0;
  options.world_size = static_cast<uint64_t>(world);
  options.rank = static_cast<uint64_t>(rank);
  const uint64_t batch = u64(flags, "--batch", 3);
  const uint64_t epochs = u64(flags, "--epochs", 2);
  const uint64_t every = u64(flags, "--checkpoint-every", 5);
  const std::string checkpoint = text(flags, "--checkpoint", "checkpoint.state");
  const std::string log_dir = text(flags, "--log-dir", ".");
  const std::string run = text(flags, "--run", "0");
  const int64_t kill_rank = static_cast<int64_t>(u64(flags, "--kill-rank", UINT64_MAX));
  const uint64_t kill_step = u64(flags, "--kill-step", UINT64_MAX);
  if (batch == 0 || every == 0) throw std::invalid_argument("--batch and --checkpoint-every >= 1");

  const DistributedSampler sampler(options);
  // Before the first batch: every rank must run the same configuration.
  distsampler::agree_on_configuration(MPI_COMM_WORLD, distsampler::fingerprint(options));

  SamplerState state = distsampler::make_state(sampler, 0, 0);
  std::ifstream in(checkpoint, std::ios::binary);
  if (in) {
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    state = distsampler::decode_state(bytes);  // throws on a corrupt or foreign state
  }
  if (rank == 0) {
    std::ofstream(log_dir + "/run" + run + ".start")
        << state.epoch << " " << state.consumed << " " << world << "\n";
  }
  std::FILE* log =
      std::fopen((log_dir + "/run" + run + ".rank" + std::to_string(rank) + ".log").c_str(), "w");
  if (log == nullptr) throw std::runtime_error("cannot open the log in " + log_dir);

  uint64_t step = 0;
  for (uint64_t epoch = state.epoch; epoch < epochs; ++epoch) {
    // resume() checks the checkpoint's fingerprint against this job's configuration.
    const RankView view =
        epoch == state.epoch ? distsampler::resume(sampler, state) : sampler.epoch(epoch);
    for (uint64_t taken = 0; taken < view.size(); ++step) {
      if (rank == kill_rank && step == kill_step) raise(SIGKILL);
      const uint64_t b = std::min(batch, view.size() - taken);
      const uint64_t consumed = distsampler::consumed_after(view, taken + b);
      for (uint64_t j = 0; j < b; ++j) {
        std::fprintf(log, "%llu %llu %d %llu\n", static_cast<unsigned long long>(epoch),
                     static_cast<unsigned long long>(consumed), world,
                     static_cast<unsigned long long>(view[taken + j]));
      }
      std::fflush(log);
      taken += b;
      double gradient = static_cast<double>(b), sum = 0;  // the synchronous step
      MPI_Allreduce(&gradient, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      const bool epoch_done = taken == view.size();
      if (rank == 0 && (epoch_done || (step + 1) % every == 0)) {
        save(checkpoint, epoch_done ? distsampler::make_state(sampler, epoch + 1, 0)
                                    : distsampler::make_state(sampler, epoch, consumed));
      }
    }
    if (view.size() == 0 && rank == 0)
      save(checkpoint, distsampler::make_state(sampler, epoch + 1, 0));
  }
  std::fclose(log);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int code = 0;
  try {
    code = train(argc, argv, rank, world);
  } catch (const distsampler::ConfigurationMismatch& e) {
    // Every rank gets the same verdict: report it (one write, each line tagged with the rank, so
    // that ranks' messages do not interleave) and leave together.
    std::string message = "rank " + std::to_string(rank) + ": error: ";
    for (const char* c = e.what(); *c != '\0'; ++c) {
      message += *c;
      if (*c == '\n') message += "rank " + std::to_string(rank) + ": error: ";
    }
    message += "\n";
    std::fwrite(message.data(), 1, message.size(), stderr);
    std::fflush(stderr);
    code = 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": error: " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return code;
}
