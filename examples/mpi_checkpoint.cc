// A synchronous data-parallel "training" loop under MPI that checkpoints and resumes on any
// number of ranks: the pattern to copy, and the program the kill-and-resume tests run.
//
//   mpirun -np 4 mpi_checkpoint --size 1001 --checkpoint ckpt --log-dir logs --attempt 0
//   (killed)  mpirun -np 3 mpi_checkpoint --size 1001 --checkpoint ckpt --log-dir logs --attempt 1
//
// Every step each rank takes a batch from its view, then all ranks meet in an all-reduce (the
// gradient exchange). Every --checkpoint-every steps rank 0 saves the sampler state (epoch,
// global positions consumed) atomically; a restarted job, with any number of ranks, resumes
// from it. Each rank appends what it consumed to <log-dir>/run<R>.rank<r>.log as lines
// "epoch consumed_after_step world_size index"; rank 0 writes <log-dir>/run<R>.start with the
// state it started from. --kill-rank/--kill-step make that rank SIGKILL itself before that step
// (counted from this run's start), as a crash would.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "cli_flags.h"
#include "mpi_main.h"
#include "distsampler/launch/mpi.h"
#include "distsampler/distsampler.h"

namespace {

using examples::kAtLeastOne;
using examples::kDecimal;
using examples::library_check;

using distsampler::DistributedSampler;
using distsampler::RankView;
using distsampler::SamplerOptions;
using distsampler::SamplerState;

struct Flags {
  uint64_t size = 1001;
  std::string seed = "0";
  std::string order = "torch";
  bool drop_last = false;
  bool no_shuffle = false;
  uint64_t batch = 3;
  uint64_t epochs = 2;
  uint64_t checkpoint_every = 5;
  std::string checkpoint = "checkpoint.state";
  std::string log_dir = ".";
  std::string run = "0";
  uint64_t kill_rank = UINT64_MAX;  // none
  uint64_t kill_step = UINT64_MAX;  // none
};

void add_flags(CLI::App& app, Flags& f) {
  app.option_defaults()->always_capture_default()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last one counts
  app.add_option("--size", f.size, "dataset size")->transform(kDecimal);
  app.add_option("--seed", f.seed, "sampler seed, in [-2^63, 2^64)")
      ->check(library_check([](const std::string& s) { distsampler::Seed::parse(s); }));
  app.add_option("--order", f.order, "sampler order: torch or feistel")
      ->check(library_check([](const std::string& s) { distsampler::parse_order_kind(s); }));
  app.add_flag("--drop-last", f.drop_last, "drop the tail instead of padding it");
  app.add_flag("--no-shuffle", f.no_shuffle, "the identity order");
  app.add_option("--batch", f.batch, "batch size per rank")
      ->transform(kDecimal)
      ->check(kAtLeastOne);
  app.add_option("--epochs", f.epochs, "epochs to run")->transform(kDecimal);
  app.add_option("--checkpoint-every", f.checkpoint_every, "rank 0 saves every N steps")
      ->transform(kDecimal)
      ->check(kAtLeastOne);
  app.add_option("--checkpoint", f.checkpoint, "the checkpoint file; resumed from when it exists");
  app.add_option("--log-dir", f.log_dir, "directory of the logs");
  app.add_option("--attempt", f.run, "this run's name in the logs' names");
  app.add_option("--kill-rank", f.kill_rank, "this rank SIGKILLs itself before --kill-step")
      ->transform(kDecimal)
      ->default_str("none");
  app.add_option("--kill-step", f.kill_step, "step (counted from this run's start) of the kill")
      ->transform(kDecimal)
      ->default_str("none");
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

int train(const Flags& flags, int rank, int world) {
  SamplerOptions options;
  options.size = flags.size;
  options.seed = distsampler::Seed::parse(flags.seed);
  options.order = distsampler::parse_order_kind(flags.order);
  options.drop_last = flags.drop_last;
  options.shuffle = !flags.no_shuffle;
  options.world_size = static_cast<uint64_t>(world);
  options.rank = static_cast<uint64_t>(rank);
  const uint64_t batch = flags.batch;
  const uint64_t epochs = flags.epochs;
  const uint64_t every = flags.checkpoint_every;
  const std::string& checkpoint = flags.checkpoint;
  const std::string& log_dir = flags.log_dir;
  const std::string& run = flags.run;
  const int64_t kill_rank = static_cast<int64_t>(flags.kill_rank);
  const uint64_t kill_step = flags.kill_step;

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
  Flags flags;
  CLI::App app(
      "Synchronous data-parallel training under MPI that checkpoints the sampler state and "
      "resumes from it on any number of ranks.",
      "mpi_checkpoint");
  app.footer(
      "Each rank appends what it consumed to LOG_DIR/run<RUN>.rank<r>.log; rank 0 writes "
      "LOG_DIR/run<RUN>.start.\n"
      "Run: mpirun -np 4 mpi_checkpoint --size 1001 --checkpoint ckpt --log-dir logs --attempt 0");
  add_flags(app, flags);
  return examples::mpi_main(argc, argv, app, [&](int rank, int world) {
    int code = 0;
    try {
      code = train(flags, rank, world);
    } catch (const distsampler::ConfigurationMismatch& e) {
      // Every rank gets the same verdict: report it (one write, each line tagged with the rank,
      // so that ranks' messages do not interleave) and leave together.
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
    return code;
  });
}
