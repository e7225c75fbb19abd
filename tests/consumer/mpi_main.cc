// Runs agree_on_configuration (distsampler::mpi) on every rank: equal configurations pass, and a
// seed that differs on one rank stops every rank with ConfigurationMismatch naming the seed.
#include <distsampler/launch/mpi.h>
#include <mpi.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  distsampler::SamplerOptions options;
  options.size = 1000;
  options.world_size = static_cast<uint64_t>(size);
  options.rank = static_cast<uint64_t>(rank);
  int ok = size >= 2;
  try {
    distsampler::agree_on_configuration(MPI_COMM_WORLD, distsampler::fingerprint(options));
  } catch (const std::exception& e) {
    std::printf("rank %d: equal configurations refused: %s\n", rank, e.what());
    ok = 0;
  }
  options.seed = rank == 1 ? 7 : 0;
  try {
    distsampler::agree_on_configuration(MPI_COMM_WORLD, distsampler::fingerprint(options));
    std::printf("rank %d: a seed differing on rank 1 was not caught\n", rank);
    ok = 0;
  } catch (const distsampler::ConfigurationMismatch& e) {
    if (std::string(e.what()).find("seed differs across ranks") == std::string::npos) {
      std::printf("rank %d: unexpected message: %s\n", rank, e.what());
      ok = 0;
    }
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("distsampler::mpi on %d ranks: %s\n", size, all_ok ? "ok" : "WRONG");
  }
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
