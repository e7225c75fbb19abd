// env.h: this process's rank and world size, from the launcher's environment variables.
#ifndef DISTSAMPLER_DIST_ENV_H_
#define DISTSAMPLER_DIST_ENV_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace distsampler {

// Where a process sits in the job.
struct DistEnv {
  uint64_t rank = 0;
  uint64_t world_size = 1;
  std::optional<uint64_t> local_rank;  // rank within the node, when the launcher says
  std::string source;                  // "given", "torchrun", "openmpi", "pmi" or "slurm"
};

// Looks up an environment variable; nullptr when unset. Tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;

// Reads the launcher's variables, innermost launcher first (a torchrun started by srun sees both):
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK
//   openmpi   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   pmi       PMI_RANK, PMI_SIZE (MPICH, Intel MPI)
//   slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
// Returns nullopt when none is set. Throws std::invalid_argument naming the variable and its
// value when a launcher's variables are partial (a rank without a size), not a decimal integer,
// or inconsistent (rank >= world size, world size 0).
std::optional<DistEnv> detect_dist_env(const EnvLookup& lookup);
std::optional<DistEnv> detect_dist_env();  // the process environment

// The rank and world size to use: `rank` and `world_size` when both are given (validated),
// otherwise the launcher's (given values win over the environment). Throws std::invalid_argument
// when only one is given, when rank >= world_size, when the launcher's variables are bad (as
// detect_dist_env), or when neither is given and no launcher variable is set (the message lists
// the variables looked for).
DistEnv resolve_dist_env(std::optional<uint64_t> rank, std::optional<uint64_t> world_size,
                         const EnvLookup& lookup);
DistEnv resolve_dist_env(std::optional<uint64_t> rank = std::nullopt,
                         std::optional<uint64_t> world_size = std::nullopt);

}  // namespace distsampler

#endif  // DISTSAMPLER_DIST_ENV_H_
