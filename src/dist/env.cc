#include "distsampler/dist/env.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace distsampler {
namespace {

struct Launcher {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;  // nullptr when the launcher has none
};

// Innermost first: torchrun under srun, or mpirun under SLURM, sees the outer launcher's too.
constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"pmi", "PMI_RANK", "PMI_SIZE", nullptr},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

uint64_t parse_count(const char* name, const char* text) {
  const std::string s = text;
  bool ok = !s.empty() && s.size() <= 19;
  for (char c : s) ok = ok && c >= '0' && c <= '9';
  if (!ok) {
    throw std::invalid_argument(std::string(name) + " = '" + s +
                                "'; allowed: a decimal integer >= 0 (at most 19 digits)");
  }
  return std::stoull(s);
}

void check(uint64_t rank, uint64_t world_size, const std::string& rank_name,
           const std::string& size_name) {
  if (world_size == 0) throw std::invalid_argument(size_name + " = 0; allowed: >= 1");
  if (rank >= world_size) {
    throw std::invalid_argument(rank_name + " = " + std::to_string(rank) + "; allowed: < " +
                                size_name + " = " + std::to_string(world_size));
  }
}

const char* process_env(const char* name) { return std::getenv(name); }

}  // namespace

std::optional<DistEnv> detect_dist_env(const EnvLookup& lookup) {
  for (const Launcher& l : kLaunchers) {
    const char* rank = lookup(l.rank);
    const char* size = lookup(l.size);
    if (rank == nullptr && size == nullptr) continue;
    if (rank == nullptr || size == nullptr) {
      const char* set = rank != nullptr ? l.rank : l.size;
      const char* unset = rank != nullptr ? l.size : l.rank;
      throw std::invalid_argument(std::string(set) + " is set but " + unset + " is not; " +
                                  l.source + " sets both");
    }
    DistEnv env;
    env.rank = parse_count(l.rank, rank);
    env.world_size = parse_count(l.size, size);
    check(env.rank, env.world_size, l.rank, l.size);
    if (l.local_rank != nullptr) {
      if (const char* local = lookup(l.local_rank)) {
        env.local_rank = parse_count(l.local_rank, local);
        if (*env.local_rank > env.rank) {
          throw std::invalid_argument(std::string(l.local_rank) + " = " + local +
                                      "; allowed: <= " + l.rank + " = " + rank);
        }
      }
    }
    env.source = l.source;
    return env;
  }
  return std::nullopt;
}

std::optional<DistEnv> detect_dist_env() { return detect_dist_env(process_env); }

DistEnv resolve_dist_env(std::optional<uint64_t> rank, std::optional<uint64_t> world_size,
                         const EnvLookup& lookup) {
  if (rank.has_value() != world_size.has_value()) {
    throw std::invalid_argument(std::string(rank ? "rank" : "world_size") + " given without " +
                                (rank ? "world_size" : "rank") +
                                "; allowed: both or neither (then the launcher's are used)");
  }
  if (rank) {
    check(*rank, *world_size, "rank", "world_size");
    DistEnv env;
    env.rank = *rank;
    env.world_size = *world_size;
    env.source = "given";
    return env;
  }
  if (std::optional<DistEnv> env = detect_dist_env(lookup)) return *env;
  std::string names;
  for (const Launcher& l : kLaunchers) {
    names += std::string(names.empty() ? "" : ", ") + l.rank + "/" + l.size + " (" + l.source + ")";
  }
  throw std::invalid_argument(
      "rank and world_size: not given, and no launcher variable is set; looked for " + names +
      ". Start the program with torchrun, mpirun or srun, or pass rank and world_size");
}

DistEnv resolve_dist_env(std::optional<uint64_t> rank, std::optional<uint64_t> world_size) {
  return resolve_dist_env(rank, world_size, process_env);
}

}  // namespace distsampler
