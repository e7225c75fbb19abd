// launch/mpi.h's contract, under mpirun -np 3 (one host):
// - agree_on_configuration passes equal fingerprints, and a seed differing on rank 1 makes every
//   rank throw ConfigurationMismatch with the same message, naming the field and rank 1;
// - node_group over MPI_COMM_WORLD: distinct local ranks 0..size-1, local_world_size = size, one
//   node name and one job token on every rank;
// - node_group over a sub-communicator (even and odd ranks): local ranks and sizes count that
//   communicator's ranks only, and the two communicators get different job tokens (their node
//   segments never meet).
// Exit code 0 when all of it holds on every rank; each failure is printed with its rank.
#include "distsampler/launch/mpi.h"

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using namespace distsampler;

int g_rank = 0;
int g_ok = 1;

void check(bool condition, const std::string& what) {
  if (!condition) {
    std::fprintf(stderr, "rank %d: %s\n", g_rank, what.c_str());
    g_ok = 0;
  }
}

// Every rank's `text` on every rank of `comm`.
std::vector<std::string> gather_text(MPI_Comm comm, const std::string& text) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int r = 0; r < size; ++r) offsets[static_cast<size_t>(r)] = total, total += lengths[r];
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                 MPI_CHAR, comm);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.push_back(all.substr(offsets[r], lengths[r]));
  return out;
}

void check_agreement(int size) {
  SamplerOptions options;
  options.size = 1000;
  options.world_size = static_cast<uint64_t>(size);
  options.rank = static_cast<uint64_t>(g_rank);
  try {
    agree_on_configuration(MPI_COMM_WORLD, fingerprint(options));
  } catch (const std::exception& e) {
    check(false, std::string("equal configurations refused: ") + e.what());
  }
  options.seed = g_rank == 1 ? 7 : 0;
  std::string message;
  try {
    agree_on_configuration(MPI_COMM_WORLD, fingerprint(options));
    check(false, "a seed differing on rank 1 was not caught");
  } catch (const ConfigurationMismatch& e) {
    message = e.what();
  }
  check(message.find("seed differs across ranks") != std::string::npos &&
            message.find("on rank 1") != std::string::npos,
        "the mismatch names neither the seed nor rank 1: " + message);
  for (const std::string& theirs : gather_text(MPI_COMM_WORLD, message)) {
    check(theirs == message, "another rank's mismatch message differs: " + theirs);
  }
}

void check_group(MPI_Comm comm, const std::string& name) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const NodeGroup group = node_group(comm, 60);
  check(group.local_world_size == static_cast<uint64_t>(size),
        name + ": local_world_size = " + std::to_string(group.local_world_size) + ", expected " +
            std::to_string(size));
  const std::vector<std::string> locals = gather_text(comm, std::to_string(group.local_rank));
  for (int r = 0; r < size; ++r) {
    for (int s = r + 1; s < size; ++s) {
      check(locals[r] != locals[s], name + ": ranks " + std::to_string(r) + " and " +
                                        std::to_string(s) + " share local rank " + locals[r]);
    }
  }
  check(group.local_rank < group.local_world_size, name + ": local rank out of range");
  for (const std::string& theirs : gather_text(comm, group.node + "|" + group.job)) {
    check(theirs == group.node + "|" + group.job, name + ": node|job differs: " + theirs);
  }
  (void)rank;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  check(size >= 3, "run under mpirun -np 3 or more");
  check_agreement(size);
  check_group(MPI_COMM_WORLD, "world");
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
  check_group(half, "half");
  // The two halves' job tokens differ: gather (parity, token) over the world.
  const std::string token = node_group(half, 60).job;
  const std::vector<std::string> tokens = gather_text(MPI_COMM_WORLD, token);
  for (int r = 0; r < size; ++r) {
    const bool same_half = r % 2 == g_rank % 2;
    check((tokens[r] == token) == same_half,
          "rank " + std::to_string(r) + "'s job token " + (same_half ? "differs from" : "equals") +
              " this rank's in the " + (same_half ? "same" : "other") + " half");
  }
  MPI_Comm_free(&half);
  int all_ok = 0;
  MPI_Allreduce(&g_ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("launch/mpi.h on %d ranks: %s\n", size, all_ok ? "ok" : "WRONG");
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
